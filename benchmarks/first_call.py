"""First-call time (compiling and running) of the documentation's examples, each page in a fresh process.

The Python blocks of README.md's first example and of the user-guide pages listed in ``PAGES`` run
one after another in one namespace, as a reader pastes them, in a fresh interpreter per page; each
block's wall time is recorded. A block's time is what a user waits the first time: tracing, XLA
compiling and running (the first block of a page also imports jax and jaxrot; the import alone is
measured apart, in fresh interpreters too). Three passes per page: without a persistent compilation
cache (JAX's default for a program), then twice with an empty cache folder (the
``jax_compilation_cache_dir`` setting, here through its environment variable, every program kept):
the first fills it, the second reads it
(what a second run of the same script costs). The load average (``os.getloadavg``) is recorded
before and after each page: on a shared machine the times scale with it.

    python benchmarks/first_call.py --out figures [--pages NAME ...]

Writes ``first_call.json`` and ``first_call.md`` to the folder, with their provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: (label, file, which blocks: None for all, or a heading whose section's blocks are taken)
PAGES = [
    ("README: a first run", "README.md", "## A first run"),
    ("saveat_events.md", "docs/user_guide/saveat_events.md", None),
    ("fitting_inertia.md", "docs/user_guide/fitting_inertia.md", None),
    ("error_maps.md", "docs/user_guide/error_maps.md", None),
    ("newton_maps.md", "docs/user_guide/newton_maps.md", None),
]
#: the target for one example's first call on a 2-core machine
TARGET_S = 3.0

_CHILD = r"""
import json, sys, time
blocks = json.loads(open(sys.argv[1]).read())
scope = {"__name__": "__guide__"}
times = []
for k, (line, block) in enumerate(blocks):
    t = time.perf_counter()
    exec(compile(block, f"block {k} (line {line})", "exec"), scope)
    times.append(time.perf_counter() - t)
    print("BLOCK", json.dumps(times[-1]), flush=True)
"""

_IMPORT = "import time; t = time.perf_counter(); import jax, jaxrot; print(time.perf_counter() - t)"


def python_blocks(text: str, section: str | None = None) -> list[tuple[int, str]]:
    """``(first line, code)`` of each ```python block (of one ``##`` section when ``section`` is given)."""
    if section is not None:
        start = text.index(section + "\n")
        end = text.find("\n## ", start + len(section))
        offset = text[:start].count("\n")
        text = text[start:end if end >= 0 else len(text)]
    else:
        offset = 0
    out = []
    for m in re.finditer(r"^[ \t]*```python\n(.*?)^[ \t]*```", text, flags=re.S | re.M):
        out.append((offset + text[:m.start()].count("\n") + 2, textwrap.dedent(m.group(1))))
    return out


def first_line(code: str) -> str:
    """The block's first line that is not an import, a comment or a config line (to name it)."""
    for line in code.splitlines():
        s = line.strip()
        if s and not s.startswith(("import ", "from ", "#", "jax.config")):
            return s[:90]
    return code.strip().splitlines()[0][:90]


def run_page(path: pathlib.Path, section, cache: str | None) -> list[float]:
    blocks = python_blocks(path.read_text(), section)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(blocks, f)
    try:
        env = dict(os.environ)
        if cache:  # read by JAX at import, so the blocks' own import of jax is timed in every pass
            env.update(JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                       JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        r = subprocess.run([sys.executable, "-c", _CHILD, f.name], cwd=tempfile.gettempdir(), env=env,
                           capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    times = [float(line.split(" ", 1)[1]) for line in r.stdout.splitlines() if line.startswith("BLOCK ")]
    if r.returncode != 0 or len(times) != len(blocks):
        sys.exit(f"{path}: the blocks failed:\n{r.stderr[-3000:]}")
    return times


def import_seconds(n: int = 3) -> float:
    xs = [float(subprocess.run([sys.executable, "-c", _IMPORT], capture_output=True, text=True, check=True,
                               cwd=tempfile.gettempdir()).stdout) for _ in range(n)]
    return statistics.median(xs)


def machine() -> dict:
    import jax

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "jax": jax.__version__,
            "device": str(jax.devices()[0]), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = [f"First call of each documented example, in a fresh process per page: {m['cpu']}, {m['cores']} cores, "
             f"jax {m['jax']}, {m['device']}. Import of jax and jaxrot: {res['import_s']:.1f} s (median of 3), "
             f"included in each page's first block. Target: {res['target_s']:g} s per block.", ""]
    lines += ["| page | block (line) | first line | no cache (s) | meets 3 s | cache filled (s) | cache read (s) |",
              "|---|---|---|---|---|---|---|"]
    for p in res["pages"]:
        for b in p["blocks"]:
            code = b["first_line"].replace("|", "\\|")
            lines.append(f"| {p['label']} | {b['index']} ({b['line']}) | `{code}` | {b['no_cache_s']:.1f} | "
                         f"{'yes' if b['no_cache_s'] <= res['target_s'] else 'no'} | {b['cache_cold_s']:.1f} | "
                         f"{b['cache_warm_s']:.1f} |")
    lines += ["", "| page | total, no cache (s) | cache filled (s) | cache read (s) | load average before / after "
              "(1 min) |", "|---|---|---|---|---|"]
    for p in res["pages"]:
        lines.append(f"| {p['label']} | {sum(b['no_cache_s'] for b in p['blocks']):.1f} | "
                     f"{sum(b['cache_cold_s'] for b in p['blocks']):.1f} | "
                     f"{sum(b['cache_warm_s'] for b in p['blocks']):.1f} | "
                     f"{p['load_before'][0]:.1f} / {p['load_after'][0]:.1f} |")
    return "\n".join(lines) + "\n"


def main(out_dir, pages=None) -> dict:
    from jaxrot.present import provenance

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in PAGES if pages is None or p[0] in pages or p[1] in pages]
    res = {"quick": False, "machine": machine(), "target_s": TARGET_S, "load_start": list(os.getloadavg()),
           "import_s": import_seconds(), "pages": [],
           "command": "python " + shlex.join(sys.argv)}
    for label, file, section in chosen:
        path = ROOT / file
        blocks = python_blocks(path.read_text(), section)
        before = list(os.getloadavg())
        t0 = time.perf_counter()
        plain = run_page(path, section, None)
        with tempfile.TemporaryDirectory(prefix="jaxrot-first-call-") as cache:
            cold = run_page(path, section, cache)
            warm = run_page(path, section, cache)
        after = list(os.getloadavg())
        res["pages"].append({"label": label, "file": file, "section": section, "load_before": before,
                             "load_after": after, "blocks": [
                                 {"index": k, "line": line, "first_line": first_line(code), "no_cache_s": a,
                                  "cache_cold_s": b, "cache_warm_s": c}
                                 for k, ((line, code), a, b, c) in enumerate(zip(blocks, plain, cold, warm))]})
        print(f"{label}: {', '.join(f'{t:.1f}' for t in plain)} s without a cache, "
              f"{', '.join(f'{t:.1f}' for t in warm)} s from a filled one (load {before[0]:.1f} -> {after[0]:.1f}; "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    res["load_end"] = list(os.getloadavg())
    provenance.write_record(out_dir, "first_call", res, markdown(res), command=res["command"])
    print(markdown(res))
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="jaxrot-results")
    ap.add_argument("--pages", nargs="*", help="labels or files of PAGES to measure (default: all)")
    a = ap.parse_args()
    main(a.out, a.pages)
