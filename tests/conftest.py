import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import pytest  # noqa: E402

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
