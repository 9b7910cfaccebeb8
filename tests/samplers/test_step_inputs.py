"""What a step consumes: its noise (drawn or passed in) and the gradient kept in the state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _problems import linear_regression, ring

import dgsgld

SAMPLERS = [dgsgld.DIGingSGLD, dgsgld.DESGLD, dgsgld.EXTRASGLD, dgsgld.SGLD]


def _start(make, pb, key):
    alg = make(0.05)
    x0 = jax.random.normal(key, (5, 2))
    if not alg.decentralized:
        x0 = x0[0]
    return alg, alg.init(x0, pb.potential, jax.random.key(11))


@pytest.mark.parametrize("make", SAMPLERS)
@pytest.mark.slow  # fast twin: test_flat_noise_gives_the_same_step_bit_for_bit
def test_passing_the_drawn_noise_changes_nothing(make, key):
    pb = linear_regression(batch_size=2)
    alg, state = _start(make, pb, key)
    W = ring(5)
    k = jax.random.key(5)
    drawn = alg.step(k, state, pb.potential, W)
    passed = alg.step(k, state, pb.potential, W, alg.noise(k, state.position))
    for a, b in zip(jax.tree.leaves(drawn), jax.tree.leaves(passed)):
        np.testing.assert_array_equal(a, b)


EVERY_SAMPLER = {  # every sampler class
    "diging": lambda: dgsgld.DIGingSGLD(0.05),
    "de": lambda: dgsgld.DESGLD(0.05),
    "extra": lambda: dgsgld.EXTRASGLD(0.05),
    "sgld": lambda: dgsgld.SGLD(0.02),
    "diging_sghmc": lambda: dgsgld.DIGingSGHMC(0.05, 1.0),
    "de_sghmc": lambda: dgsgld.DESGHMC(0.05, 1.0),
    "d_ula": lambda: dgsgld.DULA(0.01, 0.5),
}


# Default run: DIGing-SGLD (decentralized, with a tracker) and SGLD (centralized: the refusal of a
# (d,) leaf reshaped); the other samplers' steps (same flat-noise path) in the slow set.
@pytest.mark.parametrize("name", [
    name if name in ("diging", "sgld") else pytest.param(name, marks=pytest.mark.slow)
    for name in EVERY_SAMPLER])
def test_flat_noise_gives_the_same_step_bit_for_bit(name, key):
    """The runner passes the noise flat (``(size,)`` leaves) where its loop keeps the chain
    axis first, and the step then updates in that shape: the same elementwise arithmetic, so
    the same bits as with the noise shaped like the position. A leaf of another shape is
    refused, even of the right size (taking it would be a silent reshuffle of the noise)."""
    pb = linear_regression(batch_size=2)
    alg = EVERY_SAMPLER[name]()
    x0 = jax.random.normal(key, (5, 2))
    if not alg.decentralized:
        x0 = x0[0]                       # (d,): flat is the same shape, the refusal is tested
    state = alg.init(x0, pb.potential, jax.random.key(11))
    W = jnp.asarray(ring(5)) if alg.decentralized else None
    k = jax.random.key(5)
    w = alg.noise(k, state.position)
    step = jax.jit(lambda noise: alg.step(k, state, pb.potential, W, noise))
    shaped, flat = step(w), step(jax.tree.map(jnp.ravel, w))
    assert jax.tree.structure(shaped) == jax.tree.structure(flat)
    for a, b in zip(jax.tree.leaves(shaped), jax.tree.leaves(flat)):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="`noise` leaves must be shaped like the position"):
        alg.step(k, state, pb.potential, W, jax.tree.map(lambda a: a[..., None], w))


def test_shared_noise_couples_two_samplers(key):
    """With the same noise and full batches, DE-SGLD and DIGing-SGLD from the same start and
    with y⁰ = ∇F(x⁰) take the same first step exactly (x¹ = W x⁰ − η ∇F(x⁰) + √(2η) w)."""
    pb = linear_regression()
    x0 = jax.random.normal(key, (5, 2))
    W = ring(5)
    de, diging = dgsgld.DESGLD(0.05), dgsgld.DIGingSGLD(0.05)
    s_de, s_dg = de.init(x0, pb.potential, key), diging.init(x0, pb.potential, key)
    w = de.noise(jax.random.key(1), x0)
    a = de.step(jax.random.key(2), s_de, pb.potential, W, w)
    b = diging.step(jax.random.key(3), s_dg, pb.potential, W, w)
    np.testing.assert_allclose(a.position, b.position, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make", [dgsgld.DESGLD, dgsgld.EXTRASGLD, dgsgld.SGLD])
def test_kept_gradient_is_the_gradient_at_the_position(make, key):
    """Full batches: after any number of steps the state's gradient is ∇F at its position."""
    pb = linear_regression()
    alg, state = _start(make, pb, key)
    for k in range(3):
        state = alg.step(jax.random.key(k), state, pb.potential, ring(5))
    pot = pb.potential
    exact = (pot.full_grad(state.position) if alg.decentralized
             else pot.pooled_grad(state.position, jax.random.key(0)))
    np.testing.assert_allclose(state.grad, exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [dgsgld.DESGLD, dgsgld.EXTRASGLD, dgsgld.SGLD])
def test_state_without_kept_gradient_is_refused(make, key):
    """A state built by hand without ``grad`` is named, not stepped with a gradient drawn
    anew (which would change the step's random numbers)."""
    pb = linear_regression()
    alg, state = _start(make, pb, key)
    with pytest.raises(ValueError, match="keeps no gradient"):
        alg.step(jax.random.key(4), state._replace(grad=None), pb.potential, ring(5))


def test_runner_matches_a_python_loop_of_steps(key):
    """``dgsgld.sample`` (chains-last loop, noise drawn outside the vmapped step) equals the
    documented key scheme run step by step in Python, to float32 rounding."""
    pb = linear_regression(batch_size=2)
    alg = dgsgld.DIGingSGLD(0.05)
    init = jax.random.normal(key, (6, 5, 2))
    run_key = jax.random.key(9)
    trace = dgsgld.sample(alg, pb.potential, ring(5), init, run_key, 8)
    for c in range(6):
        init_key, chain_run = jax.random.split(jax.random.fold_in(run_key, c))
        state = alg.init(init[c], pb.potential, init_key)
        for k in range(8):
            state = alg.step(jax.random.fold_in(chain_run, k), state, pb.potential, ring(5))
            np.testing.assert_allclose(trace.positions[c, k + 1], state.position,
                                       rtol=2e-5, atol=2e-5)
    assert jnp.all(jnp.isfinite(trace.positions))
