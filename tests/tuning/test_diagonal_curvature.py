"""The warm-up's diagonal curvature estimates (``warmup(curvature=..., prior_floor=...)``).

Two known answers.

Logistic regression at the parameter that drew the labels (``y ~ Bernoulli(σ(xᵀθ))``): the
Hessian of ``f = −Σ log p(y_n | x_n, θ) + ‖θ‖² / 2`` is ``Σ p_n(1 − p_n) x_n x_nᵀ + I``,
whatever the labels. Its empirical Fisher diagonal ``Σ (y_n − p_n)² x_nj² + 1`` is unbiased
for the Hessian's diagonal there (``E (y − p)² = p(1 − p)``), with variance
``Σ x_nj⁴ [E (y − p)⁴ − p²(1 − p)²]``, ``E (y − p)⁴ = p(1 − p)⁴ + (1 − p)p⁴``. The Hutchinson
estimate ``mean_s z_s ⊙ H z_s`` (Rademacher ``z``) is unbiased too, with variance
``Σ_{k≠j} H_jk² / S`` for ``S`` probes. Both are checked within 4 standard errors per
coordinate (a false alarm below ``1e-4`` each over the 5 coordinates).

A linear-Gaussian regression whose features share a common factor, eight flat coordinates
(curvature about 1.2, most of it the prior ``N(0, I)``'s) and four stiff ones (about 800): the Hutchinson noise of a flat coordinate, ``√(Σ_{k≠j} H_jk² / S)``, is
many times its curvature, so its raw estimate is near zero or negative and ``1 / |estimate|``
would exceed its prior variance by orders of magnitude. With the prior floor (default) every
``M`` entry is at most the prior variance 1, so the pooled preconditioned Hessian
``S A S = T A T`` (``T = M^{1/2} ≤ 1``) has ``λmax(S A S) ≤ λmax(A)`` (``λmax(A) > 0``),
and the stiffness the warm-up reports is bounded by it.

The stiffness cap, on twelve coordinates of equal scale that share a common factor (their
correlation matrix's top eigenvalue, what a perfect diagonal ``M`` leaves, is about 11, the
others about 0.04): a capped step is the largest on the criterion's grid (refined to a few
per cent) whose stationary sd ratio on the scalar mode at the stiffest curvature is within
``1 + stiff_tol_sd``: the cap's own modal law must hold it there, and fail 10 % above it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld.samplers import DIGingSGLD
from dgsgld.tuning import adaptation, criterion
from dgsgld.tuning.adaptation import warmup

N = 4


def _logistic_ll(theta, datum):
    x, y = datum
    logit = x @ theta
    return y * logit - jnp.logaddexp(0.0, logit)


def _gaussian_ll(theta, datum):
    x, y = datum
    return -0.5 * (x @ theta - y) ** 2


def _prior(theta):
    return -0.5 * theta @ theta


def _logistic(n=150, scales=(0.1, 0.3, 1.0, 3.0, 10.0), seed=0):
    """``(potential, theta, X (N, n, d), p (N, n))``: labels drawn at ``theta``."""
    rng = np.random.default_rng(seed)
    d = len(scales)
    X = rng.normal(size=(N, n, d)) * np.asarray(scales)
    theta = rng.normal(size=d) * 0.3 / np.asarray(scales)
    p = 1.0 / (1.0 + np.exp(-X @ theta))
    y = (rng.uniform(size=p.shape) < p).astype(np.float64)
    pot = dgsgld.Potential(_logistic_ll, _prior, (jnp.asarray(X, jnp.float32),
                                                  jnp.asarray(y, jnp.float32)))
    return pot, theta, X, p


@pytest.mark.parametrize("curvature", ["fisher", "hutchinson"])
def test_diagonal_estimates_are_unbiased_for_the_hessian_diagonal(curvature):
    pot, theta, X, p = _logistic()
    probes = 64
    grads = adaptation._agent_grads(pot, jnp.zeros((1, N, len(theta))), 2)
    xs = jnp.broadcast_to(jnp.asarray(theta, jnp.float32), (1, N, len(theta)))
    diag, prior, _ = adaptation._diagonal_curvature(grads, xs, jax.random.key(1), probes,
                                                    curvature)
    pooled = np.asarray(diag, np.float64)[0].sum(0)
    w = p * (1 - p)
    H = np.einsum("in,ina,inb->ab", w, X, X) + np.eye(len(theta))
    # the prior's share of every agent, exact (an isotropic prior's Hessian is diagonal)
    np.testing.assert_allclose(np.asarray(prior, np.float64)[0], 1.0 / N, rtol=1e-5)
    if curvature == "fisher":
        fourth = p * (1 - p) ** 4 + (1 - p) * p**4
        var = np.einsum("in,ina->a", fourth - w**2, X**4)
    else:  # agents' probes independent: the pooled variance sums the agents'
        Hi = np.einsum("in,ina,inb->iab", w, X, X)
        off = Hi**2 * (1 - np.eye(len(theta)))
        var = off.sum(axis=(0, 2)) / probes
    err = np.abs(pooled - np.diag(H))
    # float32 sums of ~600 terms: relative rounding ~1e-5 on top of the Monte Carlo error
    assert np.all(err <= 4 * np.sqrt(var) + 1e-4 * np.diag(H)), (pooled, np.diag(H), var)


def _correlated_gaussian(n=25, scales=(0.05,) * 8 + (3.0,) * 4, seed=0, shared=0.9,
                         own=0.45):
    """The linear-Gaussian model with a common factor: ``(potential, A, A_i (N, d, d))``."""
    rng = np.random.default_rng(seed)
    d = len(scales)
    common = rng.normal(size=(N, n, 1))
    X = (shared * common + own * rng.normal(size=(N, n, d))) * np.asarray(scales)
    y = rng.normal(size=(N, n))
    pot = dgsgld.Potential(_gaussian_ll, _prior, (jnp.asarray(X, jnp.float32),
                                                  jnp.asarray(y, jnp.float32)))
    A_i = np.einsum("ina,inb->iab", X, X) + np.eye(d) / N
    return pot, A_i.sum(0), A_i


@pytest.mark.slow  # fast twin: test_stiffness_tolerance_sets_the_capped_step
def test_prior_floor_bounds_the_preconditioner_and_the_stiffness():
    pot, A, A_i = _correlated_gaussian()
    d = A.shape[0]
    out = {}
    for floor in (True, False):
        sampler, _, report = warmup(dgsgld.DIGingSGLD, pot, dgsgld.networks.ring(N),
                                    jnp.zeros((4, N, d)), jax.random.key(3), 120,
                                    preconditioner="diagonal", prior_floor=floor)
        out[floor] = np.asarray(sampler.preconditioner.diagonal, np.float64), report
    M, report = out[True]
    # the floor: no entry above the prior variance (float32 M)
    assert np.all(M <= 1.0 + 1e-6)
    # M = 1 / max(|estimate|, prior, 1e-4 max): each entry within 4 standard errors of the
    # Hessian's diagonal (the floor maps onto [1, ∞), which holds diag(A), so it moves the
    # estimate no farther from it). 32 points x 8 probes per agent, independent: S = 256.
    off = (A_i**2 * (1 - np.eye(d))).sum(axis=(0, 2))
    sd = np.sqrt(off / 256)
    rel = 1e-4 * np.max(np.diag(A) + 4 * sd)  # the relative floor, at most
    assert np.all(np.abs(1 / M - np.diag(A)) <= 4 * sd + rel + 1e-4 * np.diag(A))
    # this model exercises the failure the floor removes: the flat coordinates' raw
    # estimates are noise, and without the floor some M entry exceeds the prior variance
    # (by simulation of the estimate, in 98 % of keys; this key is one of them)
    assert np.max(out[False][0]) > 1.0
    # λmax(S A S) <= λmax(A) for M <= 1 (module docstring); power iterations in float32
    top = np.linalg.eigvalsh(A)[-1]
    assert report.stiffest <= top * (1 + 1e-3)


@pytest.mark.parametrize("tol", [pytest.param(0.5, marks=pytest.mark.slow), 1.5])  # 1.5: the default
def test_stiffness_tolerance_sets_the_capped_step(tol):
    pot, A, _ = _correlated_gaussian(scales=(1.0,) * 12, shared=1.0, own=0.2)
    _, _, report = warmup(dgsgld.DIGingSGLD, pot, dgsgld.networks.ring(N),
                          jnp.zeros((4, N, A.shape[0])), jax.random.key(3), 120,
                          preconditioner="diagonal", stiff_tol_sd=tol)
    assert report.capped and report.stiffest > 5
    # the last adaptation's step before the growth limit: the cap's
    step = report.windows[-1].criterion_step
    mixing = dgsgld.networks.ring(N)

    def sd(eta):
        return criterion.modal_errors(DIGingSGLD(eta), [report.stiffest], N, mixing).sd
    assert sd(step) <= np.log1p(tol) + 1e-9
    assert sd(1.1 * step) > np.log1p(tol)


@pytest.mark.parametrize(("change", "match"), [
    ({"curvature": "exact"}, "`curvature` must be one of"),
    ({"prior_floor": "yes"}, "`prior_floor` must be True or False"),
    ({"stiff_tol_sd": 0.0}, "`stiff_tol_sd` must be a positive number"),
])
def test_bad_curvature_options_are_named(change, match):
    pot, A, _ = _correlated_gaussian()
    with pytest.raises(ValueError, match=match):
        warmup(dgsgld.DIGingSGLD, pot, dgsgld.networks.ring(N), jnp.zeros((4, N, A.shape[0])),
               jax.random.key(3), 120, preconditioner="diagonal", **change)
