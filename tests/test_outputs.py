"""Results are written whole or not at all, into a folder checked before the run; Ctrl-C and closed
pipes end a command cleanly."""

import contextlib
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from jaxrot.present import cli, output

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_atomic_replaces_only_on_success(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with output.atomic(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    with output.atomic(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".txt"
        tmp.write_text("new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_staged_files_appear_only_when_the_run_finished(tmp_path):
    (tmp_path / "x.json").write_text("earlier run")
    with pytest.raises(KeyboardInterrupt):
        with output.staged(tmp_path) as stage:
            (stage / "x.json").write_text("partial")
            raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"] and (tmp_path / "x.json").read_text() == "earlier run"
    with output.staged(tmp_path) as stage:
        (stage / "x.json").write_text("new")
        (stage / "y.png").write_bytes(b"png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y.png"]
    assert (tmp_path / "x.json").read_text() == "new"


def test_unwritable_output_folder_fails_before_the_run(capsys, monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("the experiment ran before the output folder was checked")

    import importlib

    mod = importlib.import_module(cli.EXPERIMENTS["dancing_pole"])
    monkeypatch.setattr(mod, "main", no_run)
    assert cli.main(["reproduce", "dancing_pole", "--out", "/proc/jaxrot-no-such-place"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write to the output folder '/proc/jaxrot-no-such-place'" in err


@pytest.fixture
def umask():
    """Set the process's umask for one test (put back afterwards)."""
    before = os.umask(0o022)
    os.umask(before)
    yield lambda mask: os.umask(mask)
    os.umask(before)


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_files_get_the_permissions_of_the_users_umask(tmp_path, umask, mask):
    """A plot, a trajectory, a staged result and provenance.json: ``0o666 & ~umask`` like any file a
    program creates, not the private 0o600 of their temporary files."""
    from jaxrot.present import provenance

    umask(mask)
    assert output.umask() == mask
    with output.atomic(tmp_path / "single.png") as tmp:
        tmp.write_bytes(b"png")
    with output.staged(tmp_path, lambda done: provenance.record(tmp_path, done, command="jaxrot x",
                                                                 quick=False)) as stage:
        (stage / "result.json").write_text("[1]")
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["single.png", "result.json", provenance.MANIFEST], 0o666 & ~mask)


def _no_experiment(*a, **k):
    raise AssertionError("the experiment ran before its arguments were checked")


@pytest.mark.parametrize("stop", [KeyboardInterrupt, ValueError])
def test_a_failed_run_leaves_no_folder_it_created(tmp_path, capsys, monkeypatch, stop):
    """Ctrl-C or an error before anything was written: the folders the command made for its results
    go again (its parents too, where it made them); a folder that was there before stays."""
    import importlib

    def fails(**kw):
        (kw["out_dir"] / "half.png").write_text("half-written")
        raise stop("stopped")

    monkeypatch.setattr(importlib.import_module(cli.EXPERIMENTS["dancing_pole"]), "main", fails)
    new = tmp_path / "a" / "b"
    assert cli.main(["reproduce", "dancing_pole", "--out", str(new)]) == (130 if stop is KeyboardInterrupt else 2)
    assert list(tmp_path.iterdir()) == []
    there = tmp_path / "there"
    there.mkdir()
    assert cli.main(["reproduce", "dancing_pole", "--out", str(there)]) != 0
    assert there.is_dir() and list(there.iterdir()) == []
    capsys.readouterr()


def test_a_bad_protocol_fails_before_the_output_folder_is_made(tmp_path, capsys, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module(cli.EXPERIMENTS["buss"]), "main", _no_experiment)
    assert cli.main(["reproduce", "buss", "--tilt", "100", "--out", str(tmp_path / "k")]) == 2
    assert "tilt_deg must be in [0, 90)" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_an_interrupt_removes_the_empty_folders_it_made(tmp_path):
    """What the main thread does on Ctrl-C (the computation's thread may still be running)."""
    made = output.prepare(tmp_path / "x" / "y")
    quick = output.temporary_folder(prefix="jaxrot-test-")
    with pytest.raises(KeyboardInterrupt):
        with output.staged(made):
            assert made.is_dir() and quick.is_dir()
            output.discard_pending()
            assert not (tmp_path / "x").exists() and not quick.exists()
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == [] and output.CREATED == []


def test_a_folder_with_results_is_kept(tmp_path):
    made = output.prepare(tmp_path / "x")
    with output.staged(made) as stage:
        (stage / "r.json").write_text("[1]")
    output.remove_empty_created()
    assert [p.name for p in made.iterdir()] == ["r.json"] and output.CREATED == []


def test_default_frames_are_bounded():
    assert cli._default_save_every(2000) == 10  # about 200 frames
    assert cli._default_save_every(1009) == 1  # prime, 1 010 frames: within the bound
    assert cli._default_save_every(100_003) == 100_003  # prime: the first and the last frame
    assert 100_000 // cli._default_save_every(100_000) <= cli.MAX_FRAMES
    for n in (7, 10_007, 20_014, 999_983, 1 << 20):
        assert n % cli._default_save_every(n) == 0 and n // cli._default_save_every(n) <= cli.MAX_FRAMES


def _jaxrot(*args, cwd=ROOT, script=False):
    """``python -m jaxrot ARGS`` (or the installed ``jaxrot`` script) as a process of its own."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [str(pathlib.Path(sys.executable).parent / "jaxrot")] if script else [sys.executable, "-m", "jaxrot"]
    # an xdist worker ignores SIGINT, and a child would inherit that: restore the default, as in a shell
    return subprocess.Popen([*command, *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_list_into_a_closed_pipe_is_quiet():
    head = subprocess.run(f"{sys.executable} -m jaxrot list | head -2", shell=True, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert len(head.stdout.splitlines()) == 2 and "Error" not in head.stderr and "Traceback" not in head.stderr


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_during_reproduce_leaves_nothing(tmp_path, sig, code, word):
    out = tmp_path / "results"
    proc = _jaxrot("reproduce", "dancing_pole", "--quick", "--out", str(out))
    started = time.monotonic()
    line = ""
    while "writing results to" not in line and time.monotonic() - started < 240:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, proc.stderr.read()
    time.sleep(2.0)  # inside the run: JAX compiling or computing
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert err.strip() == f"jaxrot: {word}; nothing was written" and "Traceback" not in err
    assert not out.exists()  # no file, no staging folder, and not the (empty) folder it made


def test_an_interrupt_after_the_command_finished_does_not_cut_its_exit_short():
    # Ctrl-C just as a command ends (its files written) came during the interpreter's exit: a traceback
    # from an exit handler, or 130 after a complete run; the command's process now ignores it there
    code = ("import os, signal, sys; from jaxrot.present import cli; sys.argv = ['jaxrot', 'list', 'problems']; "
            "c = cli.main(); os.kill(os.getpid(), signal.SIGINT); os.kill(os.getpid(), signal.SIGTERM); "
            "print('exit', c, file=sys.stderr); sys.exit(c)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 0 and r.stderr.strip().endswith("exit 0") and "Traceback" not in r.stderr, r.stderr


def test_ctrl_c_inside_a_long_compiled_call_ends_at_once(tmp_path):
    """One compiled call of minutes (2e9 steps, no progress reports to split it): the interrupt must
    not wait for it to return."""
    proc = _jaxrot("--quiet", "run", "buss4", "free_body_mz", "--dt", "1e-5", "--steps", "2000000000",
                   "--save", str(tmp_path / "t.npz"), cwd=tmp_path)
    time.sleep(10.0)  # imported, compiled (a Warp kernel not yet on disk: a second or two), inside the run
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10.0
    assert proc.returncode == 130 and err.strip() == "jaxrot: interrupted; nothing was written", err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script", [False, True], ids=["python -m jaxrot", "jaxrot script"])
@pytest.mark.parametrize("delay", [0.2, 0.6])
def test_ctrl_c_while_jax_loads_ends_with_one_line(tmp_path, script, delay):
    """An interrupt in the first second, while JAX and its extension load: before the command's own
    handling starts. (Without the loading-time handler it printed an ``ImportError`` traceback, or
    was lost inside the extension's initialisation and the run went on.)"""
    args = ["--quiet", "run", "buss4", "free_body_mz", "--dt", "1e-5", "--steps", "2000000000"]
    proc = _jaxrot(*args, cwd=tmp_path, script=script)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "jaxrot: interrupted; nothing was written", err


def test_sigterm_while_jax_loads_ends_with_one_line(tmp_path):
    """SIGTERM in the first second (before the command's own handling starts) ends the run as one
    later does: exit code 143 and one line, not a silent kill."""
    args = ["--quiet", "run", "buss4", "free_body_mz", "--dt", "1e-5", "--steps", "2000000000"]
    proc = _jaxrot(*args, cwd=tmp_path)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip() == "jaxrot: terminated; nothing was written", err


def test_an_ignored_sigint_stays_ignored(tmp_path):
    """Started with SIGINT ignored (``nohup``, a background job of a script), the command keeps it
    ignored, while JAX loads and after; SIGTERM still ends it."""
    args = ["run", "buss4", "free_body_mz", "--dt", "1e-5", "--steps", "2000000000"]
    proc = subprocess.Popen([sys.executable, "-m", "jaxrot", *args], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)  # while loading
    # inside the run: its program compiled (on a loaded machine loading alone can take seconds)
    assert "compiled in" in lines.get(timeout=120)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    time.sleep(0.2)  # the reader thread takes the last lines
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert proc.returncode == 143 and "".join(rest).strip() == "jaxrot: terminated; nothing was written", rest


def test_discard_pending_removes_writes_under_way(tmp_path):
    (tmp_path / "a.txt").write_text("earlier")
    # the computation's thread, had it gone on, finds its file gone
    with pytest.raises(output.OutputError, match="a.txt"):
        with output.staged(tmp_path) as stage, output.atomic(tmp_path / "a.txt") as tmp:
            (stage / "x.json").write_text("partial")
            tmp.write_text("partial")
            assert output.PENDING == {stage, tmp}
            output.discard_pending()  # what an interrupt does before the process ends
            assert not stage.exists() and not tmp.exists() and not output.PENDING
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"] and (tmp_path / "a.txt").read_text() == "earlier"


def test_the_last_sweep_removes_a_staging_folder_made_anew_after_the_interrupt(tmp_path, monkeypatch):
    """After an interrupt the command's thread may go on and make its staging folder (and the output
    folder above it) anew before the process ends: the sweep just before the end removes them again."""
    for name in ("PENDING", "CREATED", "_DISCARDED", "_DISCARDED_CREATED"):
        monkeypatch.setattr(output, name, type(getattr(output, name))())
    out = output.prepare(tmp_path / "results")
    with contextlib.suppress(FileNotFoundError):
        with output.staged(out) as stage:
            output.discard_pending()  # the interrupt
            assert not out.exists()
            stage.mkdir(parents=True)  # the thread, going on: os.makedirs(out_dir), then a file in it
            (stage / "figure.png").write_text("partial")
            output.sweep()  # the command's last step before os._exit
            assert not out.exists()
            raise FileNotFoundError  # (the thread's next write fails; what staged does then is not the point)


def test_the_wheel_carries_every_package_and_the_c_baseline(tmp_path):
    """``pip install .`` (not editable): every sub-package and the C source of the throughput bench."""
    import zipfile

    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "Could not find a version" in r.stderr + r.stdout:
        pytest.skip("no package index to build the wheel's build requirements")
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "w").glob("jaxrot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "jaxrot/experiments/buss2p.c" in names
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "jaxrot").rglob("__init__.py")}
    assert {f"{p}/__init__.py" for p in packages} <= names, {f"{p}/__init__.py" for p in packages} - names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=600)
    probe = ("import jaxrot, pathlib; from jaxrot.experiments import bench_throughput as b; "
             "assert pathlib.Path(jaxrot.__file__).is_relative_to(pathlib.Path(r'%s')); "
             "assert b.C_SOURCE.exists(); print('ok')" % target)
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(target)),
                       capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "ok", r.stderr


class _Terminal:
    """A stand-in for a terminal's stderr."""

    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


def test_progress_is_a_bar_on_a_terminal_lines_otherwise_and_silent_when_quiet(monkeypatch, capsys):
    from jaxrot.driver import progress

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    with progress.Progress(1000, "steps", "run") as bar:
        bar.compiled(1.25)
        bar.update(400)
        bar.update(600)
    assert "1000/1000" in term.text and "compiled in 1.2 s" in term.text and "steps" in term.text
    monkeypatch.undo()
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)
    with progress.Progress(10, "rows", "table") as bar:
        for _ in range(10):
            bar.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("  table: 10/10 rows (100%)")
    monkeypatch.setattr(progress, "QUIET", True)
    assert list(progress.items(range(3), "quiet")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


class _Clock:
    """A fake clock, moved by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_time_left_is_not_drawn_from_the_first_item(monkeypatch):
    """The first row of a table compiles (here 100 s), the next ones take 2 s each: no estimate
    until two rows after the first are timed, then 2 s a row (an estimate from the first row
    said ~800 s left for a job of two minutes)."""
    from jaxrot.present import progress

    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)
    monkeypatch.setattr(progress._driver_progress, "QUIET", False)
    clock, term = _Clock(), _Terminal()
    term.isatty = lambda: False
    bar = progress.ItemProgress(20, "rows", "table", clock=clock, stream=term)
    lefts = []
    for dt in [100.0] + [2.0] * 19:
        clock.t += dt
        bar.update(1)
        lefts.append(bar.left())
    assert lefts[:2] == [None, None]
    assert lefts[2:] == pytest.approx([2.0 * (20 - k) for k in range(3, 21)])
    lines = term.text.splitlines()
    assert lines[0] == "  table: 1/20 rows (5%), 100 s, time left: estimated from rows 2-3"
    assert lines[2] == "  table: 3/20 rows (15%), 104 s, ~34 s left"
    assert "~" not in "".join(lines[:2]) and lines[-1].endswith("20/20 rows (100%), 2.3 min, done")
    assert progress.time_left(10, 4, first_done=2, t_first=50.0, now=54.0) == pytest.approx(12.0)  # batches


def test_simulate_progress_reports_steps_and_keeps_the_result(capsys):
    import jax

    import jaxrot

    p = jaxrot.problems.get("t_handle")
    # XLA's loop both times: a run with progress reports is XLA's (one fused launch has no chunks to
    # report), and on a GPU the automatic choice without it is the fused kernel, equal to round-off
    a = jaxrot.simulate("buss2p", p, 1e-3, 2000, saveat=jaxrot.SaveAt(steps=10), progress=True, executor=jaxrot.XLA())
    err = capsys.readouterr().err
    assert "compiled in" in err and "2000/2000 steps (100%)" in err
    b = jaxrot.simulate("buss2p", p, 1e-3, 2000, saveat=jaxrot.SaveAt(steps=10), executor=jaxrot.XLA())
    assert jax.numpy.array_equal(a.states.R, b.states.R) and a.ts.shape == b.ts.shape == (201,)


def test_no_committed_figure_comes_from_a_quick_run():
    import json

    for path in sorted((ROOT / "figures").glob("*.json")):
        data = json.loads(path.read_text())
        assert not (isinstance(data, dict) and data.get("quick") is True), f"{path.name} is from a --quick run"


def test_provenance_records_each_file_and_finds_what_no_longer_holds(tmp_path):
    from jaxrot.present import provenance

    def run(files, quick=False):
        with output.staged(tmp_path, lambda done: provenance.record(tmp_path, done, command="jaxrot x",
                                                                     quick=quick)) as stage:
            for name, text in files.items():
                (stage / name).write_text(text)

    run({"a.json": "[1]", "a.png": "figure of [1]"})
    run({"b.json": "[2]", "b.png": "figure of [2]"})
    assert provenance.check(tmp_path) == []
    run({"a.json": "[3]"})  # the numbers redone without the figure
    assert provenance.check(tmp_path) == ["a.png: drawn from numbers that are no longer a.json (rerun jaxrot x)"]
    run({"a.json": "[3]", "a.png": "figure of [3]"}, quick=True)
    assert provenance.check(tmp_path) == ["a.json: written by a --quick run (jaxrot x)",
                                          "a.png: written by a --quick run (jaxrot x)"]
    (tmp_path / "b.png").write_text("edited")
    (tmp_path / "c.png").write_text("from elsewhere")
    assert provenance.check(tmp_path)[2:] == ["b.png: changed since jaxrot x wrote it",
                                              "c.png: no provenance entry (not written by a reproduce/bench command)"]


# Measurements made before provenance was recorded and not yet measured again (docs/benchmarks.md
# quotes them): the GPU run needs the H100 it was measured on, the precision suite takes about an hour
# and a half on two cores, the three-problem precision run 8-25 minutes, the CPU throughput run ~10.
NOT_YET_RECORDED = {
    "bench_throughput_h100": "jaxrot bench throughput --device gpu --out figures (on an H100)",
}


def test_every_committed_figure_was_drawn_by_a_full_run_from_the_numbers_beside_it():
    from jaxrot.present import provenance

    found = provenance.check(ROOT / "figures")
    legacy = [f for f in found if "no provenance entry" in f and any(f.startswith(s) for s in NOT_YET_RECORDED)]
    assert [f for f in found if f not in legacy] == []


def test_run_plot_has_no_artificial_floor(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    saved = []
    orig = plt.Figure.savefig

    def keep(fig, *a, **k):
        saved.append([ax.get_ylim() for ax in fig.axes])
        return orig(fig, *a, **k)

    plt.Figure.savefig = keep
    try:
        assert cli.main(["--quiet", "run", "buss4", "t_handle", "--dt", "0.01", "--steps", "200", "--plot",
                         str(tmp_path / "r.png")]) == 0
    finally:
        plt.Figure.savefig = orig
    assert saved and all(lo > 1e-30 for lo, _ in saved[0]), saved  # log axes start near the data, not at 1e-300


def test_coinciding_curves_stay_visible():
    """Two curves within a pixel of each other (buss2 and buss3_false in Buss's energy figure): the
    later one is drawn dashed on top, and its legend entry says which curve it lies on."""
    from jaxrot.present.plotting import grouped_series_figure

    t = np.linspace(0, 1, 50)
    a = 1e-3 * (t + 0.1)
    b = 1.1 * a
    b[:3] *= 10  # they part during the first steps only, as in the figure
    fig = grouped_series_figure(t, {"p": {"a": a, "b": b, "c": 1e-10 * (t + 0.1), "d": 1e-17 + 0 * t}},
                                ylabel="y")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"a", "b (dashed: coincides with a)", "c", "d"}
    b = lines["b (dashed: coincides with a)"]
    assert b.get_linestyle() != "-" and b.get_zorder() > lines["a"].get_zorder()
    assert all(lines[k].get_linestyle() == "-" for k in "acd")
    legend = [x.get_text() for x in fig.axes[0].get_legend().get_texts()]
    assert legend == ["a", "b (dashed: coincides with a)", "c", "d"]


def test_convergence_map_example_draws_rows_as_l_y(tmp_path, monkeypatch):
    """imshow draws row i at height x[i]: the grid must vary L_x along columns and L_y along rows."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("convergence_map_example",
                                                  pathlib.Path(__file__).parents[1] / "examples" / "convergence_map.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    seen = {}

    def fake_map(rule, J, ells, **kw):
        seen["ells"] = np.asarray(ells)
        return np.zeros(ells.shape[:-1], dtype=int)

    monkeypatch.setattr(mod.maps, "convergence_map", fake_map)
    mod.main(n=5, png=str(tmp_path / "map.png"))
    ells = seen["ells"]
    assert np.all(np.diff(ells[..., 0], axis=1) > 0) and np.all(np.diff(ells[..., 0], axis=0) == 0)  # L_x: columns
    assert np.all(np.diff(ells[..., 1], axis=0) > 0) and np.all(np.diff(ells[..., 1], axis=1) == 0)  # L_y: rows
    assert [p.name for p in tmp_path.iterdir()] == ["map.png"]  # written whole, no temporary left
