"""Small Bayesian linear-regression problems with closed-form posteriors, for tests."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

import dgsgld


class Problem(NamedTuple):
    potential: dgsgld.Potential
    mean: np.ndarray  # (d,) posterior mean
    cov: np.ndarray  # (d, d) posterior covariance
    hessians: np.ndarray  # (N, d, d) Hessians of the f_i
    Z: np.ndarray  # (N, n, d)
    y: np.ndarray  # (N, n)


def log_likelihood(theta, datum):
    z, y = datum
    return -0.5 * (z @ theta - y) ** 2


def linear_regression(num_agents=5, local_size=4, dim=2, prior_precision=1.0, seed=0,
                      heterogeneous=False, batch_size=None, replace=False, dtype=np.float32):
    """Agents hold ``local_size`` data each; ``heterogeneous`` shifts each agent's responses
    so that the local posteriors disagree strongly (the setting where DE-SGLD is biased)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(num_agents, local_size, dim)) / np.sqrt(local_size)
    truth = rng.normal(size=dim)
    y = Z @ truth + 0.5 * rng.normal(size=(num_agents, local_size))
    if heterogeneous:
        y = y + 3.0 * rng.normal(size=(num_agents, 1))
    lam = prior_precision
    hessians = np.einsum("nki,nkj->nij", Z, Z) + lam / num_agents * np.eye(dim)
    A = hessians.sum(0)
    cov = np.linalg.inv(A)
    mean = cov @ np.einsum("nki,nk->i", Z, y)
    potential = dgsgld.Potential(
        log_likelihood,
        lambda t: -0.5 * lam * t @ t,
        (jnp.asarray(Z, dtype), jnp.asarray(y, dtype)),
        batch_size=batch_size,
        replace=replace,
    )
    return Problem(potential, mean, cov, hessians, Z, y)


def complete_graph(n):
    return np.full((n, n), 1.0 / n)


def ring(n, self_weight=1 / 3):
    w = np.zeros((n, n))
    side = (1 - self_weight) / 2
    for i in range(n):
        w[i, i] = self_weight
        w[i, (i + 1) % n] += side
        w[i, (i - 1) % n] += side
    return w


def permuted_rings(n, period, seed=0):
    """A time-varying stack: the ring relabelled by a random permutation at each step."""
    rng = np.random.default_rng(seed)
    base = ring(n)
    out = []
    for _ in range(period):
        p = np.eye(n)[rng.permutation(n)]
        out.append(p @ base @ p.T)
    return np.stack(out)


def pair_swaps():
    """Three snapshots, each averaging one pair: δ = 1 for B = 1, δ < 1 only from B = 2 on."""
    out = []
    for i, j in ((0, 1), (1, 2), (0, 2)):
        W = np.eye(3)
        W[np.ix_([i, j], [i, j])] = 0.5
        out.append(W)
    return np.stack(out)


def paper_size_potential(batch_size=None, seed=0):
    """The paper's shape: 20 agents of 5 data, d = 6 (random data)."""
    rng = np.random.default_rng(seed)
    data = (jnp.asarray(rng.normal(size=(20, 5, 6)), jnp.float32),
            jnp.asarray(rng.normal(size=(20, 5)), jnp.float32))
    return dgsgld.Potential(log_likelihood, lambda th: -0.05 * th @ th, data, batch_size)


class Hierarchical(NamedTuple):
    """A Gaussian hierarchical regression with agent-private intercepts (closed form).

    Agent ``i`` holds ``y_ij = a_i + b x_ij + ε``, ``ε ~ N(0, σ²)``; intercepts ``a_i | μ ~
    N(μ, τ²)``, private; the slope ``b ~ N(0, s²)`` and hyper-mean ``μ ~ N(0, s²)`` shared.
    Parameters ``{"intercept": (), "shared": (2,) = (b, μ)}``; agent ``i``'s vector
    ``z_i = (b, μ, a_i)`` (:func:`hierarchical_vector`)."""

    potential: dgsgld.Potential
    quadratic: object  # dgsgld.theory.exact.Quadratic with private=(False, False, True)


def hierarchical_vector(params):
    """``(..., N, 3)`` vectors ``(b, μ, a_i)`` of parameters with leaves ``(..., N, ...)``."""
    return np.concatenate([np.asarray(params["shared"], np.float64),
                           np.asarray(params["intercept"], np.float64)[..., None]], axis=-1)


def hierarchical_params(z):
    """Inverse of :func:`hierarchical_vector`."""
    z = jnp.asarray(z)
    return {"intercept": z[..., 2], "shared": z[..., :2]}


def hierarchical_gaussian(num_agents=4, local_size=5, sigma=0.5, tau=1.0, scale=2.0, seed=0,
                          batch_size=None, dtype=np.float32):
    from dgsgld.theory import exact

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_agents, local_size))
    a = 1.0 + tau * rng.normal(size=num_agents)
    y = a[:, None] + 0.7 * x + sigma * rng.normal(size=(num_agents, local_size))

    def ll(p, d):
        return -0.5 * (d[1] - p["intercept"] - p["shared"][0] * d[0]) ** 2 / sigma**2

    def log_prior(p):
        return -0.5 * p["shared"] @ p["shared"] / scale**2

    def agent_prior(p):
        return -0.5 * (p["intercept"] - p["shared"][1]) ** 2 / tau**2

    potential = dgsgld.Potential(ll, log_prior, (jnp.asarray(x, dtype), jnp.asarray(y, dtype)),
                                 batch_size, private=("intercept",), log_agent_prior=agent_prior)
    u = np.stack([x, np.zeros_like(x), np.ones_like(x)], axis=-1)       # (N, n, 3)
    v = np.array([0.0, -1.0, 1.0])
    A = (np.einsum("inj,ink->ijk", u, u) / sigma**2 + np.outer(v, v) / tau**2
         + np.diag([1.0, 1.0, 0.0]) / scale**2 / num_agents)
    b = np.einsum("inj,in->ij", u, y) / sigma**2
    return Hierarchical(potential, exact.Quadratic(A, b, (False, False, True)))
