"""Shared I/O for the experiment scripts: output folder, JSON/markdown writing, float64 switch."""

from __future__ import annotations

import json
import pathlib

import jax

FIGURES = pathlib.Path(__file__).resolve().parents[1] / "figures"


def setup(out_dir=None) -> pathlib.Path:
    """Switch on float64 (accuracy studies) and return the output folder (created)."""
    jax.config.update("jax_enable_x64", True)
    out = pathlib.Path(out_dir) if out_dir is not None else FIGURES
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_json(path: pathlib.Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")


def md_table(header: list[str], rows: list[list]) -> str:
    """A GitHub markdown table."""
    def fmt(x):
        if isinstance(x, float):
            return f"{x:.3g}"
        return str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)
