"""The precision suite's conclusions on problems it does not contain: bodies, torques, spans and
tolerances drawn from a seed of their own, ``jaxrot.suggest``'s choice run as the suite runs its
methods, beside diffrax's Tsit5 and Dopri8 at their searched tolerance, in one run.

Five problems (``unseen_problems``): an asymmetric heavy top with a random body, centre of mass and
spin; a gravity-gradient satellite with a random body and orbit rate over three orbits; a damped,
periodically forced body whose torque is a plain Python function (``jaxrot.Torque``); an
axisymmetric top with its centre of mass off the axis; a free asymmetric body. Tolerances 1e-5 and
1e-8 (the suite's are 1e-6 and 1e-10). For each: the batch of the suite (perturbed initial states,
``SUITE_BODIES`` bodies), its reference, ``jaxrot.suggest(problem, tol, state0=<the batch>)``, its
run on the batch on the executor it names (``jaxrot.Fused()`` where the method has a kernel, as
the suite runs its methods) with its error and time, the smallest step count of the same method that meets the
tolerance (searched as in the suite), and the peers at their loosest passing tolerance. Writes
``bench_unseen.{json,md,png}`` (``--seed N``: five other problems, ``bench_unseen_seedN.*``).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrot
from jaxrot.physics.problems import Problem, RigidBody, from_body_rate
from jaxrot.physics.orbit import gravity_gradient_satellite
from jaxrot.physics.torques import GravityTorque

from ._common import md_table, setup, write_json
from .precision_runs import diffrax_row, fixed_step_row, perturbed_batch, reference_states, timed_fixed_steps

TOLS = (1e-5, 1e-8)
PEERS = ["Tsit5", "Dopri8"]
SEED = 20261125


def _physical_J(rng, lo=1.0, hi=5.0):
    """Three distinct principal moments meeting the triangle inequality."""
    while True:
        J = np.sort(rng.uniform(lo, hi, 3))[::-1]
        if J[0] < J[1] + J[2] and min(np.diff(-J)) > 0.2:
            return J


def _unit(rng):
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def unseen_problems(seed: int = SEED) -> dict[str, Problem]:
    """The five problems, drawn from ``seed`` (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    f64 = lambda x: jnp.asarray(x, jnp.float64)  # noqa: E731
    out = {}

    J = _physical_J(rng)
    body = RigidBody(f64(J))
    spin = rng.uniform(10.0, 40.0) * _unit(rng)
    out["asymmetric heavy top, random body"] = Problem(
        body, GravityTorque(mgl=float(rng.uniform(5.0, 30.0)), com=tuple(_unit(rng))),
        from_body_rate(body, jaxrot.so3.exp(f64(0.5 * _unit(rng))), f64(spin)), t_end=2.0, name="unseen_top",
        description=f"J = {np.round(J, 3).tolist()}, random com, |omega| = {np.linalg.norm(spin):.1f}")

    J = _physical_J(rng)
    n = float(rng.uniform(0.5, 2.0))
    out["satellite, random body and orbit"] = gravity_gradient_satellite(
        J=tuple(float(x) for x in J), n=n, libration=tuple(float(x) for x in 0.15 * rng.normal(size=3)),
        rate=tuple(float(x) for x in 0.05 * rng.normal(size=3)),
        t_end=3 * 2 * np.pi / n)

    J = _physical_J(rng)
    c, A, Om, e = float(rng.uniform(0.05, 0.3)), float(rng.uniform(0.5, 2.0)), float(rng.uniform(1.0, 4.0)), _unit(rng)
    Jd, ed = f64(J), f64(e)

    def damped_forced(t, R, Pi):  # world torque: damping of the world rate, periodic forcing
        return -c * (R @ (Pi / Jd)) + A * jnp.sin(Om * t) * ed

    body = RigidBody(Jd)
    out["damped, forced body (plain-function torque)"] = Problem(
        body, jaxrot.Torque(damped_forced), from_body_rate(body, jnp.eye(3, dtype=jnp.float64),
                                                          f64(3.0 * _unit(rng))),
        t_end=5.0, name="unseen_damped", description=f"J = {np.round(J, 3).tolist()}, c = {c:.2f}, A = {A:.2f}")

    a, b = sorted(rng.uniform(1.0, 5.0, 2))[::-1]
    J = np.array([a, a, b])
    body = RigidBody(f64(J))
    out["axisymmetric top, centre of mass off the axis"] = Problem(
        body, GravityTorque(mgl=float(rng.uniform(5.0, 30.0)), com=tuple(_unit(rng))),
        from_body_rate(body, jaxrot.so3.exp(f64([0.3, 0.1, 0.0])), f64([0.5, -0.3, rng.uniform(20.0, 40.0)])),
        t_end=2.0, name="unseen_axisymmetric", description=f"J = {np.round(J, 3).tolist()}, random com")

    J = _physical_J(rng)
    body = RigidBody(f64(J))
    out["free asymmetric body"] = Problem(
        body, jaxrot.problems.get("free_body_mz").torque, from_body_rate(body, jnp.eye(3, dtype=jnp.float64),
                                                                           f64(2.0 * _unit(rng))),
        t_end=50.0, name="unseen_free", description=f"J = {np.round(J, 3).tolist()}")
    return out


def suggestion_row(p: Problem, S, ref, tol):
    """``jaxrot.suggest``'s method and step for the whole batch (``state0=S``: the step must serve
    every body), run on it: error, time per body, and the time its trial runs took."""
    t0 = time.perf_counter()
    s = jaxrot.suggest(p, tol, state0=S)
    trial = time.perf_counter() - t0
    T = float(p.t_end)
    n = max(1, int(round(T / float(s.dt))))
    row = timed_fixed_steps(s.method, p, T, S, ref, n, s.executor)  # Fused where the method has a kernel
    return dict(row, method=f"suggest: {row['method']}", suggest_s=trial), s.executor


def run_problem(label, p, B, tols, peers, log):
    S = perturbed_batch(p, B)
    ref = reference_states(p, S, float(p.t_end))
    rows = []
    for tol in tols:
        sug, executor = suggestion_row(p, S, ref, tol)
        found = [sug]
        method = sug["method"].split(": ", 1)[1].split(" ")[0]
        found.append(fixed_step_row(method, p, float(p.t_end), S, ref, tol, executor=executor))
        for solver in peers:
            found.append(diffrax_row(solver, p, float(p.t_end), S, ref, tol))
        for r in found:
            rows.append(dict(r, case=label, target=tol, description=p.description))
            log(rows[-1])
    return rows


def summary(rows):
    """Per (problem, tolerance): the suggestion's error over the tolerance, its time over the best
    peer's, and over the searched step count's of the same method."""
    out = []
    for case, tol in dict.fromkeys((r["case"], r["target"]) for r in rows):
        rs = [r for r in rows if r["case"] == case and r["target"] == tol]
        sug = next(r for r in rs if r["method"].startswith("suggest"))
        searched = next((r for r in rs if not r["method"].startswith(("suggest", "diffrax")) and r["us"]), None)
        peers = [r for r in rs if r["method"].startswith("diffrax") and r["us"] is not None]
        best = min(peers, key=lambda r: r["us"]) if peers else None
        out.append(dict(case=case, target=tol, method=sug["method"][len("suggest: "):], setting=sug["setting"],
                        err_ratio=sug["err"] / tol, us=sug["us"], suggest_s=sug["suggest_s"],
                        searched=None if searched is None else searched["setting"],
                        vs_searched=None if searched is None else sug["us"] / searched["us"],
                        peer=None if best is None else best["method"], peer_us=None if best is None else best["us"],
                        ratio=None if best is None else sug["us"] / best["us"]))
    return out


def main(quick: bool = False, out_dir=None, seed: int = SEED):
    from .bench_precision import SUITE_BODIES

    out = setup(out_dir, quick)
    problems = unseen_problems(seed)
    if quick:
        problems = {k: v for k, v in problems.items() if "plain-function" in k}
        B, tols, peers = 8, (1e-5,), ["Tsit5"]
    else:
        B, tols, peers = SUITE_BODIES, TOLS, PEERS
    log = lambda r: print("  ", {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in r.items()  # noqa: E731
                                 if k != "description"}, flush=True)
    rows = []
    for label, p in problems.items():
        print(f"{label} ({p.description}): {B} bodies", flush=True)
        rows += run_problem(label, p, B, tols, peers, log)
    data = {"bodies": B, "seed": seed, "rows": rows, "summary": summary(rows),
            "devices": [str(d) for d in jax.devices()]}
    write_json(out / f"{_stem(data)}.json", data)
    render(data, out)
    return data


def _stem(data) -> str:
    """``bench_unseen``, or ``bench_unseen_seed<N>`` for problems drawn from another seed."""
    return "bench_unseen" if data["seed"] == SEED else f"bench_unseen_seed{data['seed']}"


def render(data, out):
    """``<stem>.md`` and ``<stem>.png`` from the results (see :func:`_stem`)."""
    summ = data["summary"]
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    table = md_table(["problem", "tol", "suggest", "setting", "error / tol", "µs/body", "suggest's trial runs (s)",
                      "searched N", "× searched", "best peer", "µs/body", "ratio"],
                     [[s["case"], f"{s['target']:.0e}", s["method"], s["setting"], f"{s['err_ratio']:.2f}",
                       f"{s['us']:.3g}", f"{s['suggest_s']:.2f}", s["searched"] or "-", fmt(s["vs_searched"], ".2f"),
                       s["peer"] or "-", fmt(s["peer_us"], ".3g"), fmt(s["ratio"], ".2g")] for s in summ])
    rows = md_table(["problem", "tol", "method", "setting", "steps/body", "µs/body", "max error"],
                    [[r["case"], f"{r['target']:.0e}", r["method"], r["setting"],
                      "-" if r["steps"] is None else f"{r['steps']:.0f}", fmt(r["us"], ".3g"), fmt(r["err"], ".1e")]
                     for r in data["rows"]])
    descr = "\n".join(f"- {case}: {d}" for case, d in dict.fromkeys((r["case"], r["description"]) for r in data["rows"]))
    dev = data["devices"][0] if data.get("devices") else "?"
    (out / f"{_stem(data)}.md").write_text(
        f"Batch of {data['bodies']} bodies, {dev}, problems drawn from seed {data['seed']}:\n\n{descr}\n\n"
        f"ratio: the suggestion's time per body over the best peer's (diffrax at its loosest passing "
        f"tolerance); × searched: over the smallest step count of the same method meeting the tolerance.\n\n"
        f"{table}\n\nEvery row:\n\n{rows}\n")
    _figure(summ, out / f"{_stem(data)}.png")


def _figure(summ, path):
    """Per (problem, tolerance): the suggestion's error over the tolerance and its time over the best
    peer's, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{s['case']}\n{s['method']}, tol {s['target']:.0e}" for s in summ]
    y = np.arange(len(summ))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 1.0 + 0.55 * len(summ)), sharey=True)
    a1.barh(y, [s["err_ratio"] for s in summ], color="tab:blue")
    a1.axvline(1.0, color="k", lw=0.8)
    a1.set_xscale("log")
    a1.set_xlabel("suggestion's max final error / tolerance")
    a1.set_yticks(y, labels, fontsize=7)
    a2.barh(y, [s["ratio"] if s["ratio"] is not None else np.nan for s in summ], color="tab:orange")
    a2.axvline(0.25, color="k", lw=0.8, ls="--")
    a2.set_xscale("log")
    a2.set_xlabel("suggestion's time / best diffrax peer's (dashed: 0.25)")
    for ax in (a1, a2):
        ax.grid(True, which="both", axis="x", alpha=0.3)
    a1.invert_yaxis()
    fig.suptitle("jaxrot.suggest on problems and tolerances outside the precision suite", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

