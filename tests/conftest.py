import os

import jax
import pytest

# Tests that call the command line in-process must not store programs in the user's cache
# (nor point JAX's cache elsewhere for the rest of the session); tests/test_cache.py opts in.
os.environ.setdefault("DGSGLD_NO_CACHE", "1")

# Catch ``(n, d)`` vs ``(d,)`` broadcasting slips in mixing and gradient code.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
