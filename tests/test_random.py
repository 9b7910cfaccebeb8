"""``dgsgld._random`` gives jax.random's numbers bit for bit, and the engine uses it that way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgsgld import _random

SEEDS = [0, 1, 12345, 2**31 - 1]
SHAPES = [(), (1,), (7,), (20, 6), (3, 4, 5)]


def _data(keys):
    return np.asarray(jax.random.key_data(keys))


@pytest.mark.parametrize("seed", SEEDS)
def test_keys_equal_jax_random(seed):
    key = jax.random.key(seed)
    for data in [0, 1, 99, 2**31 + 5]:
        np.testing.assert_array_equal(_data(_random.fold_in(key, data)),
                                      _data(jax.random.fold_in(key, data)))
    traced = jax.jit(_random.fold_in)(key, jnp.int32(7))
    np.testing.assert_array_equal(_data(traced), _data(jax.random.fold_in(key, 7)))
    for num in [1, 2, 3, 20]:
        np.testing.assert_array_equal(_data(_random.split(key, num)),
                                      _data(jax.random.split(key, num)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_draws_equal_jax_random(seed, shape):
    key = jax.random.key(seed)
    np.testing.assert_array_equal(_random.normal(key, shape), jax.random.normal(key, shape))
    np.testing.assert_array_equal(_random.uniform(key, shape), jax.random.uniform(key, shape))
    np.testing.assert_array_equal(_random.uniform(key, shape, minval=-2.0, maxval=3.0),
                                  jax.random.uniform(key, shape, minval=-2.0, maxval=3.0))
    np.testing.assert_array_equal(_random.bits(key, shape), jax.random.bits(key, shape))


def test_draws_equal_jax_random_under_vmap_jit_and_in_a_scan():
    keys = jax.random.split(jax.random.key(3), 5)
    ours = jax.jit(jax.vmap(lambda k: _random.normal(k, (20, 6))))(keys)
    theirs = jax.vmap(lambda k: jax.random.normal(k, (20, 6)))(keys)
    np.testing.assert_array_equal(ours, theirs)

    def loop(draw):
        def body(c, k):
            return c, draw(jax.random.fold_in(keys[0], k) if draw is jax.random.normal
                           else _random.fold_in(keys[0], k), (4, 3))
        return jax.lax.scan(body, 0, jnp.arange(6))[1]

    np.testing.assert_array_equal(jax.jit(lambda: loop(_random.normal))(),
                                  jax.jit(lambda: loop(jax.random.normal))())


def test_float64_draws_equal_jax_random():
    with jax.enable_x64(True):
        key = jax.random.key(3)
        for shape in [(), (7,), (20, 6)]:
            ours, theirs = _random.normal(key, shape, jnp.float64), jax.random.normal(key, shape, jnp.float64)
            assert ours.dtype == theirs.dtype == jnp.float64
            np.testing.assert_array_equal(ours, theirs)
            np.testing.assert_array_equal(_random.uniform(key, shape, jnp.float64),
                                          jax.random.uniform(key, shape, jnp.float64))


def test_other_keys_and_dtypes_fall_back_to_jax_random():
    for key in [jax.random.key(0, impl="philox4x32"), jax.random.key(0, impl="rbg"),
                jax.random.PRNGKey(0)]:
        np.testing.assert_array_equal(_random.normal(key, (5,)), jax.random.normal(key, (5,)))
        np.testing.assert_array_equal(_data(_random.split(key)), _data(jax.random.split(key)))
    key = jax.random.key(0)
    np.testing.assert_array_equal(_random.normal(key, (4,), jnp.bfloat16),
                                  jax.random.normal(key, (4,), jnp.bfloat16))


def test_partitionable_off_falls_back_to_jax_random():
    key = jax.random.key(0)
    with jax.threefry_partitionable(False):
        np.testing.assert_array_equal(_random.normal(key, (6,)), jax.random.normal(key, (6,)))
        np.testing.assert_array_equal(_data(_random.split(key, 3)), _data(jax.random.split(key, 3)))


def test_the_hash_is_written_out_without_loops():
    # The point of the module: no while loop (XLA:CPU's rolled threefry) in the program.
    key = jax.random.key(0)
    ours = jax.jit(lambda k: _random.normal(_random.fold_in(k, 3), (10,))).lower(key).as_text()
    theirs = jax.jit(lambda k: jax.random.normal(jax.random.fold_in(k, 3), (10,))).lower(key)
    assert "while" not in ours
    assert "while" in theirs.compile().as_text()
