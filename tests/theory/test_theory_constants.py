"""Estimates of μ, L, σ², δ, B and the initial moments from a Potential and a schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

import dgsgld
from dgsgld import theory as th
from tests._problems import linear_regression, pair_swaps, permuted_rings, ring


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def test_mu_L_exact_for_quadratics():
    prob = linear_regression(num_agents=4, local_size=3, dim=3, dtype=np.float64)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))
    curv = th.estimate_mu_L(prob.potential, x)
    eig = np.linalg.eigvalsh(prob.hessians)
    assert curv.exact
    assert curv.mu == pytest.approx(eig.min(), rel=1e-10)
    assert curv.L == pytest.approx(eig.max(), rel=1e-10)


@pytest.mark.slow
def test_mu_L_estimate_for_logistic():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(3, 6, 2))

    def loglik(theta, datum):
        z, y = datum
        t = z @ theta
        return y * t - jax.nn.softplus(t)

    pot = dgsgld.Potential(loglik, lambda t: -0.5 * t @ t, (jnp.asarray(Z), jnp.ones((3, 6))))
    points = jnp.asarray(rng.normal(size=(5, 3, 2)))
    curv = th.estimate_mu_L(pot, points)
    assert not curv.exact
    # Closed form: ∇²f_i(x) = Σ_j s_j(1 − s_j) z_j z_jᵀ + I/N with s_j = sigmoid(z_jᵀx), N = 3.
    eigs = []
    for p in np.asarray(points):
        for i in range(3):
            sig = 1 / (1 + np.exp(-Z[i] @ p[i]))
            H = np.einsum("j,ja,jb->ab", sig * (1 - sig), Z[i], Z[i]) + np.eye(2) / 3
            eigs.append(np.linalg.eigvalsh(H))
    eigs = np.concatenate(eigs)
    # The estimate includes one extra probe point, so it brackets the direct values.
    assert curv.mu <= eigs.min() + 1e-10 and curv.L >= eigs.max() - 1e-10
    assert curv.mu >= 1 / 3 - 1e-12  # the prior's share λ/N is a floor


# Slow set (a Monte Carlo of the estimator per agent); default run: the exact curvature constants.
@pytest.mark.slow
@pytest.mark.parametrize("replace", [False, True])
def test_sigma2_matches_the_sampling_formula(replace):
    # ĝ = (n/b) Σ_{j∈S} g_j with per-datum gradients g_j. Without replacement
    # E‖ĝ − g‖² = n²(1 − b/n) S²/b with S² = Σ_coords Σ_j (g_j − ḡ)²/(n − 1); with replacement
    # n² σ²_pop / b with σ²_pop = Σ_coords Σ_j (g_j − ḡ)²/n.
    n, b = 6, 2
    prob = linear_regression(
        num_agents=3, local_size=n, dim=2, batch_size=b, replace=replace, dtype=np.float64
    )
    x = np.random.default_rng(2).normal(size=(2, 3, 2))
    est = th.estimate_sigma2(prob.potential, jnp.asarray(x), jax.random.key(0), num_draws=4000)
    exact = np.zeros((2, 3))
    for m in range(2):
        for i in range(3):
            g = (prob.Z[i] @ x[m, i] - prob.y[i])[:, None] * prob.Z[i]  # ∇(−log p(d_j | x))
            ss = np.sum((g - g.mean(0)) ** 2)
            exact[m, i] = n**2 * ss / n / b if replace else n**2 * (1 - b / n) * ss / (n - 1) / b
    z = (est.per_agent - exact) / est.stderr
    assert np.max(np.abs(z)) < norm.ppf(1 - 1e-3 / (2 * z.size))
    assert est.sigma2 == pytest.approx(est.per_agent.max())


def test_sigma2_is_zero_for_full_batches():
    prob = linear_regression(num_agents=3, local_size=4, dim=2, dtype=np.float64)
    est = th.estimate_sigma2(prob.potential, jnp.zeros((3, 2)), jax.random.key(0))
    assert est.sigma2 == 0.0


def test_choose_window():
    # Each snapshot averages one pair: δ = 1 at B = 1; B = 2 maximizes (1 − δ_B)²/B².
    stack = pair_swaps()
    B, delta = th.choose_window(stack)
    deltas = {b: dgsgld.networks.delta(stack, b).sup for b in range(1, 4)}
    assert deltas[1] == pytest.approx(1.0)
    scores = {b: (1 - d) ** 2 / b**2 for b, d in deltas.items() if d < 1}
    assert B == max(scores, key=scores.get) and delta == pytest.approx(deltas[B])
    assert th.choose_window(ring(5))[0] == 1
    with pytest.raises(ValueError, match="No window"):
        th.choose_window(np.eye(3)[None])


@pytest.mark.slow
def test_monte_carlo_bound_inputs_match_exact_ones():
    # 4000 chains: the relative s.e. of a mean squared norm with k ≥ 2 degrees of freedom is
    # ≤ √(2/k)/√4000 ≈ 1.6%, ≤ 0.8% after the square root; 4% is about 5 s.e.
    prob = linear_regression(
        num_agents=4, local_size=3, dim=2, heterogeneous=True, dtype=np.float64
    )
    q = th.quadratic_from_potential(prob.potential, jnp.zeros((4, 2)))
    schedule = permuted_rings(4, 3, seed=0)
    init = jnp.asarray(np.random.default_rng(3).normal(size=(4000, 4, 2)))
    eta = 0.05
    mc = th.bound_inputs(prob.potential, schedule, init, eta, jax.random.key(1), B=3)
    ex = th.exact_bound_inputs(q, schedule, np.zeros(2), np.eye(2), eta, B=3)
    assert (mc.mu, mc.L, mc.sigma2, mc.delta, mc.B) == pytest.approx(
        (ex.mu, ex.L, 0.0, ex.delta, 3)
    )
    np.testing.assert_allclose(mc.x_consensus, ex.x_consensus, rtol=0.04)
    np.testing.assert_allclose(mc.y_consensus, ex.y_consensus, rtol=0.04)
    assert mc.init_norm == pytest.approx(ex.init_norm, rel=0.04)
    assert mc.init_mean_error == pytest.approx(ex.init_mean_error, rel=0.04)
