"""The exact laws with gradient noise (``Quadratic.gradient_noise``) against mini-batch chains.

The model: a Gaussian location model, agent ``i`` holding ``n`` data ``y_ij`` with
``−log p(y | x) = ½‖x − y‖²`` and no prior, so ``f_i(x) = ½ n‖x‖² − (Σ_j y_ij)ᵀx``. A
mini-batch ``B`` of ``b`` of them drawn without replacement gives ``(n/b) Σ_{j∈B} (x − y_ij)
= n x − n ȳ_B``: the gradient's error ``−n (ȳ_B − ȳ_i)`` does not depend on ``x``, is fresh at
every draw, and has the covariance of a simple random sample's mean times ``n²``,

    V_i = n² Σ_i (n − b) / (b (n − 1)),     Σ_i = (1/n) Σ_j (y_ij − ȳ_i)(y_ij − ȳ_i)ᵀ,

so the recursion with these columns is the chains' exact law for the first two moments (the
iterates are no longer Gaussian: the error is a discrete law).

Tolerances: ``tests._moments.z_scores`` against the exact law with the Bonferroni bound for
``α = 1e-3``; its standard errors are those of Gaussian chains. The chains' law is a Gaussian
plus the sum of a few bounded discrete errors: lighter-tailed than a Gaussian of the same
covariance (negative excess kurtosis), so a sample covariance varies less and the bound is
conservative. The step is set so that the gradient noise adds 20-40 % to the per-step variance
``2η``: the law without it is tens of standard errors away (asserted, so the test can fail).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import theory as th
from tests._moments import bonferroni, z_scores
from tests._problems import permuted_rings

N, n, b, d = 4, 5, 2, 2
NUM_CHAINS, NUM_STEPS = 4000, 12
CHECK_AT = (1, 4, NUM_STEPS)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _location(batch_size=b):
    y = np.random.default_rng(0).normal(size=(N, n, d)) * np.array([1.0, 2.0])
    pot = dgsgld.Potential(lambda x, datum: -0.5 * jnp.sum((x - datum) ** 2), None,
                           jnp.asarray(y), batch_size=batch_size)
    centred = y - y.mean(1, keepdims=True)
    sigma = np.einsum("ija,ijb->iab", centred, centred) / n
    V = n**2 * sigma * (n - b) / (b * (n - 1))
    q = th.Quadratic(np.broadcast_to(n * np.eye(d), (N, d, d)).copy(), y.sum(1), None, V)
    return pot, q


def _z(algorithm, mixing, q, draws):
    init_mean, init_cov = np.array([1.0, -2.0]), np.diag([0.5, 1.5])
    law = th.exact_moments(algorithm, q, mixing, init_mean, init_cov, NUM_STEPS)
    mean, cov = np.asarray(law.mean), np.asarray(law.cov)
    return np.concatenate([np.ravel(part) for k in CHECK_AT
                           for part in z_scores(draws[:, k], mean[k], cov[k])])


def _draws(algorithm, pot, mixing):
    shape = (NUM_CHAINS, N, d) if algorithm.decentralized else (NUM_CHAINS, d)
    init = np.array([1.0, -2.0]) + np.random.default_rng(1).normal(size=shape) * np.sqrt(
        [0.5, 1.5])
    trace = dgsgld.sample(algorithm, pot, mixing, jnp.asarray(init), jax.random.key(2),
                          NUM_STEPS)
    return np.asarray(trace.positions, np.float64)


SAMPLERS = {
    "DIGing-SGLD": (lambda: dgsgld.DIGingSGLD(0.08), "rings"),
    "DE-SGLD": (lambda: dgsgld.DESGLD(0.08), "rings"),
    "EXTRA-SGLD": (lambda: dgsgld.EXTRASGLD(0.08), "static"),
    "SGLD": (lambda: dgsgld.SGLD(0.02), None),
    "D-ULA": (lambda: dgsgld.DULA(0.02, 0.5), "rings"),
    "DE-SGHMC": (lambda: dgsgld.DESGHMC(0.2, 2.0), "rings"),
    "DIGing-SGHMC": (lambda: dgsgld.DIGingSGHMC(0.2, 2.0), "rings"),
    "Push-DIGing-SGLD": (lambda: dgsgld.PushDIGingSGLD(0.08), "directed"),
    "Push-Sum-SGLD": (lambda: dgsgld.PushSumSGLD(0.08), "directed"),
}


def _mixing(kind):
    if kind == "rings":
        return permuted_rings(N, 3, seed=4)
    if kind == "static":
        return dgsgld.networks.ring(N)
    if kind == "directed":
        return dgsgld.networks.directed_one_peer_exponential(N)
    return None


@pytest.mark.parametrize("name", [
    "DIGing-SGLD", "DE-SGLD", "Push-DIGing-SGLD",
    *(pytest.param(s, marks=pytest.mark.slow) for s in
      ("EXTRA-SGLD", "SGLD", "D-ULA", "DE-SGHMC", "DIGing-SGHMC", "Push-Sum-SGLD"))])
def test_mini_batch_chains_follow_the_law_with_gradient_noise(name):
    make, kind = SAMPLERS[name]
    algorithm, mixing = make(), _mixing(kind)
    pot, q = _location()
    draws = _draws(algorithm, pot, mixing)
    z = _z(algorithm, mixing, q, draws)
    bound = bonferroni(z.size)
    assert np.max(np.abs(z)) < bound, (np.max(np.abs(z)), bound)
    # Without the noise's columns the same chains are far outside the bound.
    z0 = _z(algorithm, mixing, q._replace(gradient_noise=None), draws)
    assert np.max(np.abs(z0)) > 3 * bound, np.max(np.abs(z0))


def test_stationary_law_adds_the_gradient_noise_of_sgld_in_closed_form():
    # Scalar SGLD x⁺ = x − η(a x − c + ξ) + √(2η) w: Var = (2η + η² v) / (1 − (1 − ηa)²).
    a, c, v, eta = 2.0, 1.0, 3.0, 0.1
    q = th.Quadratic(np.array([[[a]]]), np.array([[c]]), None, np.array([[[v]]]))
    st = th.stationary_moments(dgsgld.SGLD(eta), q, None)
    np.testing.assert_allclose(st.cov.ravel(), (2 * eta + eta**2 * v) / (1 - (1 - eta * a)**2),
                               rtol=1e-12)
    # DIGing-SGLD on the complete graph: the network average is SGLD at η/N on Σ_i f_i with
    # the agents' errors averaged, Var = (2η' + η'² Σ v_i) / (1 − (1 − η' a)²), η' = η/N.
    W = np.full((3, 3), 1 / 3)
    q3 = th.Quadratic(np.full((3, 1, 1), a / 3), np.full((3, 1), c / 3), None,
                      np.full((3, 1, 1), v / 3))
    st = th.stationary_moments(dgsgld.DIGingSGLD(eta), q3, W)
    e = eta / 3
    np.testing.assert_allclose(st.average_cov.ravel(), (2 * e + e**2 * v) / (1 - (1 - e * a)**2),
                               rtol=1e-10)


def test_gradient_noise_is_refused_where_the_law_does_not_take_it():
    _, q = _location()
    with pytest.raises(ValueError, match="gradient noise"):
        th.exact_moments(dgsgld.DIGingSGLD(0.1), q, permuted_rings(N, 3, seed=4), np.zeros(d),
                         np.eye(d), 3, channel=dgsgld.communication.Channel())
    with pytest.raises(ValueError, match=r"gradient_noise.*\(N, d, d\)"):
        th.stationary_moments(dgsgld.DESGLD(0.1), q._replace(gradient_noise=np.eye(d)),
                              dgsgld.networks.ring(N))


def test_the_covariance_estimate_matches_the_mini_batch_formula():
    # K = 4000 draws: an entry's relative standard error is about √(2/K) ≈ 2.2 %
    # (Wishart); a 10 % tolerance on the ratio of traces and on every entry's error
    # in units of √(V_aa V_bb) sits beyond four of them.
    pot, q = _location()
    V = th.estimate_gradient_covariance(pot, jnp.zeros((N, d)), jax.random.key(0),
                                        num_draws=4000)
    exact = q.gradient_noise
    scale = np.sqrt(np.einsum("iaa,ibb->iab", exact, exact))
    assert np.max(np.abs(V - exact) / scale) < 0.1
    diag = th.estimate_gradient_covariance(pot, jnp.zeros((N, d)), jax.random.key(0),
                                           num_draws=4000, diagonal=True)
    np.testing.assert_allclose(diag, np.diagonal(V, axis1=1, axis2=2), rtol=1e-12)
    full = dgsgld.Potential(pot.log_likelihood, None, pot.data)
    assert not np.any(th.estimate_gradient_covariance(full, jnp.zeros((N, d)),
                                                      jax.random.key(0)))
    with pytest.raises(ValueError, match="num_draws"):
        th.estimate_gradient_covariance(pot, jnp.zeros((N, d)), jax.random.key(0), num_draws=1)
    # Along directions D (d, k): the same draws projected, Dᵀ V_i D, to rounding.
    D = np.random.default_rng(0).normal(size=(d, 2))
    along = th.estimate_gradient_covariance(pot, jnp.zeros((N, d)), jax.random.key(0),
                                            num_draws=4000, directions=D)
    np.testing.assert_allclose(along, np.einsum("ak,iab,bl->ikl", D, V, D), rtol=1e-9)
    assert th.estimate_gradient_covariance(full, jnp.zeros((N, d)), jax.random.key(0),
                                           directions=D).shape == (N, 2, 2)
    with pytest.raises(ValueError, match="directions"):
        th.estimate_gradient_covariance(pot, jnp.zeros((N, d)), jax.random.key(0),
                                        directions=D[:-1])
