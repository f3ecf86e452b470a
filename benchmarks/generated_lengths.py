"""How long the generated sources are: for each pair on the heterogeneous batch's heavy top, the lines
of its generated attempt, of its accepted step's vector-Jacobian product
(``jaxrot.kernels.generate``, ``jaxrot.kernels.generate_vjp``) and of its attempt carrying one
direction's tangents (forward mode, ``jaxrot.kernels.adaptive_tangents``), and the square roots, sines and cosines
they write out, in this checkout and, with ``--against``, in another one (run there in a subprocess).
Only the writing out is done: nothing is compiled or checked. The length is what Warp compiles on a
run's first call; the runtime cost is what the compiler leaves of it (``benchmarks/generated_kernels.py``,
``benchmarks/heterogeneous_gradient.py``).

    python benchmarks/generated_lengths.py --out DIR [--pairs "rkmk8(5),buss4(3)"] [--against /tmp/old]

Writes ``generated_lengths.json`` and ``.md`` to DIR with their provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_MEASURE = """
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jaxrot
from jaxrot.experiments.bench_heterogeneous import heavy_tops
from jaxrot.kernels import generate, generate_vjp
from jaxrot.kernels.adaptive import integrators_get
assert jaxrot.__file__.startswith(sys.argv[1]), jaxrot.__file__
p, _, _, _ = heavy_tops(8)
rows = []
for name in sys.argv[2].split(","):
    pair = integrators_get(name)
    key = generate._generate(pair, p.system, jnp.float64, True)[0]
    src = {"attempt": generate._SOURCES[key]}
    keeps = generate_vjp.keeps_memory(pair, p.system, jnp.float64)
    try:  # forward mode: the attempt carrying the tangents (jaxrot.kernels.adaptive_tangents)
        from jaxrot.kernels.adaptive_tangents import carried
    except ImportError:  # (an older checkout: the step's own generated JVP)
        for kind in ("vjp", "jvp"):
            src[kind] = generate_vjp._SOURCES[generate_vjp._generate(pair, p.system, jnp.float64, kind, keeps).key][0]
    else:
        src["vjp"] = generate_vjp._SOURCES[generate_vjp._generate(pair, p.system, jnp.float64, keeps, False).key][0]
        src["jvp"] = generate._SOURCES[generate._generate(carried(pair, p.system, jnp.float64), p.system, jnp.float64,
                                                          True)[0]]
    for what, s in src.items():
        s = s[0] if isinstance(s, tuple) else s
        rows.append(dict(pair=name, source=what, lines=s.count(chr(10)), sqrt=s.count("wp.sqrt("),
                         sin_cos=s.count("wp.sin(") + s.count("wp.cos(")))
print(json.dumps(rows))
"""


def measure(repo: str, pairs: str) -> list:
    env = dict(os.environ, PYTHONPATH=repo)
    out = subprocess.run([sys.executable, "-c", _MEASURE, os.path.realpath(repo), pairs], env=env, cwd=repo,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", default="rkmk8(5),buss4(3)")
    ap.add_argument("--against", default=None, help="another checkout, measured the same way")
    a = ap.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from generated_kernels import _commit  # (the checkout's commit, as that benchmark names it)

    rows = measure(here, a.pairs)
    before = {(r["pair"], r["source"]): r for r in measure(a.against, a.pairs)} if a.against else {}
    command = "python " + " ".join([os.path.relpath(__file__, here), *(argv if argv is not None else sys.argv[1:])])
    lines = ["# Lengths of the generated sources (heavy top, float64)", "",
             f"`{command}`; this checkout {_commit(here)}"
             + (f", against {_commit(a.against)}" if a.against else "") + ".", "",
             "| pair | source | lines | square roots | sines and cosines |"
             + (" lines before | square roots before | sines and cosines before |" if before else ""),
             "|---|---|---|---|---|" + ("---|---|---|" if before else "")]
    for r in rows:
        b = before.get((r["pair"], r["source"]))
        line = f"| {r['pair']} | {r['source']} | {r['lines']} | {r['sqrt']} | {r['sin_cos']} |"
        if before:
            line += f" {b['lines']} | {b['sqrt']} | {b['sin_cos']} |" if b else " | | |"
        lines.append(line)
        print(line, flush=True)
    from jaxrot.present import provenance

    provenance.write_record(a.out, "generated_lengths", dict(command=command, commit=_commit(here), rows=rows,
                                                             against=_commit(a.against) if a.against else None,
                                                             before=list(before.values())),
                            "\n".join(lines) + "\n", command=command)


if __name__ == "__main__":
    main()
