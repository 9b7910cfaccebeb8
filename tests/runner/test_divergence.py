"""Divergence: a deliberately unstable step size, caught inside the compiled run.

Set-up: three agents that do not communicate (``W = I``, a valid mixing matrix) with quadratic
potentials of curvature ``L_i = n_local * p_i``, ``p = (1, 3, 5)``, ``n_local = 2``. With full
batches DIGing-SGLD's tracker equals the local gradient, so agent ``i`` runs
``x⁺ = (1 − η L_i) x + η L_i μ + √(2η) ξ``: with ``η = 1`` the growth factors are ``|1 − 2 p_i|
= 1, 5, 9``. A chain has diverged once a position is non-finite or reaches
``divergence_threshold = 1e8`` times ``r = max(1, max |x⁰|)`` of the chain
(``dgsgld.evaluate._divergence``): agent 2 gets there first, after about
``log(1e8 r / |x₀|) / log 9`` iterations, still finite (float32 overflows near 3.4e38). Chain 0
starts every agent at 1, chain 2 at 1e16 (the same number of steps: the bound is relative), and
chain 1 starts agent 1 (factor 5) at 1e20 so that it reaches its chain's bound 1e28 before agent 2
(from 1) does.
"""

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import evaluate
from dgsgld.runner.checkpoint import sample_chunked

N, D, C, NUM_STEPS = 3, 2, 3, 60
PRECISION = np.array([1.0, 3.0, 5.0], np.float32)
#: |x_0| per chain and agent, and the agent expected to overflow first in each chain.
INIT_SCALE = np.array([[1.0, 1.0, 1.0], [1.0, 1e20, 1.0], [1e16, 1e16, 1e16]], np.float32)
FIRST_AGENT = [2, 1, 2]
F32_MAX = float(np.finfo(np.float32).max)
THRESHOLD = 1e8


def log_likelihood(theta, datum):
    x, precision = datum
    return -0.5 * precision * jnp.sum((x - theta) ** 2)


@functools.cache
def problem():
    # float32 throughout: the overflow threshold below is float32's.
    x = jnp.zeros((N, 2, D), jnp.float32)
    precision = jnp.broadcast_to(jnp.asarray(PRECISION)[:, None], (N, 2))
    potential = dgsgld.Potential(log_likelihood, None, (x, precision))
    init = jnp.ones((C, N, D), jnp.float32) * jnp.asarray(INIT_SCALE)[:, :, None]
    return potential, init


def run(step_size=1.0, mixing=None, **kwargs):
    potential, init = problem()
    # W = I is refused by default (never connected); here it is the point: allow it.
    return dgsgld.sample(dgsgld.DIGingSGLD(step_size), potential,
                         jnp.eye(N) if mixing is None else mixing, init, jax.random.key(3),
                         NUM_STEPS, allow_disconnected=mixing is None, **kwargs)


@pytest.fixture(scope="module")
def flagged():
    return run(on_divergence="flag")


def first_diverged(positions):
    """(iteration, agent) of the first diverged entry of one chain's ``(T, N, D)`` positions:
    non-finite, or |x| >= THRESHOLD * max(1, max |x⁰|)."""
    a = np.abs(np.asarray(positions, np.float64)).reshape(positions.shape[0], N, -1)
    bound = THRESHOLD * max(1.0, float(a[0].max()))
    bad = ~(a < bound).all(axis=2)  # (T, N): some coordinate of the agent diverged
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size == 0:
        return -1, -1
    return int(rows[0]), int(np.argmax(bad[rows[0]]))


def test_reported_iteration_and_agent_match_the_stored_trace(flagged):
    div = flagged.divergence
    assert flagged.diverged.tolist() == [True] * C
    for c in range(C):
        assert (int(div.iteration[c]), int(div.agent[c])) == first_diverged(flagged.positions[c])
        i = FIRST_AGENT[c]
        assert int(div.agent[c]) == i
        # The reported iteration matches the growth rate g = |1 - η L_i|: the first k with
        # g^k x0 >= 1e8 r, r = max(1, max |x⁰|) of the chain; two iterations of slack either
        # way for the noise, which is comparable to x0 = 1.
        x0, lip = float(INIT_SCALE[c, i]), 2.0 * float(PRECISION[i])
        growth = abs(1.0 - lip)
        expect = math.log(THRESHOLD * max(1.0, float(INIT_SCALE[c].max())) / x0) / math.log(growth)
        assert expect - 2 <= int(div.iteration[c]) <= expect + 2
        # Caught while still finite, far below float32's overflow.
        stored = np.asarray(flagged.positions[c, : int(div.iteration[c]) + 1])
        assert np.isfinite(stored).all() and np.abs(stored).max() < F32_MAX / 1e6


def test_default_raises_naming_the_first_iteration_chain_and_agent(flagged):
    div = flagged.divergence
    first = int(np.argmin(np.asarray(div.iteration)))
    with pytest.raises(dgsgld.DivergenceError) as err:
        run()
    message = str(err.value)
    assert f"{C} of {C} chains diverged" in message
    assert (
        f"iteration {int(div.iteration[first])}, chain {first}, agent {int(div.agent[first])}"
        in message
    )
    assert "step size" in message


def test_warn_returns_the_flagged_trace(flagged):
    with pytest.warns(RuntimeWarning, match="chains diverged"):
        trace = run(on_divergence="warn")
    assert np.array_equal(trace.divergence.iteration, flagged.divergence.iteration)


def test_stable_step_size_is_not_flagged():
    potential, init = problem()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, jnp.eye(N), init / 1e16,
                              jax.random.key(3), NUM_STEPS, on_divergence="raise",
                              allow_disconnected=True)
    assert not np.asarray(trace.diverged).any()
    assert np.asarray(trace.divergence.iteration).tolist() == [-1] * C
    assert np.asarray(trace.divergence.agent).tolist() == [-1] * C


def test_on_divergence_stop_freezes_every_chain(flagged):
    trace = run(on_divergence="stop")
    flagged_it = np.asarray(flagged.divergence.iteration)
    first = int(np.min(flagged_it))
    # Only the earliest chains are caught (the others stop before they diverge), at the same
    # iteration and agent as without stopping.
    it = np.asarray(trace.divergence.iteration)
    earliest = flagged_it == first
    assert it.tolist() == np.where(earliest, first, -1).tolist() and not earliest.all()
    for c in np.flatnonzero(earliest):
        assert int(trace.divergence.agent[c]) == FIRST_AGENT[c]
    # Nothing is computed after that iteration: the count stops and the kept positions repeat.
    assert np.asarray(trace.state.count).tolist() == [first] * C
    pos = np.asarray(trace.positions)
    assert np.array_equal(pos[:, : first + 1], np.asarray(flagged.positions[:, : first + 1]),
                          equal_nan=True)
    frozen = np.broadcast_to(pos[:, first : first + 1], pos[:, first:].shape)
    assert np.array_equal(pos[:, first:], frozen, equal_nan=True)
    # The chains that did not diverge hold finite samples up to the stop.
    assert np.isfinite(pos[~earliest]).all()


@pytest.mark.slow  # default run: test_on_divergence_stop_freezes_every_chain
def test_on_divergence_stop_in_chunks_matches_one_call(tmp_path):
    # Complete-graph averaging (connected); the agents' mean curvature 2 * 3 still makes
    # η = 1 unstable (factor |1 - 6| = 5).
    complete = jnp.full((N, N), 1.0 / N)
    want = run(on_divergence="stop", mixing=complete)
    potential, init = problem()
    got = sample_chunked(dgsgld.DIGingSGLD(1.0), potential, complete, init,
                         jax.random.key(3), NUM_STEPS, chunk_size=20, path=tmp_path,
                         on_divergence="stop")
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def test_flag_is_set_per_step_size_under_vmap():
    # Under vmap "flag" marks the unstable step size only ("raise" would raise).
    iterations = jax.vmap(lambda eta: run(eta, on_divergence="flag").divergence.iteration)(
        jnp.array([0.05, 1.0])
    )
    assert np.all(np.asarray(iterations[0]) == -1)
    assert np.all(np.asarray(iterations[1]) > 0)


def test_diverged_positions_are_refused_by_diagnostics(flagged):
    with pytest.raises(ValueError, match=r"Did the run diverge\? See `trace.divergence`"):
        evaluate.ess(flagged.positions)
