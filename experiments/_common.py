"""Shared I/O for the experiment scripts: output folder, JSON/markdown writing, float64 switch."""

from __future__ import annotations

import json
import pathlib
import tempfile

import jax

def setup(out_dir=None, quick: bool = False) -> pathlib.Path:
    """Switch on float64 (accuracy studies) and return the output folder (created).

    Default: ``./figures`` of the current directory for a full run; a quick run writes to a fresh
    temporary folder, so it never overwrites the committed full-run results.
    """
    jax.config.update("jax_enable_x64", True)
    if out_dir is not None:
        out = pathlib.Path(out_dir)
    elif quick:
        out = pathlib.Path(tempfile.mkdtemp(prefix="jaxrot-quick-"))
        print(f"quick run: writing to {out}", flush=True)
    else:
        out = pathlib.Path.cwd() / "figures"
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_json(path: pathlib.Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")


def md_table(header: list[str], rows: list[list]) -> str:
    """A GitHub markdown table."""
    def fmt(x):
        s = f"{x:.3g}" if isinstance(x, float) else str(x)
        return s.replace("\\|", "|").replace("|", "\\|")  # a bare | inside a cell splits it

    lines = ["| " + " | ".join(fmt(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)
