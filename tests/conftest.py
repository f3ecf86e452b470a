import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import os  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# One on-disk compilation cache per test session, shared by the xdist workers (named by the run's
# id, which every worker of a run gets): a program compiled by one worker, or before a
# jax.clear_caches() below, is loaded instead of compiled again. JAXROT_TEST_CACHE=off disables it.
if os.environ.get("JAXROT_TEST_CACHE", "") != "off":
    _run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    _dir = os.path.join(tempfile.gettempdir(), f"jaxrot-test-xla-{_run}")
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
