"""Matplotlib figures from arrays (never imported by the core). Each function returns a Figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def convergence_figure(panels: dict[str, dict[str, dict]], *, ylabel: str = "error at t_end",
                       title: str = "") -> "plt.Figure":
    """Log-log error against step size; ``panels[title][method] = {"dts", "errors", "order"}``.

    Each method's legend shows its fitted slope; dashed grey lines are reference slopes 1-4.
    """
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.4), squeeze=False)
    for ax, (ptitle, methods) in zip(axes[0], panels.items()):
        for name, r in methods.items():
            ax.loglog(r["dts"], r["errors"], "o-", ms=4, label=f"{name} (slope {r['order']:.2f})")
        dts = np.array(next(iter(methods.values()))["dts"])
        e0 = min(min(r["errors"]) for r in methods.values())
        for k in (1, 2, 3, 4):
            ax.loglog(dts, e0 * (dts / dts.min()) ** k, ":", color="0.6", lw=0.8)
        ax.set_xlabel("step size dt")
        ax.set_ylabel(ylabel)
        ax.set_title(ptitle)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def series_figure(ts, series: dict[str, np.ndarray], *, ylabel: str, title: str = "", logy: bool = False):
    """Quantities over time, one line per entry."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, y in series.items():
        (ax.semilogy if logy else ax.plot)(np.asarray(ts), np.abs(np.asarray(y)) if logy else np.asarray(y),
                                           label=name, lw=1)
    ax.set_xlabel("t")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def throughput_figure(rows: list[dict]):
    """Body-steps per second against batch size, jaxrot beside NumPy, per method."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    methods = sorted({r["method"] for r in rows})
    for m in methods:
        rs = sorted((r for r in rows if r["method"] == m), key=lambda r: r["batch"])
        (line,) = ax.loglog([r["batch"] for r in rs], [r["jax_steps_per_s"] for r in rs], "o-", label=f"{m} jax")
        ax.loglog([r["batch"] for r in rs], [r["numpy_steps_per_s"] for r in rs], "x--", color=line.get_color(),
                  label=f"{m} numpy")
    ax.set_xlabel("bodies in the batch")
    ax.set_ylabel("body-steps per second")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
