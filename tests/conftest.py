import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import os  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# The suite's time is mostly XLA compiling hundreds of small programs (a reverse-mode gradient of one
# method: 7 s of compilation, 5 ms of running). The tests check values, orders and invariants, not
# speed, so they compile with XLA's older loop-fusion emitters and no LLVM optimisation: about half the
# compile time, the same values to round-off. Set before JAX starts its backend (read once, there);
# JAXROT_TEST_XLA=default keeps XLA's defaults.
# Tests marked ``default_xla`` (bit-for-bit claims about the programs users compile, which two
# differently structured programs need not meet under other flags) run in a fresh process with the
# defaults instead.
# XLA aborts the process on a flag it does not know (newer XLA dropped the first of these), before
# pytest prints anything: each is tried once in a subprocess, and the workers and subprocesses inherit
# the ones kept through JAXROT_TEST_XLA_FLAGS.
_WANTED_XLA_FLAGS = ("--xla_cpu_use_fusion_emitters=false", "--xla_backend_optimization_level=0")


def _known_xla_flags() -> str:
    def known(flag):
        env = dict(os.environ, XLA_FLAGS=flag, JAX_PLATFORMS="cpu")
        return subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                              capture_output=True, timeout=120).returncode == 0

    if "JAXROT_TEST_XLA_FLAGS" not in os.environ:
        os.environ["JAXROT_TEST_XLA_FLAGS"] = " ".join(f for f in _WANTED_XLA_FLAGS if known(f))
    return os.environ["JAXROT_TEST_XLA_FLAGS"]


FAST_COMPILE = os.environ.get("JAXROT_TEST_XLA", "") != "default"
TEST_XLA_FLAGS = _known_xla_flags() if FAST_COMPILE else ""
if FAST_COMPILE and TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + TEST_XLA_FLAGS).strip()


# Warp's kernels likewise (the fused executor's): LLVM at -O0 compiles them faster and, with
# floating-point contraction off as jaxrot builds them, gives the same values; Warp hashes the level,
# so these builds are cached apart from the default -O2 builds users run.
if FAST_COMPILE:
    try:
        import warp  # noqa: E402

        warp.config.optimization_level = 0
    except ImportError:  # the fast extra is optional
        pass


def pytest_pyfunc_call(pyfuncitem):
    if not (FAST_COMPILE and pyfuncitem.get_closest_marker("default_xla")):
        return None  # pytest calls the test here
    env = dict(os.environ, JAXROT_TEST_XLA="default",
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "").replace(TEST_XLA_FLAGS, "").strip())
    root = pathlib.Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts=",
                        "-q", "-rfE", pyfuncitem.nodeid], cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and " passed" in r.stdout, f"with XLA's default flags:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"
    return True

# Every temporary file of a test session (pytest's tmp_path, the XLA cache below, the folders of
# --quick runs, subprocesses' files) goes under one folder that the session's first process (the
# xdist controller, or pytest itself without workers) makes and removes at the end: the tests leave
# nothing in the system's temporary folder. Workers and subprocesses inherit it through TMPDIR.
if "JAXROT_TEST_TMP" not in os.environ:
    _ROOT = tempfile.mkdtemp(prefix="jaxrot-tests-")
    os.environ["JAXROT_TEST_TMP"] = os.environ["TMPDIR"] = _ROOT
    tempfile.tempdir = _ROOT
    _OWNER = True
else:
    _ROOT = os.environ["JAXROT_TEST_TMP"]
    _OWNER = False


def pytest_sessionfinish(session):
    if _OWNER:
        shutil.rmtree(_ROOT, ignore_errors=True)


# One on-disk compilation cache per test session, shared by the xdist workers: a program compiled by
# one worker, or before a jax.clear_caches() below, is loaded instead of compiled again. `import jaxrot`
# would keep programs in the user's cache folder (jaxrot.present.cache): never in tests, nor in their
# subprocesses (tests of that cache set their own folders).
os.environ["JAXROT_COMPILATION_CACHE"] = "off"
# JAXROT_TEST_CACHE=off disables it. JAX before 0.7 caches programs with Python callbacks too, which
# another worker then runs with its own callback of that number (wrong values: jaxrot.present.cache),
# so the cache is off there.
from jaxrot.present.cache import safe_for  # noqa: E402

if os.environ.get("JAXROT_TEST_CACHE", "") != "off" and safe_for(jax.__version__):
    _dir = os.path.join(_ROOT, "xla-cache")
    os.makedirs(_dir, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", _dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# Hundreds of distinct compilations in one long-lived xdist worker: a CI run segfaulted inside an
# XLA CPU compile late in test_integrators (the known accumulate-then-crash pattern), so free XLA's
# executables every 25 tests (every test would recompile shared helpers and cost minutes).
_COUNT = [0]


@pytest.fixture(autouse=True)
def _free_compiled_executables():
    yield
    _COUNT[0] += 1
    if _COUNT[0] % 25 == 0:
        jax.clear_caches()


# The default run's selection: tests/tiers.py says what it leaves to the slow tier, and why. Marked
# before pytest's -m selection runs (tryfirst).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    from . import tiers

    root = pathlib.Path(config.rootpath)
    whole = set()
    if not config.getoption("keyword"):  # a -k selection collects part of a file
        for arg in config.args:
            if "::" in arg:
                continue
            path = (pathlib.Path(config.invocation_params.dir) / arg).resolve()
            whole |= {it.nodeid.split("::")[0] for it in items
                      if (root / it.nodeid.split("::")[0]).resolve().is_relative_to(path)}
    try:
        tiers.apply(items, pytest.mark.slow, whole)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
