"""D-ULA (Parayil et al. 2020): exact law with decaying weights, the network average's
stationary law (the posterior), a retrace guard and input validation."""

import jax
import numpy as np
import optax
import pytest
from _moments import (
    assert_cov_matches,
    assert_mean_matches,
    count_traces,
    exact_quadratic,
    law_after,
    run_chains,
)
from _problems import complete_graph, linear_regression, permuted_rings, ring

import dgsgld
from dgsgld.samplers import PolynomialDecay
from dgsgld.theory import exact


def test_decaying_weights_law_matches_theory_exact(key):
    """α_k = 0.01/(k+1)^0.3, β_k = 0.9/(k+1)^0.1 on a time-varying ring, full batch: after 40
    steps the per-agent mean and covariance of 4000 chains equal theory.exact's within 4.5
    Monte Carlo standard errors."""
    pb = linear_regression(heterogeneous=True)
    alg = dgsgld.DULA(PolynomialDecay(0.01, 0.3), consensus=PolynomialDecay(0.9, 0.1))
    stack = permuted_rings(5, 6)
    x = run_chains(alg, pb, stack, 40, 4000, key)
    mean, cov = law_after(alg, pb, stack, 40)
    assert_mean_matches(x, mean, cov)
    assert_cov_matches(x, cov)


@pytest.mark.parametrize("graph", [complete_graph, ring])
def test_network_average_targets_the_posterior(graph):
    """β = 1, constant α: the network average runs centralized ULA on f with step α (drift
    α Σ_i N∇f_i / N, noise √(2Nα) w̄ with w̄ ~ N(0, I/N)), so its exact stationary law is the
    posterior up to O(α): centralized ULA's covariance (A(I − αA/2))⁻¹ is off by ≈ αλ_max/2
    relatively, and the agents' O(Nα) disagreement adds a term of the same order; we allow
    αλ_max(A) for the covariance's trace and the mean. With noise √(2α) instead (the
    drift N∇f_i without the √N) the average would sample exp(−N f): covariance ≈ Σ̂/N."""
    pb = linear_regression()
    q = exact_quadratic(pb)
    lam = np.linalg.eigvalsh(q.hessians.sum(0)).max()
    for alpha in (1e-3, 1e-4):
        st = exact.stationary_moments(dgsgld.DULA(alpha, 1.0), q, graph(5))
        ratio = np.trace(st.average_cov[0]) / np.trace(pb.cov)
        assert abs(ratio - 1) < alpha * lam
        scale = np.sqrt(np.trace(pb.cov))
        assert np.linalg.norm(st.average_mean[0] - pb.mean) < alpha * lam * scale


@pytest.mark.slow  # default run: the decaying schedules' exact law above
def test_optax_schedule_equals_polynomial_decay(key):
    pb = linear_regression(batch_size=2)
    init = jax.random.normal(key, (3, 5, 2))
    a = dgsgld.sample(dgsgld.DULA(0.01, consensus=0.5), pb.potential, ring(5), init, key, 8)
    b = dgsgld.sample(dgsgld.DULA(optax.constant_schedule(0.01),
                                   consensus=PolynomialDecay(0.5, 0.0)), pb.potential, ring(5),
                      init, key, 8)
    np.testing.assert_allclose(a.positions, b.positions, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # fast twin:
# tests/samplers/test_samplers.py::test_compiled_once_for_new_step_size_and_init and
# tests/samplers/test_sghmc.py::test_compiled_once_for_new_step_size_and_friction (a sampler's
# constants are array leaves)
def test_compiled_once_for_new_schedule_values(key):
    ll, calls = count_traces()
    pb = linear_regression()
    pot = dgsgld.Potential(ll, None, pb.potential.data)
    init = jax.random.normal(key, (3, 5, 2))
    dgsgld.sample(dgsgld.DULA(PolynomialDecay(0.01, 0.3), PolynomialDecay(0.9, 0.1)), pot,
                  ring(5), init, key, 5)
    n = len(calls)
    dgsgld.sample(dgsgld.DULA(PolynomialDecay(0.02, 0.4), PolynomialDecay(0.8, 0.2)), pot,
                  ring(5), init + 1, jax.random.key(3), 5)
    assert len(calls) - n <= 1  # only the pre-compile shape check traces again


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="consensus"):
        dgsgld.DULA(0.01, consensus=1.5)
    with pytest.raises(ValueError, match="consensus"):
        dgsgld.DULA(0.01, consensus=0.0)
    with pytest.raises(ValueError, match="exponent"):
        PolynomialDecay(0.1, -1.0)
    with pytest.raises(ValueError, match="initial"):
        PolynomialDecay(-0.1, 0.5)
