"""Identify a thrown book from synthetic gyroscope throws: what comes back, how often the global
search finds the right basin, and how often the stated intervals cover the truth.

Truth: a 24 x 17 x 3 cm book (ratios 0.3445 : 0.6763 : 1, as in tests/data/phyphox_book_throws.csv),
spun about its intermediate axis at 8-12 rad/s, flights of 0.7-1.5 s through a flip, 100 Hz with
0.4 ms jitter, noise 0.02 rad/s, a bias of 0.01-0.03 rad/s per axis drawn for each throw, one sensor
misalignment of 1-2 degrees, air drag ``k / trace(J) = 4e-4``. Integrated independently of the fit (SciPy DOP853 at
rtol 1e-11 where installed, else jaxrot's reference DOP853).

Measured (``quick``: 4 throws and a smaller search):

1. the model's discretisation error (``rk4`` at the fit's step) against the independent integrator;
2. each throw fitted alone with no initial inertia (global search, then Levenberg-Marquardt): the
   right basin is that of the fit started at the truth (every unknown at its true value; the ratios
   within 1% of that fit's); beside it the single-guess baseline, SciPy's ``least_squares`` from
   moments each 20% off (uniformly drawn), if SciPy is installed;
3. the coverage of the per-throw 1 and 2 sigma intervals of the two ratios;
4. all throws fitted jointly (bias per throw): the ratio errors, its time (a second call: after
   compilation; and the first call's, compilation included, with its stages), the torque-free/drag
   comparison, and the scatter's chi2 of the per-throw fits started at the joint fit's values.

Writes identify.json, identify.md and identify.png (per-throw estimates with their error bars; the
normalised errors against a standard normal).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from ._common import md_table, setup, write_json

BOOK = (0.3445, 0.6763, 1.0)


def _discretisation_error(throws, truth, options) -> float:
    """The largest rate error of the fit's simulation at the truth, against the independent integrator."""
    from jaxrot.studies import identify_model as im
    from jaxrot.studies.identify_search import make_model
    from jaxrot.studies.identify_synthetic import integrate

    model = make_model(throws, im.Layout(1, False, False, "none", True, False), im.QUADRATIC_DRAG, options)
    dyn = jnp.asarray(np.concatenate([im.u_from_moments(truth["J"]), [truth["kappa"]]]))
    worst = 0.0
    for k, t in enumerate(throws[:10]):
        ts = t.ts - t.ts[0]
        ours, _ = jax.jit(model.dynamics)(dyn, jnp.asarray(truth["omega0"][k]), jnp.asarray(ts))
        ref, _ = integrate(truth["J"], truth["kappa"], truth["omega0"][k], ts)
        worst = max(worst, float(np.abs(np.asarray(ours) - ref).max()))
    return worst


def _baseline_functions(throws, options, shape):
    """The residuals and Jacobian of one throw in all its unknowns, compiled once for every throw."""
    from jaxrot.studies import identify_model as im
    from jaxrot.studies.identify_search import linearise_all, make_model, residuals_all

    layout = im.Layout(1, True, False, "shared", True, False)
    model = make_model(throws, layout, im.QUADRATIC_DRAG, options, shape[1])
    P = layout.n_shared
    res = jax.jit(lambda x, data: residuals_all(model, x[:P], x[None, P:], data)[0])

    @jax.jit
    def jac(x, data):
        _, A, B = linearise_all(model, x[:P], x[None, P:], data)
        return jnp.concatenate([A[0], B[0]], axis=1)

    return P, res, jac


def _baseline(throw, guess, functions, shape):
    """SciPy least_squares (trf) from one guess of the moments, with the fit's residuals and Jacobian."""
    from scipy.optimize import least_squares

    from jaxrot.studies import identify_model as im

    P, res, jac = functions
    data = im.pack([throw], length=shape[0])
    x0 = np.zeros(P + 3)
    x0[:2] = im.u_from_moments(guess)
    x0[P:] = im.initial_rates(throw)
    sol = least_squares(lambda x: np.asarray(res(jnp.asarray(x), data)),
                        x0, jac=lambda x: np.asarray(jac(jnp.asarray(x), data)), method="trf", x_scale="jac",
                        max_nfev=200)
    J = np.asarray(im.moments_from_u(jnp.asarray(sol.x[:2])))
    return J / J.max(), float(sol.cost)


def main(quick: bool = False, out_dir=None) -> dict:
    out = setup(out_dir, quick)
    from jaxrot.studies import identify as idf
    from jaxrot.studies.identify_synthetic import synthetic_throws

    n = 4 if quick else 100
    t0 = time.perf_counter()
    throws, truth = synthetic_throws(BOOK, n, seed=2026, kappa=4e-4)
    gen_s = time.perf_counter() - t0
    true_r = np.asarray(truth["ratios"])
    # the quick run searches on one throw: its programs are the per-throw fits' (compiled once)
    options = idf.IdentifyOptions(candidates=512 if quick else 1024, search_throws=1 if quick else 6)
    obs = idf.Gyroscope(bias="per_throw")
    disc = _discretisation_error(throws, truth, options)
    print(f"{n} throws ({truth['integrator']}, {gen_s:.1f} s); the model's discretisation error at the truth: "
          f"{disc:.2e} rad/s (noise {truth['noise']})", flush=True)

    # 2-3: each throw alone, from no initial inertia; the truth-started fit defines the right basin
    t0 = time.perf_counter()
    each = idf.identify_each(throws, obs, options=options, progress=True)
    each_s = time.perf_counter() - t0
    shape = (max(len(t.ts) for t in throws), max(t.duration for t in throws))
    at_truth = [idf.identify([t], obs, options=options, ratios=truth["J"], _shape=shape,
                             start={"misalignment": truth["misalignment"], "bias": truth["bias"][k],
                                    "omega0": truth["omega0"][k], "torque": [truth["kappa"]]})
                for k, t in enumerate(throws)]
    R = np.asarray([f.ratios for f in each])
    S = np.asarray([f.ratios_std for f in each])
    R_truth = np.asarray([f.ratios for f in at_truth])
    basin = np.all(np.abs(R / R_truth - 1) < 0.01, axis=1)
    z = ((R - true_r) / np.where(S > 0, S, np.inf))[:, :2][basin]  # the two ratios below the largest
    cover1, cover2 = float(np.mean(np.abs(z) <= 1)), float(np.mean(np.abs(z) <= 2))
    print(f"per-throw fits: right basin {basin.sum()}/{n}; coverage of 1 sigma {cover1:.1%}, 2 sigma {cover2:.1%} "
          f"({z.size} intervals); {each_s:.0f} s", flush=True)

    baseline = None
    try:
        import scipy  # noqa: F401
    except ImportError:
        print("SciPy is not installed: no least_squares baseline", flush=True)
    else:
        rng = np.random.default_rng(7)
        hits, t0 = 0, time.perf_counter()
        functions = _baseline_functions(throws, options, shape)
        for k, t in enumerate(throws):
            while True:  # a guess each moment 20% off, physical
                guess = np.asarray(truth["J"]) * (1 + rng.uniform(-0.2, 0.2, 3))
                if np.all(2 * guess < guess.sum()):
                    break
            r, _ = _baseline(t, guess, functions, shape)
            hits += bool(np.all(np.abs(r / R_truth[k] - 1) < 0.01))
        baseline = {"right_basin": hits, "of": n, "seconds": time.perf_counter() - t0,
                    "guess": "each moment 20% off (uniform), SciPy least_squares trf with the same residuals "
                             "and Jacobian"}
        print(f"baseline (one guess, SciPy least_squares): right basin {hits}/{n}", flush=True)

    # 4: jointly; the second call is timed (compiled by the first)
    t0 = time.perf_counter()
    first = idf.identify(throws, obs, options=options, progress=True)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    joint = idf.identify(throws, obs, options=options)
    joint_s = time.perf_counter() - t0
    free = idf.identify(throws, obs, options=options, ratios=joint.moments_trace1,
                        start={**idf.start_from(joint), "torque": [0.0]}, hold=("torque",))
    comp = idf.compare(free, joint)
    # the scatter of the per-throw fits in the joint fit's basin (each started at its values)
    sc = idf.scatter(idf.identify_each(throws, obs, options=options, from_fit=joint, hold=("misalignment",)), joint) \
        if n >= 2 else None
    err = joint.ratios / true_r - 1
    print(f"joint: ratios {np.round(joint.ratios, 5).tolist()} ± {np.round(joint.ratios_std, 5).tolist()}, errors "
          f"{np.round(100 * err, 3).tolist()} %; {joint_s:.1f} s after compilation", flush=True)
    print(comp.sentence(), flush=True)
    if sc is not None:
        print(sc.sentence(), flush=True)

    result = {
        "quick": quick, "n_throws": n, "truth": truth, "integrator": truth["integrator"],
        "options": {"method": options.method, "dt": options.dt, "candidates": options.candidates,
                    "starts": options.starts, "search_throws": options.search_throws},
        "discretisation_error": disc,
        "per_throw": {"right_basin": int(basin.sum()), "of": n, "seconds": each_s,
                      "ratios": R.tolist(), "ratios_std": S.tolist(), "coverage_1sigma": cover1,
                      "coverage_2sigma": cover2, "intervals": int(z.size),
                      "largest_error_over_sigma": float(np.abs(z).max()),
                      "ratio_errors_pct_median": float(np.median(np.abs(R / true_r - 1)) * 100)},
        "baseline_least_squares": baseline,
        "joint": {"ratios": joint.ratios.tolist(), "ratios_std": joint.ratios_std.tolist(),
                  "ratio_errors_pct": (100 * err).tolist(), "seconds_after_compilation": joint_s,
                  "seconds_first_call": first_s, "first_call_stages": first.search,
                  "drag_ratio": joint.drag_ratio, "drag_ratio_std": joint.drag_ratio_std,
                  "misalignment_deg": joint.misalignment_deg.tolist(),
                  "misalignment_std_deg": joint.misalignment_std_deg.tolist(), "iterations": joint.iterations},
        "comparison": {"F": comp.f_stat, "p_value": comp.p_value, "delta_bic": comp.delta_bic,
                       "supports_drag": comp.supports},
        "scatter": None if sc is None else {"chi2": sc.chi2, "dof": sc.dof, "p_value": sc.p_value, "birge": sc.birge},
    }
    _figure(out, R, S, true_r, z, basin)
    rows = [["per-throw fits in the right basin (no initial inertia)", f"{basin.sum()}/{n}"],
            ["single-guess least_squares in the right basin",
             f"{baseline['right_basin']}/{n}" if baseline else "SciPy not installed"],
            ["joint ratio errors (%)", ", ".join(f"{e:+.3f}" for e in 100 * err)],
            ["joint ratios ± 1σ", ", ".join(f"{r:.5f} ± {s:.5f}" for r, s in zip(joint.ratios, joint.ratios_std))],
            ["coverage of per-throw 1σ / 2σ intervals", f"{cover1:.1%} / {cover2:.1%} of {z.size}"],
            ["largest per-throw |error| / σ", f"{np.abs(z).max():.1f}"],
            ["joint fit time after compilation (s)", f"{joint_s:.1f}"],
            ["drag k/J_max (truth {:.3e})".format(truth["drag_ratio"]),
             f"{joint.drag_ratio:.3e} ± {joint.drag_ratio_std:.1e}"],
            ["discretisation error of the model at the truth (rad/s)", f"{disc:.1e}"]]
    text = md_table(["quantity", "value"], rows) + "\n\n" + comp.sentence() + ".\n"
    if sc is not None:
        text += sc.sentence() + ".\n"
    print(text)
    (out / "identify.md").write_text(text)
    write_json(out / "identify.json", result)
    return result


def _figure(out, R, S, true_r, z, basin):
    from jaxrot.present.plotting import plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    k = np.arange(len(R))
    for i, ax in enumerate(axes[:2]):
        ax.errorbar(k[basin], R[basin, i], yerr=S[basin, i], fmt=".", ms=3, lw=0.8, label="fit, ±1σ")
        if (~basin).any():
            ax.plot(k[~basin], R[~basin, i], "x", color="tab:red", label="wrong basin")
        ax.axhline(true_r[i], color="k", lw=0.8, label="truth")
        ax.set_xlabel("throw")
        ax.set_title(f"J_{'xyz'[i]} / J_max, each throw alone", fontsize=9)
        ax.legend(fontsize=7)
    zz = np.sort(np.abs(z).ravel())
    axes[2].plot(zz, np.arange(1, zz.size + 1) / max(zz.size, 1), label="|error| / σ, observed")
    x = np.linspace(0, 4, 200)
    axes[2].plot(x, jax.scipy.special.erf(x / np.sqrt(2)), "--", label="standard normal")
    axes[2].set_xlim(0, 4)
    axes[2].set_xlabel("|error| / stated σ")
    axes[2].set_ylabel("fraction of intervals")
    axes[2].set_title("coverage of the stated intervals", fontsize=9)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "identify.png", dpi=110)
    plt.close(fig)
