"""Matplotlib figures from arrays (never imported by the core). Each function returns a Figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

_DASHES = ["-", "--", ":", "-."]


def _overlap_style(i: int) -> dict:
    """Curve i drawn thinner and with another dash than curve i-1, so curves that coincide stay visible."""
    return dict(ls=_DASHES[i % 4], lw=2.4 - 0.5 * (i % 4))


def convergence_figure(panels: dict[str, dict[str, dict]], *, ylabel: str = "error at t_end",
                       title: str = "") -> "plt.Figure":
    """Log-log error against step size; ``panels[title][method] = {"dts", "errors", "order"}``.

    Each method's legend shows its fitted slope; dashed grey lines are reference slopes 1-4.
    """
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 5.4), squeeze=False)
    for ax, (ptitle, methods) in zip(axes[0], panels.items()):
        for name, r in methods.items():
            ax.loglog(r["dts"], r["errors"], "o-", ms=4, label=f"{name} (slope {r['order']:.2f})")
        dts = np.array(next(iter(methods.values()))["dts"])
        e0 = min(min(r["errors"]) for r in methods.values())
        for k in (1, 2, 3, 4):
            ref = e0 * (dts / dts.min()) ** k
            ax.loglog(dts, ref, ":", color="0.6", lw=0.8)
            j = int(np.argmax(dts))
            ax.annotate(f"slope {k}", (dts[j], ref[j]), fontsize=7, color="0.45", ha="left", va="center",
                        xytext=(2, 0), textcoords="offset points")
        ax.set_xlabel("step size dt")
        ax.set_ylabel(ylabel)
        ax.set_title(ptitle)
        _log_ticks(ax)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _log_ticks(ax):
    """Label decades only and grid the major ticks: minor labels on a log axis spanning less than a
    decade or two collide (``3x10^-3 4x10^-3 ...``)."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_major_locator(LogLocator(base=10, numticks=8))
            lo, hi = sorted(axis.get_view_interval())
            if lo > 0 and hi / lo < 30:  # under ~1.5 decades: also label 2x and 5x, the rest unlabelled
                axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0), numticks=12))
                axis.set_minor_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(2, 2)))
            else:
                axis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)


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


def throughput_lines_figure(bodies, series: dict[str, list[float]], *, title: str = ""):
    """Body-steps per second against the number of bodies, one line per implementation."""
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for i, (name, y) in enumerate(series.items()):
        y = np.asarray(y, dtype=float)
        if np.all(np.isnan(y)):
            continue
        ax.loglog(bodies, y, marker="os^vD<>p"[i % 8], label=name, **_overlap_style(i))
    ax.set_xlabel("bodies in the batch")
    ax.set_ylabel("body-steps per second")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(title or "buss2p throughput (higher is better)", fontsize=10)
    fig.tight_layout()
    return fig


def convergence_maps_figure(x, maps: dict[str, np.ndarray], *, max_iters: int, disc_radius: float | None = None):
    """Iteration-count maps like the Roblox article's: grey shade = iterations, yellow = not converged."""
    from matplotlib.colors import ListedColormap

    n = len(maps)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n + 1.2, 4.0), squeeze=False, sharey=True, layout="constrained")
    greys = plt.get_cmap("Greys")(np.linspace(0.15, 0.9, max_iters))
    cmap = ListedColormap(np.vstack([[1.0, 0.85, 0.0, 1.0], greys]))  # index 0: not converged
    ext = [x[0], x[-1], x[0], x[-1]]
    for ax, (title, it) in zip(axes[0], maps.items()):
        img = np.where(np.asarray(it) < 0, 0, np.asarray(it))
        im = ax.imshow(img, origin="lower", extent=ext, cmap=cmap, vmin=-0.5, vmax=max_iters + 0.5,
                       interpolation="nearest")
        if disc_radius is not None:
            ax.add_patch(plt.Circle((0, 0), disc_radius, fill=False, color="red", lw=1.2))
        ok = np.asarray(it) >= 0
        ax.set_title(f"{title}\n{100 * ok.mean():.1f}% converged", fontsize=9)
        ax.set_xlabel("dt L_x")
    axes[0][0].set_ylabel("dt L_y")
    if disc_radius is not None:
        axes[0][0].plot([], [], color="red", lw=1.2, label="Kantorovich disc")
        axes[0][0].legend(fontsize=7, loc="lower left")
    cb = fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9, ticks=range(0, max_iters + 1))
    cb.set_label("iterations (0 = yellow = not converged)")
    return fig


def scalar_map_figure(x, values: np.ndarray, *, label: str, title: str = ""):
    """A scalar over a square grid (NaN shown white)."""
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    im = ax.imshow(np.asarray(values), origin="lower", extent=[x[0], x[-1], x[0], x[-1]], cmap="viridis")
    fig.colorbar(im, ax=ax, label=label)
    ax.set_xlabel("L_x")
    ax.set_ylabel("L_y")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def fit_figure(obs, trajectories: dict, loss_history):
    """Loss curve and an overlay of observed vs simulated attitudes (first column of R)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    axes[0].semilogy(np.arange(1, len(loss_history) + 1), loss_history, "o-", ms=3)
    axes[0].set_xlabel("optimizer iteration")
    axes[0].set_ylabel("loss  (1/2 sum |log(R_obs^T R)|^2 / sigma^2)")
    axes[0].grid(True, which="both", alpha=0.3)
    ts, R = np.asarray(obs.ts), np.asarray(obs.R)
    for name, tr in trajectories.items():
        axes[1].plot(np.asarray(tr.ts), np.asarray(tr.states.R)[:, 2, 0], lw=1.2, label=f"{name}: R[2,0]")
    axes[1].plot(ts, R[:, 2, 0], "k.", ms=3, label="observed R[2,0] (noisy)")
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("R[2,0]")
    axes[1].legend(fontsize=8)
    axes[1].grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def published_comparison_figure(rows: list[dict], *, cap: int, title: str = "",
                                ylabel: str = "steps N to reach the threshold", tick: str = "method"):
    """Our N beside the published N per row (log axis), each row named by its ``rows[i][tick]``
    (the method id, as in every other figure). A row beyond the cap is drawn as a hatched bar at
    the cap labelled "> cap"; the shaded band around each published value is +-25%."""
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(rows)), 4.8))
    x = np.arange(len(rows))
    for i, r in enumerate(rows):
        for dx, val, colour, lab in ((-0.2, r["N"], "C0", "jaxrot"), (0.2, r["N_buss"], "C1", "Buss (2011)")):
            capped = val is None
            ax.bar(i + dx, cap if capped else val, 0.4, color="none" if capped else colour, edgecolor=colour,
                   hatch="//" if capped else None, label=lab if i == 0 else None)
            if capped:
                ax.text(i + dx, cap * 1.08, f"> {cap}", rotation=90, ha="center", va="bottom", fontsize=6)
        if r["N_buss"] is not None:
            ax.fill_between([i - 0.45, i + 0.45], 0.75 * r["N_buss"], 1.25 * r["N_buss"], color="0.85", zorder=0)
    ax.set_yscale("log")
    ax.set_ylim(top=cap * 4)
    ax.set_xticks(x, [r[tick] for r in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def grouped_work_precision_figure(groups: dict[str, dict[str, dict]], *, eps: float | None = None,
                                  xlabel: str = "steps N", ylabel: str = "final attitude error (rad)", title: str = ""):
    """Error against work, one panel per group (at most ~8 curves each);
    ``groups[panel][method] = {"x": [...], "errors": [...]}``. The dotted line is the threshold."""
    n = len(groups)
    fig, axes = plt.subplots(1, n, figsize=(4.8 * n, 4.4), squeeze=False, sharey=True)
    for ax, (gname, methods) in zip(axes[0], groups.items()):
        for i, (name, d) in enumerate(methods.items()):
            ax.loglog(np.asarray(d["x"], float), np.asarray(d["errors"], float), marker="os^vD<>p"[i % 8], ms=3,
                      lw=1, ls="-" if i < 8 else "--", label=name)
        if eps is not None:
            ax.axhline(eps, color="k", lw=0.8, ls=":", label=f"threshold {eps:g}")
        ax.set_title(gname, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.grid(True, which="major", alpha=0.3)
        # below its panel: inside, the legend of oscillating curves always covers some of them
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    axes[0][0].set_ylabel(ylabel)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def coinciding(a, b, *, span: float, logy: bool = True, tol: float = 0.005, share: float = 0.9) -> bool:
    """Whether curve ``b`` would hide under ``a`` (same abscissae): at ``share`` of the points or
    more they differ by at most ``tol`` of the axis's ``span`` (in decades on a log axis), about a
    pixel at the figures' size. (Two energy curves that part only during the first steps and then
    run within 10% of each other over 16 decades look like one line.)"""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.size == 0:
        return False
    if logy:
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = np.log10(np.abs(a)), np.log10(np.abs(b))
    with np.errstate(invalid="ignore"):
        close = (np.abs(a - b) <= tol * span) | (np.isnan(a) & np.isnan(b))
    return float(np.mean(close)) >= share


def grouped_series_figure(ts, groups: dict[str, dict[str, np.ndarray]], *, ylabel: str, xlabel: str = "t",
                          title: str = "", logy: bool = True):
    """Quantities over time, one panel per group (at most ~8 curves each).

    A curve that would hide under an earlier one of its panel (:func:`coinciding`: within a pixel or
    two at the figure's size) is drawn dashed on top of it, and its legend entry names the curve it
    coincides with: every entry stays visible."""
    n = len(groups)
    fig, axes = plt.subplots(1, n, figsize=(4.8 * n, 5.0), squeeze=False, sharey=True)
    values = [np.abs(np.asarray(y, dtype=float)) if logy else np.asarray(y, dtype=float)
              for series in groups.values() for y in series.values()]
    finite = np.concatenate([v[np.isfinite(v) & ((v > 0) if logy else True)] for v in values] or [np.zeros(0)])
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        span = max(np.log10(hi / lo) if logy else hi - lo, 1e-300)
    else:
        span = 1.0
    for ax, (gname, series) in zip(axes[0], groups.items()):
        drawn = []  # (name, y) of the curves drawn solid
        for i, (name, y) in enumerate(series.items()):
            y = np.abs(np.asarray(y)) if logy else np.asarray(y)
            under = next((other for other, z in drawn if coinciding(y, z, span=span, logy=logy)), None)
            if under is None:
                style, label = dict(lw=1, ls="-" if i < 10 else "--", zorder=2), name
                drawn.append((name, y))
            else:  # dashed on top: the solid curve below shows between its dashes
                style, label = dict(lw=1.6, ls=(0, (3, 3)), zorder=3), f"{name} (dashed: coincides with {under})"
            (ax.semilogy if logy else ax.plot)(np.asarray(ts), y, label=label, **style)
        ax.set_title(gname, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.grid(True, which="major", alpha=0.3)
        # below its panel: inside, the legend of oscillating curves always covers some of them
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    axes[0][0].set_ylabel(ylabel)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def flip_figure(series: dict[str, tuple], half_period: float, *, title: str = ""):
    """The intermediate body-momentum component over time, one curve per method; dotted verticals at
    the analytic flip times ``(k + 1/2) T/2`` shifted to the reference's first flip."""
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for i, (name, (ts, y)) in enumerate(series.items()):
        ax.plot(ts, y, lw=2.2 if i == 0 else 1, color="k" if i == 0 else None, ls="-" if i < 9 else "--",
                label=name, zorder=3 if i == 0 else 2)
    ax.set_xlabel("t (time units of the T-handle)")
    ax.set_ylabel("Pi_y, intermediate-axis body momentum")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def poinsot_figure(J, L: float, polhodes: list, paths: dict[str, np.ndarray], *, title: str = ""):
    """Polhodes (grey) on the momentum sphere, the separatrix (black) and methods' paths (colour)."""
    J = np.asarray(J)
    fig = plt.figure(figsize=(11, 5.2))
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    u, v = np.mgrid[0:2 * np.pi:40j, 0:np.pi:20j]
    ax.plot_wireframe(L * np.cos(u) * np.sin(v), L * np.sin(u) * np.sin(v), L * np.cos(v), color="0.9", lw=0.4)
    for x in polhodes:
        ax.plot(*x.T, color="0.55", lw=0.7)
    sep = _separatrix(J, L)
    for x in sep:
        ax.plot(*x.T, color="k", lw=1.4)
    for i, (name, x) in enumerate(paths.items()):
        ax.plot(*x.T, label=name, **_overlap_style(i))
    ax.set_xlabel("Pi_x")
    ax.set_ylabel("Pi_y")
    ax.set_zlabel("Pi_z")
    ax.set_box_aspect((1, 1, 1))
    ax.legend(fontsize=8, loc="upper left")
    ax2 = fig.add_subplot(1, 2, 2)
    for i, (name, x) in enumerate(paths.items()):
        E = 0.5 * np.sum(x * x / J, axis=-1)
        ax2.plot(np.arange(len(E)), E / E[0] - 1, label=name, **_overlap_style(i))
    ax2.set_xlabel("step")
    ax2.set_ylabel("relative energy change (E - E0) / E0")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    ax2.set_title("energy: which polhode each method is on", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _separatrix(J, L, n: int = 200):
    """The two great-circle-like curves through the intermediate axis at energy L^2 / (2 J_mid)."""
    order = np.argsort(J)
    i1, i2, i3 = order
    J1, J2, J3 = J[i1], J[i2], J[i3]
    # on the separatrix Pi_1^2 (1/J1 - 1/J2) = Pi_3^2 (1/J2 - 1/J3): a plane pair through e_2
    r = np.sqrt((1 / J2 - 1 / J3) / (1 / J1 - 1 / J2))  # Pi_1 = +- r Pi_3
    out = []
    for sgn in (1, -1):
        t = np.linspace(0, 2 * np.pi, n)
        d = np.zeros((3, 3))
        d[0, i2] = 1.0  # along e_2
        w = np.zeros(3)
        w[i1], w[i3] = sgn * r, 1.0
        w /= np.linalg.norm(w)
        x = L * (np.cos(t)[:, None] * d[0][None] + np.sin(t)[:, None] * w[None])
        out.append(x)
    return out


def conserved_drift_figure(series: dict[str, dict[str, np.ndarray]], quantities: dict[str, str], *,
                           title: str = ""):
    """How far each conserved quantity moves from its initial value, one panel per quantity, on a
    log axis (|q(t) - q(0)|; exact zeros drawn at 1e-17 so they stay visible as "exact");
    ``series[method] = {"t": ..., key: ...}``, ``quantities[key] = axis label``."""
    n = len(quantities)
    fig, axes = plt.subplots(1, n, figsize=(4.8 * n, 3.9), squeeze=False)
    for ax, (key, label) in zip(axes[0], quantities.items()):
        for i, (m, s) in enumerate(series.items()):
            q = np.asarray(s[key], dtype=np.float64)
            ax.semilogy(np.asarray(s["t"]), np.maximum(np.abs(q - q[0]), 1e-17), label=m, **_overlap_style(i))
        ax.set_ylim(5e-18, None)
        ax.set_xlabel("t")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def series_panels_figure(ts, panels: dict[str, dict[str, np.ndarray]], *, xlabel: str = "t", title: str = "",
                         logy: tuple[str, ...] = ()):
    """One panel per quantity (its title is the y label, with units), one curve per method."""
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.9), squeeze=False)
    for ax, (label, series) in zip(axes[0], panels.items()):
        for i, (name, y) in enumerate(series.items()):
            (ax.semilogy if label in logy else ax.plot)(np.asarray(ts), np.asarray(y), label=name,
                                                        **_overlap_style(i))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        if label not in logy:
            ax.ticklabel_format(axis="y", useOffset=False)  # values as they are, no "1e-5+9.999e-1"
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
