import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

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
# one worker, or before a jax.clear_caches() below, is loaded instead of compiled again.
# JAXROT_TEST_CACHE=off disables it.
if os.environ.get("JAXROT_TEST_CACHE", "") != "off":
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
