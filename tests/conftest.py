import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import pytest  # noqa: E402

# Hundreds of distinct compilations in one long-lived xdist worker: free XLA's executables after
# every test (a CI run segfaulted inside an XLA CPU compile late in test_integrators, the known
# accumulate-then-crash pattern; each test's compiled functions are its own anyway).
@pytest.fixture(autouse=True)
def _free_compiled_executables():
    yield
    jax.clear_caches()
