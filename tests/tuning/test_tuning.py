"""dgsgld.tuning.grid_run: the one grid runner behind grid_search, the proposer and the
digits benchmark."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import networks, tuning

N, D, n = 4, 2, 5


def potential(shift):
    z = np.random.default_rng(0).standard_normal((N, n, D)).astype(np.float32)
    return dgsgld.Potential(_log_likelihood, _log_prior, (z, z @ np.ones(D, np.float32) + shift))


def _log_likelihood(x, datum):
    z, y = datum
    return -0.5 * (z @ x - y) ** 2


def _log_prior(x):
    return -0.5 * x @ x


def _final_mean(trace):
    return jnp.mean(trace.state.position, axis=(0, 1))  # (D,)


def test_every_grid_point_and_split_is_a_plain_run_with_the_same_draws():
    # Common random numbers: grid point g of split s is dgsgld.sample at step g on split s
    # with the grid's key and chains (float32; the vmapped program may reorder sums: rtol
    # 1e-5). A step far above 2/L (L ~ n |z|^2 ~ 10 here) diverges: flagged, not raised.
    pots = [potential(0.0), potential(2.0)]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *pots)
    init = jnp.asarray(np.random.default_rng(1).standard_normal((3, N, D)), jnp.float32)
    key, network, grid = jax.random.key(2), networks.ring(N), [0.005, 0.02, 50.0]
    out = tuning.grid_run(dgsgld.DIGingSGLD, grid, stacked, network, init, key, 6,
                          score_fn=_final_mean, stacked=True)
    assert out.score.shape == (2, 3, D) and out.ensemble is None
    np.testing.assert_array_equal(out.diverged, [[False, False, True]] * 2)
    for s, pot in enumerate(pots):
        for g, eta in enumerate(grid[:2]):
            trace = dgsgld.sample(dgsgld.DIGingSGLD(jnp.float32(eta)), pot, network, init,
                                  key, 6)
            np.testing.assert_allclose(out.score[s, g], _final_mean(trace), rtol=1e-5)
    # The means of the two splits differ (the targets were shifted): the splits are not mixed.
    assert np.all(np.abs(out.score[1, :2] - out.score[0, :2]) > 1e-2)


def test_grid_in_chunks_is_the_grid_at_once():
    # grid_batch runs the grid a few step sizes at a time (lax.map over chunks, the last one
    # shorter): the same runs as all at once, up to the float32 rounding of another program.
    pot = potential(0.0)
    init = jnp.asarray(np.random.default_rng(1).standard_normal((3, N, D)), jnp.float32)
    args = (dgsgld.DIGingSGLD, [0.005, 0.02, 0.04], pot, networks.ring(N), init,
            jax.random.key(2), 6)
    whole = tuning.grid_run(*args, score_fn=_final_mean)
    chunked = tuning.grid_run(*args, score_fn=_final_mean, grid_batch=2)
    np.testing.assert_allclose(chunked.score, whole.score, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(chunked.diverged, whole.diverged)
    with pytest.raises(ValueError, match="grid_batch"):
        tuning.grid_run(*args, grid_batch=0)
