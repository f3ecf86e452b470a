"""The report of an identification (:func:`jaxrot.studies.identify.analyse`): figures and tables.

:func:`write_report` writes into a folder (the command line stages it and moves the files into
place only when all are written):

- ``identification.md``: the estimates with standard deviations, the scatter across throws, the
  model comparison and a table of the per-throw fits;
- ``identification.json``: the same numbers;
- ``rates.png``: the recording with the windows fitted, and per throw the measured rates with the
  fitted ones over them;
- ``residuals.png``: per throw, measured less fitted rates;
- ``polhode.png``: the fitted body rates of each throw on the inertia ellipsoid (each point scaled
  to unit energy, ``omega . J omega = 1``, so that the slowly draining drag does not move it off).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from .plotting import plt

_AXES = "xyz"
_COLORS = ("tab:blue", "tab:orange", "tab:green")


def _pm(v, s, fmt=".4f"):
    return f"{v:{fmt}} ± {s:{fmt}}"


def _fit_record(fit) -> dict:
    def arr(x):
        return None if x is None else np.asarray(x).tolist()

    return {
        "ratios": arr(fit.ratios), "ratios_std": arr(fit.ratios_std),
        "moments_trace1": arr(fit.moments_trace1), "moments_cov": arr(fit.moments_cov),
        "torque": dict(zip(fit.torque_names, np.asarray(fit.torque).tolist())),
        "torque_std": dict(zip(fit.torque_names, np.asarray(fit.torque_std).tolist())),
        "drag_k_over_Jmax": fit.drag_ratio, "drag_k_over_Jmax_std": fit.drag_ratio_std,
        "misalignment_deg": arr(fit.misalignment_deg), "misalignment_std_deg": arr(fit.misalignment_std_deg),
        "bias": arr(fit.bias), "bias_std": arr(fit.bias_std), "scale": arr(fit.scale), "scale_std": arr(fit.scale_std),
        "omega0": arr(fit.omega0), "omega0_std": arr(fit.omega0_std),
        "rms_rate_residual": fit.sigma_gyro, "rms_attitude_residual": fit.sigma_att,
        "reduced_chi2": fit.reduced_chi2, "n_residuals": fit.n_residuals, "n_params": fit.n_params,
        "iterations": fit.iterations, "converged": fit.converged, "seconds": fit.seconds, "widened": fit.widened,
        "windows": [[float(t.ts[0]), float(t.ts[-1])] for t in fit.throws], "search": fit.search,
    }


def report_record(analysis, *, source: str = "", scale: dict | None = None) -> dict:
    """The numbers of the report as one JSON-able dict."""
    out = {"source": source, "joint": _fit_record(analysis.joint), "seconds": analysis.seconds}
    if analysis.torque_free is not None:
        out["torque_free"] = _fit_record(analysis.torque_free)
    if analysis.comparison is not None:
        c = analysis.comparison
        out["comparison"] = {"F": c.f_stat, "p_value": c.p_value, "delta_bic": c.delta_bic, "supports_drag": c.supports,
                             "sentence": c.sentence()}
    if analysis.scatter is not None:
        s = analysis.scatter
        out["scatter"] = {"chi2": s.chi2, "dof": s.dof, "p_value": s.p_value, "birge": s.birge,
                          "sentence": s.sentence()}
    out["per_throw"] = [_fit_record(f) for f in analysis.per_throw]
    if scale:
        out["absolute"] = scale
    return out


def report_text(analysis, *, source: str = "", scale: dict | None = None) -> str:
    """The report's markdown."""
    j = analysis.joint
    lines = [f"# Identification{' of ' + source if source else ''}", "",
             f"{len(j.throws)} throw(s) fitted jointly: "
             + ", ".join(f"{t.ts[0]:.3f}-{t.ts[-1]:.3f} s" for t in j.throws) + ".", "",
             "| quantity | estimate ± 1σ |", "|---|---|"]
    for a, r, s in zip(_AXES, j.ratios, j.ratios_std):
        lines.append(f"| J_{a} / J_max | {_pm(r, s)} |")
    if j.drag_ratio is not None:
        lines.append(f"| air drag k / J_max (τ = −k‖ω‖ω) | {j.drag_ratio:.3e} ± {j.drag_ratio_std:.1e} |")
    for n, v, s in zip(j.torque_names, j.torque, j.torque_std):
        if j.drag_ratio is None:
            lines.append(f"| torque parameter {n} | {v:.4g} ± {s:.2g} |")
    if j.misalignment is not None:
        for a, v, s in zip(_AXES, j.misalignment_deg, j.misalignment_std_deg):
            lines.append(f"| sensor misalignment q_{a} (deg) | {_pm(v, s, '.3f')} |")
    if j.bias is not None and np.ndim(j.bias) == 1:
        for a, v, s in zip(_AXES, j.bias, j.bias_std):
            lines.append(f"| gyro bias b_{a} (rad/s) | {_pm(v, s)} |")
    if j.scale is not None:
        for a, v, s in zip(_AXES, j.scale, j.scale_std):
            lines.append(f"| gyro scale s_{a} | {_pm(1 + v, s)} |")
    if scale:
        for a, v, s in zip(_AXES, scale["J"], scale["J_std"]):
            lines.append(f"| J_{a} (kg m², scale: {scale['from']}) | {v:.4e} ± {s:.1e} |")
        if scale.get("k") is not None:
            lines.append(f"| drag k (N m s²) | {scale['k']:.3e} ± {scale['k_std']:.1e} |")
    if j.sigma_gyro is not None:
        lines.append(f"| rms rate residual (rad/s) | {j.sigma_gyro:.4f} |")
    lines += ["", "Gyroscope rates fix the ratios of the moments, not their scale"
              + ("." if scale else ": give a scale (the trace, or mass and dimensions) for absolute moments."), ""]
    if j.widened != 1.0:
        lines.append(f"The uncertainties above are widened by {j.widened:.2f} (the scatter across throws).")
    if analysis.scatter is not None:
        lines.append(analysis.scatter.sentence()[0].upper() + analysis.scatter.sentence()[1:] + ".")
    if analysis.comparison is not None:
        s = analysis.comparison.sentence()
        lines.append(s[0].upper() + s[1:] + ".")
    if analysis.per_throw:
        lines += ["", "## Each throw alone", "",
                  "Started at the joint fit's values, the sensor misalignment held there (what the scatter "
                  "above compares).", "",
                  "| throw | window (s) | J_x / J_max | J_y / J_max | J_z / J_max | rms residual (rad/s) |",
                  "|---|---|---|---|---|---|"]
        for k, f in enumerate(analysis.per_throw):
            t = f.throws[0]
            rms = "" if f.sigma_gyro is None else f"{f.sigma_gyro:.4f}"
            lines.append(f"| {k + 1} | {t.ts[0]:.3f}-{t.ts[-1]:.3f} | "
                         + " | ".join(_pm(r, s) for r, s in zip(f.ratios, f.ratios_std)) + f" | {rms} |")
    lines += ["", f"Total time {analysis.seconds:.1f} s. Figures: rates.png (fitted over measured), residuals.png, "
              "polhode.png.", ""]
    return "\n".join(lines)


def rates_figure(fit, recording=None):
    """The recording with its fitted windows, then per throw the measured (dots) and fitted rates."""
    T = len(fit.throws)
    rows = T + (1 if recording is not None else 0)
    fig, axes = plt.subplots(rows, 1, figsize=(9, 2.4 * rows + 0.6), squeeze=False)
    axes = axes[:, 0]
    if recording is not None:
        ax = axes[0]
        ax.plot(recording.ts, recording.rate, color="0.3", lw=0.8, label="|ω| measured")
        for t in fit.throws:
            ax.axvspan(t.ts[0], t.ts[-1], color="tab:green", alpha=0.2)
        ax.set_ylabel("|ω| (rad/s)")
        ax.set_title("the recording; shaded: the windows fitted")
        axes = axes[1:]
    for k, (ax, t) in enumerate(zip(axes, fit.throws)):
        dense = np.linspace(t.ts[0], t.ts[-1], 400)
        _, fitted = fit.rates(k, dense)
        for i in range(3):
            ax.plot(t.ts, t.omega[:, i], ".", ms=2.5, color=_COLORS[i], alpha=0.6)
            ax.plot(dense, fitted[:, i], "-", lw=1.1, color=_COLORS[i], label=f"ω_{_AXES[i]}")
        ax.set_ylabel("rate (rad/s)")
        ax.set_title(f"throw {k + 1}: measured (dots) and fitted", fontsize=9)
        if k == 0:
            ax.legend(fontsize=7, ncol=3, loc="best")
    axes[-1].set_xlabel("t (s)")
    fig.tight_layout()
    return fig


def residuals_figure(fit):
    """Per throw, measured less fitted rates."""
    T = len(fit.throws)
    fig, axes = plt.subplots(T, 1, figsize=(9, 1.9 * T + 0.6), squeeze=False, sharex=False)
    for k, (ax, t) in enumerate(zip(axes[:, 0], fit.throws)):
        r = fit.residuals(k)
        for i in range(3):
            ax.plot(t.ts, r[:, i], ".-", ms=2, lw=0.5, color=_COLORS[i], label=f"ω_{_AXES[i]}")
        ax.axhline(0, color="0.5", lw=0.6)
        ax.set_ylabel("rad/s")
        ax.set_title(f"throw {k + 1}: measured − fitted (rms {np.sqrt(np.mean(r * r)):.4f} rad/s)", fontsize=9)
        if k == 0:
            ax.legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("t (s)")
    fig.tight_layout()
    return fig


def polhode_figure(fit):
    """The fitted principal-frame rates of each throw on the inertia ellipsoid ``omega . J omega = 1``."""
    J = np.asarray(fit.moments_trace1)
    fig = plt.figure(figsize=(6.4, 6))
    ax = fig.add_subplot(projection="3d")
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, np.pi, 20))
    ax.plot_wireframe(np.cos(u) * np.sin(v) / np.sqrt(J[0]), np.sin(u) * np.sin(v) / np.sqrt(J[1]),
                      np.cos(v) / np.sqrt(J[2]), color="0.8", lw=0.4)
    for k, t in enumerate(fit.throws):
        _, w = fit.principal_rates(k, np.linspace(t.ts[0], t.ts[-1], 400))
        w = w / np.sqrt(np.sum(J * w * w, axis=1, keepdims=True))
        ax.plot(w[:, 0], w[:, 1], w[:, 2], lw=1.6, label=f"throw {k + 1}")
        ax.scatter(*w[0], s=12)
    ax.set_xlabel("ω_1")
    ax.set_ylabel("ω_2")
    ax.set_zlabel("ω_3")
    ax.set_box_aspect((1 / np.sqrt(J[0]), 1 / np.sqrt(J[1]), 1 / np.sqrt(J[2])))
    ax.set_title("polhodes on the inertia ellipsoid (fitted, unit energy)", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def write_report(analysis, folder, *, recording=None, source: str = "", scale: dict | None = None) -> list:
    """Write the report's files into ``folder`` (which must exist); returns their paths."""
    folder = pathlib.Path(folder)
    paths = []
    (folder / "identification.md").write_text(report_text(analysis, source=source, scale=scale))
    (folder / "identification.json").write_text(
        json.dumps(report_record(analysis, source=source, scale=scale), indent=2, default=float) + "\n")
    paths += [folder / "identification.md", folder / "identification.json"]
    figures = [("polhode.png", polhode_figure)]
    if analysis.joint.model.layout.gyro:
        figures = [("rates.png", lambda f: rates_figure(f, recording)), ("residuals.png", residuals_figure)] + figures
    for name, make in figures:
        fig = make(analysis.joint)
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        paths.append(folder / name)
    return paths
