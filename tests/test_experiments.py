"""Every experiment and the CLI run end to end in their quick form and write what they promise."""

import json

import numpy as np
import pytest

from jaxrot.experiments import bench_buss, buss_orders
from jaxrot.present import cli


def test_buss_orders_quick(tmp_path):
    res = buss_orders.main(quick=True, out_dir=tmp_path)
    for f in ["buss_orders.png", "buss_orders.json", "buss_orders.md"]:
        assert (tmp_path / f).stat().st_size > 0
    data = json.loads((tmp_path / "buss_orders.json").read_text())
    assert set(data["results"]) == {"buss_torqued", "fast_top"}
    # the quick sweep is coarse, but the 3rd and 4th order methods must already separate
    assert res["buss_torqued"]["buss4"]["order"] > 3.5
    assert res["buss_torqued"]["buss3"]["order"] > 2.7


def test_bench_quick(tmp_path):
    rows = bench_buss.main(quick=True, out_dir=tmp_path)
    assert (tmp_path / "bench_buss.png").exists()
    assert all(r["jax_steps_per_s"] > 0 and r["numpy_steps_per_s"] > 0 for r in rows)


def test_throughput_bench_quick(tmp_path):
    """The benchmark runs, and its C baseline (when a compiler exists) computes the same update."""
    from jaxrot.experiments import bench_throughput

    res = bench_throughput.main(quick=True, out_dir=tmp_path)
    row = res["rows"][0]
    assert row["jaxrot f64 blocked"] > 0 and row["jaxrot f32 blocked"] > 0 and row["NumPy f64"] > 0
    for k, v in row.items():
        if k.endswith("max diff"):
            assert v < 1e-12, k
    assert (tmp_path / "bench_throughput.png").stat().st_size > 0
    co = res["call_overhead_us"]  # the three timed small-call paths compute the same 10 steps
    assert co["max diff"] < 1e-15 and min(co["plain jit"], co["jaxrot.compile"], co["jaxrot.simulate"]) > 0
    for d in res["drift"]:  # momentum-conserving methods: L and R^T R at round-off of the dtype
        assert d["momentum f64"] < 1e-14 and d["orthogonality f64"] < 1e-14, d  # measured 3e-16
        assert d["momentum f32"] < 1e-6 and d["orthogonality f32"] < 1e-6, d  # measured 1.5e-7


@pytest.mark.slow  # a --quick benchmark
def test_precision_bench_quick(tmp_path):
    """Every row reached its target (the search found a setting whose measured error is below it),
    and diffrax, a dev dependency, was measured beside jaxrot."""
    from jaxrot.experiments import bench_precision

    res = bench_precision.main(quick=True, out_dir=tmp_path, suite=True)
    rows = [r for r in res["rows"] if r["us"] is not None]
    assert len(rows) == len(res["rows"]) >= 5
    assert all(r["err"] <= r["target"] and r["us"] > 0 for r in rows)
    assert any(r["method"].startswith("diffrax") for r in rows) and res["summary"]
    assert {r["dtype"] for r in rows} == {"float64", "float32"}  # the suite's float32 target too
    assert res["error_control"] and res["error_control"][0]["cost_ratio"] > 0
    for f in ["bench_precision_suite.png", "bench_precision_suite_1.png", "bench_precision_suite.md"]:
        assert (tmp_path / f).stat().st_size > 0


@pytest.mark.slow  # a --quick benchmark
def test_unseen_bench_quick(tmp_path):
    """On a problem outside the suite (a plain-function torque), jaxrot.suggest's step met the
    tolerance within 3x (the suggestion aims at it from trial runs, tests/test_suggest.py), and the
    comparison's rows and files were written."""
    from jaxrot.experiments import bench_unseen

    res = bench_unseen.main(quick=True, out_dir=tmp_path)
    (s,) = res["summary"]
    from jaxrot import kernels

    # the function is restated in rkmk8's fused kernel where Warp is installed
    assert s["method"] == ("rkmk8 (Fused)" if kernels.have_warp() else "rkmk8")
    assert 0 < s["err_ratio"] <= 3.0 and s["us"] > 0
    assert s["peer"] == "diffrax Tsit5" and s["ratio"] > 0 and s["vs_searched"] > 0
    for f in ["bench_unseen.md", "bench_unseen.json", "bench_unseen.png"]:
        assert (tmp_path / f).stat().st_size > 0


def test_numpy_baseline_is_the_same_update():
    # the benchmark compares like with like: the NumPy step equals jaxrot's step
    import jax.numpy as jnp

    import jaxrot
    from jaxrot import problems

    p = problems.get("t_handle")
    rng = np.random.default_rng(3)
    R0 = np.asarray(jaxrot.so3.exp(jnp.asarray(rng.normal(size=3))))
    Pi0 = rng.normal(size=3)
    for m in bench_buss.METHODS:
        ours = jaxrot.simulate(m, p, 0.05, 1, state0=jaxrot.State(jnp.asarray(R0), jnp.asarray(Pi0))).final.R
        theirs = bench_buss.numpy_step(m, R0[None], (R0 @ Pi0)[None], np.asarray(p.body.J), 0.05)[0]
        np.testing.assert_allclose(ours, theirs, atol=1e-14)


def test_cli_list_and_run(capsys, tmp_path):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "buss2p" in out and "explicit" in out
    png = tmp_path / "run.png"
    assert cli.main(["run", "buss3", "fast_top", "--dt", "1e-3", "--steps", "200", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "attitude error vs reference" in out and png.stat().st_size > 0
    assert cli.main(["run", "buss3", "nope", "--dt", "1e-3", "--steps", "10"]) == 2
    assert cli.main(["run", "buss3", "fast_top", "--dt", "-1", "--steps", "10"]) == 2


@pytest.mark.slow  # a --quick reproduction
def test_krysl_quick(tmp_path):
    from jaxrot.experiments import krysl

    res = krysl.main(quick=True, out_dir=tmp_path)
    assert set(res["problems"]) == set(krysl.CASES)
    for f in ["krysl.md", "krysl.json", "krysl_ea_long.png", "krysl_fast_top_R2.png", "krysl_slow_top_conserved.png"]:
        assert (tmp_path / f).stat().st_size > 0
    # EA conserves pi_z on the tops to round-off even in the quick run
    s = res["problems"]["fast_top"]["series"]["liemid_ea"]["pi_z"]
    assert max(abs(x - s[0]) for x in s) < 1e-12 * abs(s[0])


def test_buss_table_quick(tmp_path, monkeypatch, capsys):
    from jaxrot.experiments import buss_table
    from jaxrot.present import plotting

    figures = {}

    def keep(name, draw):
        def wrapped(*a, **k):
            figures[name] = draw(*a, **k)
            return figures[name]
        monkeypatch.setattr(buss_table, name, wrapped)

    for name in ("published_comparison_figure", "grouped_series_figure"):
        keep(name, getattr(buss_table, name))
    res = buss_table.main(quick=True, out_dir=tmp_path)
    for f in ["buss_table.md", "buss_table.json", "buss_table.png", "buss_work_precision.png",
              "buss_energy_drift.png"]:
        assert (tmp_path / f).stat().st_size > 0
    run = res["main"]
    assert len(run["rows"]) == 17 and run["n_rows"] == 17
    eps = run["protocol"]["eps"]
    # the search's answer is consistent with what it evaluated: N passes, and so does every larger
    # count it tried; N - 1 (if evaluated) fails
    for r in run["rows"]:
        if r["N"] is None:
            continue
        ev = dict(r["evaluations"])
        assert all(e <= eps for n, e in ev.items() if n >= r["N"])
        if r["N"] - 1 in ev:
            assert ev[r["N"] - 1] > eps
    N = {r["method"]: r["N"] for r in run["rows"]}
    assert N["buss4"] < N["buss2"]  # higher order needs fewer steps on this smooth problem
    assert abs(res["cost_relative"]["buss3_ep"] - 1.0) < 1e-12
    md = (tmp_path / "buss_table.md").read_text()
    assert "Spearman" in md and "within 25%" in md
    for line in md.splitlines():  # no stray '|' inside a cell: every table row has the header's width
        if line.startswith("| algorithm"):
            width = line.count("|")
        elif line.startswith("| ") and "protocol" not in line and "reading" not in line and "main" not in line:
            assert line.count("|") in (width, 5)
    # the table figure names rows by method id, like every other figure, and gives the unit
    ax = figures["published_comparison_figure"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [r["method"] for r in run["rows"]]
    assert "final attitude error ≤ 0.0001 rad" in ax.get_title()
    # the energy figure: no legend entry without a visible curve (none drawn solid under another)
    axes = figures["grouped_series_figure"].axes
    y = np.concatenate([ln.get_ydata() for ax in axes for ln in ax.get_lines()])
    span = np.log10(y.max() / y.min())
    for ax in axes:
        solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
        for i, a in enumerate(solid):
            for b in solid[:i]:
                assert not plotting.coinciding(a.get_ydata(), b.get_ydata(), span=span), (
                    a.get_label(), b.get_label())
    # four phases, each with its own time left
    err = capsys.readouterr().err
    for phase in ("1/4 Buss table: 17/17 rows", "2/4 sensitivity: 17/17 rows", "3/4 cost per step: 17/17 methods",
                  "4/4 energy drift: 17/17 methods"):
        assert phase in err


def test_roblox_quick(tmp_path):
    from jaxrot.experiments import roblox

    res = roblox.main(quick=True, out_dir=tmp_path)
    for f in ["roblox_convergence.png", "roblox_energy.png", "roblox.json", "roblox.md"]:
        assert (tmp_path / f).stat().st_size > 0
    assert res["converged_fraction"]["world-space trapezoid, Newton (v0 = I^-1 l)"] == 1.0
    assert res["energy_change_max_pct"] < 0.3


@pytest.mark.slow  # a --quick reproduction; the fit itself is tested in tests/test_fitting.py
def test_fit_inertia_quick(tmp_path):
    from jaxrot.experiments import fit_inertia

    res = fit_inertia.main(quick=True, out_dir=tmp_path)
    for f in ["fit_inertia.png", "fit_inertia.json", "fit_inertia.md"]:
        assert (tmp_path / f).stat().st_size > 0
    assert max(abs(e) for e in res["fits"]["split4_231"]["rel_error_pct"]) < 1.0


@pytest.mark.slow  # three --quick reproductions
def test_demonstrations_quick(tmp_path):
    from jaxrot.experiments import dancing_pole, dzhanibekov, groningen

    g = groningen.main(quick=True, out_dir=tmp_path)
    flips = g["first_flip"]["y (intermediate J, flips)"]
    assert all(v is not None for v in flips.values())  # every model flips about the intermediate axis
    assert all(v is None for lab, f in g["first_flip"].items() if lab.startswith(("x", "z")) for v in f.values())
    ks = g["spring_sweep"]  # the slides' answer: stiffer springs vibrate sooner but distort less
    assert ks[-1]["t_L_half"] < ks[0]["t_L_half"] and ks[-1]["max_strain"] < ks[0]["max_strain"]
    bad = g["printed_inertia"]
    assert bad[-1]["printed_R^T I R"] > 0.5 * bad[0]["printed_R^T I R"]  # does not converge
    d = dzhanibekov.main(quick=True, out_dir=tmp_path)
    assert d["flips"]["buss4"]["rel_error"] < 0.01
    p = dancing_pole.main(quick=True, out_dir=tmp_path)
    assert p["methods"]["euler_svd"]["cone_angle_deg_end"] < p["methods"]["midpoint_exp"]["cone_angle_deg_end"] - 10
    for f in ["groningen.md", "groningen_axes.png", "groningen_energy.png", "groningen_springs.png", "book.gif",
              "dzhanibekov.png", "poinsot.png", "t_handle.gif", "dancing_pole.png", "dancing_pole.gif"]:
        size = (tmp_path / f).stat().st_size
        assert 0 < size < 2_000_000, f


def test_cli_animate(tmp_path, capsys):
    gif = tmp_path / "a.gif"
    assert cli.main(["animate", "buss2p", "t_handle", "--compare", "euler_svd", "--steps", "40", "--frames", "4",
                     "--out", str(gif)]) == 0
    assert gif.stat().st_size > 0
    assert cli.main(["animate", "buss2p", "t_handle", "--out", str(tmp_path / "a.png")]) == 2
    assert cli.main(["animate", "nope", "t_handle", "--out", str(gif)]) == 2


@pytest.mark.slow  # a --quick benchmark (the fused adaptive kernel compiles for it)
def test_heterogeneous_bench_quick(tmp_path):
    """`jaxrot bench heterogeneous --quick`: the fused adaptive run, XLA's loop and the others were
    timed, and the records were written (the step-for-step agreement of the two adaptive runs is
    tests/test_kernels_adaptive.py's)."""
    pytest.importorskip("warp")
    from jaxrot.experiments import bench_heterogeneous

    res = bench_heterogeneous.main(quick=True, out_dir=tmp_path)
    names = [r["contender"] for r in res["rows"]]
    assert names[0].startswith("fused adaptive") and any(n.startswith("XLA adaptive loop") for n in names)
    assert all(r["us_per_body"] > 0 for r in res["rows"]) and res["summary"]
    assert (tmp_path / "heterogeneous_batch_quick.json").stat().st_size > 0
    assert (tmp_path / "heterogeneous_batch_quick.md").read_text().count("|") > 10
