"""The W2 bounds of DIGing-SGLD: §3.1 (eqs. 3.11–3.22), Lemma 3.6 and Corollary 3.7.

Notation follows the paper: each ``f_i`` is ``μ``-strongly convex and ``L``-smooth, ``N`` agents,
dimension ``d``, gradient-noise variance bound ``σ²`` (Assumption 3.1), joint spectral constant
``δ`` over windows of ``B`` mixing matrices (Assumption 3.2 (iii)), step size ``η``, free proof
parameters ``λ ∈ (δ^{1/B}, 1)``, ``α, β > 0``. The bound of Theorem 3.5,

    (1/N) Σ_i W2(Law(x_i⁽ᵏ⁾), π) ≤ E₁(k, η) + E₂(k, η, δ) + E₃(k, η, δ),

holds when conditions (3.16) hold; :func:`theorem35` returns the three terms and a ``valid`` mask.

Corrections (see ``shared/paper/ERRATA.md``; each was re-derived here). ``variant="corrected"``
(default) uses the re-derived form, ``variant="printed"`` the paper's text:

* ``η̄`` (3.23): printed ``3(1−δ²)/(μJ₁)`` puts λ(η̄)^B = √(2(1−δ²)) + δ > 1, so (3.16) fails
  there; corrected ``1.5(1−δ)²/(μJ₁)`` (Nedić–Olshevsky–Shi 2017, Thm 3.14), the supremum of
  the steps for which (3.24) gives λ < 1 (at η̄ itself λ = 1: the interval is open on the right).
* ``D`` (3.20) and ``D̄`` (3.25): (A.8) bounds ``2N E‖ȳ‖²`` by ``(4L²/N) E‖q‖² + (4/N)σ²``.
  For the gradient term, ``‖(1/N) Σ_i a_i‖² ≤ (1/N) Σ_i ‖a_i‖²`` gives ``4L² E‖q‖²`` (a factor
  ``N`` lost in print; not in ERRATA.md). For the noise term the same averaging inequality gives
  only ``4Nσ²``; ``4σ²`` holds when the agents' gradient noises ``ξ_i`` are uncorrelated
  (``E‖(1/N) Σ_i ξ_i‖² = (1/N²) Σ_i E‖ξ_i‖²``), an assumption Assumption 3.1 does not state.
  It holds for the toolkit's estimators, whose agents draw independent mini-batches (and for
  full batches, ``σ² = 0``). Corrected uses ``4L²`` and ``4σ²`` under that assumption; for
  correlated noises replace ``sigma2`` by ``N σ²``.
* ``E₂``'s last term (3.19): unrolling (A.11) gives ``√(c_η H_k(δ^{2/B}, 1−ημ(1−ηL/2)))
  √3 L δ⁻¹ ‖x⁽⁰⁾‖_{L2}/√N`` with ``c_η = η(η + (1+ηL)²/(μ(1−ηL/2)))`` and no extra ``δ^{1/B}``.
* Corollary 3.7: ``k*`` uses ``log(3(C̄₁+C̄₂)/ε)`` as derived in Appendix B (printed statement:
  ``4``); ``C̄₂`` carries the ``c_η`` factor above (evaluated at ``η̄``, where it is largest).
  ``C̄₄`` uses ``2/√(3μ)`` in both terms as in the statement (Appendix B's ``2/√μ`` is looser).
* ``ω̂₄`` keeps the factor ``B`` of (3.13) (A.7 drops it); (3.28)'s second ``ω̄̃₄`` is ``ω̄̂₄``.
* Lemma 3.18 as used needs ``η ≤ 2/(μ+L)`` (``(1/N)f`` is ``μ``-convex, ``L``-smooth), implied by
  (3.16)'s ``η ≤ 1/((1+α)L)``; ``E₁`` is unchanged.

Array namespace: Python floats and NumPy arrays are computed with NumPy in float64, which the
tiny steps of Lemma 3.6 (``η̄ ~ 1e-9`` on the paper's problem) need. JAX arrays are computed with
``jax.numpy`` (jittable, vmappable; use float64 via ``jax.enable_x64(True)`` for such
steps). Every function broadcasts its array arguments (``k``, ``eta``, ``lam``...) together.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import ArrayLike

__all__ = [
    "BoundInputs",
    "BoundTerms",
    "Conditions316",
    "Corollary37",
    "Gammas",
    "Lemma36",
    "Omegas",
    "conditions_316",
    "corollary37",
    "e1",
    "e2",
    "e3",
    "eta_bar",
    "eta_check",
    "failed_conditions",
    "gammas",
    "j1",
    "lambda_lower",
    "lemma36",
    "lemma36_lambda",
    "max_step_316",
    "omegas",
    "optimal_parameters",
    "theorem34",
    "theorem35",
    "tracker_bound",
]

VARIANTS = ("corrected", "printed")


class BoundInputs(NamedTuple):
    """Problem constants and initial moments entering §3.1.

    Attributes:
        mu: ``μ``, strong convexity of every ``f_i``.
        L: ``L``, smoothness of every ``f_i``.
        num_agents: ``N``.
        dim: ``d``.
        sigma2: ``σ²``, bound on ``E‖ξ_i⁽ᵏ⁾‖²`` (0 for full-batch gradients).
        delta: ``δ = sup_k σ_max(W_B⁽ᵏ⁾ − 11ᵀ/N) < 1``.
        B: window length of Assumption 3.2 (iii).
        init_mean_error: ``‖x̄⁽⁰⁾ − x*‖_{L2}``, distance of the initial network average to the
            minimizer of ``f``.
        init_norm: ``‖x⁽⁰⁾‖_{L2} = (E Σ_i ‖x_i⁽⁰⁾‖²)^{1/2}`` of the stacked ``Nd`` vector.
        x_consensus: ``(..., B)``: ``‖x̃⁽ᵗ⁾‖_{L2}`` for ``t = 0..B−1`` (consensus errors).
        y_consensus: ``(..., B)``: ``‖ỹ⁽ᵗ⁾‖_{L2}`` for ``t = 0..B−1``. Both depend on ``η``
            through the first ``B`` iterations; a leading axis broadcasts with ``eta``.
    """

    mu: ArrayLike
    L: ArrayLike
    num_agents: int
    dim: int
    sigma2: ArrayLike
    delta: ArrayLike
    B: int
    init_mean_error: ArrayLike
    init_norm: ArrayLike
    x_consensus: ArrayLike
    y_consensus: ArrayLike


class Omegas(NamedTuple):
    """``ω̃₁, ω̂₁, ω̃₃, ω̂₃, ω̃₄, ω̂₄`` of (3.11)–(3.13) (``ω₂ = 0``)."""

    tilde1: ArrayLike
    hat1: ArrayLike
    tilde3: ArrayLike
    hat3: ArrayLike
    tilde4: ArrayLike
    hat4: ArrayLike


class Gammas(NamedTuple):
    """``γ₁…γ₄`` of (3.14)–(3.15): the gains of the loop ``q → z → ỹ → x̃ → q``."""

    g1: ArrayLike
    g2: ArrayLike
    g3: ArrayLike
    g4: ArrayLike


class Conditions316(NamedTuple):
    """Which of the conditions of Theorem 3.4 hold (boolean arrays).

    Attributes:
        lambda_range: ``δ^{1/B} < λ < 1``; ``λ = 1`` is accepted as the limit ``λ → 1⁻``
            (see :func:`optimal_parameters`).
        contraction: ``√(1 − ημβ/(β+1)) ≤ λ``.
        step_size: ``η ≤ 1/((1+α)L)``.
        loop_gain: ``0 < γ₁γ₂γ₃γ₄ < 1``.
        holds: all of the above.
    """

    lambda_range: ArrayLike
    contraction: ArrayLike
    step_size: ArrayLike
    loop_gain: ArrayLike
    holds: ArrayLike


class BoundTerms(NamedTuple):
    """The terms of Theorems 3.4/3.5 at ``(k, η)``.

    Attributes:
        e1, e2, e3: (3.18), (3.19), (3.22); ``e1 + e2`` bounds ``W2(Law(x̄⁽ᵏ⁾), π)``.
        total: ``e1 + e2 + e3`` where ``valid``, ``inf`` elsewhere.
        D: (3.20), the bound on ``sup_k ‖y⁽ᵏ⁾‖_{L2}`` (``inf`` where the loop gain is ≥ 1).
        valid: conditions (3.16) hold.
    """

    e1: ArrayLike
    e2: ArrayLike
    e3: ArrayLike
    total: ArrayLike
    D: ArrayLike
    valid: ArrayLike


class Lemma36(NamedTuple):
    """Lemma 3.6's explicit choices: ``J₁, η̄, η̌, λ̲`` (3.23)–(3.29) and ``D̄`` (3.25)."""

    J1: ArrayLike
    eta_bar: ArrayLike
    eta_check: ArrayLike
    lambda_lower: ArrayLike
    D_bar: ArrayLike
    gain_bar: ArrayLike  # γ̄₁γ̄₂γ̄₃γ̄₄; D̄ is finite only when this is < 1


class Corollary37(NamedTuple):
    """Corollary 3.7: ``η* = min(η̄, η_noise(ε))`` and ``k*(ε)`` with the constants C̄₁…C̄₄."""

    eta_star: ArrayLike
    k_star: ArrayLike
    eta_noise: ArrayLike
    eta_bar: ArrayLike
    C1: ArrayLike
    C2: ArrayLike
    C3: ArrayLike
    C4: ArrayLike
    D_bar: ArrayLike


# ---------------------------------------------------------------- numerics


def _xp(*args):
    """``jax.numpy`` if any leaf is a JAX array (or tracer), else NumPy."""
    return jnp if any(isinstance(a, jax.Array) for a in jax.tree.leaves(args)) else np


def _f(xp, x):
    return xp.asarray(x, dtype=float) if xp is np else xp.asarray(x, dtype=jnp.result_type(float))


def _bcast(xp, *arrays, trailing: int = 0):
    """Float arrays broadcast explicitly to one shape (JAX's rank-promotion check stays quiet).

    With ``trailing = t`` the last ``t`` axes of the *last* array are kept out of the broadcast.
    """
    arrays = [_f(xp, a) for a in arrays]
    heads = [a.shape for a in arrays[:-1]] + [arrays[-1].shape[: arrays[-1].ndim - trailing]]
    shape = xp.broadcast_shapes(*heads)
    out = [xp.broadcast_to(a, shape) for a in arrays[:-1]]
    last = arrays[-1]
    tail = last.shape[last.ndim - trailing :]
    out.append(xp.broadcast_to(last, shape + tail))
    return out


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"`variant` must be one of {VARIANTS}; got {variant!r}.")


def _geom(xp, log_r, k):
    """``(1 − r^k)/(1 − r) = Σ_{t<k} r^t`` for ``r = exp(log_r) ≤ 1``, stable as ``r → 1``."""
    small = xp.abs(log_r) < 1e-300
    den = xp.where(small, 1.0, xp.expm1(log_r))
    return xp.where(small, k * xp.ones_like(log_r), xp.expm1(k * log_r) / den)


def _h_k(xp, log_a, log_b, k):
    """``H_k(a, b) = Σ_{i<k} a^{k−1−i} b^i`` (Appendix B; ``H_k(a, a) = k a^{k−1}``), from logs."""
    hi = xp.maximum(log_a, log_b)
    lo = xp.minimum(log_a, log_b)
    return xp.exp((k - 1) * hi) * _geom(xp, lo - hi, k)


def _one_minus_pow(xp, delta, p):
    """``1 − δ^p`` without cancellation."""
    return -xp.expm1(p * xp.log(delta))


def _s(xp, mu, L, alpha, beta):
    """``√(L(1+α)/(μα) + β)``, the constant of Lemma C.2."""
    return xp.sqrt(L * (1.0 + alpha) / (mu * alpha) + beta)


# ---------------------------------------------------------------- (3.11)–(3.16)


def omegas(inp: BoundInputs, eta, lam, alpha=1.0, beta=None) -> Omegas:
    """``ω̃ᵢ, ω̂ᵢ`` of (3.11)–(3.13) at step ``eta`` and ``λ = lam``.

    ``ω̂₄`` keeps the factor ``B`` of (3.13) ((A.7) drops it). ``beta`` defaults to ``2L/μ``.
    """
    xp = _xp(inp, eta, lam, alpha, beta)
    mu, L, d, N, B = _f(xp, inp.mu), _f(xp, inp.L), inp.dim, inp.num_agents, inp.B
    beta = 2.0 * L / mu if beta is None else beta
    xc, yc = _f(xp, inp.x_consensus), _f(xp, inp.y_consensus)
    if xc.ndim < 1 or yc.ndim < 1 or xc.shape[-1] != B or yc.shape[-1] != B:
        raise ValueError(
            f"`x_consensus`/`y_consensus` need a last axis of length B={B}; "
            f"got {xc.shape} and {yc.shape}."
        )
    eta, lam, alpha, beta, xc = _bcast(xp, eta, lam, alpha, beta, xc, trailing=1)
    eta, lam, alpha, beta, yc = _bcast(xp, eta, lam, alpha, beta, yc, trailing=1)
    xc = xp.broadcast_to(xc, yc.shape)
    sigma = xp.sqrt(_f(xp, inp.sigma2))
    lam_b = lam**B
    ratio = lam_b / (lam_b - inp.delta)
    # Σ_{t=1}^B λ^{1−t} a_{t−1}: weights λ^{−t}, t = 0..B−1, on the trailing axis.
    powers = xp.broadcast_to(-xp.arange(B, dtype=lam.dtype), yc.shape)
    weights = xp.broadcast_to(lam[..., None], yc.shape) ** powers
    s = _s(xp, mu, L, alpha, beta)
    return Omegas(
        tilde1=ratio * xp.sum(weights * yc, axis=-1),
        hat1=ratio * 2.0 * B * sigma * np.sqrt(N),
        tilde3=2.0 * np.sqrt(N) * _f(xp, inp.init_mean_error) * xp.ones_like(lam),
        hat3=np.sqrt(N) / lam * s / mu * (sigma + xp.sqrt(2.0 * d / eta)),
        tilde4=ratio * xp.sum(weights * xc, axis=-1),
        hat4=ratio * B * xp.sqrt(2.0 * eta * N * d),
    )


def gammas(inp: BoundInputs, eta, lam, alpha=1.0, beta=None) -> Gammas:
    """``γ₁…γ₄`` of (3.14)–(3.15); ``(1−λ^B)/(1−λ)`` is summed stably (→ ``B`` as ``λ → 1``)."""
    xp = _xp(inp, eta, lam, alpha, beta)
    mu, L, N, B = _f(xp, inp.mu), _f(xp, inp.L), inp.num_agents, inp.B
    beta = 2.0 * L / mu if beta is None else beta
    eta, lam, alpha, beta = _bcast(xp, eta, lam, alpha, beta)
    geom = _geom(xp, xp.log(lam), B)
    gap = lam**B - inp.delta
    return Gammas(
        g1=lam * geom / gap,
        g2=L * (1.0 + 1.0 / lam),
        g3=1.0 + np.sqrt(N) / lam * _s(xp, mu, L, alpha, beta),
        g4=eta * geom / gap,
    )


def conditions_316(inp: BoundInputs, eta, lam, alpha=1.0, beta=None) -> Conditions316:
    """Check conditions (3.16) of Theorem 3.4 (and ``λ ∈ (δ^{1/B}, 1)``) elementwise.

    ``lam = 1`` (and ``beta = 0``) stand for the limits ``λ → 1⁻`` (``β → 0⁺``): the conditions
    then hold for all ``λ`` close enough to 1 iff they hold at the limit with a strict loop gain.
    """
    xp = _xp(inp, eta, lam, alpha, beta)
    mu, L = _f(xp, inp.mu), _f(xp, inp.L)
    beta = 2.0 * L / mu if beta is None else beta
    eta, lam, alpha, beta = _bcast(xp, eta, lam, alpha, beta)
    lam_range = (lam**inp.B > inp.delta) & (lam <= 1.0)
    contraction = xp.sqrt(1.0 - eta * mu * beta / (beta + 1.0)) <= lam
    step = eta <= 1.0 / ((1.0 + alpha) * L)
    g = gammas(inp, eta, lam, alpha, beta)
    gain = g.g1 * g.g2 * g.g3 * g.g4
    loop = (gain > 0.0) & (gain < 1.0) & lam_range
    shape = xp.broadcast_shapes(lam_range.shape, contraction.shape, step.shape, loop.shape)
    parts = [xp.broadcast_to(c, shape) for c in (lam_range, contraction, step, loop)]
    return Conditions316(*parts, holds=parts[0] & parts[1] & parts[2] & parts[3])


def failed_conditions(conditions: Conditions316) -> list[str]:
    """Names of the conditions that fail anywhere in ``conditions`` (host-side, for messages)."""
    return [
        name
        for name in ("lambda_range", "contraction", "step_size", "loop_gain")
        if not bool(np.all(np.asarray(getattr(conditions, name))))
    ]


# ---------------------------------------------------------------- (3.18)–(3.22)


def tracker_bound(inp: BoundInputs, eta, lam, alpha=1.0, beta=None, *, variant: str = "corrected"):
    """``D`` of (3.20): ``sup_k E‖y⁽ᵏ⁾‖² ≤ D²`` (Lemma 3.8); ``inf`` when the loop gain is ≥ 1.

    ``variant="corrected"`` uses ``4L² (·)² + 4σ²`` for the ``2N E‖ȳ‖²`` part (``4σ²`` assumes the
    agents' gradient noises are uncorrelated, as with independent mini-batches), ``"printed"``
    the paper's ``(4L²/N)(·)² + (4/N)σ²`` (see the module docstring).
    """
    _check_variant(variant)
    xp = _xp(inp, eta, lam, alpha, beta)
    w = omegas(inp, eta, lam, alpha, beta)
    g = gammas(inp, eta, lam, alpha, beta)
    # ω's carry the leading axes of the consensus inputs as well: one common shape.
    *w, lam = _bcast(xp, *w, *g, lam)
    w, g = Omegas(*w[:6]), Gammas(*w[6:])
    gain = g.g1 * g.g2 * g.g3 * g.g4
    den = 1.0 - gain
    o1, o3, o4 = w.tilde1 + w.hat1, w.tilde3 + w.hat3, w.tilde4 + w.hat4
    t1 = (g.g1 * g.g2 * g.g3 * o4 + g.g1 * g.g2 * o3 + o1) / den
    t2 = (g.g3 * g.g4 * o1 + g.g3 * o4 + o3) / den
    L2, s2 = _f(xp, inp.L) ** 2, _f(xp, inp.sigma2)
    scale = 1.0 / inp.num_agents if variant == "printed" else 1.0
    d2 = 2.0 * t1**2 + 4.0 * L2 * scale * t2**2 + 4.0 * s2 * scale
    lam_ok = lam**inp.B > inp.delta
    return xp.where((gain > 0.0) & (gain < 1.0) & lam_ok, xp.sqrt(d2), xp.inf)


def e1(inp: BoundInputs, k, eta):
    """``E₁`` (3.18): Lemma 3.18 (Dalalyan–Karagulyan) for the ULA iterate ``x_k`` of (3.35)."""
    xp = _xp(inp, k, eta)
    mu, L, d, N = _f(xp, inp.mu), _f(xp, inp.L), inp.dim, inp.num_agents
    k, eta = _bcast(xp, k, eta)
    decay = xp.exp(k * xp.log1p(-mu * eta))
    start = _f(xp, inp.init_mean_error) + xp.sqrt(2.0 * d / (mu * N))
    return decay * start + 1.65 * L / mu * xp.sqrt(eta * d / N)


def e2(inp: BoundInputs, k, eta, D, *, variant: str = "corrected"):
    """``E₂`` (3.19): bound on ``‖x̄⁽ᵏ⁾ − x_k‖_{L2}`` (Lemma 3.17) given ``D`` of (3.20).

    The last (transient) term is the re-derived one unless ``variant="printed"``.
    """
    _check_variant(variant)
    xp = _xp(inp, k, eta, D)
    mu, L, d, N, B = _f(xp, inp.mu), _f(xp, inp.L), inp.dim, inp.num_agents, inp.B
    delta, s2 = _f(xp, inp.delta), _f(xp, inp.sigma2)
    k, eta, D = _bcast(xp, k, eta, D)
    h = 1.0 - eta * L / 2.0
    net = 3.0 * L**2 * D**2 * eta / (
        delta**2 * N * _one_minus_pow(xp, delta, 1.0 / B) ** 2
    ) + 6.0 * d * L**2 / (delta**2 * _one_minus_pow(xp, delta, 2.0 / B))
    steady = (
        xp.sqrt(eta) * xp.sqrt(eta / (mu * h) + (1.0 + eta * L) ** 2 / (mu * h) ** 2) * xp.sqrt(net)
    )
    noise = xp.sqrt(eta * s2 / (mu * h * N))
    log_a = 2.0 / B * xp.log(delta)  # δ^{2/B}
    log_b = xp.log1p(-eta * mu * h)  # 1 − ημ(1 − ηL/2)
    hk = _h_k(xp, log_a, log_b, k)
    x0 = _f(xp, inp.init_norm)
    if variant == "printed":
        transient = xp.sqrt(hk) * np.sqrt(3.0) * L / (delta * np.sqrt(N)) * delta ** (1.0 / B) * x0
    else:
        c_eta = eta * (eta + (1.0 + eta * L) ** 2 / (mu * h))
        transient = xp.sqrt(c_eta * hk) * np.sqrt(3.0) * L / (delta * np.sqrt(N)) * x0
    return steady + noise + transient


def e3(inp: BoundInputs, k, eta, D):
    """``E₃`` (3.22): bound on ``(1/N) Σ_i ‖x_i⁽ᵏ⁾ − x̄⁽ᵏ⁾‖_{L2}`` (Lemma 3.15)."""
    xp = _xp(inp, k, eta, D)
    d, N, B = inp.dim, inp.num_agents, inp.B
    delta = _f(xp, inp.delta)
    k, eta, D = _bcast(xp, k, eta, D)
    c = np.sqrt(3.0) / (delta * np.sqrt(N))
    return (
        c * xp.exp(k / B * xp.log(delta)) * _f(xp, inp.init_norm)
        + c * D * eta / _one_minus_pow(xp, delta, 1.0 / B)
        + xp.sqrt(6.0 * d * eta / _one_minus_pow(xp, delta, 2.0 / B)) / delta
    )


def _parameters(inp, eta, lam, beta):
    """Fill in Lemma 3.6's ``λ(η)`` and ``β = 2L/μ`` when not given."""
    if lam is None:
        lam = lemma36_lambda(inp, eta)
    if beta is None:
        beta = 2.0 * inp.L / inp.mu
    return lam, beta


def theorem35(
    inp: BoundInputs, k, eta, lam=None, alpha=1.0, beta=None, *, variant: str = "corrected"
) -> BoundTerms:
    """``E₁ + E₂ + E₃`` (Theorem 3.5) with its validity mask (conditions 3.16).

    Args:
        inp: constants and initial moments.
        k: iterations (any shape, broadcast with ``eta``), e.g. ``np.arange(101)``.
        eta: step sizes, e.g. ``np.geomspace(1e-10, 1e-6, 20)[:, None]`` for a grid.
        lam, alpha, beta: proof parameters; default Lemma 3.6's ``λ(η)``, ``α = 1``, ``β = 2L/μ``.
            ``λ`` only enters through ``D`` and (3.16); ``D`` decreases as ``λ → 1⁻``.
        variant: ``"corrected"`` or ``"printed"`` (module docstring).

    Returns:
        :class:`BoundTerms` broadcast over ``k`` and ``eta``.
    """
    xp = _xp(inp, k, eta, lam, alpha, beta)
    lam, beta = _parameters(inp, eta, lam, beta)
    D = tracker_bound(inp, eta, lam, alpha, beta, variant=variant)
    valid = conditions_316(inp, eta, lam, alpha, beta).holds
    k, eta, D, valid = _bcast(xp, k, eta, D, valid)
    t1, t2, t3 = e1(inp, k, eta), e2(inp, k, eta, D, variant=variant), e3(inp, k, eta, D)
    valid = valid > 0.5
    total = xp.where(valid, t1 + t2 + t3, xp.inf)
    return BoundTerms(t1, t2, t3, total, D, valid)


def theorem34(
    inp: BoundInputs, k, eta, lam=None, alpha=1.0, beta=None, *, variant: str = "corrected"
):
    """``E₁ + E₂`` (Theorem 3.4), the bound on ``W2(Law(x̄⁽ᵏ⁾), π)``; ``inf`` where (3.16) fails."""
    terms = theorem35(inp, k, eta, lam, alpha, beta, variant=variant)
    xp = _xp(terms)
    return xp.where(terms.valid, terms.e1 + terms.e2, xp.inf)


def optimal_parameters(inp: BoundInputs, eta):
    """``(λ, α, β)`` giving the smallest bound of Theorem 3.5 at step ``η``: ``(1, 1/(ηL) − 1, 0)``.

    ``E₁, E₂, E₃`` depend on ``(λ, α, β)`` only through ``D``, and ``D`` and ``γ₁γ₂γ₃γ₄``
    decrease as ``λ`` grows (each ``γᵢ``, ``ω̂ᵢ``, ``ω̃ᵢ`` does, for ``δ < λ^B ≤ 1``), as ``β``
    shrinks and as ``α`` grows; ``α`` is capped by ``η ≤ 1/((1+α)L)``. So the infimum over valid
    parameters is the limit ``λ → 1⁻, β → 0⁺, α = 1/(ηL) − 1`` (a bound, being an infimum of
    bounds). Lemma 3.6's ``λ(η) < 1`` matters for the optimization rate of DIGing, not here.
    """
    xp = _xp(inp, eta)
    eta = _f(xp, eta)
    # A hair below the cap, so that η ≤ 1/((1+α)L) survives rounding.
    return xp.ones_like(eta), (1.0 - 1e-9) / (eta * inp.L) - 1.0, xp.zeros_like(eta)


def max_step_316(inp: BoundInputs) -> float:
    """Supremum of the steps for which some ``(λ, α, β)`` satisfies (3.16).

    At the parameters of :func:`optimal_parameters` the loop gain is
    ``2LB²η(1 + √N √(κ/(1 − ηL)))/(1 − δ)²``, increasing in ``η``; this solves gain = 1 by
    bisection (NumPy float64).
    """
    kappa = inp.L / inp.mu

    def gain(eta):
        s = np.sqrt(kappa / (1.0 - eta * inp.L))
        return (
            2.0
            * inp.L
            * inp.B**2
            * eta
            * (1.0 + np.sqrt(inp.num_agents) * s)
            / (1.0 - inp.delta) ** 2
        )

    lo, hi = 0.0, 1.0 / inp.L  # α > 0 needs η < 1/L
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gain(mid) < 1.0 else (lo, mid)
    return lo


# ---------------------------------------------------------------- Lemma 3.6, Corollary 3.7


def j1(inp: BoundInputs):
    """``J₁ = 3κB²(1 + 4√N √κ)`` with ``κ = L/μ`` (3.23)."""
    kappa = inp.L / inp.mu
    return 3.0 * kappa * inp.B**2 * (1.0 + 4.0 * np.sqrt(inp.num_agents) * kappa**0.5)


def eta_bar(inp: BoundInputs, *, variant: str = "corrected"):
    """Largest step of Lemma 3.6: corrected ``1.5(1−δ)²/(μJ₁)``, printed ``3(1−δ²)/(μJ₁)``.

    The printed value violates (3.16) (ERRATA 1); the corrected one is a supremum (λ(η̄) = 1).
    """
    _check_variant(variant)
    delta = inp.delta
    if variant == "printed":
        return 3.0 * (1.0 - delta**2) / (inp.mu * j1(inp))
    return 1.5 * (1.0 - delta) ** 2 / (inp.mu * j1(inp))


def eta_check(inp: BoundInputs):
    """``η̌`` of Lemma C.4, where the two branches of (3.24) meet and ``λ(η)`` is smallest."""
    J, delta = j1(inp), inp.delta
    root = (J**2 + (1.0 - delta**2) * J) ** 0.5
    return 1.5 * (root - delta * J) ** 2 / (inp.mu * J * (J + 1.0) ** 2)


def lambda_lower(inp: BoundInputs):
    """``λ̲ = ((√(J₁² + (1−δ²)J₁) + δ)/(J₁ + 1))^{1/B}`` (3.29), the minimum of ``λ(η)``."""
    J, delta = j1(inp), inp.delta
    return (((J**2 + (1.0 - delta**2) * J) ** 0.5 + delta) / (J + 1.0)) ** (1.0 / inp.B)


def lemma36_lambda(inp: BoundInputs, eta):
    """``λ(η)`` of (3.24): ``(1 − ημ/1.5)^{1/(2B)}`` up to ``η̌``, then
    ``(√(ημJ₁/1.5) + δ)^{1/B}``."""
    xp = _xp(inp, eta)
    eta = _f(xp, eta)
    mu, B = inp.mu, inp.B
    first = xp.exp(xp.log1p(-eta * mu / 1.5) / (2.0 * B))
    second = (xp.sqrt(eta * mu * j1(inp) / 1.5) + inp.delta) ** (1.0 / B)
    return xp.where(eta <= eta_check(inp), first, second)


def lemma36(inp: BoundInputs, *, variant: str = "corrected") -> Lemma36:
    """Lemma 3.6: ``J₁, η̄, η̌, λ̲`` and ``D̄ ≥ D√η`` for ``η ≤ η̄`` (with ``α = 1, β = 2L/μ``).

    ``D̄ = D(η̄, λ̲)·√η̄`` evaluates every term at ``λ̲`` and ``η̄`` together, as (3.25)–(3.30) do;
    it is ``inf`` when ``γ̄₁γ̄₂γ̄₃γ̄₄ ≥ 1`` (ERRATA 2: happens with the printed ``η̄``).
    """
    eb = eta_bar(inp, variant=variant)
    lam = lambda_lower(inp)
    beta = 2.0 * inp.L / inp.mu
    g = gammas(inp, eb, lam, 1.0, beta)
    D = tracker_bound(inp, eb, lam, 1.0, beta, variant=variant)
    xp = _xp(inp)
    return Lemma36(
        J1=j1(inp),
        eta_bar=eb,
        eta_check=eta_check(inp),
        lambda_lower=lam,
        D_bar=D * xp.sqrt(eb),
        gain_bar=g.g1 * g.g2 * g.g3 * g.g4,
    )


def corollary37(inp: BoundInputs, epsilon, *, variant: str = "corrected") -> Corollary37:
    """Corollary 3.7: step ``η*(ε)`` and iterations ``k*(ε)`` for an average W2 error ``≤ ε``.

    Corrected: ``log(3(C̄₁+C̄₂)/ε)`` and the re-derived ``C̄₂`` (module docstring); printed: the
    statement's ``log(4(C̄₁+C̄₂)/ε)`` and ``C̄₂``. Both use the variant's ``η̄`` and ``D̄``.
    """
    _check_variant(variant)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _corollary37(inp, epsilon, variant)


def _corollary37(inp: BoundInputs, epsilon, variant: str) -> Corollary37:
    xp = _xp(inp, epsilon)
    epsilon = _f(xp, epsilon)
    mu, L, d, N, B = inp.mu, inp.L, inp.dim, inp.num_agents, inp.B
    delta, sigma = inp.delta, inp.sigma2**0.5
    lem = lemma36(inp, variant=variant)
    eb, Db = lem.eta_bar, lem.D_bar
    gap1 = _one_minus_pow(xp, _f(xp, delta), 1.0 / B)
    gap2 = _one_minus_pow(xp, _f(xp, delta), 2.0 / B)
    x0 = inp.init_norm
    net_noise = (6.0 * d * L**2 / (delta**2 * gap2)) ** 0.5
    net_drift = (3.0 * L**2 / (delta**2 * N * gap1**2)) ** 0.5
    C1 = inp.init_mean_error + (2.0 * d / (mu * N)) ** 0.5
    margin = 1.0 - eb * mu / 1.5 - delta ** (2.0 / B)
    if variant == "printed":
        first = 1.0 / xp.sqrt(margin) * 3**0.5 * L / (delta * N**0.5) * delta ** (1.0 / B) * x0
    else:
        # c_η ≤ η(η + 3/μ) for ηL ≤ 1/2, and c_η / (b₂ − δ^{2/B}) grows with η ≤ η̄.
        first = xp.sqrt(eb * (eb + 3.0 / mu) / margin) * 3**0.5 * L / (delta * N**0.5) * x0
    C2 = first + 3**0.5 / (delta * N**0.5) * x0
    C3 = (
        1.65 * L / mu * (d / N) ** 0.5
        + (6.0 * d) ** 0.5 / (delta * xp.sqrt(gap2))
        + 2.0 * sigma / (3.0 * mu * N) ** 0.5
        + 2.0 / mu * net_noise
        + 3**0.5 * Db / (delta * N**0.5 * gap1)
        + 2.0 / mu * net_drift * Db
    )
    C4 = 2.0 / (3.0 * mu) ** 0.5 * (net_noise + net_drift * Db)
    eta_noise = xp.minimum(epsilon**2 / (9.0 * C3**2), epsilon / (3.0 * C4))
    eta_star = xp.minimum(eb, eta_noise)
    factor = 4.0 if variant == "printed" else 3.0
    k_star = 3.0 / (mu * eta_star) * xp.log(factor * (C1 + C2) / epsilon)
    return Corollary37(eta_star, k_star, eta_noise, eb, C1, C2, C3, C4, Db)
