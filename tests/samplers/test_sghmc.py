"""DE-SGHMC and DIGing-SGHMC: exact linear-Gaussian laws, the bias tracking removes, the
overdamped limit, the tracker invariant, a retrace guard and input validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _moments import (
    assert_cov_matches,
    assert_mean_matches,
    count_traces,
    exact_quadratic,
    law_after,
    run_chains,
)
from _problems import linear_regression, permuted_rings, ring

import dgsgld
from dgsgld.theory import exact


# Default run: DIGing-SGHMC (DE-SGHMC shares the velocity update; slow set).
@pytest.mark.parametrize("make", [pytest.param(dgsgld.DESGHMC, marks=pytest.mark.slow),
                                  dgsgld.DIGingSGHMC], ids=["de", "diging"])
def test_full_batch_law_matches_theory_exact(make, key):
    """Full batch, time-varying ring: the state (x, v[, y]) is linear-Gaussian, so after 40
    steps the per-agent mean and covariance of C = 4000 chains equal theory.exact's within
    4.5 Monte Carlo standard errors (see tests/_moments.py)."""
    pb = linear_regression(heterogeneous=True)
    alg, stack = make(0.2, friction=2.0), permuted_rings(5, 6)
    x = run_chains(alg, pb, stack, 40, 4000, key)
    mean, cov = law_after(alg, pb, stack, 40)
    assert_mean_matches(x, mean, cov)
    assert_cov_matches(x, cov)


def test_tracking_removes_the_network_bias():
    """Exact stationary laws on a ring with heterogeneous data: DIGing-SGHMC's agents are
    centred on the posterior mean (to the float32 rounding of the data), DE-SGHMC's are not
    (bias ≈ 0.4)."""
    pb = linear_regression(heterogeneous=True)
    q = exact_quadratic(pb)
    diging = exact.stationary_moments(dgsgld.DIGingSGHMC(0.2, 2.0), q, ring(5))
    de = exact.stationary_moments(dgsgld.DESGHMC(0.2, 2.0), q, ring(5))
    assert diging.spectral_radius < 1 and de.spectral_radius < 1
    assert np.abs(diging.mean[0] - pb.mean).max() < 1e-4  # float32 data vs float64 mean
    assert np.abs(de.mean[0] - pb.mean).max() > 0.1


@pytest.mark.slow  # default run: DIGing-SGHMC's exact law and tracking invariant
def test_unit_friction_step_is_de_sgld_with_squared_step(key):
    """γη = 1: v⁺ = −η∇̃F(x) + √2 w, so x⁺ = W x − η²∇̃F(x) + √(2η²) w, DE-SGLD at step η²
    with the same noise and gradients (same key): equal to float32 rounding."""
    pb = linear_regression(batch_size=2)
    init = jax.random.normal(key, (4, 5, 2))
    eta = 0.3
    a = dgsgld.sample(dgsgld.DESGHMC(eta, friction=1 / eta), pb.potential, ring(5), init, key, 10)
    b = dgsgld.sample(dgsgld.DESGLD(eta**2), pb.potential, ring(5), init, key, 10)
    np.testing.assert_allclose(a.positions, b.positions, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # fast twin:
# tests/samplers/test_samplers.py::test_tracking_invariant_with_minibatches (the same tracker
# update in DIGing-SGLD)
def test_tracking_invariant_with_minibatches(key):
    """Σ_i y_i = Σ_i ∇̃f_i(x_i) at every iteration (rounding bound as in test_samplers.py)."""
    pb = linear_regression(local_size=6, batch_size=2, heterogeneous=True)

    def residual(state):
        return jnp.stack([jnp.sum(state.tracker, 0), jnp.sum(state.grad, 0)])

    init = jax.random.normal(key, (8, 5, 2))
    trace = dgsgld.sample(dgsgld.DIGingSGHMC(0.1, 2.0), pb.potential, permuted_rings(5, 7),
                          init, key, num_steps=200, output=dgsgld.Output(trace_fn=residual))
    diff = np.asarray(trace.values[:, :, 0] - trace.values[:, :, 1])
    assert np.abs(diff).max() <= 200 * 5 * 1.2e-7 * 10 * np.abs(np.asarray(trace.state.grad)).max()


def test_compiled_once_for_new_step_size_and_friction(key):
    ll, calls = count_traces()
    pb = linear_regression()
    pot = dgsgld.Potential(ll, None, pb.potential.data)
    init = jax.random.normal(key, (3, 5, 2))
    dgsgld.sample(dgsgld.DIGingSGHMC(0.1, 1.0), pot, ring(5), init, key, 5)
    n = len(calls)
    dgsgld.sample(dgsgld.DIGingSGHMC(0.2, 3.0), pot, ring(5), init + 1, jax.random.key(3), 5)
    assert len(calls) - n <= 1  # only the pre-compile shape check traces again


def test_bad_inputs_raise():
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="friction"):
            dgsgld.DESGHMC(0.1, friction=bad)
    with pytest.raises(ValueError, match="friction"):
        dgsgld.DIGingSGHMC(0.1, friction=lambda k: 1.0)
    with pytest.raises(ValueError, match="step_size"):
        dgsgld.DIGingSGHMC(-0.1)
    with pytest.raises(ValueError, match="estimator"):
        dgsgld.DESGHMC(0.1, estimator=object())
