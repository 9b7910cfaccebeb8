"""The warm-up's step criterion: a sampler's exact stationary bias on a Gaussian approximation.

Given the agents' quadratics ``f_i(y) = ½ yᵀA_i y − b_iᵀy`` in preconditioned coordinates
(``y = S⁻¹(x − c)``, ``M = S Sᵀ``: a sampler preconditioned by ``M`` in ``x`` is the plain
sampler in ``y``), :func:`stationary_errors` solves the sampler's exact stationary law
(:func:`dgsgld.theory.stationary_moments`: a discrete Lyapunov equation on the recursion of its
type) and compares the law of the draws *pooled over agents* (what a user keeps) with the target
``N(A⁻¹b, A⁻¹)``, ``A = Σ A_i``, whatever the direction (with private coordinates, every
agent's law of its ``(φ, θ_i)`` against the target's marginal of them):

* ``sd``: ``max |log r|`` over the square roots ``r`` of the generalized eigenvalues of (pooled
  covariance, target covariance): the log sd ratio of the worst linear functional;
* ``mean``: the Mahalanobis norm of the pooled mean's error: the standardized mean error of
  the worst linear functional;
* ``radius``: the per-step spectral radius of the recursion: the chains forget their start
  like ``radius^k``.

Each is the worst over the phases of a periodic schedule. Unlike a pilot's spread, this cannot
be fooled by chains that have not moved yet: it is the law the chains settle into.

:func:`choose_step` picks the step (and SGHMC's friction or D-ULA's consensus weight) that
minimizes the predicted squared error of the worst direction's sd and mean after
``num_draws`` steps (:func:`mse_objective`: stationary bias squared plus the Monte Carlo
variance ``1.5 τ / num_draws`` the relaxation time ``τ`` leaves), among the steps whose
stationary errors are within the tolerances. :func:`modal_errors` is the same on scalar modes
(every agent holding ``λ/N`` of a curvature ``λ``): cheap at any ``d``, for diagonal and
low-rank preconditioners and large models, where the dense law would be too large.

Mini-batch gradients: the quadratic's ``gradient_noise`` (the agents' gradient-error
covariances) enters the exact law (:mod:`dgsgld.theory.recursions`), and a scalar mode of
curvature ``λ`` carries the error variance ``κ λ`` (``noise_ratio=κ``, every agent ``κλ/N``):
the worst ratio of the gradient error's variance to the curvature over the directions. To
first order a step ``η`` then widens the stationary variance by ``1 + ηκ/2`` for SGLD, which
no smaller tolerance of the noise-free law would see.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..theory import exact
from ..theory.recursions import Quadratic

__all__ = ["Errors", "StepChoice", "choose_step", "modal_errors", "mse_objective",
           "stationary_errors", "tau_int", "worst"]


class Errors(NamedTuple):
    """Exact stationary errors of one setting (module docstring).

    Attributes:
        sd: worst ``|log sd ratio|`` (``inf``: unstable).
        mean: worst standardized mean error.
        radius: per-step spectral radius (``>= 1``: unstable).
    """

    sd: float
    mean: float
    radius: float


UNSTABLE = Errors(math.inf, math.inf, math.inf)


def _pooled(mean: np.ndarray, cov: np.ndarray):
    """Mean and covariance of the equal mixture of the agents' laws ``(N, d)``, ``(N, d, d)``."""
    m = mean.mean(0)
    second = np.mean(cov + np.einsum("ia,ib->iab", mean, mean), axis=0)
    return m, second - np.outer(m, m)


def stationary_errors(sampler, quadratic: Quadratic, mixing) -> Errors:
    """Exact stationary :class:`Errors` of ``sampler`` (constant parameters, no
    preconditioner, or one that ``quadratic`` already includes) on ``quadratic``; ``mixing``
    ``None`` for a centralized sampler."""
    try:
        st = exact.stationary_moments(sampler, quadratic,
                                      mixing if sampler.decentralized else None)
    except (np.linalg.LinAlgError, ValueError):
        return UNSTABLE
    if not st.spectral_radius < 1 or not np.all(np.isfinite(st.cov)):
        return Errors(math.inf, math.inf, float(st.spectral_radius))
    mu, sigma = quadratic.target()
    private = quadratic.private_coordinates is not None and sampler.decentralized
    if private:  # agent i's (φ, θ_i) against the target's marginal of them
        rows = [np.argmax(E, axis=1) for E in quadratic.embedding()]
        whiten = [np.linalg.inv(np.linalg.cholesky(sigma[np.ix_(r, r)])) for r in rows]
    else:
        whiten = np.linalg.inv(np.linalg.cholesky(sigma))
    sd = mean = 0.0
    for p in range(st.mean.shape[0]):
        if private:
            laws = [(st.mean[p][i], st.cov[p][i], mu[r], Li)
                    for i, (r, Li) in enumerate(zip(rows, whiten))]
        elif sampler.decentralized:
            laws = [(*_pooled(st.mean[p], st.cov[p]), mu, whiten)]
        else:
            laws = [(st.mean[p].reshape(-1), st.cov[p].reshape(mu.size, mu.size), mu, whiten)]
        for m, c, target_mean, Li in laws:
            rel = Li @ c @ Li.T
            ev = np.linalg.eigvalsh(0.5 * (rel + rel.T))
            if ev.min() <= 0:
                return UNSTABLE
            sd = max(sd, float(np.max(np.abs(0.5 * np.log(ev)))))
            mean = max(mean, float(np.linalg.norm(Li @ (m - target_mean))))
    return Errors(sd, mean, float(st.spectral_radius))


def modal_quadratic(lam: float, num_agents: int, noise_ratio: float = 0.0) -> Quadratic:
    """Every agent holds ``λ/N`` of a scalar curvature ``λ`` (target ``N(0, 1/λ)``) and, with
    ``noise_ratio=κ > 0``, a gradient error of variance ``κλ/N``."""
    noise = None if not noise_ratio else np.full((num_agents, 1, 1),
                                                 noise_ratio * lam / num_agents)
    return Quadratic(np.full((num_agents, 1, 1), lam / num_agents),
                     np.zeros((num_agents, 1)), None, noise)


def worst(*errors: Errors) -> Errors:
    """The elementwise worst of several :class:`Errors`."""
    return Errors(*(max(values) for values in zip(*errors)))


def modal_errors(sampler, curvatures, num_agents: int, mixing, noise_ratio: float = 0.0
                 ) -> Errors:
    """The worst :class:`Errors` of ``sampler`` over scalar modes of the given curvatures (each
    with gradient noise ``noise_ratio`` times its curvature, :func:`modal_quadratic`)."""
    out = Errors(0.0, 0.0, 0.0)
    for lam in curvatures:
        n = num_agents if sampler.decentralized else 1
        q = modal_quadratic(float(lam), n, noise_ratio)
        out = worst(out, stationary_errors(sampler, q, mixing))
    return out


def tau_int(radius: float) -> float:
    """Integrated autocorrelation time ``(1 + ρ) / (1 − ρ)`` of the slowest mode."""
    return (1.0 + radius) / (1.0 - radius) if radius < 1 else math.inf


def mse_objective(e: Errors, num_draws: float) -> float:
    """Predicted squared error, in posterior sds, of the worst direction's sd and mean:
    ``(e^sd − 1)² + mean² + 1.5 τ / num_draws`` (Monte Carlo variance ``1 / ESS`` of a mean
    and ``1 / (2 ESS)`` of an sd, ``ESS = num_draws / τ``)."""
    if not math.isfinite(e.sd) or not e.radius < 1:
        return math.inf
    return math.expm1(e.sd) ** 2 + e.mean**2 + 1.5 * tau_int(e.radius) / num_draws


class StepChoice(NamedTuple):
    """What :func:`choose_step` chose.

    Attributes:
        step_size: the step.
        parameter: SGHMC's friction or D-ULA's consensus weight (``None`` for the others).
        errors: its :class:`Errors`.
        table: ``(parameter, step, Errors)`` of every evaluated point.
    """

    step_size: float
    parameter: float | None
    errors: Errors
    table: list


def choose_step(errors_fn: Callable[[float, float | None], Errors], *, lo: float, hi: float,
                parameters=(None,), tol_sd: float = 0.1, tol_mean: float = 0.1,
                num_draws: float | None = None, grid: int = 24, refine: int = 4) -> StepChoice:
    """The step (and second parameter) of smallest :func:`mse_objective` among those whose
    errors are within ``log(1 + tol_sd)`` (sd) and ``tol_mean`` (mean); without
    ``num_draws`` the largest such step (over ``parameters``: the fastest contraction).

    The log grid ``[lo, hi]`` is walked upwards until a step fails after one passed (the bias
    grows with the step; failures below the first pass are the law's numerics at contractions
    within rounding of 1), the best point refined by bisection in ``log η``; a grid with no
    passing point moves down (twice, a factor 100 each).

    Raises:
        ValueError: when no step passes.
    """
    log_sd = math.log1p(tol_sd)

    def ok(e):
        return e.sd <= log_sd and e.mean <= tol_mean

    if num_draws is None:
        def score(e, eta):
            return -eta

        def rank(e, eta):
            return e.radius
    else:
        def score(e, eta):
            return mse_objective(e, num_draws)
        rank = score
    table: list = []
    best = None
    for par in parameters:
        def fn(eta, par=par):
            e = errors_fn(float(eta), par)
            table.append((par, float(eta), e))
            return e

        found, low, high = None, lo, hi
        for _ in range(3):
            found = _search(fn, low, high, grid, refine, ok, score)
            if found is not None:
                break
            high, low = low, low / 100.0
        if found is None:
            continue
        eta, e = found
        if best is None or rank(e, eta) < rank(best.errors, best.step_size):
            best = StepChoice(eta, par, e, table)
    if best is None:
        raise ValueError(f"no step in [{lo / 1e4:g}, {hi:g}] keeps the stationary errors below "
                         f"sd {tol_sd:g} and mean {tol_mean:g}.")
    return best._replace(table=table)


def _search(fn, lo, hi, grid, refine, ok, score):
    etas = np.geomspace(lo, hi, grid)
    pts = []
    for eta in etas:
        e = fn(eta)
        if not ok(e):
            if pts:
                break
            # Below the first passing step a failure is the law's numerics, not its bias: a
            # contraction within rounding of 1 (a nearly flat direction at a tiny step) makes
            # the stationary solve ill-posed.
            continue
        pts.append((float(eta), e))
    if not pts:
        return None
    i = int(np.argmin([score(e, eta) for eta, e in pts]))
    best = pts[i]
    ratio = float(etas[1] / etas[0])
    left = pts[i - 1][0] if i > 0 else best[0] / ratio
    right = pts[i + 1][0] if i + 1 < len(pts) else best[0] * ratio
    for _ in range(refine):
        moved = False
        for cand in (math.sqrt(left * best[0]), math.sqrt(best[0] * right)):
            e = fn(cand)
            if ok(e) and score(e, cand) < score(best[1], best[0]):
                left, right = (left, best[0]) if cand < best[0] else (best[0], right)
                best, moved = (cand, e), True
                break
        if not moved:
            left, right = math.sqrt(left * best[0]), math.sqrt(best[0] * right)
    return best
