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

import dgsgld
from dgsgld import theory as th
from tests._moments import assert_exact_law, bonferroni, z_scores
from tests._problems import linear_regression, permuted_rings

NUM_CHAINS = 4000
NUM_STEPS = 12
CHECK_AT = (1, 4, NUM_STEPS)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize(
    # Default run: DIGing-SGLD (the other samplers' exact laws are checked against their
    # engine steps in tests/theory/test_theory_exact.py, and centralized SGLD in test_samplers.py).
    "make", [dgsgld.DIGingSGLD, pytest.param(dgsgld.DESGLD, marks=pytest.mark.slow),
             pytest.param(dgsgld.EXTRASGLD, marks=pytest.mark.slow),
             pytest.param(dgsgld.SGLD, marks=pytest.mark.slow)]
)
def test_exact_moments_match_monte_carlo(make):
    prob = linear_regression(
        num_agents=4, local_size=4, dim=2, heterogeneous=True, dtype=np.float64
    )
    algo = make(0.08)
    schedule = permuted_rings(4, 3, seed=4) if algo.decentralized else None
    assert_exact_law(algo, prob, schedule, NUM_CHAINS, NUM_STEPS, CHECK_AT)


@pytest.mark.slow  # fast twin: test_exact_moments_match_monte_carlo (the per-agent law)
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
        dgsgld.DIGingSGLD(eta),
        prob.potential,
        schedule,
        init,
        jax.random.key(4),
        NUM_STEPS,
        output=dgsgld.Output(trace_fn=stats),
    )
    exact = th.exact_moments(
        dgsgld.DIGingSGLD(eta), q, schedule, np.zeros(2), np.eye(2), NUM_STEPS
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
        z.extend(z_scores(avg[:, k], np.asarray(exact.average_mean[k]),
                          np.asarray(exact.average_cov[k])))
    z = np.concatenate([np.ravel(part) for part in z])
    assert np.max(np.abs(z)) < bonferroni(z.size)
