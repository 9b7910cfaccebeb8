import jax
import pytest

# Catch ``(n, d)`` vs ``(d,)`` broadcasting slips in mixing and gradient code.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
