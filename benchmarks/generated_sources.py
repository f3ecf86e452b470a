"""Whether two checkouts generate the same kernels: for every registered method and pair, on the fast
top and the free body, in float64 and float32, the source the fused executor restates from its JAX
code (a constant-step method's step, a pair's attempt), its step's vector-Jacobian product and its
step carrying tangents (``jaxrot.kernels.generate``, ``jaxrot.kernels.generate_vjp``,
``jaxrot.kernels.adaptive_tangents``), or the
reason one is refused, hashed; and how long each case took to write out (tracing and restating only:
nothing is compiled or checked). A change to the generator, or to code a method traces through (SO(3)'s
functions, the torques), that is meant to leave the kernels as they were shows here as every hash
equal; where a hash differs the table gives the lengths on both sides.

    python benchmarks/generated_sources.py --out DIR [--against /tmp/base] [--methods rkmk8,buss4(3)]
                                           [--problems fast_top,free_body_mz] [--dtypes float64,float32]
                                           [--jobs 2]

Each checkout is measured in processes of its own (``PYTHONPATH`` set to it), its cases shared among
``--jobs`` of them in the same order on both sides (a case's source can depend on what its process
traced before: JAX keeps some traces by function); the two checkouts in turn, not side by side. Every registered method and pair: about
20 minutes a checkout on one core of this machine. Writes ``generated_sources.json`` and ``.md`` to
DIR with their provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_MEASURE = """
import hashlib, json, sys, time, warnings
warnings.filterwarnings("ignore")
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jaxrot
from jaxrot.physics import problems
from jaxrot.kernels import adaptive_tangents, generate, generate_vjp
import os
assert os.path.realpath(jaxrot.__file__).startswith(sys.argv[1]), jaxrot.__file__
cases = json.loads(open(sys.argv[2]).read())
rows = {}


def text(entry):
    return entry[0] if isinstance(entry, tuple) else entry


for case in cases:
    problem, name, dtype = case.split("/")
    p, dt = problems.get(problem), jnp.dtype(dtype)
    t = time.perf_counter()
    parts = []
    try:
        m = jaxrot.integrators.get(name)
        key = generate._generate(m, p.system, dt, hasattr(m, "step_with_error"))[0]
        parts.append(text(generate._SOURCES[key]))
        try:
            low = generate_vjp._generate(m, p.system, dt, generate_vjp.keeps_memory(m, p.system, dt), False)
            parts.append(text(generate_vjp._SOURCES[low.key]))
        except Exception as e:  # the refusal is part of what is compared
            parts.append(f"refused {type(e).__name__}: {e}")
        try:  # forward mode: the step carrying tangents
            c = adaptive_tangents.carried(m, p.system, dt)
            parts.append(text(generate._SOURCES[generate._generate(c, p.system, dt, hasattr(m, "step_with_error"))[0]]))
        except Exception as e:
            parts.append(f"refused {type(e).__name__}: {e}")
    except Exception as e:
        parts.append(f"refused {type(e).__name__}: {e}")
    whole = "\\n#####\\n".join(parts)
    rows[case] = dict(hash=hashlib.sha256(whole.encode()).hexdigest()[:16], seconds=round(time.perf_counter() - t, 2),
                      parts=[hashlib.sha256(s.encode()).hexdigest()[:16] for s in parts],
                      lines=[s.count("\\n") + 1 if not s.startswith("refused") else 0 for s in parts])
print("ROWS " + json.dumps(rows))
"""


def cases(repo: str, methods: str | None, probs: str, dtypes: str) -> list:
    """The cases ``problem/method/dtype`` to hash (every registered method and pair unless ``methods``)."""
    names = methods.split(",") if methods else None
    if names is None:
        code = "import json, jaxrot.integrators as i; print(json.dumps(sorted(i.REGISTRY)))"
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=repo), cwd=repo,
                             capture_output=True, text=True, check=True)
        names = json.loads(out.stdout.strip().splitlines()[-1])
    return [f"{p}/{n}/{d}" for p in probs.split(",") for n in names for d in dtypes.split(",")]


def measure(repo: str, todo: list, jobs: int) -> dict:
    """``case -> {hash, seconds, lines}`` for ``repo``'s checkout, ``todo`` shared among ``jobs`` processes."""
    env = dict(os.environ, PYTHONPATH=repo)
    procs, files = [], []
    for j in range(jobs):
        part = todo[j::jobs]
        if not part:
            continue
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(part, f)
        f.close()
        files.append(f.name)
        procs.append(subprocess.Popen([sys.executable, "-c", _MEASURE, os.path.realpath(repo), f.name], env=env,
                                      cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    rows = {}
    try:
        for proc in procs:
            out, err = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"measuring {repo} failed:\n{err[-3000:]}")
            rows.update(json.loads(next(ln for ln in out.splitlines() if ln.startswith("ROWS "))[5:]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for name in files:
            os.unlink(name)
    return rows


def markdown(command: str, here: str, there: str | None, rows: dict, before: dict) -> str:
    lines = ["# The generated sources of every registered method and pair", "",
             f"`{command}`; this checkout {here}" + (f", against {there}" if there else "") + ".", ""]
    total = sum(r["seconds"] for r in rows.values())
    lines.append(f"{len(rows)} cases (a method's step or a pair's attempt, its step VJP and its step carrying tangents, or why one is "
                 f"refused); writing them out took {total:.0f} s here"
                 + (f" and {sum(r['seconds'] for r in before.values()):.0f} s there" if before else "") + ".")
    if before:
        same = [c for c in rows if c in before and before[c]["hash"] == rows[c]["hash"]]
        differ = [c for c in rows if c in before and before[c]["hash"] != rows[c]["hash"]]
        lines += ["", f"**Equal character for character: {len(same)} of {len(rows)}.**"]
        if differ:
            lines += ["", "| case | which differ | lines here (step, VJP, tangents) | lines there |", "|---|---|---|---|"]
            for c in differ:
                a, b = rows[c]["parts"], before[c]["parts"]
                which = ", ".join(w for w, x, y in zip(("step", "VJP", "tangents"), a, b) if x != y) or "how many"
                lines.append(f"| {c} | {which} | {rows[c]['lines']} | {before[c]['lines']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--against", default=None, help="another checkout, hashed the same way")
    ap.add_argument("--methods", default=None, help="comma-separated names (default: every registered one)")
    ap.add_argument("--problems", default="fast_top,free_body_mz")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--jobs", type=int, default=1, help="processes per checkout")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    if a.against and not os.path.isdir(os.path.join(a.against, "jaxrot")):
        ap.error(f"--against {a.against}: no jaxrot package there")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from generated_kernels import _commit  # (the checkout's commit, as that benchmark names it)

    todo = cases(here, a.methods, a.problems, a.dtypes)
    t0 = time.perf_counter()
    rows = measure(here, todo, a.jobs)
    print(f"this checkout: {len(rows)} cases in {time.perf_counter() - t0:.0f} s", flush=True)
    before = measure(a.against, todo, a.jobs) if a.against else {}
    command = "python " + " ".join([os.path.relpath(__file__, here), *(argv if argv is not None else sys.argv[1:])])
    text = markdown(command, _commit(here), _commit(a.against) if a.against else None, rows, before)
    print(text)
    from jaxrot.present import provenance

    provenance.write_record(a.out, "generated_sources",
                            dict(command=command, commit=_commit(here), rows=rows,
                                 against=_commit(a.against) if a.against else None, before=before),
                            text, command=command)


if __name__ == "__main__":
    main()
