"""Exact moments against Monte Carlo: many chains of ``dgsgld.sample`` on a quadratic potential.

Tolerances. The chains are independent and, on a quadratic potential with full batches, each
iterate is exactly Gaussian. So with ``C`` chains the sample mean of coordinate ``a`` has
standard deviation ``√(S_aa / C)`` and the sample covariance entry ``(a, b)`` (divisor ``C − 1``)
has variance ``(S_aa S_bb + S_ab²)/(C − 1)`` (Wishart), both under the exact law ``(m, S)``. Each
comparison is a z-score against these; with ``m`` comparisons in a test we require
``|z| ≤ Φ⁻¹(1 − α/(2m))`` for a family-wise false-alarm rate ``α = 1e-3`` (Bonferroni, which
the correlations between comparisons only make more conservative). At ``C = 4000`` the normal
approximation of a covariance entry is good (skewness ≈ √(8/C) ≈ 0.04).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

import dgsgld
from dgsgld import theory as th
from tests._problems import linear_regression, permuted_rings

NUM_CHAINS = 4000
NUM_STEPS = 12
CHECK_AT = (1, 4, NUM_STEPS)
ALPHA = 1e-3


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def z_scores(samples, mean, cov):
    """z of the sample mean ``(..., d)`` and of the sample covariance's upper triangle."""
    C = samples.shape[0]
    m_hat = samples.mean(axis=0)
    centred = samples - m_hat
    s_hat = np.einsum("c...a,c...b->...ab", centred, centred) / (C - 1)
    var = np.diagonal(cov, axis1=-2, axis2=-1)
    z_mean = (m_hat - mean) / np.sqrt(var / C)
    iu = np.triu_indices(cov.shape[-1])
    sd = np.sqrt((var[..., :, None] * var[..., None, :] + cov**2) / (C - 1))
    z_cov = ((s_hat - cov) / sd)[..., iu[0], iu[1]]
    return np.concatenate([z_mean.ravel(), z_cov.ravel()])


@pytest.mark.parametrize(
    # Default run: DIGing-SGLD (the other samplers' exact laws are checked against their
    # engine steps in tests/test_theory_exact.py, and centralized SGLD in test_samplers.py).
    "make", [dgsgld.diging_sgld, pytest.param(dgsgld.de_sgld, marks=pytest.mark.slow),
             pytest.param(dgsgld.extra_sgld, marks=pytest.mark.slow),
             pytest.param(dgsgld.sgld, marks=pytest.mark.slow)]
)
def test_exact_moments_match_monte_carlo(make):
    prob = linear_regression(
        num_agents=4, local_size=4, dim=2, heterogeneous=True, dtype=np.float64
    )
    q = th.quadratic_from_potential(prob.potential, jnp.zeros((4, 2)))
    algo = make(0.08)
    centralized = not algo.decentralized
    schedule = None if centralized else permuted_rings(4, 3, seed=4)
    m0, S0 = np.array([1.0, -2.0]), np.array([[0.5, 0.2], [0.2, 1.5]])
    shape = (NUM_CHAINS, 2) if centralized else (NUM_CHAINS, 4, 2)
    draws = np.random.default_rng(1).normal(size=shape)
    init = jnp.asarray(m0 + draws @ np.linalg.cholesky(S0).T)
    trace = dgsgld.sample(algo, prob.potential, schedule, init, jax.random.key(2), NUM_STEPS)
    exact = th.exact_moments(algo, q, schedule, m0, S0, NUM_STEPS)
    positions = np.asarray(trace.positions)
    z = np.concatenate(
        [
            z_scores(positions[:, k], np.asarray(exact.mean[k]), np.asarray(exact.cov[k]))
            for k in CHECK_AT
        ]
    )
    threshold = norm.ppf(1 - ALPHA / (2 * z.size))
    assert np.max(np.abs(z)) < threshold, (np.max(np.abs(z)), threshold)


def test_network_average_and_consensus_match_monte_carlo():
    # The summaries used by the bounds: E‖x̃‖², E‖ỹ‖², E‖y‖² and the law of x̄ (DIGing).
    prob = linear_regression(
        num_agents=4, local_size=4, dim=2, heterogeneous=True, dtype=np.float64
    )
    q = th.quadratic_from_potential(prob.potential, jnp.zeros((4, 2)))
    schedule = permuted_rings(4, 3, seed=4)
    eta = 0.08

    def stats(state):
        def spread(v):
            return jnp.sum((v - v.mean(0, keepdims=True)) ** 2)

        return (
            spread(state.position),
            spread(state.tracker),
            jnp.sum(state.tracker**2),
            state.position.mean(0),
        )

    init = jax.random.normal(jax.random.key(3), (NUM_CHAINS, 4, 2), jnp.float64)
    trace = dgsgld.sample(
        dgsgld.diging_sgld(eta),
        prob.potential,
        schedule,
        init,
        jax.random.key(4),
        NUM_STEPS,
        output=dgsgld.Output(trace_fn=stats),
    )
    exact = th.exact_moments(
        "diging", q, schedule, np.zeros(2), np.eye(2), NUM_STEPS, step_size=eta
    )
    x_sq, y_sq, y_norm, avg = (np.asarray(v) for v in trace.values)
    # Averages of squared norms: z-tests with the sample standard deviation over chains.
    z = []
    for sample, truth in (
        (x_sq, exact.consensus_sq),
        (y_sq, exact.aux_consensus_sq),
        (y_norm, exact.aux_sq),
    ):
        se = sample.std(axis=0, ddof=1) / np.sqrt(NUM_CHAINS)
        z.append(((sample.mean(axis=0) - np.asarray(truth)) / se)[1:])  # k = 0 has s.e. > 0 too
    for k in CHECK_AT:
        z.append(
            z_scores(avg[:, k], np.asarray(exact.average_mean[k]), np.asarray(exact.average_cov[k]))
        )
    z = np.concatenate(z)
    assert np.max(np.abs(z)) < norm.ppf(1 - ALPHA / (2 * z.size))
