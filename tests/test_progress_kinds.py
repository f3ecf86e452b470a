"""Progress on every kind of run: constant or error-controlled steps, saving frames or only the final
state, on XLA's loop or in the fused kernels. Each run reports its compilation, then a line at least
every ``LINE_INTERVAL`` seconds (set short here) with the part of the run done, and ends at 100%; the
pieces the run goes in give the numbers of the run without a meter, bit for bit."""

import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels, problems
from jaxrot.driver import progress

INTERVAL = 0.25
#: a line may come this many intervals after the last (the heartbeat wakes four times an interval;
#: a loaded machine delays it: 0.9 s was seen with both cores busy and a fifth of the time stolen):
#: far below the runs' lengths (6-8 s), so a silent stretch fails
GAP = 6.0

#: seconds to the first line (the input checks come before the report)
FIRST = 3.0

P = problems.get("t_handle")
needs_warp = pytest.mark.skipif(not kernels.have_warp(), reason="needs the fast extra")


def _batch(n):
    return jaxrot.State(jnp.broadcast_to(P.state0.R, (n, 3, 3)), P.state0.Pi * jnp.linspace(0.9, 1.1, n)[:, None])


class _Lines:
    """A stand-in for a non-terminal stderr that keeps each line with the time it came."""

    def __init__(self):
        self.lines = []

    def write(self, s):
        for line in s.splitlines():
            if line.strip():
                self.lines.append((time.perf_counter(), line.strip()))

    def flush(self):
        pass

    def isatty(self):
        return False


def _reported(monkeypatch, run):
    """``run(progress)``'s result and its lines, checked: the compilation first, a line at least every
    ``GAP`` intervals from the call to the last (100%) line, one strictly between 0 and 100%."""
    monkeypatch.setattr(progress, "LINE_INTERVAL", INTERVAL)
    out = _Lines()
    monkeypatch.setattr(sys, "stderr", out)
    start = time.perf_counter()
    traj = run(jaxrot.TextProgressMeter())
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    text = [line for _, line in out.lines]
    assert any(line.startswith("compiled in") for line in text), text
    pct = [(t, int(m.group(1))) for t, line in out.lines if (m := re.search(r"(?:\(|^)(\d+)%", line))]
    assert pct and pct[-1][1] == 100, text
    assert [p for _, p in pct] == sorted(p for _, p in pct), text
    assert any(0 < p < 100 for _, p in pct), text  # the run was seen part done
    # (from the first line: the input checks before it take what they take on a loaded machine)
    times = [t for t, _ in out.lines if t <= pct[-1][0]]
    gaps = np.diff(times)
    assert times[0] - start <= FIRST and gaps.max() <= GAP * INTERVAL, (times[0] - start, gaps.max(), text)
    return traj


def _same(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)


@pytest.mark.parametrize("bodies", [None, 64])
@pytest.mark.parametrize("saveat", ["frames", "final"])
def test_constant_steps_on_xla_report_every_interval(monkeypatch, saveat, bodies):
    state0 = None if bodies is None else _batch(bodies)
    n = 10**6 if bodies is None else 20_000
    save = jaxrot.SaveAt(steps=n // 200) if saveat == "frames" else jaxrot.SaveAt(t0=False)

    def run(meter=None):
        return jaxrot.simulate("rk4", P, 1e-5, n, state0=state0, saveat=save, executor=jaxrot.XLA(), progress=meter)

    _same(_reported(monkeypatch, run), run())


@needs_warp
@pytest.mark.parametrize("saveat", ["frames", "final"])
def test_constant_steps_fused_report_every_interval(monkeypatch, saveat):
    save = jaxrot.SaveAt(steps=50) if saveat == "frames" else jaxrot.SaveAt(t0=False)

    def run(meter=None):
        return jaxrot.simulate("rk4", P, 1e-4, 5000, state0=_batch(256), saveat=save, executor=jaxrot.Fused(),
                               progress=meter)

    _same(_reported(monkeypatch, run), run())


def _adaptive(executor, saveat, pair, tol, bodies, t1):
    save = jaxrot.SaveAt(ts=np.linspace(t1 / 4, t1, 4)) if saveat == "frames" else jaxrot.SaveAt(t0=False)

    def run(meter=None):
        return jaxrot.simulate(pair, P, t1=t1, state0=_batch(bodies), stepsize=jaxrot.Adaptive(tol, tol),
                               saveat=save, executor=executor, progress=meter)

    return run


# (the slow tier: each kind's second case, the same pieces with the other output)
@pytest.mark.default_xla  # the pieces and the loop in one call are two programs: equal as users compile them
@pytest.mark.parametrize("saveat", ["frames", pytest.param("final", marks=pytest.mark.slow)])
def test_error_controlled_steps_on_xla_report_every_interval(monkeypatch, saveat):
    run = _adaptive(jaxrot.XLA(), saveat, "buss4(3)", 1e-9, 8, 400.0)
    _same(_reported(monkeypatch, run), run())


@needs_warp
@pytest.mark.parametrize("saveat", [pytest.param("frames", marks=pytest.mark.slow), "final"])
def test_error_controlled_steps_fused_report_every_interval(monkeypatch, saveat):
    run = _adaptive(jaxrot.Fused(), saveat, "rkmk8(5)", 1e-10, 256, 50.0)
    _same(_reported(monkeypatch, run), run())


def test_a_long_call_still_gives_a_line_every_interval(monkeypatch):
    """Where the run cannot be cut (a terminal event's while loop: one call), lines still come while it
    runs, and the count when it ends; a traced run (part of someone's program) says nothing."""
    monkeypatch.setattr(progress, "LINE_INTERVAL", INTERVAL)
    out = _Lines()
    monkeypatch.setattr(sys, "stderr", out)
    flip = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)
    start = time.perf_counter()
    jaxrot.simulate("rk4", P, 1e-5, 10**6, event=flip, executor=jaxrot.XLA(), progress=jaxrot.TextProgressMeter())
    times = [t for t, _ in out.lines]
    assert len(times) >= 2 and times[0] - start <= FIRST and np.diff(times).max() <= GAP * INTERVAL, out.lines
    assert out.lines[-1][1].startswith("1000000/1000000 steps (100%)"), out.lines
    out.lines.clear()
    jax.jit(lambda x: jaxrot.simulate("rk4", P, 1e-3, 100, state0=jaxrot.State(P.state0.R, x),
                                      progress=jaxrot.TextProgressMeter()).final.Pi)(P.state0.Pi)
    assert out.lines == []


@pytest.mark.parametrize("kind", ["constant", "adaptive"])
def test_the_preparation_is_reported_before_the_compilation(monkeypatch, kind):
    """Choosing the executor (a fused kernel's source written and checked: seconds on a first call) is
    reported while it lasts, made to last 1 s here, before the compilation's lines."""
    from jaxrot.driver import simulate as simulate_module

    chosen = simulate_module.choose_executor

    def slow(*args):
        time.sleep(1.0)
        return chosen(*args)

    monkeypatch.setattr(simulate_module, "choose_executor", slow)
    monkeypatch.setattr(progress, "LINE_INTERVAL", INTERVAL)
    out = _Lines()
    monkeypatch.setattr(sys, "stderr", out)
    start = time.perf_counter()
    if kind == "constant":
        jaxrot.simulate("rk4", P, 1e-3, 100, executor=jaxrot.XLA(), progress=jaxrot.TextProgressMeter())
    else:
        jaxrot.simulate("buss4(3)", P, t1=0.1, stepsize=jaxrot.Adaptive(1e-6, 1e-6), executor=jaxrot.XLA(),
                        progress=jaxrot.TextProgressMeter())
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    text = [line for _, line in out.lines]
    first_compiled = next(i for i, line in enumerate(text) if line.startswith("compiled in"))
    assert text[0].startswith("preparing") and out.lines[0][0] - start < 1.0, out.lines
    assert all(not line.startswith("preparing") for line in text[first_compiled:]), text


def test_a_refused_run_closes_its_meter(monkeypatch):
    """An executor that cannot run the job raises before the run starts: the meter drawn for it is
    closed (a bar on a terminal is not left on the screen)."""
    from jaxrot.driver.progress import RunProgress

    closed = []
    monkeypatch.setattr(RunProgress, "close", lambda self: closed.append(self))
    eigh = jaxrot.Torque(lambda t, R, Pi: -0.1 * Pi * jnp.linalg.eigvalsh(R @ R.T)[0], frame="body")
    q = jaxrot.Problem(P.body, eigh, P.state0, 1.0)
    runs = (lambda: jaxrot.simulate("rk4", q, 1e-3, 10, executor=jaxrot.Fused(), progress=jaxrot.TextProgressMeter()),
            lambda: jaxrot.simulate("buss4(3)", q, t1=0.1, stepsize=jaxrot.Adaptive(1e-6, 1e-6),
                                    executor=jaxrot.Fused(), progress=jaxrot.TextProgressMeter()))
    for k, run in enumerate(runs):
        with pytest.raises(ValueError, match="cannot run this job"):
            run()
        assert len(closed) == k + 1


def test_no_meter_no_lines_and_quiet_silences_a_meter(monkeypatch, capsys):
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)
    jaxrot.simulate("rk4", P, 1e-3, 2000, saveat=jaxrot.SaveAt(t0=False))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "QUIET", True)
    jaxrot.simulate("rk4", P, 1e-3, 2000, saveat=jaxrot.SaveAt(t0=False), progress=True)
    assert capsys.readouterr().err == ""
