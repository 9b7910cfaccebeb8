"""Exact moments of the samplers on quadratic potentials with full-batch gradients.

When every ``f_i(x) = ½ xᵀA_i x − b_iᵀx`` and gradients are exact, each sampler is a linear
Gaussian recursion in its stacked state ``s`` (:mod:`dgsgld.theory.recursions`, one per sampler
class, dispatched on the sampler's type),

    s⁺ = M⁽ᵏ⁾ s + c⁽ᵏ⁾ + G⁽ᵏ⁾ w,      w ~ N(0, I),

so a Gaussian initialization stays Gaussian and its mean and covariance propagate exactly:
``m⁺ = M m + c``, ``S⁺ = M S Mᵀ + G Gᵀ``. A sampler's constant preconditioner (its
``preconditioner=``, written ``P`` here to keep ``M`` for the recursion) enters its recursion:
``η ∇F → η P ∇F``, ``w → S w`` with ``S Sᵀ = P``. ``𝒲 = W⁽ᵏ⁾ ⊗ I_d`` below.

Random link drops (``Channel(probability=p, per_link=True)``, ``channel=`` of
:func:`exact_moments`): every undirected link ``l = {i, j}`` of the snapshot is up with
probability ``p``, independently at every step and of the state, its weight moved to the
diagonals when down, so ``W' = W̄ + Σ_l ζ_l E_l`` with ``W̄ = E[W']``, ``ζ_l = ξ_l − p``
(``Var ζ_l = p(1 − p)``) and ``E_l = W_ij (e_i e_jᵀ + e_j e_iᵀ − e_i e_iᵀ − e_j e_jᵀ)``. The
recursions are affine in ``𝒲`` (with ``c`` and ``G`` free of it for every sampler but
EXTRA-SGLD), so ``M = M̄ + Σ_l ζ_l F_l``, ``F_l = M(W̄ + E_l) − M(W̄)``, and, ``M`` being
independent of ``s``: ``m⁺ = M̄ m + c``, ``S⁺ = M̄ S M̄ᵀ + p(1 − p) Σ_l F_l (S + m mᵀ) F_lᵀ +
G Gᵀ``. The state is then no longer Gaussian (a mixture over the masks); its mean and
covariance are exact.

Finite mixtures: stragglers (``Channel(activity=q)`` or a ``(P, N)`` pattern), a
:class:`~dgsgld.communication.Clock`'s deadline, rounds drawn for all agents at once
(``Channel(probability=p)``) and randomized gossip (``Channel(gossip=...)``), alone or
together. Given the step's used matrix ``U`` (``W``; ``I`` when the step is no round; a
gossip matrix) and active set ``a`` the step is ``s⁺ = M_a s + c_a + G_a w`` with
``M_a = Π_a M(W'_a) + I − Π_a``, ``c_a = Π_a c``, ``G_a = Π_a G``, ``W'_a`` the matrix ``U``
with the inactive agents cut off and ``Π_a`` the projection on the active agents' rows of every
block (an inactive agent's state is held). The outcomes are drawn independently of each other
and of the state, so each is enumerated with the product of its probabilities: a round w.p.
``p`` (else ``U = I``); each gossip matrix of
:func:`dgsgld.communication.gossip_outcomes` (``"edge"``: the ``L`` links, ``1/L`` each;
``"matching"``: the ``Π_j deg_j`` proposal profiles, at most
:data:`~dgsgld.communication.MAX_GOSSIP_PROFILES`, merged into their matchings), on the links
of the step's snapshot; and the active sets: with a pattern ``a`` is fixed at each step; with
``activity=q`` or a deadline ``D`` agent ``i`` is active w.p. ``r_i = q P(c_i (1 − j + j E)
≤ D) = q (1 − exp(−(D/c_i − 1 + j) / j))`` (``E ~ Exp(1)``, compute time ``c_i``, jitter
``j``; ``j = 0``: ``q`` if ``c_i ≤ D``, else 0), independently, and the ``2^N`` sets are
enumerated with probabilities ``Π_i r_i^{a_i} (1 − r_i)^{1 − a_i}`` (``N ≤``
:data:`MAX_ENUMERATED_AGENTS`). Then
``m⁺ = Σ_a π_a (M_a m + c_a)``, ``E[s⁺s⁺ᵀ] = Σ_a π_a (M_a E[ssᵀ] M_aᵀ + M_a m c_aᵀ +
c_a mᵀM_aᵀ + c_a c_aᵀ + G_a G_aᵀ)`` over all outcomes ``a``.

Intermittent rounds (``Channel(every=τ)``, deterministic): at ``k ≢ 0 (mod τ)`` nothing is
sent and every message (DIGing's tracker too; the push-sum mass and weight alike) is mixed
with ``I``, so the step is the recursion with ``W⁽ᵏ⁾`` replaced by ``I``; it composes with
every channel above and below, and is the one channel propagated for the push-sum samplers.
Error feedback with exact messages (``Channel(error_feedback=True, consensus=γ)``): after a
round the public copies are the messages, ``x̂ = x``, so ``mixed = x + γ (U − I) x̂`` is the
recursion with ``(1 − γ) I + γ U``. An event trigger with ``threshold=0`` sends whenever the
message moved, and an unmoved message equals its copy: the mixed values are those without
it. Refused (a ``ValueError`` naming ``channel``): top-k, sign and quantized messages (not
linear in the message, with error feedback or without), a threshold ``> 0`` (sending depends
on ``‖x_j − x̂_j‖``, a function of the state), and combinations not propagated (link drops or
random-k messages with a random matrix; anything random for the push-sum samplers, whose
recursion divides by the weights).

Random-k messages (``Channel(random_k(f))``, no error feedback): sender ``j`` sends
``q_j = m_j ⊙ x_j``, ``m_j`` a scaled mask (``d / k`` on ``k = ⌈f d⌉`` entries drawn uniformly
without replacement, ``0`` elsewhere; independent over agents, messages and steps), and agent
``i`` mixes ``W_ii x_i + Σ_{j≠i} W_ij q_j``: the message's operator is ``𝒲 + 𝒪 diag(ζ)`` with
``𝒪`` the off-diagonal part of ``𝒲`` and ``ζ = m − 1`` (mean zero). Every recursion whose
messages are blocks of the state before the step is ``M = L_x 𝒲_x + L_y 𝒲_y + (free of 𝒲)``,
each message's operator entering through its own column block (``x``; the tracker ``y`` of the
DIGing samplers), with ``L`` read off
``M(W + I) − M(W)``; so ``m⁺ = M m + c`` and ``S⁺ = M S Mᵀ + G Gᵀ + Σ_msg L_msg 𝒪 (C_ζ ⊙
E[s_msg s_msgᵀ]) 𝒪ᵀ L_msgᵀ``, with ``C_ζ = I_N ⊗ Σ``, ``Σ_rr = d/k − 1`` and
``Σ_rs = −(d − k) / (k (d − 1))`` (``r ≠ s``) the covariance of one agent's mask. The law is
again a mixture (exact mean and covariance, not Gaussian).

Random-k messages with error feedback (``Channel(random_k(f), error_feedback=True,
consensus=γ)``): each sent block ``u`` of ``s`` (``x``; DIGing's tracker ``y``, the old one)
has public copies ``û`` (``û⁽⁰⁾ = 0``), ``û⁺ = û + D (u − û)`` with ``D`` the unscaled 0/1
masks (``k`` entries per agent, drawn as above), and the step mixes ``u + γ (𝒲 − I) û⁺``
where the recursion has ``𝒲 u``: ``s⁺ = M(I) s + K ŝ⁺ + c + G w``, ``K = γ (M(W) − M(I))``.
The state ``z = (s, ŝ)`` (``ŝ⁽⁰⁾ = 0``) then steps as ``z⁺ = (M̄ + ρ B diag(ζ) J) z + [c; 0]
+ [G; 0] w`` with ``ρ = k / d``, ``D = ρ (I + diag(ζ))`` (``ρ`` times the scaled mask),
``M̄ = [[M(I) + ρK, (1 − ρ) K], [ρI, (1 − ρ) I]]``, ``B = [K; I]`` and ``J z = s − ŝ``:
``m⁺ = M̄ m + c``, ``S⁺ = M̄ S M̄ᵀ + G Gᵀ + ρ² B (C_ζ ⊙ J E[zzᵀ] Jᵀ) Bᵀ``. Without error
feedback the spread is this term with ``ρB`` replaced by ``L (I ⊗ 𝒪)`` and ``J = I``. A step that
is no round (``every``) sends nothing: ``D = 0``, the copies kept. Not for EXTRA-SGLD, which
sends the new ``x⁽ᵏ⁺¹⁾`` and whose offset depends on ``W``.

The momentum samplers' friction ``γ`` and D-ULA's consensus weight ``β_k`` (a schedule too)
are read off the sampler.

Precision: moments are computed in the dtype JAX gives (float32 by default). Near stationarity
the W2 of interest is a small difference of traces; run under ``jax.enable_x64(True)``
for float64. :func:`stationary_moments` always works in NumPy float64.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, ArrayLike
from ..evaluate import distances as metrics
from .recursions import LinearRecursion, Quadratic, SamplerRecursion, block_diag, is_directed
from .recursions import check_gradient_noise as _check_gradient_noise
from .recursions import label as _label
from .recursions import recursion_of as _recursion_of

__all__ = [
    "MAX_ENUMERATED_AGENTS",
    "ExactMoments",
    "StationaryMoments",
    "agent_hessians",
    "exact_moments",
    "exact_w2",
    "laplace_quadratic",
    "loglog_slope",
    "quadratic_from_potential",
    "stationary_moments",
    "stationary_w2",
]

#: Most agents whose ``2^N`` active sets :func:`exact_moments` enumerates for ``activity=q``.
MAX_ENUMERATED_AGENTS = 12


def agent_hessians(potential, positions: ArrayLike) -> Array:
    """``∇²f_i(x_i)`` for every agent, from ``d`` forward-mode derivatives of ``full_grad``.

    ``F(x) = Σ f_i(x_i)`` has a block-diagonal Hessian, so moving every agent along ``e_j`` at
    once gives column ``j`` of all ``N`` Hessians in one pass.

    Args:
        potential: a ``dgsgld.Potential`` with flat ``(d,)`` parameters.
        positions: ``(N, d)``.

    Returns:
        ``(N, d, d)``.
    """
    x = _tree.as_array(positions)
    if x.ndim != 2:
        raise ValueError(f"`positions` must be (N, d) with flat parameters; got shape {x.shape}.")
    return _agent_hessians(potential, x)


@eqx.filter_jit
def _agent_hessians(potential, x):
    def column(j):
        tangent = jnp.zeros_like(x).at[:, j].set(1.0)
        return jax.jvp(potential.full_grad, (x,), (tangent,))[1]

    cols = jax.vmap(column)(jnp.arange(x.shape[1]))  # (d, N, d): cols[j, i] = ∇²f_i e_j
    return jnp.transpose(cols, (1, 2, 0))


def quadratic_from_potential(potential, position: ArrayLike, *, rtol: float = 1e-4) -> Quadratic:
    """Read ``A_i, b_i`` off a quadratic :class:`dgsgld.Potential` with flat parameters.

    ``A_i = ∇²f_i`` (:func:`agent_hessians`), ``b_i = A_i x_i − ∇f_i(x_i)``; the gradient is then
    checked against ``A x − b`` at a second point. One compiled program (not one per operation).

    Args:
        potential: a ``dgsgld.Potential`` whose ``f_i`` are quadratic in ``(d,)`` parameters.
        position: ``(N, d)``, the point to differentiate at (any point, for a quadratic).
        rtol: relative tolerance of the quadratic check.

    Returns:
        :class:`Quadratic` with NumPy arrays in the dtype of the computation.

    Raises:
        ValueError: if ``∇f`` at ``position + 1`` disagrees with ``A x − b`` (not quadratic).
    """
    x = _tree.as_array(position)
    if x.ndim != 2:
        raise ValueError(f"`position` must be (N, d) with flat parameters; got shape {x.shape}.")
    A, b, err, scale = (np.asarray(a) for a in _quadratic_parts(potential, x))
    if not err <= rtol * scale:
        raise ValueError(
            f"The potential is not quadratic: its gradient at position + 1 differs from A x − b by "
            f"{float(err):.3g} (tolerance {rtol * float(scale):.3g})."
        )
    return Quadratic(A, b)


def laplace_quadratic(potential, start: ArrayLike, *, max_iterations: int = 100) -> Quadratic:
    """The agents' quadratics of the Laplace approximation at the MAP, in float64.

    Newton's method on ``Σ_i f_i`` with every agent at the same point (from ``start``)
    finds the MAP ``x̂``; then ``A_i = ∇²f_i(x̂)`` and
    ``b_i = A_i x̂ − ∇f_i(x̂)``, so ``Σ_i ∇f_i`` vanishes at ``x̂`` and the quadratics' target
    ``Quadratic.target()`` is ``N(x̂, (Σ_i A_i)⁻¹)``. Exact for a quadratic potential (one
    Newton step), a local model for any other; ``Σ_i f_i`` should be strongly convex (the
    theory's assumption), else Newton may not converge.

    Args:
        potential: a ``dgsgld.Potential`` with flat ``(d,)`` parameters.
        start: ``(d,)`` first Newton point.
        max_iterations: Newton steps at most; it stops when a step is below ``1e-10``
            relative to the point.

    Returns:
        :class:`Quadratic` with ``(N, d, d)`` and ``(N, d)`` float64 NumPy arrays.
    """
    n = potential.num_agents
    with jax.enable_x64(True):
        def parts(x):
            A, g = _laplace_parts(potential, jnp.broadcast_to(jnp.asarray(x, jnp.float64),
                                                              (n, x.shape[0])))
            return np.asarray(A, np.float64), np.asarray(g, np.float64)

        x = np.asarray(start, np.float64)
        if x.ndim != 1:
            raise ValueError(f"`start` must be a flat (d,) point; got shape {x.shape}.")
        for _ in range(max_iterations):
            A, g = parts(x)
            step = np.linalg.solve(A.sum(0), g.sum(0))
            x = x - step
            if np.max(np.abs(step)) <= 1e-10 * (1.0 + np.max(np.abs(x))):
                break
        A, g = parts(x)
    return Quadratic(A, np.einsum("iab,b->ia", A, x) - g)


@eqx.filter_jit
def _laplace_parts(potential, x):
    """``(∇²f_i(x_i) (N, d, d) symmetrized, ∇f_i(x_i) (N, d))``."""
    A = _agent_hessians(potential, x)
    return 0.5 * (A + jnp.swapaxes(A, 1, 2)), potential.full_grad(x)


@eqx.filter_jit
def _quadratic_parts(potential, x):
    """``(A, b, err, scale)`` of :func:`quadratic_from_potential`."""
    grad = potential.full_grad
    A = _agent_hessians(potential, x)
    A = 0.5 * (A + jnp.swapaxes(A, -1, -2))
    b = jnp.einsum("iab,ib->ia", A, x) - grad(x)
    probe = x + 1.0
    predicted = jnp.einsum("iab,ib->ia", A, probe) - b
    return A, b, jnp.max(jnp.abs(grad(probe) - predicted)), jnp.max(jnp.abs(predicted)) + 1.0


# ---------------------------------------------------------------- propagation


def _conserved(law: SamplerRecursion) -> int | None:
    """The block summarized as the auxiliary variable: the tracker or the dual, if any."""
    for i, name in enumerate(law.blocks):
        if name in ("tracker", "dual"):
            return i
    return None


def _initial_state(law: SamplerRecursion, decentralized, quadratic, mean0, cov0, xp=jnp):
    """Stacked state moments at ``k = 0`` from those of ``x⁽⁰⁾``: ``s⁽⁰⁾ = T₀ x⁽⁰⁾ + o₀``, block by
    block (:mod:`~dgsgld.theory.recursions`): ``x⁽⁰⁾``; a tracker ``∇F(x⁽⁰⁾) = 𝐀x⁽⁰⁾ − 𝐛``; a
    velocity or dual ``0``."""
    if not decentralized or len(law.blocks) == 1:
        return mean0, cov0
    n = mean0.shape[0]
    eye = xp.eye(n, dtype=mean0.dtype)
    zeros, zero = xp.zeros((n, n), mean0.dtype), xp.zeros(n, mean0.dtype)
    T0, o0 = [], []
    for name in law.blocks:
        if name == "position":
            T0.append(eye), o0.append(zero)
        elif name == "tracker":
            T0.append(block_diag(xp, xp.asarray(quadratic.hessians, dtype=mean0.dtype)))
            o0.append(-xp.asarray(quadratic.shifts, mean0.dtype).reshape(n))
        else:
            T0.append(zeros), o0.append(zero)
    T0, o0 = xp.concatenate(T0), xp.concatenate(o0)
    return T0 @ mean0 + o0, T0 @ cov0 @ T0.T


def _stacked_init(decentralized, quadratic, init_mean, init_cov, xp=jnp):
    """Flatten the initial moments: ``(Nd,)`` and ``(Nd, Nd)`` (``(d,)``, ``(d, d)`` for a
    centralized sampler), in JAX's dtype for them (float32 unless x64 is on) whether ``xp`` is
    NumPy or jnp."""
    d = quadratic.dim
    mean = xp.asarray(init_mean)
    cov = xp.asarray(init_cov)
    dtype = jnp.result_type(mean, cov, float)
    mean, cov = mean.astype(dtype), cov.astype(dtype)
    if not decentralized:  # the joint vector (φ, θ_1, …, θ_N) with private coordinates
        d = quadratic.joint_dim
        if mean.shape != (d,) or cov.shape != (d, d):
            raise ValueError(
                f"A centralized sampler needs init_mean (d,) and init_cov (d, d) with d={d}; "
                f"got {mean.shape} and {cov.shape}."
            )
        return mean, cov
    N = quadratic.num_agents
    n = N * d
    if mean.shape == (d,):
        mean = xp.broadcast_to(mean, (N, d))
    if mean.shape != (N, d):
        raise ValueError(f"`init_mean` must be (d,) or (N, d) = {(N, d)}; got {mean.shape}.")
    if cov.shape == (d, d):
        cov = xp.broadcast_to(cov, (N, d, d))
    if cov.shape == (N, d, d):  # independent agents
        cov = block_diag(xp, cov)
    if cov.shape != (n, n):
        raise ValueError(
            f"`init_cov` must be (d, d), (N, d, d) or (Nd, Nd) with N={N}, d={d}; got {cov.shape}."
        )
    return mean.reshape(n), cov


class ExactMoments(NamedTuple):
    """Exact moments per iteration ``k = 0..T``.

    Attributes:
        mean: ``(T+1, N, d)`` each agent's mean (``(T+1, d)`` for centralized SGLD).
        cov: ``(T+1, N, d, d)`` each agent's covariance (``(T+1, d, d)`` for SGLD).
        average_mean: ``(T+1, d)`` mean of the network average ``x̄⁽ᵏ⁾``.
        average_cov: ``(T+1, d, d)`` covariance of ``x̄⁽ᵏ⁾``.
        consensus_sq: ``(T+1,)`` ``E‖x̃⁽ᵏ⁾‖² = E Σ_i ‖x_i − x̄‖²``.
        aux_consensus_sq: ``(T+1,)`` the same for the tracker ``y`` (DIGing) or the dual ``z``
            (EXTRA); zeros otherwise.
        aux_sq: ``(T+1,)`` ``E‖y⁽ᵏ⁾‖²`` (DIGing; Lemma 3.8) or ``E‖z⁽ᵏ⁾‖²``; zeros otherwise.
        sq_norm: ``(T+1,)`` ``E‖x⁽ᵏ⁾‖²`` of the stacked positions.
    """

    mean: Array
    cov: Array
    average_mean: Array
    average_cov: Array
    consensus_sq: Array
    aux_consensus_sq: Array
    aux_sq: Array
    sq_norm: Array


def _second_moment_parts(m, S, N, d):
    """``E‖v‖²``, ``E‖ṽ‖²`` and the moments of ``v̄`` for a stacked ``v (Nd)`` ~ (m, S)."""
    blocks = S.reshape(N, d, N, d)
    avg_mean = m.reshape(N, d).mean(axis=0)
    avg_cov = jnp.einsum("iajb->ab", blocks) / N**2
    sq = jnp.trace(S) + m @ m
    consensus = sq - N * (jnp.trace(avg_cov) + avg_mean @ avg_mean)
    return sq, consensus, avg_mean, avg_cov


def _summaries(aux, decentralized, N, d, m, S):
    """The :class:`ExactMoments` fields of one iteration; ``aux`` the auxiliary block or
    ``None``."""
    zero = jnp.zeros((), m.dtype)
    if not decentralized:
        sq = jnp.trace(S) + m @ m
        return (m, S, m, S, zero, zero, zero, sq)
    n = N * d
    mx, Sx = m[:n], S[:n, :n]
    sq, cons, avg_mean, avg_cov = _second_moment_parts(mx, Sx, N, d)
    mean = mx.reshape(N, d)
    cov = jnp.einsum("iaib->iab", Sx.reshape(N, d, N, d))
    if aux is not None:
        lo, hi = aux * n, (aux + 1) * n
        aux_sq, aux_cons, _, _ = _second_moment_parts(m[lo:hi], S[lo:hi, lo:hi], N, d)
    else:
        aux_sq, aux_cons = zero, zero
    return (mean, cov, avg_mean, avg_cov, cons, aux_cons, aux_sq, sq)


def _mixing_stack(mixing, algorithm, xp=jnp):
    if not algorithm.decentralized:
        return None
    if mixing is None:
        raise ValueError(f"{_label(algorithm)} needs a mixing schedule; got None.")
    stack = xp.asarray(getattr(mixing, "matrices", mixing))
    if stack.ndim == 2:
        stack = stack[None]
    if stack.ndim != 3 or stack.shape[1] != stack.shape[2]:
        raise ValueError(f"`mixing` must be (P, N, N) or (N, N); got shape {stack.shape}.")
    return stack


def _step_sizes(step_size, override, num_steps, xp=jnp) -> Array:
    """``(T,)`` step sizes ``η_0..η_{T−1}`` from a constant or a schedule ``count -> η``."""
    value = override if override is not None else step_size
    if callable(value):
        return jnp.broadcast_to(jax.vmap(value)(jnp.arange(num_steps)), (num_steps,))
    return xp.broadcast_to(xp.asarray(value), (num_steps,))


def _law_view(algorithm):
    """``algorithm`` as the compiled propagation takes it: its step size (passed per step) and
    channel (:func:`_channel_law`'s) replaced, so that neither a schedule's function nor a
    channel's settings make a new program."""
    algorithm = eqx.tree_at(lambda a: a.step_size, algorithm, np.zeros((), np.float32))
    if getattr(algorithm, "channel", None) is not None:
        algorithm = eqx.tree_at(lambda a: a.channel, algorithm, None)
    return algorithm


def exact_moments(
    algorithm,
    quadratic: Quadratic,
    mixing,
    init_mean: ArrayLike,
    init_cov: ArrayLike,
    num_steps: int,
    *,
    step_size=None,
    channel=None,
) -> ExactMoments:
    """Propagate the exact mean and covariance of a sampler's stacked state through a schedule.

    A ``lax.scan`` over ``k = 0..num_steps−1`` with ``W⁽ᵏ⁾ = mixing[k % P]`` and ``η_k`` from the
    sampler's step size (a constant or a schedule). Jittable; ``vmap`` over step sizes works.

    Args:
        algorithm: a sampler whose class has a registered recursion
            (:func:`dgsgld.theory.register_recursion`; every sampler of
            :data:`dgsgld.samplers.ALL` has one), e.g. ``dgsgld.DIGingSGLD(0.05)``; its
            friction, consensus weight and preconditioner enter the law.
        quadratic: the agents' quadratic potentials (:func:`quadratic_from_potential`); with
            ``gradient_noise``, the mini-batch gradients' error covariances (exact mixing
            only: no ``channel``).
        mixing: ``(P, N, N)`` stack, one ``(N, N)`` matrix, or a schedule with ``.matrices``;
            ignored (may be ``None``) for centralized SGLD.
        init_mean: ``(N, d)`` or ``(d,)`` (shared) mean of ``x⁽⁰⁾``; ``(d,)`` for SGLD.
        init_cov: ``(d, d)`` (i.i.d. agents), ``(N, d, d)`` (independent agents) or ``(Nd, Nd)``.
        num_steps: ``T``.
        step_size: a constant or schedule that overrides the sampler's step size.
        channel: ``None`` (exact mixing), ``Channel()``, random link drops
            ``Channel(probability=p, per_link=True)``, random-k messages
            ``Channel(random_k(f))`` with or without error feedback (neither for
            EXTRA-SGLD; random-k over a fixed matrix, ``every=τ`` allowed), intermittent
            rounds ``every=τ``, and the finite mixtures of stragglers (``activity``, a clock's
            deadline), rounds for all agents at once (``probability=p``) and gossip, error
            feedback with exact messages, ``threshold=0`` (module docstring). Not for
            centralized SGLD; the push-sum samplers take ``every`` only; random-k messages
            not with private coordinates (``quadratic.private``). Other channels are refused
            with the reason. The sampler's own ``channel`` is not read.

    Returns:
        :class:`ExactMoments` with ``T + 1`` entries (``k = 0`` first).

    Example:
        >>> import numpy as np, dgsgld
        >>> q = Quadratic(np.stack([np.eye(2), 2 * np.eye(2)]), np.ones((2, 2)))
        >>> W = np.full((2, 2), 0.5)
        >>> out = exact_moments(dgsgld.DIGingSGLD(0.1), q, W, np.zeros(2), np.eye(2), 3)
        >>> out.mean.shape, out.cov.shape
        ((4, 2, 2), (4, 2, 2, 2))
    """
    _check_gradient_noise(_recursion_of(algorithm), algorithm, quadratic)
    if quadratic.gradient_noise is not None and channel is not None:
        raise ValueError("`channel`: a quadratic with gradient noise is propagated with exact "
                         "mixing only (channel=None).")
    law = _channel_law(channel, algorithm, quadratic.num_agents)
    if law.fraction is not None and _private_of(quadratic) is not None:
        raise ValueError("`channel`: random-k messages with private coordinates are not "
                         "propagated (the masks cover the shared coordinates only).")
    # Host inputs are prepared by NumPy (an eager jnp operation is a compiled program of its
    # own); traced ones (under the caller's jit or vmap) by jnp.
    host = _validation.is_concrete_tree((quadratic, mixing, init_mean, init_cov, algorithm,
                                         step_size))
    xp = np if host else jnp
    stack = _mixing_stack(mixing, algorithm, xp)
    mean0, cov0 = _stacked_init(algorithm.decentralized, quadratic, init_mean, init_cov, xp)
    etas = _step_sizes(algorithm.step_size, step_size, num_steps, xp).astype(mean0.dtype)
    A = xp.asarray(quadratic.hessians).astype(mean0.dtype)
    b = xp.asarray(quadratic.shifts).astype(mean0.dtype)
    V = (None if quadratic.gradient_noise is None
         else xp.asarray(quadratic.gradient_noise).astype(mean0.dtype))
    stack = None if stack is None else stack.astype(mean0.dtype)
    mixture = _mixture(law, stack, mixing, mean0.dtype)
    mask = None if law.fraction is None else _random_k_mask(law.fraction, A.shape[-1])
    return ExactMoments(*_propagate(_law_view(algorithm), int(num_steps), law.link_p, law.every,
                                    law.consensus, A, b, stack, mean0, cov0, etas, mixture,
                                    mask, _private_of(quadratic), V))


class _ChannelLaw(NamedTuple):
    """What of a channel :func:`exact_moments` propagates (``None``: absent).

    Attributes:
        every: ``τ``, rounds at ``k ≡ 0 (mod τ)`` only.
        link_p: ``p`` of per-link drops.
        round_p: ``p`` of rounds drawn for all agents at once.
        gossip: ``"edge"`` or ``"matching"``.
        activity: ``(P, N)`` float64, each agent's probability of being active at step
            ``k ≡ p (mod P)`` (``activity`` and a clock's deadline together).
        fraction: random-k's ``f``.
        consensus: ``γ`` of error feedback (with random-k messages the public copies ride
            along in the state).
    """

    every: int = 1
    link_p: float | None = None
    round_p: float | None = None
    gossip: str | None = None
    activity: np.ndarray | None = None
    fraction: float | None = None
    consensus: float | None = None


def _channel_law(channel, algorithm, num_agents: int) -> _ChannelLaw:
    """The :class:`_ChannelLaw` of ``channel`` for the sampler ``algorithm``; a ``ValueError``
    naming ``channel`` and why for a channel whose recursion is not linear, or not
    propagated."""
    if channel is None:
        return _ChannelLaw()
    from ..communication import Channel, Identity, RandomK

    if not isinstance(channel, Channel):
        raise ValueError("`channel` must be None or a dgsgld.communication.Channel; got "
                         f"{type(channel).__name__}.")

    def refuse(why: str):
        raise ValueError(f"`channel`: {why}; got {channel!r}.")

    compressor = channel.compressor
    thresholds = ([v for _, v in channel.threshold] if isinstance(channel.threshold, tuple)
                  else [channel.threshold])
    name = _label(algorithm)
    if not algorithm.decentralized:
        refuse(f"the centralized {name} sends no messages")
    if not isinstance(compressor, (Identity, RandomK)):
        refuse(f"{type(compressor).__name__} messages are not linear in the message (exact "
               "moments need identity or random_k(f) messages)")
    if any(t is not None and t > 0 for t in thresholds):
        refuse("an event trigger with threshold > 0 sends when ‖x_j − x̂_j‖ > threshold, a "
               "function of the state, so the recursion is not linear")
    fraction = compressor.fraction if isinstance(compressor, RandomK) else None
    p = None if channel.probability == 1.0 else channel.probability
    link_p, round_p = (p, None) if channel.per_link else (None, p)
    activity = _activity_rates(channel, num_agents)
    random_matrix = {"link drops": link_p, "random rounds": round_p,
                     "gossip": channel.gossip, "stragglers": activity}
    drawn = [name for name, value in random_matrix.items() if value is not None]
    if is_directed(algorithm) and (drawn or fraction is not None or channel.error_feedback):
        refuse(f"for the push-sum samplers ({name}) only exact messages and every=τ are "
               "propagated (a random or compressed push makes the weights v random, and the "
               "recursion divides by them)")
    if fraction is not None and drawn:
        refuse(f"random-k messages are propagated over a fixed matrix only, not with "
               f"{' and '.join(drawn)}")
    if link_p is not None and len(drawn) > 1:
        refuse(f"link drops are propagated alone, not with {' and '.join(drawn[1:])}")
    if not _recursion_of(algorithm).sends_state(algorithm) and (fraction is not None
                                                               or link_p is not None):
        refuse(f"{'random-k messages' if link_p is None else 'random link drops'} are "
               "propagated for the samplers whose messages are blocks of the state before the "
               f"step (offset and noise free of W), not for {name}")
    return _ChannelLaw(channel.every, link_p, round_p, channel.gossip, activity, fraction,
                       channel.consensus if channel.error_feedback else None)


def _activity_rates(channel, num_agents: int):
    """``(P, N)`` float64, each agent's probability of being active at step ``k ≡ p (mod P)``:
    ``activity`` (``q``, or a 0/1 pattern) times, with a :class:`Clock` deadline ``D``, the
    probability of computing within it, ``P(c_i (1 − j + j E) ≤ D) = 1 − exp(−(D/c_i − 1 +
    j) / j)`` (``E ~ Exp(1)``; ``j = 0``: ``c_i ≤ D``); ``None`` when every agent always is."""
    rates = np.atleast_2d(np.asarray(channel.activity, np.float64))
    if rates.shape[1] not in (1, num_agents):
        raise ValueError(f"`channel`: its `activity` pattern has {rates.shape[1]} agents per "
                         f"row; the quadratic has {num_agents}.")
    rates = np.broadcast_to(rates, (rates.shape[0], num_agents))
    clock = channel.clock
    if clock is not None and clock.deadline is not None:
        compute = np.asarray(clock.compute, np.float64)
        if compute.ndim and compute.shape[0] != num_agents:
            raise ValueError(f"`channel`: its clock has {compute.shape[0]} agents' compute "
                             f"times; the quadratic has {num_agents}.")
        compute = np.broadcast_to(compute, (num_agents,))
        if clock.jitter == 0:
            done = (compute <= clock.deadline).astype(np.float64)
        else:
            done = -np.expm1(-np.maximum(
                (clock.deadline / compute - 1 + clock.jitter) / clock.jitter, 0.0))
        rates = rates * done
    return None if (rates == 1).all() else rates


def _random_k_mask(fraction: float, d: int) -> tuple[float, np.ndarray]:
    """``(k / d, Σ (d, d))``: one agent's probability of keeping an entry and the covariance of
    its scaled mask (:func:`_random_k_covariance`)."""
    from ..communication import RandomK

    return RandomK(fraction).k(d) / d, _random_k_covariance(fraction, d)


def _random_k_covariance(fraction: float, d: int) -> np.ndarray:
    """``(d, d)``: the covariance of one agent's scaled random-k mask ``m`` (``d / k`` on ``k``
    entries drawn without replacement): ``E m_r = 1``, ``P(r kept) = k/d`` and ``P(r, s kept)
    = k (k − 1) / (d (d − 1))``, so ``Var m_r = d/k − 1`` and ``Cov(m_r, m_s) = −(d − k) /
    (k (d − 1))``."""
    from ..communication import RandomK

    k = RandomK(fraction).k(d)
    off = 0.0 if d == 1 else -(d - k) / (k * (d - 1))
    return np.full((d, d), off) + np.eye(d) * (d / k - 1 - off)


def _mixture(law: _ChannelLaw, stack, mixing, dtype):
    """The enumerated randomness of a step, ``(gossip, rounds, activity)`` (each ``None`` when
    absent), or ``None`` when nothing is enumerated. ``gossip``: ``(matrices (P, K, N, N),
    probabilities (P, K))`` per phase of the mixing; ``rounds``: ``(2,)`` the probabilities of
    a round and of none; ``activity``: ``(masks (1 or P, K, N), probabilities (P, K))``."""
    if law.gossip is None and law.round_p is None and law.activity is None:
        return None
    gossip = None
    if law.gossip is not None:
        if not _validation.is_concrete_tree(mixing):
            raise ValueError("`channel`: gossip's outcomes are enumerated from the links of "
                             "`mixing`, which must then be concrete (not traced).")
        gossip = _gossip_outcomes(np.asarray(stack), law.gossip, dtype)
    rounds = None if law.round_p is None else np.array([law.round_p, 1 - law.round_p], dtype)
    activity = None if law.activity is None else _activity_masks(law.activity, dtype)
    return gossip, rounds, activity


def _gossip_outcomes(stack: np.ndarray, mode: str, dtype):
    """``(matrices (P, K, N, N), probabilities (P, K))``: each snapshot's gossip matrices
    (:func:`dgsgld.communication.gossip_outcomes`), padded to one ``K`` with ``I`` of
    probability 0."""
    from ..communication import gossip_outcomes

    try:
        outcomes = [gossip_outcomes(W, mode) for W in stack]
    except ValueError as error:
        raise ValueError(f"`channel`: gossip={mode!r} is not enumerable here: {error}") \
            from error
    P, N, K = len(stack), stack.shape[-1], max(len(p) for _, p in outcomes)
    matrices = np.broadcast_to(np.eye(N), (P, K, N, N)).copy()
    probs = np.zeros((P, K))
    for phase, (m, p) in enumerate(outcomes):
        matrices[phase, :len(p)], probs[phase, :len(p)] = m, p
    return matrices.astype(dtype), probs.astype(dtype)


def _activity_masks(rates: np.ndarray, dtype):
    """``(masks (1 or P, K, N), probabilities (P, K))``: the active sets of each step ``k % P``
    and their probabilities, from the agents' activity probabilities ``rates (P, N)``: one set
    per step when they are 0 or 1 (a pattern), else all ``2^N`` sets, agents independent."""
    num_agents = rates.shape[1]
    if np.isin(rates, (0.0, 1.0)).all():
        return rates[:, None, :].astype(dtype), np.ones((len(rates), 1), dtype)
    if num_agents > MAX_ENUMERATED_AGENTS:
        raise ValueError(f"`channel`: random stragglers enumerate the 2^N active sets; N = "
                         f"{num_agents} > {MAX_ENUMERATED_AGENTS}.")
    sets = (np.arange(2**num_agents)[:, None] >> np.arange(num_agents)) & 1     # (K, N)
    probs = np.prod(np.where(sets[None], rates[:, None], 1 - rates[:, None]), axis=-1)
    return sets[None].astype(dtype), probs.astype(dtype)


def _link_directions(W, p):
    """``(W̄ (N, N), E (L, N, N))``: the mean of the dropped matrix and each possible link's
    change ``E_l`` (zero where ``W`` has no link), over the ``L = N (N − 1) / 2`` pairs."""
    N = W.shape[0]
    i, j = np.triu_indices(N, 1)
    eye = jnp.eye(N, dtype=W.dtype)
    e_i, e_j = eye[i], eye[j]                                       # (L, N)
    outer = lambda a, c: a[:, :, None] * c[:, None, :]              # noqa: E731
    E = W[i, j][:, None, None] * (outer(e_i, e_j) + outer(e_j, e_i) - outer(e_i, e_i)
                                  - outer(e_j, e_j))
    return W - (1 - p) * jnp.sum(E, axis=0), E


def _with_consensus(W, consensus):
    """The matrix error feedback with exact messages mixes with, ``(1 − γ) I + γ W``
    (``mixed = x + γ (W − I) x̂`` with ``x̂ = x``); ``W`` itself without (``None``)."""
    if consensus is None:
        return W
    return (1 - consensus) * jnp.eye(W.shape[0], dtype=W.dtype) + consensus * W


def _held(step, W, eta, mask, d, blocks, consensus=None):
    """``(M_a, c_a, G_a)`` of the used matrix ``W (N, N)`` and active set ``mask (N,)``
    (module docstring); ``step(W, eta)`` is the sampler's recursion, ``blocks`` its number of
    blocks."""
    from ..communication import without_inactive

    used = _with_consensus(without_inactive(W, mask > 0), consensus)
    rec = step(used, eta)
    rows = jnp.tile(jnp.repeat(mask, d), blocks)                         # Π_a's diagonal
    M = rows[:, None] * rec.matrix + jnp.diag(1 - rows)
    return M, rows * rec.offset, rows[:, None] * rec.noise


def _components(step, blocks, W, talk, eta, k, mixture, consensus, d):
    """``(M (K, n, n), c (K, n), G (K, n, m), probabilities (K,))`` of step ``k``'s outcomes:
    every gossip matrix × round or none × active set. ``W``: the step's matrix; ``talk``:
    whether ``every`` makes it a round (``None``: always)."""
    gossip, rounds, activity = mixture
    N = W.shape[0]
    eye = jnp.eye(N, dtype=W.dtype)
    if gossip is None:
        used, probs = W[None], jnp.ones(1, W.dtype)
    else:
        used, probs = gossip[0][k % gossip[0].shape[0]], gossip[1][k % gossip[1].shape[0]]
        if talk is not None:
            used = jnp.where(talk, used, eye)
    if rounds is not None:  # no round: every message mixed with I
        used = jnp.concatenate([used, eye[None]])
        probs = jnp.concatenate([rounds[0] * probs, rounds[1:]])
    if activity is None:
        sets, chance = jnp.ones((1, N), W.dtype), jnp.ones(1, W.dtype)
    else:
        sets = activity[0][k % activity[0].shape[0]]
        chance = activity[1][k % activity[1].shape[0]]
    num_sets = sets.shape[0]
    used = jnp.repeat(used, num_sets, axis=0)
    sets = jnp.tile(sets, (probs.shape[0], 1))
    probs = (probs[:, None] * chance[None]).reshape(-1)
    M, c, G = jax.vmap(lambda U, a: _held(step, U, eta, a, d, blocks, consensus))(used, sets)
    return M, c, G, probs


def _masked(step, blocks, q, W, eta, mask, consensus, talk):
    """``(rec, B, J, C)`` of a step with random-k messages over ``W (N, N)``: given the masks the
    step is ``z⁺ = (rec.matrix + B diag(ζ) J) z + rec.offset + rec.noise w``, ``ζ`` the masks'
    deviation from their mean, independent of ``z`` with ``Cov ζ = C`` (module docstring).
    ``step(W, eta)``: the sampler's recursion, of ``blocks`` blocks. ``mask``: ``(k / d, Σ (d,
    d))``, one agent's keep probability and scaled mask covariance. ``consensus``: ``γ`` with
    error feedback, whose public copies ride along (``z = (s, ŝ)``), ``None`` without
    (``z = s``). ``talk``: whether the step is a round (``None``: always); a step that is none
    sends nothing (``W = I`` already; with error feedback ``ŝ`` is kept)."""
    N, d = q.hessians.shape[0], q.hessians.shape[-1]
    dtype = W.dtype
    keep, spread = jnp.asarray(mask[0], dtype), jnp.asarray(mask[1], dtype)
    if talk is not None:
        keep, spread = jnp.where(talk, keep, 0), jnp.where(talk, spread, 0)
    cov = jnp.kron(jnp.eye(blocks * N, dtype=dtype), spread)   # agents and messages independent
    rec = step(W, eta)
    if consensus is None:  # each message's operator 𝒲 + 𝒪 diag(ζ)
        L = step(W + jnp.eye(N, dtype=dtype), eta).matrix - rec.matrix
        off = jnp.kron(W - jnp.diag(jnp.diagonal(W)), jnp.eye(d, dtype=dtype))
        B = L @ jnp.kron(jnp.eye(blocks, dtype=dtype), off)
        return rec, B, jnp.eye(B.shape[1], dtype=dtype), cov
    # error feedback: ŝ⁺ = ŝ + D (s − ŝ), s⁺ = M(I) s + K ŝ⁺ + c + G w, D = keep I + diag(ζ)
    local = step(jnp.eye(N, dtype=dtype), eta).matrix
    K = consensus * (rec.matrix - local)
    eye = jnp.eye(K.shape[0], dtype=dtype)
    M = jnp.block([[local + keep * K, (1 - keep) * K], [keep * eye, (1 - keep) * eye]])
    lifted = LinearRecursion(M, jnp.concatenate([rec.offset, jnp.zeros_like(rec.offset)]),
                             jnp.concatenate([rec.noise, jnp.zeros_like(rec.noise)]))
    # unscaled masks: Cov = (k / d)² Σ
    return lifted, jnp.concatenate([K, eye]), jnp.concatenate([eye, -eye], 1), keep**2 * cov


@eqx.filter_jit
def _propagate(algorithm, num_steps, link_p, every, consensus, A, b, stack, mean0, cov0, etas,
               mixture=None, mask=None, private=None, gradient_noise=None):
    """The compiled moment recursion (cached across step sizes, data, initial laws and the
    sampler's array parameters); ``private`` the quadratic's private coordinates (a tuple),
    ``gradient_noise`` its ``(N, d, d)`` covariances or ``None``."""
    law = _recursion_of(algorithm)
    decentralized, directed = algorithm.decentralized, is_directed(algorithm)
    blocks, aux = len(law.blocks), _conserved(law)
    q = Quadratic(A, b, private, gradient_noise)
    N, d = A.shape[0], A.shape[-1]
    m, S = _initial_state(law, decentralized, q, mean0, cov0, jnp)
    if mask is not None and consensus is not None:  # the public copies ŝ⁽⁰⁾ = 0 ride along
        m = jnp.concatenate([m, jnp.zeros_like(m)])
        S = jax.scipy.linalg.block_diag(S, jnp.zeros_like(S))
    period = 1 if stack is None else stack.shape[0]

    def step(carry, xs):
        k, eta = xs
        m, S, v = carry

        def recursion(W, eta, weight=None):
            return law.step(algorithm, q, W, eta, count=k, weight=weight, xp=jnp)

        W = None if stack is None else stack[k % period]
        talk = None
        if every > 1:  # local steps between rounds: every message mixed with I
            talk = k % every == 0
            W = jnp.where(talk, W, jnp.eye(N, dtype=W.dtype))
        links = 0.0
        if directed:  # the push-sum weights v⁽ᵏ⁾ ride along: v⁽ᵏ⁺¹⁾ = C⁽ᵏ⁾ v⁽ᵏ⁾
            rec, v = recursion(W, eta, v), W @ v
        elif link_p is not None:  # random link drops: the mean recursion and its spread
            W, E = _link_directions(W, link_p)
            rec = recursion(W, eta)
            F = jax.vmap(lambda e: recursion(W + e, eta).matrix)(E) - rec.matrix[None]
            links = link_p * (1 - link_p) * jnp.einsum("lab,bc,ldc->ad", F,
                                                       S + jnp.outer(m, m), F)
        elif mask is not None:  # random-k messages: the masks' spread
            rec, B, J, cov = _masked(recursion, blocks, q, W, eta, mask, consensus, talk)
            links = B @ (cov * (J @ (S + jnp.outer(m, m)) @ J.T)) @ B.T
        elif mixture is not None:  # a mixture over gossip matrices, rounds and active sets
            M, c, G, probs = _components(recursion, blocks, W, talk, eta, k, mixture, consensus,
                                         d)
            second = S + jnp.outer(m, m)
            Mm = jnp.einsum("kab,b->ka", M, m)
            m_new = probs @ (Mm + c)
            moment = jnp.einsum("k,kab,bc,kdc->ad", probs, M, second, M) \
                + jnp.einsum("k,ka,kb->ab", probs, Mm, c) \
                + jnp.einsum("k,ka,kb->ab", probs, c, Mm) \
                + jnp.einsum("k,ka,kb->ab", probs, c, c) \
                + jnp.einsum("k,kab,kcb->ac", probs, G, G)
            S = moment - jnp.outer(m_new, m_new)
            S = 0.5 * (S + S.T)
            return (m_new, S, v), _summaries(aux, decentralized, N, d, m_new, S)
        else:
            rec = recursion(None if W is None else _with_consensus(W, consensus), eta)
        m = rec.matrix @ m + rec.offset
        S = rec.matrix @ S @ rec.matrix.T + rec.noise @ rec.noise.T + links
        S = 0.5 * (S + S.T)
        return (m, S, v), _summaries(aux, decentralized, N, d, m, S)

    ones = jnp.ones(N, mean0.dtype)
    _, rest = jax.lax.scan(step, (m, S, ones), (jnp.arange(num_steps), etas))
    first = _summaries(aux, decentralized, N, d, m, S)
    return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)


def exact_w2(moments, target_mean: ArrayLike, target_cov: ArrayLike) -> Array:
    """Exact W2 of each agent's Gaussian law to ``N(target_mean, target_cov)``.

    Args:
        moments: :class:`ExactMoments` or :class:`StationaryMoments` (``mean (..., N, d)``).
        target_mean: ``(d,)``; target_cov: ``(d, d)``.

    Returns:
        ``(..., N)`` (``(T+1,)`` for centralized ULA).
    """
    mean, cov = jnp.asarray(moments.mean), jnp.asarray(moments.cov)
    tm = jnp.broadcast_to(jnp.asarray(target_mean, mean.dtype), mean.shape)
    tc = jnp.broadcast_to(jnp.asarray(target_cov, cov.dtype), cov.shape)
    return _gaussian_w2(mean, cov, tm, tc)


_gaussian_w2 = jax.jit(metrics.gaussian_w2)


# ---------------------------------------------------------------- stationary limit


class StationaryMoments(NamedTuple):
    """Periodic-stationary moments, one entry per phase ``p = k mod P`` (float64 NumPy).

    Attributes:
        mean: ``(P, N, d)`` (``(1, d)`` for ULA); cov: ``(P, N, d, d)`` (``(1, d, d)``).
        average_mean: ``(P, d)``; average_cov: ``(P, d, d)`` of the network average.
        spectral_radius: per-step rate ``ρ(Φ)^{1/P}`` of the period map on the reachable
            subspace; the moments are ``nan`` when it is ``≥ 1`` (unstable step size).
    """

    mean: np.ndarray
    cov: np.ndarray
    average_mean: np.ndarray
    average_cov: np.ndarray
    spectral_radius: float


def _reachable_coordinates(law: SamplerRecursion, decentralized, quadratic, N, d):
    """``s = T r + o``: the affine subspace the stacked state never leaves (float64).

    A tracker conserves ``Σ_i (y_i − ∇f_i(x_i))`` (``= 0`` from ``y⁽⁰⁾ = ∇F(x⁽⁰⁾)``), a dual
    variable ``Σ_i z_i`` (``= 0``): each adds ``d`` unit-modulus directions to ``M`` that noise
    never excites. With private coordinates (never mixed) these hold agent by agent there:
    ``y_i − ∇f_i(x_i) = 0`` and ``z_i = 0`` on them, the sums over the shared ones. ``T`` is
    an orthonormal basis of the directions these linear functionals ``K s = k₀`` leave free
    and ``o`` the least-norm solution of ``K o = k₀``.
    """
    n = N * d
    size = quadratic.joint_dim if not decentralized else len(law.blocks) * n
    # The functionals on one block (n,): Σ_i on shared coordinates, each agent's own on
    # private ones.
    total = np.kron(np.ones((1, N)), np.eye(d))                      # (d, n): Σ_i over agents
    mask = quadratic.private_coordinates
    if mask is not None:
        total = np.concatenate([total[~mask], np.kron(np.eye(N), np.eye(d)[mask])])
    rows, values = [], []
    for i, name in enumerate(law.blocks):
        if name not in ("tracker", "dual") or not decentralized:
            continue
        K = np.zeros((total.shape[0], size))
        K[:, i * n:(i + 1) * n] = total
        if name == "tracker":  # Σ y − Σ A_i x_i = −Σ b_i
            K[:, :n] -= total @ block_diag(np, np.asarray(quadratic.hessians, np.float64))
            values.append(-total @ np.asarray(quadratic.shifts, np.float64).reshape(n))
        else:
            values.append(np.zeros(total.shape[0]))
        rows.append(K)
    if not rows:
        return np.eye(size), np.zeros(size)
    K, k0 = np.concatenate(rows), np.concatenate(values)
    _, _, vt = np.linalg.svd(K)
    return vt[K.shape[0]:].T, np.linalg.lstsq(K, k0, rcond=None)[0]


def _private_of(quadratic) -> tuple | None:
    """The quadratic's private coordinates as a hashable tuple of bools, or ``None``."""
    mask = quadratic.private_coordinates if isinstance(quadratic, Quadratic) else None
    return None if mask is None else tuple(bool(m) for m in mask)


def stationary_moments(algorithm, quadratic: Quadratic, mixing, *, step_size=None
                       ) -> StationaryMoments:
    """The exact (periodic-)stationary law for a constant step and a static or periodic schedule.

    For a static ``W`` (``P = 1``) this solves the discrete Lyapunov equation
    ``S = M S Mᵀ + G Gᵀ`` and ``m = (I − M)⁻¹ c``. For a period-``P`` schedule the same is solved
    for the period map ``Φ = M⁽ᴾ⁻¹⁾⋯M⁽⁰⁾`` (phase 0), then propagated through one period. The
    conserved directions of a tracker or dual variable are removed first by restricting the
    recursion to the affine subspace the state lives on (see ``_reachable_coordinates``):
    ``r⁺ = T⁺(M(Tr + o) + c − o) + T⁺G w``, exact because that subspace is invariant. For the
    push-sum samplers the weights are their periodic limit (``_periodic_weights``): the law
    the run settles into.

    Args:
        algorithm: a sampler with a registered recursion and constant step size, friction
            and consensus weight (``step_size`` may replace a schedule).
        quadratic: the agents' quadratic potentials (and their ``gradient_noise``).
        mixing: ``(P, N, N)``, ``(N, N)`` or a schedule; ``None`` for centralized SGLD.
        step_size: a constant that overrides the sampler's step size.

    Returns:
        :class:`StationaryMoments` in float64.
    """
    law = _recursion_of(algorithm)
    _check_gradient_noise(law, algorithm, quadratic)
    eta = step_size if step_size is not None else algorithm.step_size
    if eta is None or callable(eta):
        raise ValueError("The stationary limit needs one constant step size.")
    eta = np.float64(np.asarray(eta))
    decentralized, directed = algorithm.decentralized, is_directed(algorithm)
    N, d = quadratic.num_agents, quadratic.dim
    V = quadratic.gradient_noise
    q = Quadratic(
        np.asarray(quadratic.hessians, np.float64), np.asarray(quadratic.shifts, np.float64),
        _private_of(quadratic), None if V is None else np.asarray(V, np.float64)
    )
    stack = ([None] if not decentralized
             else np.asarray(_mixing_stack(mixing, algorithm, np), np.float64))
    T, o = _reachable_coordinates(law, decentralized, q, N, d)
    T_pinv = T.T  # T has orthonormal columns (_reachable_coordinates)
    weights = _periodic_weights(stack) if directed else [None] * len(stack)

    def reduced(W, v):
        rec = law.step(algorithm, q, W, eta, count=None, weight=v, xp=np)
        return (
            T_pinv @ rec.matrix @ T,
            T_pinv @ (rec.matrix @ o + rec.offset - o),
            T_pinv @ rec.noise,
        )

    steps = [reduced(W, v) for W, v in zip(stack, weights)]
    size = T.shape[1]
    phi, c_phi, s_phi = np.eye(size), np.zeros(size), np.zeros((size, size))
    for M, c, G in steps:
        phi, c_phi, s_phi = M @ phi, M @ c_phi + c, M @ s_phi @ M.T + G @ G.T
    radius = float(np.max(np.abs(np.linalg.eigvals(phi)))) ** (1.0 / len(steps))
    if radius >= 1.0:
        m, S = np.full(size, np.nan), np.full((size, size), np.nan)
    else:
        m = np.linalg.solve(np.eye(size) - phi, c_phi)
        S = scipy.linalg.solve_discrete_lyapunov(phi, s_phi)
    phases = []
    for M, c, G in steps:
        S = 0.5 * (S + S.T)
        phases.append((T @ m + o, T @ S @ T.T))   # back to the stacked state
        m, S = M @ m + c, M @ S @ M.T + G @ G.T
    if not decentralized:
        mean = np.stack([p[0] for p in phases])
        cov = np.stack([p[1] for p in phases])
        return StationaryMoments(mean, cov, mean, cov, radius)
    n = N * d  # x is the leading block of the stacked state
    mean = np.stack([p[0][:n].reshape(N, d) for p in phases])
    blocks = np.stack([p[1][:n, :n].reshape(N, d, N, d) for p in phases])
    cov = np.einsum("piaib->piab", blocks)
    return StationaryMoments(
        mean, cov, mean.mean(axis=1), np.einsum("piajb->pab", blocks) / N**2, radius
    )


def _periodic_weights(stack: np.ndarray, tol: float = 1e-13, max_periods: int = 100_000) -> list:
    """The push-sum weights at phases ``0..P−1`` in the limit ``k → ∞``: ``v`` at phase 0 is
    the Perron vector of the period product ``C⁽ᴾ⁻¹⁾⋯C⁽⁰⁾`` scaled to sum ``N`` (found by
    iterating the period map), then ``v⁽ᵖ⁺¹⁾ = C⁽ᵖ⁾ v⁽ᵖ⁾``."""
    n = stack.shape[-1]
    phi = np.eye(n)
    for C in stack:
        phi = C @ phi
    v = np.ones(n)
    for _ in range(max_periods):
        new = phi @ v
        new *= n / new.sum()
        if np.max(np.abs(new - v)) < tol:
            v = new
            break
        v = new
    else:
        raise ValueError("The push-sum weights do not settle: is the schedule jointly strongly "
                         "connected?")
    out = []
    for C in stack:
        out.append(v)
        v = C @ v
    return out


def stationary_w2(algorithm, quadratic: Quadratic, mixing, step_sizes: ArrayLike) -> np.ndarray:
    """Stationary W2 of every agent to the target, for each step size.

    Args:
        algorithm: a sampler with a registered recursion (its own step size is replaced by
            each of ``step_sizes``).
        quadratic: the agents' quadratic potentials.
        mixing: ``(P, N, N)``, ``(N, N)``, a schedule, or ``None`` for centralized SGLD.
        step_sizes: ``(M,)``.

    Returns:
        ``(M, P, N)`` (``(M, 1)`` for SGLD) float64; ``nan`` where the step is unstable.
    """
    target = quadratic.target()
    out = []
    for eta in np.asarray(step_sizes, dtype=np.float64).ravel():
        st = stationary_moments(algorithm, quadratic, mixing, step_size=eta)
        with jax.enable_x64(True):  # a local float64 scope: these W2 are small differences
            out.append(np.asarray(exact_w2(st, *target)))
    return np.stack(out)


def loglog_slope(x: ArrayLike, y: ArrayLike) -> tuple[float, float]:
    """Least-squares fit ``log y = slope · log x + intercept``; returns ``(slope, intercept)``."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    keep = np.isfinite(y) & (y > 0)
    slope, intercept = np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)
    return float(slope), float(intercept)
