"""``dgsgld.runner._random.IMPL`` gives the numbers of JAX's threefry2x32 keys bit for bit, and
:func:`dgsgld.sample` runs every key that has those numbers on it (legacy keys included)."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from _problems import linear_regression, ring

import dgsgld
from dgsgld.runner import _random as _random

SEEDS = [0, 2**31 - 1]
SHAPES = [(), (7,), (3, 4, 5)]


def _data(keys):
    return np.asarray(jax.random.key_data(keys))


# Slow set: seed 0 and the largest seed.
@pytest.mark.slow  # fast twin:
# tests/samplers/test_step_inputs.py::test_runner_matches_a_python_loop_of_steps (sample's IMPL
# keys, folded in and split, give the draws of JAX's threefry keys: a different key is an O(1)
# difference), test_fast_key_converts_threefry_and_legacy_keys_only (the key data)
@pytest.mark.parametrize("seed", [0, 2**31 - 1])
def test_keys_equal_threefry(seed):
    key = jax.random.key(seed)
    fast = _random.fast_key(key)
    for data in [0, 1, 99, 2**31 + 5]:
        np.testing.assert_array_equal(_data(jax.random.fold_in(fast, data)),
                                      _data(jax.random.fold_in(key, data)))
    traced = jax.jit(jax.random.fold_in)(fast, jnp.int32(7))
    np.testing.assert_array_equal(_data(traced), _data(jax.random.fold_in(key, 7)))
    for num in [1, 2, 3, 20, (2, 3)]:
        np.testing.assert_array_equal(_data(jax.random.split(fast, num)),
                                      _data(jax.random.split(key, num)))


# Default run: seed 0 at shapes () and (7,) (several axes: the vmap/jit/scan test below); the
# shape (3, 4, 5) and the largest seed in the slow set.
@pytest.mark.parametrize("seed", [0, pytest.param(2**31 - 1, marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[1],
                                   pytest.param(SHAPES[2], marks=pytest.mark.slow)])
def test_draws_equal_threefry(seed, shape):
    key = jax.random.key(seed)
    fast = _random.fast_key(key)
    np.testing.assert_array_equal(jax.random.normal(fast, shape), jax.random.normal(key, shape))
    np.testing.assert_array_equal(jax.random.uniform(fast, shape), jax.random.uniform(key, shape))
    np.testing.assert_array_equal(jax.random.uniform(fast, shape, minval=-2.0, maxval=3.0),
                                  jax.random.uniform(key, shape, minval=-2.0, maxval=3.0))
    for dtype in [jnp.uint8, jnp.uint16, jnp.uint32]:
        np.testing.assert_array_equal(jax.random.bits(fast, shape, dtype),
                                      jax.random.bits(key, shape, dtype))


def test_draws_equal_threefry_under_vmap_jit_and_in_a_scan():
    # In the scan, XLA:CPU of JAX 0.12 compiled normal's transform fused with a written-out hash
    # to scalar code and JAX's to vector code: 2 of these 72 normals then differed in the last
    # bit. IMPL hands its words over through an optimization barrier, as JAX's loop does.
    keys = jax.random.split(jax.random.key(3), 5)
    draw = jax.vmap(lambda k: jax.random.normal(k, (20, 6)))
    np.testing.assert_array_equal(jax.jit(draw)(_random.fast_key(keys)), draw(keys))

    def loop(key):
        def body(c, k):
            return c, jax.random.normal(jax.random.fold_in(key, k), (4, 3))
        return jax.lax.scan(body, 0, jnp.arange(6))[1]

    np.testing.assert_array_equal(jax.jit(loop)(_random.fast_key(keys[0])), loop(keys[0]))


# Default run: shape (7,); the scalar shape in the slow set.
@pytest.mark.parametrize("shape", [pytest.param((), marks=pytest.mark.slow), (7,)])
def test_float64_draws_equal_threefry(shape):
    with jax.enable_x64(True):
        key = jax.random.key(3)
        fast = _random.fast_key(key)
        ours = jax.random.normal(fast, shape, jnp.float64)
        theirs = jax.random.normal(key, shape, jnp.float64)
        assert ours.dtype == theirs.dtype == jnp.float64
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(jax.random.uniform(fast, shape, jnp.float64),
                                      jax.random.uniform(key, shape, jnp.float64))
        np.testing.assert_array_equal(jax.random.bits(fast, shape, jnp.uint64),
                                      jax.random.bits(key, shape, jnp.uint64))


def test_fast_key_converts_threefry_and_legacy_keys_only():
    impl = jax.random.key_impl(jax.random.key(0, impl=_random.IMPL))
    for key in [jax.random.key(5), jax.random.PRNGKey(5), jax.random.split(jax.random.key(5), 3)]:
        fast = _random.fast_key(key)
        assert jax.random.key_impl(fast) == impl
        np.testing.assert_array_equal(_data(fast), np.asarray(jax.random.key_data(key)))
    for key in [jax.random.key(0, impl="philox4x32"), jax.random.key(0, impl="rbg")]:
        assert _random.fast_key(key) is key
    # With partitionable threefry off, IMPL's numbers differ from JAX's: no conversion.
    with jax.threefry_partitionable(False):
        key = jax.random.key(0)
        assert _random.fast_key(key) is key
        legacy = _random.fast_key(jax.random.PRNGKey(0))
        assert str(jax.random.key_impl(legacy)) == str(jax.random.key_impl(key))


def _key_types(jaxpr) -> set[str]:
    """Key dtypes of every draw (``random_bits``) in a jaxpr, sub-jaxprs (scan bodies) included."""
    names = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "random_bits":
            names.add(str(eqn.invars[0].aval.dtype))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _key_types(sub)
    return names


# Default run: legacy keys (run against the typed key's run); typed keys alone in the slow set.
@pytest.mark.parametrize("make_key", [pytest.param(jax.random.key, marks=pytest.mark.slow),
                                      jax.random.PRNGKey], ids=["typed", "legacy"])
def test_sample_draws_with_the_written_out_hash_for_typed_and_legacy_keys(make_key):
    """Legacy ``PRNGKey`` keys take the same path as typed keys: the same trace, every draw
    from ``IMPL`` (not XLA's rolled threefry loop, 2-3x slower at paper size)."""
    pb = linear_regression(batch_size=2)
    alg, x0 = dgsgld.DIGingSGLD(0.05), jnp.zeros((3, 5, 2))

    def run(key):
        return dgsgld.sample(alg, pb.potential, ring(5), x0, key, 4, on_divergence="flag").positions

    np.testing.assert_array_equal(run(make_key(7)), run(jax.random.key(7)))
    fast = str(jax.random.key(0, impl=_random.IMPL).dtype)
    assert _key_types(jax.make_jaxpr(run)(make_key(7)).jaxpr) == {fast}


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_rbg_draws_under_vmap_depend_on_the_batch(impl):
    """Why ``sample`` refuses these keys: JAX's batching rule of XLA's RngBitGenerator draws a
    whole batch from its first key, so keys 1-3 draw other numbers batched than alone (equal
    would be a 2^-32-per-word coincidence). If JAX ever batches them key by key, this fails and
    the refusal below can go."""
    keys = jax.random.split(jax.random.key(0, impl=impl), 4)
    batched = jax.vmap(lambda k: jax.random.normal(k, (5,)))(keys)
    alone = jnp.stack([jax.random.normal(keys[c], (5,)) for c in range(4)])
    np.testing.assert_array_equal(batched[0], alone[0])
    assert not np.any(np.asarray(batched[1:]) == np.asarray(alone[1:]))


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_sample_refuses_keys_whose_draws_depend_on_batching(impl):
    pb = linear_regression(batch_size=2)
    with pytest.raises(ValueError, match=f"`key` is a '{impl}' key.*philox4x32"):
        dgsgld.sample(dgsgld.DIGingSGLD(0.05), pb.potential, ring(5), jnp.zeros((3, 5, 2)),
                      jax.random.key(0, impl=impl), 2)
