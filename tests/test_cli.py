"""The command line explains itself: each defect a new user met has a test (exit code, a one-line
message, no traceback), and arguments are checked before anything is computed."""

import pathlib
import warnings

import jax
import numpy as np
import pytest

import jaxrot
from jaxrot.present import cli

from .helpers import subprocess_env


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and jaxrot.__version__ in capsys.readouterr().out


def test_list_problems(capsys):
    rc, out, _ = _run(capsys, "list", "problems")
    assert rc == 0
    for name in jaxrot.problems.PROBLEMS:
        assert name in out


def test_run_help_lists_problems(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "t_handle" in out and "Dzhanibekov" in out and "jaxrot list" in out


@pytest.mark.parametrize("argv, message", [
    (["run", "nope", "t_handle", "--dt", "0.1", "--steps", "10"], "unknown method 'nope'"),
    (["run", "buss2p", "nope", "--dt", "0.1", "--steps", "10"], "unknown problem 'nope'"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save-every", "3"], "--save-every"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save-every", "0"], "--save-every"),
    (["run", "buss2p", "t_handle", "--dt", "0", "--steps", "10"], "--dt"),
    (["run", "buss2p", "t_handle", "--dt", "nan", "--steps", "10"], "--dt"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "0"], "--steps"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--plot", "/no/such/dir/a.png"], "does not exist"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--plot", "a.txt"], "--plot must end in"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save", "a.csv"], "--save must end in .npz"),
    # a folder no one may write in, root included: the user's path named, not a temporary file
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save", "/proc/jaxrot-run.npz"],
     "--save: cannot write '/proc/jaxrot-run.npz'"),
    (["run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--plot", "/proc/jaxrot-run.png"],
     "--plot: cannot write '/proc/jaxrot-run.png'"),
    (["bench", "buss", "--suite"], "--suite is an option of 'bench precision'"),
    (["bench", "precision", "--seed", "3"], "--seed is an option of 'bench unseen'"),
    (["bench", "precision", "--device", "cpu"], "--device is an option of 'bench throughput'"),
])
def test_bad_arguments_fail_before_computing(capsys, monkeypatch, argv, message):
    def no_simulation(*a, **k):
        raise AssertionError("simulate was called before the arguments were checked")

    monkeypatch.setattr(jaxrot, "simulate", no_simulation)
    rc, _, err = _run(capsys, *argv)
    assert rc == 2
    assert err.startswith("jaxrot: error: ") and message in err and "Traceback" not in err
    assert err.count("\n") == 1 and "\"'" not in err and not err.startswith("jaxrot: error: '")


def test_an_unwritable_save_path_fails_before_computing(capsys, monkeypatch, tmp_path):
    """Paths whose folder exists and is writable, but which cannot be written: a folder of that name,
    a name too long for the file system. The error names the path given, in one line."""
    def no_simulation(*a, **k):
        raise AssertionError("simulate was called before the output path was checked")

    monkeypatch.setattr(jaxrot, "simulate", no_simulation)
    (tmp_path / "run.npz").mkdir()
    long = tmp_path / ("x" * 300 + ".npz")
    for path, why in [(tmp_path / "run.npz", "it is a folder"), (long, "name too long")]:
        rc, _, err = _run(capsys, "run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10", "--save", str(path))
        assert rc == 2 and err.startswith(f"jaxrot: error: --save: cannot write {str(path)!r}: "), err
        assert why in err.lower() and err.count("\n") == 1 and ".run-" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]  # no probe left behind


def test_a_name_near_the_limit_is_written(capsys, tmp_path):
    """A name of 250 characters is allowed; its temporary file (a longer name) must not fail."""
    path = tmp_path / ("y" * 246 + ".npz")
    rc, _, err = _run(capsys, "--quiet", "run", "buss2p", "t_handle", "--dt", "0.1", "--steps", "10",
                      "--save", str(path))
    assert rc == 0, err
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_failed_simulation_is_one_line_with_an_actionable_hint(capsys):
    rc, _, err = _run(capsys, "run", "midpoint_exp", "t_handle", "--dt", "20", "--steps", "10")
    assert rc == 1
    assert err.count("\n") == 1 and "failed at step" in err and "--no-throw" in err and "throw=False" not in err


def test_a_failed_experiment_does_not_point_at_options_it_lacks(capsys, monkeypatch, tmp_path):
    import importlib

    from jaxrot import RESULTS
    from jaxrot.driver.failures import SimulationError

    def fails(**kw):
        raise SimulationError("x", step=7, reason=RESULTS.max_steps_reached)

    monkeypatch.setattr(importlib.import_module(cli.BENCHMARKS["precision"]), "main", fails)
    rc, _, err = _run(capsys, "bench", "precision", "--out", str(tmp_path / "b"))
    assert rc == 1 and err.count("\n") == 1
    assert "step 7: the adaptive controller used up max_steps" in err and "--dt" not in err


def test_no_throw_keeps_the_trajectory_and_saves_it(capsys, tmp_path):
    import os

    path = tmp_path / "run.npz"
    before = os.umask(0o022)  # the usual umask: files 0o644, as any program writes them
    try:
        rc, out, _ = _run(capsys, "run", "midpoint_exp", "t_handle", "--dt", "20", "--steps", "10", "--no-throw",
                          "--save", str(path), "--plot", str(tmp_path / "run.png"))
    finally:
        os.umask(before)
    assert rc == 0 and "failed" in out and "statistics below cover" in out
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {"run.npz": 0o644, "run.png": 0o644}
    traj = jaxrot.load(path)
    assert traj.info["method"] == "midpoint_exp" and traj.info["problem"] == "t_handle"
    assert int(traj.failed_step) > 0 and (tmp_path / "run.png").stat().st_size > 0


def test_default_save_every_divides_steps():
    for n in [1, 7, 199, 200, 1000, 1001, 12345]:
        s = cli._default_save_every(n)
        assert n % s == 0 and (n // s >= 200 or s == 1)


def test_save_load_round_trip_is_exact(tmp_path):
    jax.config.update("jax_enable_x64", True)
    p = jaxrot.problems.get("fast_top")
    for dtype in (np.float64, np.float32):
        q = jax.tree_util.tree_map(lambda x: x.astype(dtype) if hasattr(x, "astype") else x, p)
        traj = jaxrot.simulate("liemid_ea", q, 1e-2, 20, saveat=jaxrot.SaveAt(steps=5))
        traj.save(tmp_path / "t.npz")
        back = jaxrot.load(tmp_path / "t.npz")
        for a, b in zip(jax.tree_util.tree_leaves(traj), jax.tree_util.tree_leaves(back)):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(np.asarray(a), np.asarray(b))
        info = back.info
        assert info == traj.info
        assert info["method"] == "liemid_ea" and info["problem"] == "fast_top" and info["dt"] == "0.01"
        assert info["n_steps"] == "20" and info["dtype"] == np.dtype(dtype).name and info["jax"] == jax.__version__
    with pytest.raises(ValueError, match=".npz"):
        traj.save(tmp_path / "t.csv")
    with pytest.raises(FileNotFoundError):
        jaxrot.load(tmp_path / "missing.npz")


def test_quick_reproduce_leaves_the_checkout_clean(capsys, monkeypatch):
    """--quick writes to a fresh temporary folder, never over the committed figures."""
    import pathlib
    import shutil
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")

    def status():
        return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                              capture_output=True, text=True, check=True).stdout

    before = status()
    monkeypatch.chdir(root)
    assert cli.main(["reproduce", "dancing_pole", "--quick"]) == 0
    assert "quick run: writing to" in capsys.readouterr().out
    assert status() == before
    from jaxrot.experiments._common import setup

    out = setup(None, quick=True)
    assert root not in out.resolve().parents and out.resolve() != root / "figures"


def test_dt_as_string_is_a_clear_type_error():
    p = jaxrot.problems.get("t_handle")
    with pytest.raises(TypeError, match="dt must be a number"):
        jaxrot.simulate("buss2p", p, "0.01", 10)


def test_problems_build_without_x64_and_without_warnings():
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('error'); from jaxrot import problems\n"
            "for n in problems.PROBLEMS: assert str(problems.get(n).body.J.dtype) == 'float32', n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"JAX_ENABLE_X64": "0",
                       "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]


def test_bench_throughput_makes_every_core_a_device_before_jax_starts():
    """`jaxrot bench throughput` calls use_cpu_cores before anything in the CLI starts JAX (building
    the problem list once did, and the bench silently ran on one device). The benchmark itself is
    replaced by a probe, in a fresh process."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import jax
        import jaxrot.experiments.bench_throughput as b
        b.main = lambda **kw: print("DEVICES", len(jax.devices()))
        from jaxrot.present.cli import main
        main(["bench", "throughput", "--quick"])
        """
    )
    env = subprocess_env(JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert f"DEVICES {cores}" in out.stdout, out.stdout + out.stderr[-2000:]


def test_run_auto_with_a_tolerance_uses_the_suggestion(capsys):
    rc, out, _ = _run(capsys, "--quiet", "run", "auto", "free_body_hlw", "--tol", "1e-9")
    assert rc == 0 and "suggested for tol 1e-09: exact_free" in out
    err = float(out.split("attitude error vs reference: final")[1].split()[0])
    assert err < 1e-9
    # with a torque the suggested step count is the one run (not the report's 200 frames)
    rc, out, _ = _run(capsys, "--quiet", "run", "auto", "gravity_gradient", "--tol", "1e-6")
    n = int(out.split(" steps for 1e-06")[0].split()[-1])
    assert rc == 0 and f", {n} steps, t_end" in out and n != 200
    assert float(out.split("attitude error vs reference: final")[1].split()[0]) <= 3e-6
    rc, _, err = _run(capsys, "run", "buss4", "t_handle", "--tol", "1e-6")
    assert rc == 2 and "run auto PROBLEM --tol" in err
    rc, _, err = _run(capsys, "run", "buss4", "t_handle")
    assert rc == 2 and "--dt and --steps" in err


def test_run_auto_sizes_its_steps_for_the_float64_run_it_makes(capsys, tmp_path):
    # the command runs in float64: its suggestion must not be made for float32 first (it was, when x64
    # was off as the process started, and the run ended 1e4 times off the tolerance)
    from jaxrot.driver.tolerance import PrecisionWarning

    jax.config.update("jax_enable_x64", False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrecisionWarning)
            rc, out, _ = _run(capsys, "--quiet", "run", "auto", "gravity_gradient", "--tol", "1e-6")
    finally:
        jax.config.update("jax_enable_x64", True)
    assert rc == 0 and "float32" not in out, out
    assert float(out.split("attitude error vs reference: final")[1].split()[0]) <= 3e-6
    # an output path that cannot be written is refused before the suggestion's trial runs
    rc, out, err = _run(capsys, "--quiet", "run", "auto", "gravity_gradient", "--tol", "1e-6", "--save",
                        str(tmp_path / "missing" / "x.npz"))
    assert rc == 2 and "--save" in err and "suggested" not in out, (out, err)


def test_compilation_cache_folder_choice(tmp_path):
    from jaxrot.present import cache

    home = pathlib.Path("~/.cache").expanduser()
    assert cache.choose({}) == (home / "jaxrot" / "jax", "default")
    assert cache.choose({"XDG_CACHE_HOME": str(tmp_path)})[0] == tmp_path / "jaxrot" / "jax"
    assert cache.choose({"XDG_CACHE_HOME": "relative/dir"})[0] == home / "jaxrot" / "jax"  # XDG: ignored
    assert cache.choose({cache.ENV: str(tmp_path / "c")})[0] == tmp_path / "c"
    for off in ("off", "0", "OFF", "false"):
        assert cache.choose({cache.ENV: off})[0] is None
    assert cache.choose({}, no_cache=True)[0] is None
    assert cache.choose({}, configured="/elsewhere")[0] is None  # JAX's own setting wins
    # JAX before 0.7 caches programs with Python callbacks, which another process runs wrongly
    for old in ("0.6.2", "0.6.0", "0.4.30", "0.6rc1"):
        folder, why = cache.choose({}, jax_version=old)
        assert folder is None and "wrong values" in why, old
    for new in ("0.7.0", "0.7.0rc1", "0.10.2", "0.10.2.dev2026", "1.0.0.dev20270101"):
        assert cache.choose({}, jax_version=new) == (home / "jaxrot" / "jax", "default"), new
    assert cache.choose({cache.ENV: "off"}, jax_version="0.6.2")[1] == f"{cache.ENV}=off"  # the user's choice first
    assert cache.usable(tmp_path / "new" / "jax") is None and (tmp_path / "new" / "jax").is_dir()
    (tmp_path / "file").write_text("")
    assert cache.usable(tmp_path / "file" / "jax") is not None


def _command(args, env, cwd, code=None):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAXROT_COMPILATION"))
           } | env
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "jaxrot", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_command_and_the_library_cache_compiled_programs(tmp_path):
    """The command keeps its compiled programs under $XDG_CACHE_HOME/jaxrot/jax (off with --no-cache);
    so does a program importing jaxrot (off with JAXROT_COMPILATION_CACHE=off; a folder given to JAX
    is kept, and nothing is written to jaxrot's); a cache folder that cannot be written leaves the
    command working, with one note, and the library silent."""
    run = ["--quiet", "run", "buss4", "t_handle", "--dt", "0.01", "--steps", "100"]
    r = _command(run, {"XDG_CACHE_HOME": str(tmp_path / "a")}, tmp_path)
    assert r.returncode == 0 and "note" not in r.stderr, r.stderr[-2000:]
    assert len(list((tmp_path / "a" / "jaxrot" / "jax").iterdir())) > 0
    r = _command(["--no-cache", *run], {"XDG_CACHE_HOME": str(tmp_path / "b")}, tmp_path)
    assert r.returncode == 0 and not (tmp_path / "b").exists(), r.stderr[-2000:]
    (tmp_path / "c").write_text("a file, not a folder")
    r = _command(run, {"XDG_CACHE_HOME": str(tmp_path / "c")}, tmp_path)
    assert r.returncode == 0 and "attitude error" in r.stdout, r.stderr[-2000:]
    assert r.stderr.startswith("jaxrot: note: compilation cache off: cannot write") and r.stderr.count("\n") == 1
    code = ("import jax, jaxrot; p = jaxrot.problems.get('t_handle'); jaxrot.simulate('buss4', p, 0.01, 100); "
            "print(jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)")
    r = _command([], {"XDG_CACHE_HOME": str(tmp_path / "d")}, tmp_path, code=code)
    folder = tmp_path / "d" / "jaxrot" / "jax"
    assert r.stdout.split() == [str(folder), "0.0"] and len(list(folder.iterdir())) > 0, r.stderr[-2000:]
    r = _command([], {"XDG_CACHE_HOME": str(tmp_path / "e"), "JAXROT_COMPILATION_CACHE": "off"}, tmp_path, code=code)
    assert r.stdout.split()[0] == "None" and not (tmp_path / "e").exists(), r.stderr[-2000:]
    r = _command([], {"XDG_CACHE_HOME": str(tmp_path / "e"), "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine"),
                      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}, tmp_path, code=code)
    assert r.stdout.split() == [str(tmp_path / "mine"), "2.0"] and not (tmp_path / "e").exists(), r.stderr[-2000:]
    r = _command([], {"XDG_CACHE_HOME": str(tmp_path / "c")}, tmp_path, code=code)  # not writable: off, silent
    assert r.returncode == 0 and r.stdout.split()[0] == "None" and "jaxrot" not in r.stderr, r.stderr[-2000:]
