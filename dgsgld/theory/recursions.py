"""Each sampler's step on quadratic potentials as a linear Gaussian recursion, one per class.

When every ``f_i(x) = ½ xᵀA_i x − b_iᵀx`` and gradients are exact, a sampler's step is affine
in its stacked state ``s`` plus Gaussian noise,

    s⁺ = 𝐌⁽ᵏ⁾ s + c⁽ᵏ⁾ + G⁽ᵏ⁾ w,      w ~ N(0, I),

and :mod:`dgsgld.theory.exact` propagates its law. With ``𝒲 = W⁽ᵏ⁾ ⊗ I_d`` (``x⁺ = W x`` means
``x_i⁺ = Σ_j W_ij x_j``), ``𝐀 = blockdiag(A_i)``, ``𝐛 = (b_1, …, b_N)`` and the sampler's
preconditioner ``𝐏 = I_N ⊗ P``, ``𝐒 = I_N ⊗ S`` (``S Sᵀ = P``; ``P = I`` without one, see
:mod:`dgsgld.samplers.precondition`):

* DIGing-SGLD, ``s = (x, y)``, ``y⁽⁰⁾ = 𝐀x⁽⁰⁾ − 𝐛``:
  ``𝐌 = [[𝒲, −η𝐏], [𝐀(𝒲 − I), 𝒲 − η𝐀𝐏]]``, ``c = 0``, ``G = √(2η) [𝐒; 𝐀𝐒]``; with
  private tracking (``tracking_noise=σ``) ``G = [[√(2η) 𝐒, 0], [√(2η) 𝐀𝐒, σ (𝒲 − I)]]``
  (the tracker's noise ``σ (𝒲 − I) ξ``, ``ξ ~ N(0, I)`` independent of ``w``).
* DE-SGLD, ``s = x``: ``𝐌 = 𝒲 − η𝐏𝐀``, ``c = η𝐏𝐛``, ``G = √(2η) 𝐒``.
* EXTRA-SGLD, ``s = (x, z)``, ``z⁽⁰⁾ = 0``, ``W̃ = (I+𝒲)/2``, ``V² = (I−𝒲)/2``:
  ``𝐌 = [[W̃ − η𝐏𝐀, −I], [V²(W̃ − η𝐏𝐀), I − V²]]``, ``c = η[𝐏𝐛; V²𝐏𝐛]``,
  ``G = √(2η) [𝐒; V²𝐒]``.
* centralized SGLD (ULA) on ``f = Σ f_i``, ``s = x ∈ R^d``: ``𝐌 = I − ηPA``, ``c = ηPb``,
  ``G = √(2η) S``.
* DE-SGHMC with friction ``γ``, ``s = (x, v)``, ``v⁽⁰⁾ = 0``, ``a = 1 − ηγ``:
  ``𝐌 = [[𝒲 − η²𝐏𝐀, ηa I], [−η𝐏𝐀, a I]]``, ``c = [η²𝐏𝐛; η𝐏𝐛]``, ``G = √(2γη) [η𝐒; 𝐒]``.
* DIGing-SGHMC, ``s = (x, v, y)``, ``v⁽⁰⁾ = 0``, ``y⁽⁰⁾ = 𝐀x⁽⁰⁾ − 𝐛``:
  ``𝐌 = [[𝒲, ηa I, −η²𝐏], [0, a I, −η𝐏], [𝐀(𝒲 − I), ηa𝐀, 𝒲 − η²𝐀𝐏]]``, ``c = 0``,
  ``G = √(2γη) [η𝐒; 𝐒; η𝐀𝐒]``.
* D-ULA with step ``α = η`` and consensus weight ``β_k``, ``s = x``:
  ``𝐌 = (1 − β)I + β𝒲 − ηN𝐏𝐀``, ``c = ηN𝐏𝐛``, ``G = √(2Nη) 𝐒``.
* The push-sum samplers over column-stochastic ``C⁽ᵏ⁾`` (:mod:`dgsgld.samplers.pushsum`): their
  weights ``v⁽ᵏ⁺¹⁾ = C⁽ᵏ⁾v⁽ᵏ⁾``, ``v⁽⁰⁾ = 1``, do not depend on the state, so given them the
  recursion is linear. With ``𝒱 = diag(v⁽ᵏ⁾) ⊗ I_d``, ``𝒱⁺ = diag(v⁽ᵏ⁺¹⁾) ⊗ I_d``,
  ``𝒞 = C⁽ᵏ⁾ ⊗ I_d`` and ``𝒟 = diag(√(2η m)) ⊗ I_d`` (``m = v⁽ᵏ⁺¹⁾`` for Push-DIGing-SGLD,
  ``v⁽ᵏ⁾`` for Push-Sum-SGLD, ``1`` with ``noise_rule="uniform"``):
  Push-DIGing-SGLD, ``s = (x, y)``, ``𝒫 = 𝒱⁺⁻¹𝒞𝒱``:
  ``𝐌 = [[𝒫, −η𝒱⁺⁻¹𝐏], [𝐀(𝒫 − I), 𝒞 − η𝐀𝒱⁺⁻¹𝐏]]``, ``c = 0``,
  ``G = [𝒱⁺⁻¹𝒟𝐒; 𝐀𝒱⁺⁻¹𝒟𝐒]``; Push-Sum-SGLD, ``s = x``: ``𝐌 = 𝒱⁺⁻¹𝒞(𝒱 − η𝐏𝐀)``,
  ``c = η𝒱⁺⁻¹𝒞𝐏𝐛``, ``G = 𝒱⁺⁻¹𝒞𝒟𝐒``. With ``v ≡ 1`` (doubly stochastic ``C``) the first is
  DIGing-SGLD's recursion.

**Gradient noise** (``Quadratic.gradient_noise``: ``∇̃f_i(x) = A_i x − b_i + ξ_i``, ``ξ_i`` fresh
with covariance ``V_i``; ``𝐕^{1/2} = blockdiag(V_i^{1/2})``) adds columns to ``G``. A sampler
that uses each gradient in one step only acts on ``ξ`` as on ``−𝐛``: the columns are
``−(∂c/∂𝐛) 𝐕^{1/2}``, e.g. ``−η𝐏𝐕^{1/2}`` for DE-SGLD, ``−η[𝐏; V²𝐏]𝐕^{1/2}`` for EXTRA-SGLD,
``−[η²𝐏; η𝐏]𝐕^{1/2}`` for DE-SGHMC, ``−ηP(Σ_i V_i)^{1/2}`` for SGLD. A tracker keeps the
gradient it drew and subtracts it at the next step, so ``ξ`` of a step enters twice; in the
variable ``z = y − ξ`` (the tracker of the exact gradients at the points, which conserves what
``y`` did) it enters once, and the columns are ``(𝐌_{·,y} − E_y) 𝐕^{1/2}``: the tracker's
column block of ``𝐌`` less the identity on the tracker's rows (DIGing-SGLD:
``[−η𝐏; 𝒲 − I − η𝐀𝐏] 𝐕^{1/2}``). The positions' law is the same in either variable.

Dispatch is on the sampler's type: :func:`register_recursion` files one recursion per class
(subclasses inherit it), and a sampler of one's own gets an exact law by registering its
own. The stacked state is named by the sampler's state fields, position first: ``"position"``
``x``; ``"velocity"`` ``v`` with ``v⁽⁰⁾ = 0``; ``"tracker"`` ``y`` with ``y⁽⁰⁾ = ∇F(x⁽⁰⁾)``,
which conserves ``Σ_i (y_i − ∇f_i(x_i))``; ``"dual"`` ``z`` with ``z⁽⁰⁾ = 0``, which conserves
``Σ_i z_i``. From these names :mod:`~dgsgld.theory.exact` builds the initial state, removes the
conserved directions for the stationary law and reports the tracker's or dual's summaries. A
sampler with ``network_kind = "column_stochastic"`` (the push-sum samplers) is given its
weights ``v⁽ᵏ⁾`` at every step.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._util.types import Array, ArrayLike
from ..networks.directed import COLUMN_STOCHASTIC
from ..samplers import (
    DESGHMC,
    DESGLD,
    DULA,
    EXTRASGLD,
    SGLD,
    DIGingSGHMC,
    DIGingSGLD,
    PushDIGingSGLD,
    PushSumSGLD,
)

__all__ = [
    "BLOCKS",
    "LinearRecursion",
    "Quadratic",
    "SamplerRecursion",
    "is_directed",
    "label",
    "linear_recursion",
    "network_operator",
    "recursion_of",
    "register_recursion",
    "schedule_value",
]

#: The names a registered recursion may give the blocks of its stacked state (module docstring).
BLOCKS = ("position", "velocity", "tracker", "dual")


class Quadratic(NamedTuple):
    """Quadratic agent potentials ``f_i(x) = ½ xᵀA_i x − b_iᵀx`` (up to constants).

    With private coordinates (``private``) agent ``i``'s vector is ``x_i = (φ_i, θ_i)``: the
    shared coordinates ``φ`` are mixed over the network, the private ones ``θ_i`` never are
    (:class:`dgsgld.Potential`'s ``private=``), and the target is the joint law of
    ``(φ, θ_1, …, θ_N)`` under ``exp(−Σ_i f_i(φ, θ_i))`` (:meth:`joint`). In every recursion
    the network operator ``𝒲 = W ⊗ I_d`` becomes ``W ⊗ D_s + I_N ⊗ D_p`` (``D_s``, ``D_p``
    the diagonal 0/1 projections on the shared and private coordinates; push-sum masses:
    ``diag(v⁺/v) ⊗ D_p``), and a tracker's private block is the agent's own gradient.

    Attributes:
        hessians: ``(N, d, d)``, the symmetric positive definite ``A_i``.
        shifts: ``(N, d)``, the ``b_i`` (so ``∇f_i(x) = A_i x − b_i``).
        private: ``None`` (every coordinate shared) or ``d`` bools, ``True`` at the private
            coordinates of an agent's vector.
        gradient_noise: ``None`` (exact gradients) or ``(N, d, d)``, the covariances ``V_i`` of
            agent ``i``'s gradient error ``∇̃f_i − ∇f_i``, drawn afresh and independently at
            every evaluation (:func:`dgsgld.theory.estimate_gradient_covariance`). The law is
            exact when the error does not depend on the point (per-datum gradients that differ
            by constants, e.g. a Gaussian location model) and first-order accurate otherwise
            (``V_i`` at the mode).
    """

    hessians: ArrayLike
    shifts: ArrayLike
    private: tuple | None = None
    gradient_noise: ArrayLike | None = None

    @property
    def num_agents(self) -> int:
        """``N``."""
        return int(np.shape(self.hessians)[0])

    @property
    def dim(self) -> int:
        """``d``, the dimension of one agent's vector."""
        return int(np.shape(self.hessians)[-1])

    @property
    def private_coordinates(self) -> np.ndarray | None:
        """``(d,)`` bools of the private coordinates, or ``None`` when none is private."""
        if self.private is None or not any(self.private):
            return None
        mask = np.asarray(self.private, bool)
        if mask.shape != (self.dim,):
            raise ValueError(f"`private` must hold d = {self.dim} bools; got {mask.shape}.")
        return mask

    @property
    def joint_dim(self) -> int:
        """``D = d_s + N d_p``, the dimension of the target (``d`` without private ones)."""
        mask = self.private_coordinates
        return self.dim if mask is None else int((~mask).sum() + self.num_agents * mask.sum())

    def joint(self, xp=np) -> tuple:
        """``(A (D, D), b (D,))`` of ``f = Σ_i f_i`` on the joint vector ``(φ, θ_1, …, θ_N)``
        (``(Σ A_i, Σ b_i)`` without private coordinates): ``A_φφ = Σ_i A_i[s, s]``,
        ``A_φθ_i = A_i[s, p]``, ``A_θ_iθ_i = A_i[p, p]``, ``b_φ = Σ_i b_i[s]``,
        ``b_θ_i = b_i[p]``."""
        A, b = xp.asarray(self.hessians), xp.asarray(self.shifts)
        mask = self.private_coordinates
        if mask is None:
            return xp.sum(A, axis=0), xp.sum(b, axis=0)
        E = xp.asarray(self.embedding(), A.dtype)           # (N, d, D)
        return xp.einsum("iad,iab,ibe->de", E, A, E), xp.einsum("iad,ia->d", E, b)

    def embedding(self) -> np.ndarray:
        """``E (N, d, D)``: agent ``i``'s vector is ``x_i = E_i z`` of the joint vector
        ``z = (φ, θ_1, …, θ_N)`` (identities without private coordinates)."""
        N, d = self.num_agents, self.dim
        mask = self.private_coordinates
        if mask is None:
            return np.broadcast_to(np.eye(d), (N, d, d)).copy()
        shared, private = np.flatnonzero(~mask), np.flatnonzero(mask)
        ds, dp = shared.size, private.size
        E = np.zeros((N, d, ds + N * dp))
        for i in range(N):
            E[i, shared, np.arange(ds)] = 1.0
            E[i, private, ds + i * dp + np.arange(dp)] = 1.0
        return E

    def target(self) -> tuple[np.ndarray, np.ndarray]:
        """The target ``π ∝ exp(−Σ_i f_i) = N(A⁻¹b, A⁻¹)`` with ``(A, b)`` of :meth:`joint`
        (``A = Σ A_i``, ``b = Σ b_i`` without private coordinates), float64."""
        A, b = self.joint(np)
        A, b = np.asarray(A, np.float64), np.asarray(b, np.float64)
        cov = np.linalg.inv(A)
        return cov @ b, 0.5 * (cov + cov.T)

    def minimizer(self) -> np.ndarray:
        """``x*``, the minimizer of ``f = Σ f_i`` (the target mean)."""
        return self.target()[0]


class LinearRecursion(NamedTuple):
    """``s⁺ = matrix @ s + offset + noise @ w`` with ``w ~ N(0, I)``.

    Attributes:
        matrix: ``(n, n)``.
        offset: ``(n,)``.
        noise: ``(n, m)``.
    """

    matrix: Array
    offset: Array
    noise: Array


class SamplerRecursion(NamedTuple):
    """A sampler class's registered recursion (:func:`register_recursion`).

    Attributes:
        step: ``(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp) ->``
            :class:`LinearRecursion`: one step with mixing ``W (N, N)`` (``None`` for a
            centralized sampler) and step ``η``. ``quadratic``'s arrays are ``xp`` arrays of
            one float dtype; ``count`` is the iteration ``k`` (traced inside a propagation),
            or ``None`` for the stationary limit, where every schedule of the sampler must be
            a constant (:func:`schedule_value`); ``weight`` the push-sum weights ``v⁽ᵏ⁾ (N,)``
            of a directed sampler (:func:`is_directed`), else ``None``; ``xp`` is
            ``jax.numpy`` or ``numpy``.
        blocks: the names of the stacked state's blocks (of :data:`BLOCKS`), ``"position"``
            first; each block is ``(N d,)`` (``(d,)`` for a centralized sampler).
        messages_before_step: whether every message the sampler mixes is a block of the
            state before the step, with offset and noise free of ``W``: what random link
            drops and random-k messages need (EXTRA-SGLD mixes its new position, and is
            refused those channels); a bool, or ``algorithm -> bool`` where the sampler's
            options decide (DIGing-SGLD's tracking noise ``σ (𝒲 − I) ξ`` depends on ``W``).
        gradient_noise: whether ``step`` adds the columns of ``Quadratic.gradient_noise``
            (module docstring); a quadratic with gradient noise is refused otherwise.
    """

    step: Callable[..., LinearRecursion]
    blocks: tuple[str, ...] = ("position",)
    messages_before_step: bool | Callable = True
    gradient_noise: bool = False

    def sends_state(self, algorithm) -> bool:
        """``messages_before_step`` for ``algorithm``."""
        flag = self.messages_before_step
        return bool(flag(algorithm) if callable(flag) else flag)


_RECURSIONS: dict[type, SamplerRecursion] = {}


def register_recursion(cls: type, *, blocks=("position",),
                       messages_before_step: bool | Callable = True,
                       gradient_noise: bool = False):
    """Register ``step`` as the exact recursion of the sampler class ``cls`` (a decorator).

    Args:
        cls: a sampler class; its subclasses use the same recursion unless they register
            their own.
        blocks: the stacked state's block names, ``"position"`` first
            (:class:`SamplerRecursion`).
        messages_before_step: see :class:`SamplerRecursion`.
        gradient_noise: see :class:`SamplerRecursion`.

    Returns:
        A decorator that registers a function with :class:`SamplerRecursion`'s ``step``
        signature and returns it unchanged.

    Raises:
        ValueError: naming ``blocks``, for names outside :data:`BLOCKS` or a first block
            other than ``"position"``.
    """
    blocks = tuple(blocks)
    if not blocks or blocks[0] != "position" or any(b not in BLOCKS for b in blocks):
        raise ValueError(f"`blocks` must start with 'position' and name blocks of {BLOCKS}; "
                         f"got {blocks!r}.")

    def decorate(step):
        flag = messages_before_step if callable(messages_before_step) \
            else bool(messages_before_step)
        _RECURSIONS[cls] = SamplerRecursion(step, blocks, flag, bool(gradient_noise))
        return step

    return decorate


def recursion_of(algorithm) -> SamplerRecursion:
    """The :class:`SamplerRecursion` registered for ``type(algorithm)`` or its nearest base.

    Raises:
        TypeError: naming ``algorithm``, when no class of its type's MRO has one.
    """
    for cls in type(algorithm).__mro__:
        if cls in _RECURSIONS:
            return _RECURSIONS[cls]
    known = ", ".join(sorted(c.__name__ for c in _RECURSIONS))
    raise TypeError(
        f"`algorithm` must be a sampler with a registered exact recursion ({known}; "
        "dgsgld.theory.register_recursion adds one); got "
        f"{type(algorithm).__name__}.")


def check_gradient_noise(law: SamplerRecursion, algorithm, quadratic) -> None:
    """Refuse a quadratic with gradient noise for a recursion that does not take it.

    Raises:
        ValueError: naming ``quadratic.gradient_noise``.
    """
    if quadratic.gradient_noise is None:
        return
    if not law.gradient_noise:
        raise ValueError(f"`quadratic.gradient_noise`: the recursion of {label(algorithm)} "
                         "does not take gradient noise (register_recursion(..., "
                         "gradient_noise=True) where its step adds it).")
    shape = tuple(np.shape(quadratic.gradient_noise))
    if shape != (quadratic.num_agents, quadratic.dim, quadratic.dim):
        raise ValueError(f"`quadratic.gradient_noise` must be (N, d, d) = "
                         f"{(quadratic.num_agents, quadratic.dim, quadratic.dim)}; got {shape}.")


def is_directed(algorithm) -> bool:
    """Whether ``algorithm`` runs on column-stochastic networks (push-sum weights ride along)."""
    return getattr(algorithm, "network_kind", None) == COLUMN_STOCHASTIC


def label(algorithm) -> str:
    """The sampler's display name (``cls.name``), else its class name."""
    return getattr(type(algorithm), "name", type(algorithm).__name__)


def schedule_value(value, count, name: str, xp=jnp):
    """``value`` at iteration ``count``: a constant, or a schedule ``count -> value``.

    Raises:
        ValueError: naming ``name``, for a schedule in the stationary limit (``count=None``).
    """
    if callable(value):
        if count is None:
            raise ValueError(f"The stationary limit needs a constant `{name}`; got a schedule.")
        return xp.asarray(value(count))
    return xp.asarray(value)


def linear_recursion(algorithm, quadratic: Quadratic, mixing_matrix=None, *, step_size=None,
                     count=0, weight=None, xp=jnp) -> LinearRecursion:
    """One step of ``algorithm``'s exact recursion on ``quadratic`` (module docstring).

    Args:
        algorithm: a sampler whose class has a registered recursion (every sampler of
            :data:`dgsgld.samplers.ALL` has), e.g. ``dgsgld.DIGingSGLD(0.05)``.
        quadratic: the agents' quadratic potentials, ``N`` agents in ``d`` dimensions.
        mixing_matrix: ``W⁽ᵏ⁾ (N, N)``; ignored (may be ``None``) for a centralized sampler.
        step_size: ``η``; default the sampler's at ``count``.
        count: the iteration ``k`` of the sampler's schedules (step size, D-ULA's consensus).
        weight: the push-sum weights ``v⁽ᵏ⁾ (N,)`` of a directed sampler (default ones; then
            ``v⁽ᵏ⁺¹⁾ = W v⁽ᵏ⁾``); ignored for the others.
        xp: ``jax.numpy`` (jittable) or ``numpy``.

    Returns:
        :class:`LinearRecursion` of size ``n = len(blocks) · N d`` (``d`` for SGLD), in the
        quadratic's float dtype (float64 or wider with ``numpy``).

    Example:
        >>> import numpy as np, dgsgld
        >>> q = Quadratic(np.stack([np.eye(2), 2 * np.eye(2)]), np.ones((2, 2)))
        >>> rec = linear_recursion(dgsgld.DIGingSGLD(0.1), q, np.full((2, 2), 0.5), xp=np)
        >>> rec.matrix.shape, rec.noise.shape
        ((8, 8), (8, 4))
    """
    law = recursion_of(algorithm)
    check_gradient_noise(law, algorithm, quadratic)
    A = xp.asarray(quadratic.hessians)
    b = xp.asarray(quadratic.shifts)
    dtype = xp.result_type(A.dtype, b.dtype, float) if xp is np else A.dtype
    V = quadratic.gradient_noise
    q = Quadratic(A.astype(dtype), b.astype(dtype), quadratic.private,
                  None if V is None else xp.asarray(V).astype(dtype))
    eta = (schedule_value(algorithm.step_size, count, "step_size", xp) if step_size is None
           else xp.asarray(step_size))
    W = None
    if algorithm.decentralized:
        if mixing_matrix is None:
            raise ValueError(f"`mixing_matrix`: {label(algorithm)} needs one; got None.")
        W = xp.asarray(mixing_matrix, dtype=dtype)
    if is_directed(algorithm):
        weight = xp.ones(q.num_agents, dtype) if weight is None else xp.asarray(weight, dtype)
    else:
        weight = None
    return law.step(algorithm, q, W, eta.astype(dtype), count=count, weight=weight, xp=xp)


# ---------------------------------------------------------------- the library's recursions


def block_diag(xp, A):
    """``blockdiag(A_i) (N d, N d)`` of ``A (N, d, d)``."""
    N, d = A.shape[0], A.shape[-1]
    return xp.einsum("ij,iab->iajb", xp.eye(N, dtype=A.dtype), A).reshape(N * d, N * d)


class _Stacked(NamedTuple):
    """The stacked operators of one step (module docstring): ``eye``, ``Wb = 𝒲``, ``Ab = 𝐀``,
    ``bb = 𝐛`` ``(n = N d)``, the preconditioner's ``P = 𝐏``, ``S = 𝐒`` (``None``: the
    identity, and no operation) and the gradient noise's root ``Vr = 𝐕^{1/2}`` (``None``:
    exact gradients)."""

    N: int
    d: int
    eye: Array
    Wb: Array | None
    Ab: Array
    bb: Array
    P: Array | None
    S: Array | None
    Vr: Array | None = None

    def left(self, X):
        """``𝐏 X``."""
        return X if self.P is None else self.P @ X

    def right(self, X):
        """``X 𝐏``."""
        return X if self.P is None else X @ self.P

    def root(self):
        """``𝐒``."""
        return self.eye if self.S is None else self.S


def preconditioner_matrices(algorithm, d: int, dtype, xp):
    """``(P (d, d), S (d, d))`` of the sampler's preconditioner in ``dtype``, or
    ``(None, None)`` without one.

    Raises:
        ValueError: naming ``preconditioner``, when it is not ``d × d``.
    """
    pre = getattr(algorithm, "preconditioner", None)
    if pre is None:
        return None, None
    P, S = pre.dense(xp)
    if tuple(P.shape) != (d, d):
        raise ValueError(f"`preconditioner`: a {tuple(P.shape)} matrix for a quadratic in "
                         f"d = {d} dimensions.")
    return P.astype(dtype), S.astype(dtype)


def network_operator(W, quadratic, xp, own=None):
    """``𝒲 = W ⊗ I_d``, or with private coordinates ``W ⊗ D_s + own ⊗ D_p`` (``own``:
    what a private coordinate's message becomes, default ``I_N``; ``diag(v⁺/v)`` for a
    push-sum mass)."""
    d, dtype = quadratic.dim, quadratic.hessians.dtype
    mask = quadratic.private_coordinates
    if mask is None:
        return xp.kron(W, xp.eye(d, dtype=dtype))
    own = xp.eye(W.shape[0], dtype=dtype) if own is None else own
    Dp = xp.asarray(np.diag(mask.astype(float)), dtype)
    return xp.kron(W, xp.eye(d, dtype=dtype) - Dp) + xp.kron(own, Dp)


def _stacked(algorithm, quadratic, W, xp) -> _Stacked:
    A, b = quadratic.hessians, quadratic.shifts
    N, d = A.shape[0], A.shape[-1]
    dtype = A.dtype
    P, S = preconditioner_matrices(algorithm, d, dtype, xp)
    if P is not None:
        eye_N = xp.eye(N, dtype=dtype)
        P, S = xp.kron(eye_N, P), xp.kron(eye_N, S)
    Wb = None if W is None else network_operator(W, quadratic, xp)
    V = quadratic.gradient_noise
    Vr = None if V is None else block_diag(xp, _psd_root(xp.asarray(V, dtype), xp))
    return _Stacked(N, d, xp.eye(N * d, dtype=dtype), Wb, block_diag(xp, A), b.reshape(N * d),
                    P, S, Vr)


def _psd_root(V, xp):
    """Symmetric square roots of the positive semi-definite ``V (..., d, d)`` (negative
    eigenvalues of rounding set to 0)."""
    w, Q = xp.linalg.eigh(0.5 * (V + xp.swapaxes(V, -1, -2)))
    return xp.einsum("...ab,...b,...cb->...ac", Q, xp.sqrt(xp.maximum(w, 0.0)), Q)


def _with_columns(noise, extra, xp):
    """``G`` with the gradient noise's columns appended (``extra`` ``None``: unchanged)."""
    return noise if extra is None else xp.concatenate([noise, extra], axis=1)


def _tracked(M, blocks, Vr, xp):
    """A tracker sampler's gradient-noise columns ``(𝐌_{·,y} − E_y) 𝐕^{1/2}`` (module doc),
    or ``None`` without gradient noise."""
    if Vr is None:
        return None
    n, t = Vr.shape[0], blocks.index("tracker")
    E = xp.concatenate([xp.zeros((t * n, n), Vr.dtype), xp.eye(n, dtype=Vr.dtype),
                        xp.zeros(((len(blocks) - t - 1) * n, n), Vr.dtype)])
    return (M[:, t * n:(t + 1) * n] - E) @ Vr


def _scalar(value, dtype, xp):
    return xp.asarray(value).astype(dtype)


@register_recursion(SGLD, gradient_noise=True)
def _sgld(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta = step_size
    A, b = quadratic.joint(xp)
    eye = xp.eye(A.shape[-1], dtype=A.dtype)
    P, S = preconditioner_matrices(algorithm, A.shape[-1], A.dtype, xp)
    if P is not None:
        A, b, eye_root = P @ A, P @ b, S
    else:
        eye_root = eye
    extra = None
    if quadratic.gradient_noise is not None:  # the pooled gradient's error: Σ_i ξ_i
        if quadratic.private_coordinates is not None:
            raise ValueError("`quadratic.gradient_noise` with private coordinates is not "
                             "propagated for centralized SGLD.")
        root = _psd_root(xp.sum(xp.asarray(quadratic.gradient_noise, A.dtype), axis=0), xp)
        extra = -eta * (root if P is None else P @ root)
    return LinearRecursion(eye - eta * A, eta * b,
                           _with_columns(xp.sqrt(2.0 * eta) * eye_root, extra, xp))


@register_recursion(DESGLD, gradient_noise=True)
def _de(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta, p = step_size, _stacked(algorithm, quadratic, mixing_matrix, xp)
    extra = None if p.Vr is None else -eta * p.left(p.Vr)
    return LinearRecursion(p.Wb - eta * p.left(p.Ab), eta * p.left(p.bb),
                           _with_columns(xp.sqrt(2.0 * eta) * p.root(), extra, xp))


def _tracking_noise(algorithm):
    return getattr(algorithm, "tracking_noise", None)


@register_recursion(DIGingSGLD, blocks=("position", "tracker"),
                    messages_before_step=lambda a: _tracking_noise(a) is None,
                    gradient_noise=True)
def _diging(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta, p = step_size, _stacked(algorithm, quadratic, mixing_matrix, xp)
    M = xp.block([[p.Wb, -eta * p.left(p.eye)],
                   [p.Ab @ (p.Wb - p.eye), p.Wb - eta * p.right(p.Ab)]])
    root = p.eye if p.S is None else p.S
    noise = xp.sqrt(2.0 * eta) * xp.concatenate([root, p.Ab if p.S is None else p.Ab @ p.S])
    sigma = _tracking_noise(algorithm)
    if sigma is not None:  # private tracking: σ (𝒲 − I) ξ in the tracker, ξ ~ N(0, I)
        sigma = _scalar(schedule_value(sigma, count, "tracking_noise", xp), p.eye.dtype, xp)
        zero = xp.zeros_like(p.eye)
        noise = xp.concatenate([noise, xp.concatenate([zero, sigma * (p.Wb - p.eye)])], axis=1)
    noise = _with_columns(noise, _tracked(M, ("position", "tracker"), p.Vr, xp), xp)
    return LinearRecursion(M, xp.zeros(2 * p.N * p.d, p.eye.dtype), noise)


@register_recursion(EXTRASGLD, blocks=("position", "dual"), messages_before_step=False,
                    gradient_noise=True)
def _extra(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta, p = step_size, _stacked(algorithm, quadratic, mixing_matrix, xp)
    Wt, V2 = 0.5 * (p.eye + p.Wb), 0.5 * (p.eye - p.Wb)
    top = Wt - eta * p.left(p.Ab)
    M = xp.block([[top, -p.eye], [V2 @ top, p.eye - V2]])
    pb = p.left(p.bb)
    c = eta * xp.concatenate([pb, V2 @ pb])
    root = p.root()
    extra = None
    if p.Vr is not None:
        pv = p.left(p.Vr)
        extra = -eta * xp.concatenate([pv, V2 @ pv])
    return LinearRecursion(M, c, _with_columns(
        xp.sqrt(2.0 * eta) * xp.concatenate([root, V2 @ root]), extra, xp))


@register_recursion(DULA, gradient_noise=True)
def _d_ula(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta, p = step_size, _stacked(algorithm, quadratic, mixing_matrix, xp)
    beta = _scalar(schedule_value(algorithm.consensus, count, "consensus", xp), p.eye.dtype, xp)
    M = (1 - beta) * p.eye + beta * p.Wb - eta * p.N * p.left(p.Ab)
    extra = None if p.Vr is None else -eta * p.N * p.left(p.Vr)
    return LinearRecursion(M, eta * p.N * p.left(p.bb),
                           _with_columns(xp.sqrt(2.0 * p.N * eta) * p.root(), extra, xp))


@register_recursion(DESGHMC, blocks=("position", "velocity"), gradient_noise=True)
def _de_sghmc(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta, p = step_size, _stacked(algorithm, quadratic, mixing_matrix, xp)
    gamma = _scalar(algorithm.friction, p.eye.dtype, xp)
    a, kick = 1 - eta * gamma, xp.sqrt(2.0 * gamma * eta)
    PA, pb = p.left(p.Ab), p.left(p.bb)
    M = xp.block([[p.Wb - eta**2 * PA, eta * a * p.eye], [-eta * PA, a * p.eye]])
    c = xp.concatenate([eta**2 * pb, eta * pb])
    root = p.root()
    extra = None
    if p.Vr is not None:
        pv = p.left(p.Vr)
        extra = -xp.concatenate([eta**2 * pv, eta * pv])
    return LinearRecursion(M, c, _with_columns(kick * xp.concatenate([eta * root, root]),
                                               extra, xp))


@register_recursion(DIGingSGHMC, blocks=("position", "velocity", "tracker"),
                    gradient_noise=True)
def _diging_sghmc(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta, p = step_size, _stacked(algorithm, quadratic, mixing_matrix, xp)
    gamma = _scalar(algorithm.friction, p.eye.dtype, xp)
    a, kick = 1 - eta * gamma, xp.sqrt(2.0 * gamma * eta)
    n = p.N * p.d
    zero = xp.zeros((n, n), p.eye.dtype)
    Pm = p.left(p.eye)
    M = xp.block([
        [p.Wb, eta * a * p.eye, -(eta**2) * Pm],
        [zero, a * p.eye, -eta * Pm],
        [p.Ab @ (p.Wb - p.eye), eta * a * p.Ab, p.Wb - eta**2 * p.right(p.Ab)],
    ])
    root = p.root()
    noise = kick * xp.concatenate([eta * root, root, eta * p.Ab @ root])
    noise = _with_columns(noise, _tracked(M, ("position", "velocity", "tracker"), p.Vr, xp), xp)
    return LinearRecursion(M, xp.zeros(3 * n, p.eye.dtype), noise)


def _push_parts(algorithm, quadratic, C, weight, xp):
    """``(stacked operators, v⁽ᵏ⁾ (N,), v⁽ᵏ⁺¹⁾ = C v⁽ᵏ⁾, per)`` with ``per`` repeating agent
    values along the stacked ``(N d)`` axis."""
    p = _stacked(algorithm, quadratic, C, xp)
    v_next = C @ weight
    if quadratic.private_coordinates is not None:  # a private mass keeps its ratio u / v
        p = p._replace(Wb=network_operator(C, quadratic, xp, xp.diag(v_next / weight)))

    def per(values):
        return xp.repeat(values, p.d)

    return p, weight, v_next, per


def _mass(algorithm, v, v_next, xp):
    """``m`` of ``𝒟 = diag(√(2η m))``: the weight the noise is added with (module docstring)."""
    if algorithm.noise_rule != "mass":
        return xp.ones_like(v)
    return v_next if isinstance(algorithm, PushDIGingSGLD) else v


@register_recursion(PushDIGingSGLD, blocks=("position", "tracker"), gradient_noise=True)
def _push_diging(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta = step_size
    p, v, v_next, per = _push_parts(algorithm, quadratic, mixing_matrix, weight, xp)
    inv_next = 1.0 / per(v_next)
    root = xp.sqrt(2.0 * eta * per(_mass(algorithm, v, v_next, xp)))
    P = inv_next[:, None] * p.Wb * per(v)[None, :]
    Cy = network_operator(mixing_matrix, quadratic, xp)    # the tracker's: private ones kept
    if p.P is None:
        top_noise = inv_next[:, None] * xp.diag(root)
        M = xp.block([[P, -eta * xp.diag(inv_next)],
                      [p.Ab @ (P - p.eye), Cy - eta * p.Ab * inv_next[None, :]]])
    else:
        top_noise = (inv_next * root)[:, None] * p.S
        scaled = inv_next[:, None] * p.P            # 𝒱⁺⁻¹𝐏
        M = xp.block([[P, -eta * scaled], [p.Ab @ (P - p.eye), Cy - eta * p.Ab @ scaled]])
    n = p.N * p.d
    noise = _with_columns(xp.concatenate([top_noise, p.Ab @ top_noise]),
                          _tracked(M, ("position", "tracker"), p.Vr, xp), xp)
    return LinearRecursion(M, xp.zeros(2 * n, p.eye.dtype), noise)


@register_recursion(PushSumSGLD, gradient_noise=True)
def _push_sum(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
    eta = step_size
    p, v, v_next, per = _push_parts(algorithm, quadratic, mixing_matrix, weight, xp)
    inv_next = 1.0 / per(v_next)
    root = xp.sqrt(2.0 * eta * per(_mass(algorithm, v, v_next, xp)))
    mixed = inv_next[:, None] * p.Wb
    M = mixed @ (xp.diag(per(v)) - eta * p.left(p.Ab))
    noise = mixed * root[None, :] if p.S is None else mixed @ (root[:, None] * p.S)
    extra = None if p.Vr is None else -eta * mixed @ p.left(p.Vr)
    return LinearRecursion(M, eta * mixed @ p.left(p.bb), _with_columns(noise, extra, xp))
