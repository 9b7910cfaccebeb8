"""Monte Carlo moments of a sampler's chains against the exact law of ``theory.exact``."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import norm

import dgsgld
from dgsgld.theory import exact

#: The initial law of the exact-law tests: ``x⁽⁰⁾ ~ N(m₀, S₀)`` i.i.d. over chains and agents.
INIT_MEAN = np.array([1.0, -2.0])
INIT_COV = np.array([[0.5, 0.2], [0.2, 1.5]])


def exact_quadratic(problem):
    """``Quadratic`` of a ``_problems.linear_regression`` problem, in float64."""
    with jax.enable_x64(True):
        q = exact.quadratic_from_potential(problem.potential, np.zeros(problem.Z.shape[::2]))
    return exact.Quadratic(np.asarray(problem.hessians, np.float64),
                           np.asarray(q.shifts, np.float64))


def law_after(algorithm, problem, mixing, num_steps, init_std=1.0):
    """Exact per-agent ``(mean (N, d), cov (N, d, d))`` after ``num_steps`` from
    ``x⁽⁰⁾ ~ N(0, init_std² I)`` i.i.d. over agents, for the full-batch gradient."""
    d = problem.Z.shape[-1]
    with jax.enable_x64(True):
        out = exact.exact_moments(algorithm, exact_quadratic(problem),
                                  np.asarray(mixing, np.float64), np.zeros(d),
                                  init_std**2 * np.eye(d), num_steps)
        return np.asarray(out.mean[-1]), np.asarray(out.cov[-1])


def run_chains(algorithm, problem, mixing, num_steps, num_chains, key, init_std=1.0):
    """Final positions ``(C, N, d)`` (float64) of chains started from ``N(0, init_std² I)``."""
    N, d = problem.Z.shape[0], problem.Z.shape[-1]
    init = init_std * jax.random.normal(jax.random.key(11), (num_chains, N, d))
    trace = dgsgld.sample(algorithm, problem.potential, mixing, init, key, num_steps,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    return np.asarray(trace.state.position, np.float64)


def z_scores(x, mean, cov):
    """``(z_mean (..., d), z_cov (..., d (d + 1) / 2))``: the errors of the sample means and of
    the upper triangles of the sample covariances of chains ``x (C, ..., d)``, in standard
    errors of independent Gaussian chains with these moments.

    The mean of ``C`` chains has s.e. ``sqrt(S_aa / C)``; a sample covariance entry (divisor
    ``C − 1``) has s.e. ``sqrt((S_aa S_bb + S_ab²) / (C − 1))`` (Wishart).
    """
    num_chains = x.shape[0]
    centred = x - x.mean(0)
    s_hat = np.einsum("c...a,c...b->...ab", centred, centred) / (num_chains - 1)
    var = np.diagonal(cov, axis1=-2, axis2=-1)
    z_mean = (x.mean(0) - mean) / np.sqrt(var / num_chains)
    iu = np.triu_indices(cov.shape[-1])
    se = np.sqrt((var[..., :, None] * var[..., None, :] + cov**2) / (num_chains - 1))
    return z_mean, ((s_hat - cov) / se)[..., iu[0], iu[1]]


def bonferroni(num_comparisons, alpha=1e-3):
    """``Φ⁻¹(1 − α/(2m))``: all ``m`` z-scores of a test within it has family-wise false-alarm
    rate at most ``α`` (correlations between the comparisons only make it more conservative)."""
    return float(norm.ppf(1 - alpha / (2 * num_comparisons)))


def assert_exact_law(algorithm, problem, mixing, num_chains, num_steps, check_at, thin=1,
                     channel=None):
    """Chains of ``algorithm`` on a ``_problems.linear_regression`` problem (2 dimensions) from
    ``N(INIT_MEAN, INIT_COV)`` against the exact law at iterations ``check_at`` (multiples of
    ``thin``): the sample means and covariances of every agent (:func:`z_scores`) within the
    Bonferroni bound for ``α = 1e-3``.

    Full-batch gradients on a quadratic potential make each iterate exactly Gaussian, so the
    z-scores are exact up to the normal approximation of a covariance entry (skewness
    ``≈ √(8/C)``). The chains run in the caller's precision (float64 under ``jax.enable_x64``).
    ``channel``: the sampler's channel, for the exact law (``exact_moments(channel=)``).
    """
    num_agents, dim = problem.Z.shape[0], problem.Z.shape[-1]
    shape = (num_chains, num_agents, dim) if algorithm.decentralized else (num_chains, dim)
    draws = np.random.default_rng(1).normal(size=shape)
    init = jnp.asarray(INIT_MEAN + draws @ np.linalg.cholesky(INIT_COV).T)
    trace = dgsgld.sample(algorithm, problem.potential, mixing, init, jax.random.key(2), num_steps,
                          output=dgsgld.Output(thin=thin))
    with jax.enable_x64(True):
        law = exact.exact_moments(algorithm, exact_quadratic(problem), mixing, INIT_MEAN,
                                  INIT_COV, num_steps, channel=channel)
        mean, cov = np.asarray(law.mean), np.asarray(law.cov)
    positions = np.asarray(trace.positions, np.float64)
    z = np.concatenate([np.ravel(part) for k in check_at
                        for part in z_scores(positions[:, k // thin], mean[k], cov[k])])
    assert np.max(np.abs(z)) < bonferroni(z.size), (np.max(np.abs(z)), bonferroni(z.size))


def assert_mean_matches(x, mean, cov, z=4.5):
    """Agent means of ``x (C, N, d)`` within ``z`` standard errors (:func:`z_scores`).

    The chains are independent; ``|Z| > 4.5`` has probability 7e-6 per coordinate, so a
    few dozen coordinates fail by chance with probability < 1e-3.
    """
    z_mean = np.abs(z_scores(x, mean, cov)[0])
    assert np.all(z_mean <= z), z_mean.max()


def assert_cov_matches(x, cov, z=4.5):
    """Agent covariances of ``x (C, N, d)`` within ``z`` standard errors of a Gaussian sample
    covariance entry (:func:`z_scores`; the mean is the chains' own, so it does not enter)."""
    z_cov = np.abs(z_scores(x, x.mean(0), cov)[1])
    assert np.all(z_cov <= z), z_cov.max()


def count_traces():
    """``(log_likelihood, calls)``: the tests' likelihood that records each trace."""
    calls = []

    def ll(theta, datum):
        calls.append(1)
        z, y = datum
        return -0.5 * (z @ theta - y) ** 2

    return ll, calls


