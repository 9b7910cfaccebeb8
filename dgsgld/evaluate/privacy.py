"""Differential privacy of what each agent's messages reveal: an accountant for every sampler.

Threat model. Agent ``i``'s neighbours are honest but curious and see every message it sends;
conservatively, the adversary knows everything but agent ``i``'s data and its private
randomness (its noise and mini-batch draws): the network, every other agent's data, state and
randomness, and the starting point (which must not depend on the data). Neighbouring data
sets differ in one datum of agent ``i`` (replace-one; ``n_i`` is public). The guarantee is
``(ε, δ)``-DP of the whole sequence of agent ``i``'s messages, and of all other agents'
messages too, since those are functions of what the adversary knows and of ``i``'s messages.

Mechanism. Every sampler here releases, at each step, an update whose only dependence on
agent ``i``'s data is ``a_k ∇̃f_i`` plus independent Gaussian noise of standard deviation
``s_k``: DE-SGLD and EXTRA-SGLD ``x⁺ = … − η ∇̃f_i + √(2η) w`` (EXTRA's dual is a function of
positions), D-ULA ``… − αN ∇̃f_i + √(2Nα) w``, DE-SGHMC ``v⁺ = … − η ∇̃f_i + √(2γη) w`` (read
off the positions: ``v⁺ = (x⁺ − W x) / η``), push-sum SGLD's mass ``u = v x − α ∇̃f_i + s w``
with ``s² = 2α v_i`` (``noise_rule="mass"``) or ``2α``, centralized SGLD ``x⁺ = x − η ∇̃f +
√(2η) w``. Given the history, step ``k`` is a Gaussian mechanism on agent ``i``'s clipped
gradient estimate with sensitivity ``a_k Δ_i`` and noise ``s_k``: noise multiplier
``z_ik = s_k / (a_k Δ_i)`` (dp-accounting's convention: standard deviation over the
replace-one L2 sensitivity). For SGLD-type steps ``z = √(2η) / (η Δ_i) = √(2/η) / Δ_i``.

Sensitivity of the gradient estimate (:func:`gradient_sensitivity`): with ``clip=C`` a
replaced datum moves its clipped gradient by at most ``2C``;

- mini-batches of ``b`` without replacement (``Potential``'s default: a uniform ``b``-subset,
  Floyd's algorithm or a table of subsets): ``Δ_i = 2C n_i / b`` given that the datum is
  drawn, which happens with probability ``q_i = b / n_i``: the subsampled Gaussian with
  sampling without replacement and the replace-one relation (dp-accounting's
  ``SampledWithoutReplacementDpEvent``, Rényi DP, Wang, Balle and Kasiviswanathan 2019);
- full local batches: ``Δ_i = 2C``, no sampling: the Gaussian mechanism, whose composition
  is exactly a Gaussian mechanism with ``μ² = Σ_k z_k⁻²`` (Gaussian DP), converted by the
  analytic Gaussian mechanism (Balle and Wang 2018, ``dp_accounting.get_epsilon_gaussian``);
- mini-batches with replacement (``replace=True``): a datum may be drawn ``b`` times, and
  dp-accounting's Rényi accountant has no event for this scheme: ``Δ_i = 2C n_i``, no
  amplification;
- SVRG and SAGA: their control variates reuse gradients of every datum (the anchor's full
  gradient, the table's sum) at every step, drawn or not: ``Δ_i = 2C (1 + 2 n_i / b)``, no
  amplification;
- a ``gradient_fn`` oracle or no ``clip``: unbounded (``ε = ∞``).

Composition over steps is adaptive (each step's mechanism may depend on all earlier
releases). Per-step multipliers follow the step-size schedule; for the Rényi accountant they
are rounded down to a grid of relative spacing :data:`GRID` (a smaller multiplier only
raises ``ε``) so that the few distinct values are computed once.

Channels (:mod:`dgsgld.communication`). Compression, error feedback, dropped links and gossip
change only what is sent about positions that exist anyway: post-processing, free. Steps
that send nothing (between rounds of ``every=τ``, a round that did not happen, a message an
event trigger held back) are NOT free: the agent still takes a Langevin step with its
gradient, and the next message it sends depends on it (after ``τ`` hidden steps the sent
position composes ``τ`` Gaussian mechanisms, exactly so when the clipped gradients do not
depend on ``x``), so every step is counted; an event trigger's decision is a function of the
position and the copies, so it is covered by the same count (and only by it: counting only
the steps that sent would be wrong, as whether a message is sent depends on the data).
Free are the steps at which the agent takes no step at all: an inactive agent
(``activity``, a clock's deadline) computes nothing that is released, and its activity is
drawn independently of the data. A ``(P, N)`` activity pattern is counted exactly; random
activity needs the realized mask (``active``, e.g. :func:`active_from_positions`), else every
step is counted. Point-to-point message counts (:func:`dgsgld.communication.messages_sent`)
are not what is accounted: one released position costs the same whatever the number of
neighbours that receive it, and a step without a message may still cost.

Gradient tracking. DIGing-SGLD, DIGing-SGHMC and Push-DIGing-SGLD send the tracker
``y⁺ = W y + ∇̃f_i(x⁺) − ∇̃f_i(x)`` without noise (and ``y⁽⁰⁾ = ∇̃f_i(x⁽⁰⁾)``): a neighbour
reads agent ``i``'s gradients exactly, so ``ε = ∞`` (``unbounded="tracker"``). The position
messages alone (as if the trackers travelled privately) are reported as ``position_epsilon``
for a static network: the tracker's sensitivity is ``Δ_y = Δ_i (1 + A_i)`` with
``A_i = Σ_{m≥1} |[Wᵐ]_ii − [Wᵐ⁻¹]_ii|`` (the datum's gradient enters ``y_i`` at every step,
once added and once subtracted, through the products of ``W``), with no amplification.
Private tracking (``DIGingSGLD(η, tracking_noise=σ)``, ``docs/guide/privacy.md``): agent
``j`` sends Gaussian public copies ``ŷ_j = y_j + ξ_j`` (``ξ_j ~ N(0, σ_k² I)`` fresh at every
step) and ``y⁺ = W ŷ − ξ + ∇̃F(x⁺) − ∇̃F(x) = W y + (W − I) ξ + ∇̃F(x⁺) − ∇̃F(x)``, which keeps
``Σ_i y_i = Σ_i ∇̃f_i`` exactly. By induction from ``y⁽⁰⁾ = ∇̃F(x⁽⁰⁾)``,
``e_j⁽ᵏ⁾ = y_j⁽ᵏ⁾ − ∇̃f_j(x_j⁽ᵏ⁾) = Σ_{s<k} ((W ŷ⁽ˢ⁾)_j − ŷ_j⁽ˢ⁾)`` is a function of the
copies sent before step ``k`` (the ``−∇̃f(x)`` of each step cancels the ``+∇̃f(x)`` of the
step before, and ``ξ_j = ŷ_j − y_j``). Step ``k`` releases ``ŷ_i⁽ᵏ⁾ = g + e + ξ`` and
``x_i⁽ᵏ⁺¹⁾ = (W x)_i − η e − η g + √(2η) w``, both about the one gradient ``g = ∇̃f_i(x_i⁽ᵏ⁾)``
(one mini-batch draw), with independent noises: one Gaussian mechanism of
``1/z² = (ηΔ)²/(2η) + Δ²/σ²``, sensitivity ``Δ_i`` (not ``2Δ_i`` as the difference
``∇̃f(x⁺) − ∇̃f(x)`` in one message suggests: each gradient enters the copies once, and the
copies' noise is fresh, not that of the differences). Through a channel the neighbours see
functions of the copies and of data-independent randomness: post-processing.

Preconditioners: with a constant ``M = S Sᵀ`` a step releases ``−η M g + √(2η) S w``; whitened
by ``S⁻¹`` this is ``−η Sᵀ g + √(2η) w``, whose sensitivity is at most ``‖S‖₂ Δ = √λ_max(M) Δ``,
so the drift's sensitivity is scaled by ``√λ_max(M)`` (exact for ``M = c I``: the step of
``η c`` without ``M``; for a low-rank ``M = D + U Uᵀ`` the bound ``max D + λ_max(UᵀU)``). The
tracker's copies are not preconditioned.

Not covered: the keys' secrecy is assumed (the noise is only as private as its key); the
32-bit draws of mini-batches favour some subsets by at most ``count / 2³²`` relative
probability, which the accountant ignores; and the samples an agent keeps are an output like
its messages (its last state is covered by the same count when the run ends with a step).
"""

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import gradients as _gradients
from .._util import tree as _tree
from ..communication import Identity
from ..networks._mixing import _dense_snapshot, as_mixing
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
    SamplingAlgorithm,
)
from ..samplers.precondition import (
    DensePreconditioner,
    DiagonalPreconditioner,
    LowRankPreconditioner,
)

__all__ = [
    "GRID",
    "MECHANISMS",
    "ORDERS",
    "Mechanism",
    "PrivacyReport",
    "Sensitivity",
    "active_from_positions",
    "gradient_sensitivity",
    "privacy_epsilon",
    "push_sum_weights",
    "register_mechanism",
    "tracker_gain",
]

#: Relative spacing of the grid that the Rényi accountant rounds noise multipliers down to.
GRID = 0.01
#: Rényi orders: integers up to 32, where the without-replacement bound is computed exactly,
#: then a few up to 128 (their cost grows as the square of the order).
ORDERS = (1.25, 1.5, 1.75, *range(2, 33), 40, 48, 56, 64, 80, 96, 128)


class Mechanism(NamedTuple):
    """What a sampler releases about agent ``i``'s gradient at steps ``0, ..., T − 1``: the
    update's data-dependent part is ``drift_k ∇̃f_i`` plus Gaussian noise of standard
    deviation ``noise_k``, both ``(T,)`` or ``(T, N)``; ``tracker``: the name of a message
    that carries gradients, else ``None``; ``tracker_noise``: ``None`` (that message is sent
    without noise: ``ε = ∞``), or ``(T,)``/``(T, N)`` standard deviations ``σ_k`` of Gaussian
    public copies of the tracker, each a Gaussian mechanism on the same ``∇̃f_i`` as the
    step's position (private tracking, ``docs/guide/privacy.md``): the step's two releases are one
    Gaussian mechanism of ``1/z² = (drift_k Δ / noise_k)² + (Δ / σ_k)²``."""

    drift: np.ndarray
    noise: np.ndarray
    tracker: str | None = None
    tracker_noise: np.ndarray | None = None


class Sensitivity(NamedTuple):
    """Replace-one sensitivity of each agent's gradient estimate (:func:`gradient_sensitivity`).

    Attributes:
        delta: ``(N,)`` ``Δ_i``, the largest L2 change of agent ``i``'s estimate when one of its
            data is replaced (``inf`` when unbounded).
        sampling: ``(N,)`` ``q_i = b / n_i`` where the change happens only when the datum is
            drawn (mini-batches without replacement), else 1 (no amplification).
        local_size: ``(N,)`` ``n_i``.
        batch_size: ``b``, or ``None`` for full local batches.
        scheme: what was assumed, in words.
    """

    delta: np.ndarray
    sampling: np.ndarray
    local_size: np.ndarray
    batch_size: int | None
    scheme: str


class PrivacyReport(NamedTuple):
    """Per-agent ``(ε, δ)`` of the messages of a run (:func:`privacy_epsilon`).

    Attributes:
        epsilon: ``(N,)`` ``ε`` of agent ``i``'s messages over ``num_steps`` steps (``inf``
            where a message is unbounded: see ``unbounded``).
        delta: ``δ``.
        num_steps: steps of the run.
        checkpoints: ``(K,)`` iterations at which ``curve`` is given.
        curve: ``(K, N)`` ``ε`` after each checkpoint's number of steps (``ε`` against
            iterations; its last row is ``epsilon`` when the last checkpoint is ``num_steps``).
        steps: ``(N,)`` Gaussian mechanisms accounted per agent (its active steps).
        noise_multiplier: ``(N,)`` the smallest per-step noise multiplier ``z_ik`` accounted
            (standard deviation over sensitivity; ``inf`` for an agent never active).
        sensitivity: ``(N,)`` ``Δ_i`` of the gradient estimate (:class:`Sensitivity`).
        sampling: ``(N,)`` ``q_i`` (1: no subsampling amplification).
        accountant: ``"gaussian"`` (exact composition of Gaussian mechanisms, converted by the
            analytic Gaussian mechanism), ``"rdp"`` or ``"pld"``.
        unbounded: ``None``, or what makes ``ε`` infinite: ``"tracker"`` (a message sent
            without noise), ``"gradient"`` (no clipping, or a gradient oracle).
        position_epsilon: ``(N,)`` for the gradient-tracking samplers, the ``ε`` of the
            position messages alone (trackers assumed private), or ``None`` where not
            derived (a time-varying or directed network: see ``notes``).
        notes: what was assumed and what is not covered, in words.
    """

    epsilon: np.ndarray
    delta: float
    num_steps: int
    checkpoints: np.ndarray
    curve: np.ndarray
    steps: np.ndarray
    noise_multiplier: np.ndarray
    sensitivity: np.ndarray
    sampling: np.ndarray
    accountant: str
    unbounded: str | None
    position_epsilon: np.ndarray | None
    notes: tuple[str, ...]


class _Context(NamedTuple):
    """Inputs some rules need beyond the sampler: the network and push-sum weights."""

    network: object
    weights: np.ndarray | None
    num_agents: int


# -- the samplers' mechanisms -------------------------------------------------------------


#: Sampler class -> rule ``(algorithm, num_steps, context) -> Mechanism``. A new sampler
#: adds one entry (:func:`register_mechanism`); subclasses inherit their base's rule.
MECHANISMS: dict[type, Callable] = {}


def register_mechanism(cls: type, rule: Callable | None = None):
    """Register ``rule(algorithm, num_steps, context) -> Mechanism`` for sampler ``cls``
    (usable as a decorator: ``@register_mechanism(MySampler)``)."""
    if not (isinstance(cls, type) and issubclass(cls, SamplingAlgorithm)):
        raise ValueError(f"`cls` must be a sampler class; got {cls!r}.")
    if rule is None:
        return lambda r: register_mechanism(cls, r)
    MECHANISMS[cls] = rule
    return rule


def _schedule(step_size, num_steps: int, name: str = "step_size") -> np.ndarray:
    """``(T,)`` float64: a constant or a schedule ``count -> value`` at ``0, ..., T − 1``."""
    counts = jnp.arange(num_steps, dtype=jnp.int32)
    values = np.asarray(jax.vmap(lambda c: _tree.resolve_step_size(step_size, c))(counts),
                        np.float64).reshape(num_steps)
    if not (np.isfinite(values).all() and (values > 0).all()):
        bad = int(np.flatnonzero(~(np.isfinite(values) & (values > 0)))[0])
        raise ValueError(f"`{name}` must be finite and positive at every step accounted; got "
                         f"{values[bad]!r} at step {bad}.")
    return values


def _langevin(algorithm, num_steps, context) -> Mechanism:
    eta = _schedule(algorithm.step_size, num_steps)
    return Mechanism(eta, np.sqrt(2.0 * eta))


def _dula(algorithm, num_steps, context) -> Mechanism:
    # α N ∇̃f_i with noise √(2Nα): the Langevin step at Nα.
    step = context.num_agents * _schedule(algorithm.step_size, num_steps)
    return Mechanism(step, np.sqrt(2.0 * step))


def _sghmc(algorithm, num_steps, context, tracker=None) -> Mechanism:
    # v⁺ = (1 − ηγ) v − η (∇̃f_i or y_i) + √(2γη) w, read off the positions.
    eta = _schedule(algorithm.step_size, num_steps)
    return Mechanism(eta, np.sqrt(2.0 * float(algorithm.friction) * eta), tracker)


def _diging(algorithm, num_steps, context) -> Mechanism:
    mech = _langevin(algorithm, num_steps, context)._replace(tracker="tracker")
    sigma = getattr(algorithm, "tracking_noise", None)
    if sigma is None:
        return mech
    return mech._replace(tracker_noise=_schedule(sigma, num_steps, "tracking_noise"))


def _push_sum(algorithm, num_steps, context) -> Mechanism:
    # u = v x − α ∇̃f_i + s w with s² = 2α v_i (mass rule, v = v⁽ᵏ⁾ before mixing) or 2α.
    alpha = _schedule(algorithm.step_size, num_steps)
    if algorithm.noise_rule == "uniform":
        return Mechanism(alpha, np.sqrt(2.0 * alpha))
    if context.weights is None:
        raise ValueError(
            "PushSumSGLD with noise_rule='mass' adds noise √(2α v_i) that shrinks with the "
            "push-sum weight v_i: pass `network` (weights computed by push_sum_weights) or "
            "`weights` ((num_steps, N), the run's v⁽ᵏ⁾).")
    return Mechanism(alpha[:, None], np.sqrt(2.0 * alpha[:, None] * context.weights[:num_steps]))


def _push_diging(algorithm, num_steps, context) -> Mechanism:
    alpha = _schedule(algorithm.step_size, num_steps)
    return Mechanism(alpha, np.sqrt(2.0 * alpha), "tracker")


for _cls, _rule in ((SGLD, _langevin), (DESGLD, _langevin), (EXTRASGLD, _langevin),
                    (DULA, _dula), (DESGHMC, _sghmc), (DIGingSGLD, _diging),
                    (DIGingSGHMC, lambda a, t, c: _sghmc(a, t, c, "tracker")),
                    (PushSumSGLD, _push_sum), (PushDIGingSGLD, _push_diging)):
    register_mechanism(_cls, _rule)


def _preconditioner_gain(preconditioner) -> float:
    """``√λ_max(M)`` (an upper bound for a low-rank ``M``), ``1`` without ``M`` (module
    docstring)."""
    if preconditioner is None:
        return 1.0
    if isinstance(preconditioner, DensePreconditioner):
        top = np.linalg.eigvalsh(np.asarray(preconditioner.matrix, np.float64))[-1]
    elif isinstance(preconditioner, DiagonalPreconditioner):
        top = max(float(np.max(np.asarray(leaf, np.float64)))
                  for leaf in jax.tree.leaves(preconditioner.diagonal))
    elif isinstance(preconditioner, LowRankPreconditioner):
        factor = np.asarray(preconditioner.factor, np.float64)
        top = float(np.max(np.asarray(preconditioner.diagonal, np.float64))) + float(
            np.linalg.eigvalsh(factor.T @ factor)[-1])
    else:
        raise ValueError(f"No sensitivity is derived for the preconditioner "
                         f"{type(preconditioner).__name__}: use a Dense, Diagonal or LowRank "
                         "preconditioner.")
    return float(np.sqrt(top))


def _rule_of(algorithm) -> Callable:
    for cls in type(algorithm).__mro__:
        if cls in MECHANISMS:
            return MECHANISMS[cls]
    raise ValueError(
        f"No privacy mechanism is registered for {type(algorithm).__name__}; add one with "
        "dgsgld.evaluate.privacy.register_mechanism(cls, rule).")


# -- sensitivity of the gradient estimate -------------------------------------------------


def gradient_sensitivity(potential, estimator=None) -> Sensitivity:
    """Replace-one sensitivity of every agent's clipped gradient estimate (module docstring).

    Args:
        potential: a :class:`dgsgld.Potential`; bounded only with ``clip``.
        estimator: the sampler's gradient estimator (``None``: plain mini-batches).
    """
    n = (np.full(potential.num_agents, potential.local_size) if potential.counts is None
         else np.asarray(potential.counts)).astype(np.float64)
    b = potential.batch_size
    ones = np.ones_like(n)
    if potential.gradient_fn is not None or potential.clip is None:
        what = "a gradient_fn oracle" if potential.gradient_fn is not None else "no clip"
        return Sensitivity(np.full_like(n, np.inf), ones, n, b, f"unbounded ({what})")
    c = float(potential.clip)
    estimator = _gradients.as_estimator(estimator)
    if isinstance(estimator, (_gradients.SVRG, _gradients.SAGA)):
        name = type(estimator).__name__
        return Sensitivity(2 * c * (1 + 2 * n / b), ones, n, b,
                           f"{name} control variate: every datum's gradient is reused at every "
                           "step, 2C(1 + 2n/b), no amplification")
    if not isinstance(estimator, _gradients.MiniBatch):
        raise ValueError(f"No sensitivity is derived for the estimator "
                         f"{type(estimator).__name__}; use minibatch(), svrg() or saga().")
    if b is None:
        return Sensitivity(2 * c * ones, ones, n, b, "full local batches, 2C")
    if potential.replace:
        return Sensitivity(2 * c * n, ones, n, b,
                           "mini-batches with replacement (a datum may be drawn b times), "
                           "2C n, no amplification")
    return Sensitivity(2 * c * n / b, b / n, n, b,
                       "uniform mini-batches without replacement, 2C n/b drawn with "
                       "probability b/n")


# -- networks -----------------------------------------------------------------------------


def _static_matrix(network) -> np.ndarray | None:
    """The one mixing matrix of a static network (an ``(N, N)`` array, a stack of equal
    matrices, a schedule of period 1), else ``None``."""
    if network is None:
        return None
    if isinstance(network, (np.ndarray, jax.Array, list, tuple)):
        arr = np.asarray(network, np.float64)
        if arr.ndim == 2:
            return arr
        if arr.ndim == 3 and np.all(arr == arr[:1]):
            return arr[0]
        return None
    mixing = as_mixing(network)
    if getattr(mixing, "period", None) == 1:
        return np.asarray(_dense_snapshot(mixing, 0), np.float64)
    return None


def tracker_gain(matrix, num_steps: int) -> np.ndarray:
    """``(N,)`` ``A_i = Σ_{m=1}^{T} |[Wᵐ]_ii − [Wᵐ⁻¹]_ii|`` for a static ``W`` ``(N, N)``.

    A datum's change ``δ_s`` in agent ``i``'s gradient at step ``s`` enters the tracker as
    ``y_i⁽ᵏ⁾ ∋ δ_k + Σ_{s<k} ([W^{k−s}]_ii − [W^{k−s−1}]_ii) δ_s`` (added at ``s``, subtracted
    at ``s + 1``, mixed in between), so ``‖δy_i‖ ≤ Δ (1 + A_i)`` at every ``k ≤ T``. For a
    symmetric ``W`` with nonnegative spectrum the diagonal of ``Wᵐ`` decreases to ``1/N`` and
    ``A_i < 1``. The powers stop once the diagonal has settled (``1e-12``)."""
    w = np.asarray(matrix, np.float64)
    power, prev = np.eye(w.shape[0]), np.ones(w.shape[0])
    gain = np.zeros(w.shape[0])
    for _ in range(int(num_steps)):
        power = power @ w
        diag = np.diagonal(power).copy()
        change = np.abs(diag - prev)
        gain += change
        prev = diag
        if change.max() < 1e-12 and np.abs(power - power @ w).max() < 1e-12:
            break
    return gain


def push_sum_weights(network, num_steps: int) -> np.ndarray:
    """``(T + 1, N)`` push-sum weights ``v⁽⁰⁾ = 1, v⁽ᵏ⁺¹⁾ = C⁽ᵏ⁾ v⁽ᵏ⁾`` of a column-stochastic
    schedule (any network :func:`dgsgld.sample` takes), as a run without random link drops
    or activity has them (with those, pass the run's own ``state.weight`` trace instead)."""
    if isinstance(network, (np.ndarray, jax.Array, list, tuple)):
        stack = np.asarray(network, np.float64)
        stack = stack[None] if stack.ndim == 2 else stack
        matrix_at = lambda k: stack[k % stack.shape[0]]  # noqa: E731 - (a directed stack
    else:                                                # is no MixingStack: not symmetric)
        mixing = as_mixing(network)
        matrix_at = lambda k: np.asarray(_dense_snapshot(mixing, k), np.float64)  # noqa: E731
    v = np.ones(matrix_at(0).shape[0])
    out = [v]
    for k in range(int(num_steps)):
        v = matrix_at(k) @ v
        out.append(v)
    return np.stack(out)


# -- accounting ---------------------------------------------------------------------------


def _dp():
    try:
        import dp_accounting
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError("The privacy accountant needs dp-accounting: pip install "
                          "'dgsgld[privacy]' (or dp-accounting>=0.4).") from err
    return dp_accounting


def _rounded_down(z: np.ndarray) -> np.ndarray:
    """``z`` rounded down to the grid ``(1 + GRID)^j`` (a smaller multiplier only raises ε)."""
    step = np.log1p(GRID)
    return np.exp(np.floor(np.log(z) / step + 1e-9) * step)


@lru_cache(maxsize=4096)
def _rdp_sampled(size: int, batch: int, multiplier: float) -> tuple[float, ...]:
    """RDP at :data:`ORDERS` of one Gaussian mechanism on a uniform ``batch``-subset of
    ``size`` data without replacement, replace-one relation (dp-accounting)."""
    dp = _dp()
    acc = dp.rdp.RdpAccountant(list(ORDERS), dp.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp.SampledWithoutReplacementDpEvent(
        size, batch, dp.GaussianDpEvent(multiplier)))
    return tuple(float(r) for r in acc.rdp)


def _gaussian_epsilon(mu2: float, delta: float, accountant: str) -> float:
    """``ε`` of a Gaussian mechanism of ``μ² = Σ z⁻²`` (the exact composition)."""
    if mu2 <= 0:
        return 0.0
    dp = _dp()
    z = 1.0 / np.sqrt(mu2)
    if accountant == "pld":
        # dp-accounting's PLD counts sensitivity per datum: a replacement moves the mean by
        # twice it, so our multiplier (over the replace-one shift) is half of its own.
        acc = dp.pld.PLDAccountant(dp.NeighboringRelation.REPLACE_ONE)
        acc.compose(dp.GaussianDpEvent(2.0 * z))
        return float(acc.get_epsilon(delta))
    if accountant == "rdp":
        acc = dp.rdp.RdpAccountant(list(ORDERS), dp.NeighboringRelation.REPLACE_ONE)
        acc.compose(dp.GaussianDpEvent(z))
        return float(acc.get_epsilon(delta))
    return float(dp.get_epsilon_gaussian(z, delta))


def _agent_curve(z: np.ndarray, active: np.ndarray, q: float, n: float, b: int | None,
                 delta: float, checkpoints: np.ndarray, accountant: str) -> np.ndarray:
    """``(K,)`` ``ε`` of one agent after each checkpoint's steps: per-step multipliers ``z``
    ``(T,)``, ``active`` ``(T,)`` bool."""
    if q >= 1:
        mu2 = np.concatenate([[0.0], np.cumsum(np.where(active, z ** -2.0, 0.0))])
        return np.array([_gaussian_epsilon(mu2[c], delta, accountant) for c in checkpoints])
    dp = _dp()
    grid = _rounded_down(z)
    values, index = np.unique(grid, return_inverse=True)
    table = np.array([_rdp_sampled(int(round(n)), int(b), float(v)) for v in values])
    out = []
    for c in checkpoints:
        counts = np.bincount(index[:c][active[:c]], minlength=len(values))
        rdp = counts @ table
        out.append(0.0 if c == 0 or not counts.any() else float(
            dp.rdp.rdp_privacy_accountant.compute_epsilon(list(ORDERS), list(rdp), delta)[0]))
    return np.array(out)


def _activity(channel, num_steps: int, num_agents: int, active) -> tuple[np.ndarray, list]:
    """``(T, N)`` bool: the steps accounted per agent, and notes."""
    notes = []
    if active is not None:
        mask = np.asarray(active)
        if mask.shape != (num_steps, num_agents) or not (
                mask.dtype == bool or np.isin(mask, (0, 1)).all()):
            raise ValueError(f"`active` must be a (num_steps, N) = {(num_steps, num_agents)} "
                             f"mask of 0/1 or bools; got shape {mask.shape}.")
        return mask.astype(bool), ["active steps from the given mask"]
    mask = np.ones((num_steps, num_agents), bool)
    if channel is None:
        return mask, notes
    if isinstance(channel.activity, tuple):
        pattern = np.asarray(channel.activity, bool)
        if pattern.shape[1] != num_agents:
            raise ValueError(f"the channel's activity pattern has {pattern.shape[1]} agents; "
                             f"the potential has {num_agents}.")
        mask = pattern[np.arange(num_steps) % pattern.shape[0]]
        notes.append("inactive steps of the activity pattern are free")
    elif channel.activity < 1 or (channel.clock is not None
                                  and channel.clock.deadline is not None):
        notes.append("random activity: every step is counted (pass `active`, the realized "
                     "mask, e.g. active_from_positions, to count only the active ones)")
    return mask, notes


def _channel_notes(channel) -> list:
    if channel is None:
        return []
    notes = []
    if not isinstance(channel.compressor, Identity) or channel.error_feedback:
        notes.append("compression and error feedback are post-processing (free)")
    if channel.every > 1 or channel.probability < 1:
        notes.append("local steps between rounds are counted (they shape the next message)")
    if channel.threshold is not None:
        notes.append("event trigger: every step is counted (whether to send depends on the "
                     "data; counting only the sent steps would not be a bound)")
    return notes


def active_from_positions(positions) -> np.ndarray:
    """``(C, T, N)`` bool: whether agent ``i`` of chain ``c`` took step ``k`` (``k = 0..T-1``),
    from the positions of every iteration ``0..T``: ``trace.positions`` of a run kept with
    ``thin=1``, leaves ``(C, T + 1, N, ...)``. An active agent's position moves (its Gaussian
    noise is nonzero with probability one); an inactive one's is kept exactly. Pass one
    chain's ``[c]`` as :func:`privacy_epsilon`'s ``active``."""
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(positions)]
    if not leaves or any(leaf.ndim < 3 for leaf in leaves) \
            or len({leaf.shape[:3] for leaf in leaves}) != 1 or leaves[0].shape[1] < 2:
        raise ValueError("`positions` must have leaves (num_chains, T + 1, N, ...) with T >= 1 "
                         "(trace.positions with thin=1); got shapes "
                         f"{[leaf.shape for leaf in leaves]}.")
    moved = [(np.diff(leaf, axis=1) != 0).reshape(leaf.shape[0], leaf.shape[1] - 1,
                                                   leaf.shape[2], -1).any(axis=-1)
             for leaf in leaves]
    return np.logical_or.reduce(moved)


def privacy_epsilon(
    algorithm: SamplingAlgorithm,
    potential,
    num_steps: int,
    delta: float,
    *,
    channel=None,
    network=None,
    active=None,
    weights=None,
    checkpoints: Sequence[int] | None = None,
    accountant: str = "auto",
) -> PrivacyReport:
    """Per-agent ``(ε, δ)`` of the messages a run of ``algorithm`` sends (module docstring:
    threat model, mechanisms, what is and is not covered).

    Args:
        algorithm: a sampler (its class picks the mechanism in :data:`MECHANISMS`; its step
            size, schedules included, friction and estimator are read from it).
        potential: the run's :class:`dgsgld.Potential`, with ``clip`` (else ``ε = ∞``).
        num_steps: ``T``, the steps of the run (``dgsgld.sample``'s ``num_steps``).
        delta: ``δ`` in ``(0, 1)``.
        channel: the run's :class:`dgsgld.communication.Channel` (default: the sampler's).
        network: the mixing schedule (any network ``dgsgld.sample`` takes): for the position
            messages of the gradient-tracking samplers (static networks) and push-sum weights.
        active: ``(T, N)`` bool, the steps each agent took (e.g. one chain of
            :func:`active_from_positions`); default: every step, or a channel's activity
            pattern.
        weights: ``(T, N)`` push-sum weights ``v⁽ᵏ⁾`` for :class:`~dgsgld.PushSumSGLD` with
            ``noise_rule="mass"`` (default: :func:`push_sum_weights` of ``network``).
        checkpoints: iterations at which to report ``ε`` (``curve``); default ``(T,)``.
        accountant: ``"auto"`` (full batches: the exact composition of Gaussian mechanisms,
            converted by the analytic Gaussian mechanism; mini-batches without replacement:
            Rényi DP), ``"rdp"`` (Rényi DP throughout) or ``"pld"`` (privacy-loss
            distributions; not for subsampled mechanisms).

    Returns:
        A :class:`PrivacyReport`.

    Example:
        >>> import jax.numpy as jnp, dgsgld
        >>> from dgsgld.evaluate.privacy import privacy_epsilon
        >>> data = (jnp.ones((4, 50, 2)), jnp.zeros((4, 50)))
        >>> pot = dgsgld.Potential(lambda t, d: -0.5 * (d[0] @ t - d[1]) ** 2, None, data,
        ...                        clip=1.0)
        >>> report = privacy_epsilon(dgsgld.DESGLD(0.01), pot, 100, 1e-5)
        >>> report.epsilon.shape, report.accountant
        ((4,), 'gaussian')
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) \
            or num_steps < 1:
        raise ValueError(f"`num_steps` must be a positive integer; got {num_steps!r}.")
    num_steps = int(num_steps)
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating)) \
            or not 0 < float(delta) < 1:
        raise ValueError(f"`delta` must be a number in (0, 1); got {delta!r}.")
    delta = float(delta)
    if accountant not in ("auto", "rdp", "pld"):
        raise ValueError(f"`accountant` must be 'auto', 'rdp' or 'pld'; got {accountant!r}.")
    if not isinstance(algorithm, SamplingAlgorithm):
        raise ValueError(f"`algorithm` must be a dgsgld sampler; got {type(algorithm).__name__}.")
    checkpoints = np.array([num_steps] if checkpoints is None else checkpoints, np.int64)
    if checkpoints.ndim != 1 or checkpoints.size == 0 or (checkpoints < 0).any() \
            or (checkpoints > num_steps).any():
        raise ValueError(f"`checkpoints` must be iterations in [0, num_steps = {num_steps}]; "
                         f"got {checkpoints.tolist()}.")
    n_agents = potential.num_agents
    if channel is None:
        channel = getattr(algorithm, "channel", None)
    rule = _rule_of(algorithm)
    if weights is None and network is not None and getattr(algorithm, "noise_rule", None) \
            == "mass" and isinstance(algorithm, PushSumSGLD):
        if channel is not None and (channel.probability < 1 or channel.gossip is not None
                                    or channel.activity != 1.0 or (
                                        channel.clock is not None
                                        and channel.clock.deadline is not None)):
            raise ValueError(
                "The channel drops links or agents at random, so the push-sum weights of the "
                "run differ from the schedule's: pass `weights`, the run's v⁽ᵏ⁾ (a trace of "
                "state.weight), rather than `network`.")
        weights = push_sum_weights(network, num_steps)
    if weights is not None:
        weights = np.asarray(weights, np.float64)
        if weights.ndim != 2 or weights.shape[0] < num_steps or weights.shape[1] != n_agents \
                or not (weights > 0).all():
            raise ValueError(f"`weights` must be positive push-sum weights of shape "
                             f"(num_steps, N) = {(num_steps, n_agents)}; got {weights.shape}.")
    mech = rule(algorithm, num_steps, _Context(network, weights, n_agents))
    sens = gradient_sensitivity(potential, getattr(algorithm, "estimator", None))
    mask, notes = _activity(channel, num_steps, n_agents, active)
    notes = [sens.scheme] + notes + _channel_notes(channel)
    gain = _preconditioner_gain(getattr(algorithm, "preconditioner", None))
    if gain != 1.0:
        notes.append(f"preconditioner: drift sensitivity scaled by √λ_max(M) = {gain:.4g}")
    drift = gain * np.broadcast_to(
        np.asarray(mech.drift, np.float64).reshape(num_steps, -1), (num_steps, n_agents))
    noise = np.broadcast_to(np.asarray(mech.noise, np.float64).reshape(num_steps, -1),
                            (num_steps, n_agents))
    sampled = (sens.sampling < 1).any()
    if accountant == "pld" and sampled:
        raise ValueError("accountant='pld' has no event for mini-batches drawn without "
                         "replacement under the replace-one relation; use 'rdp' or 'auto'.")
    name = accountant if accountant != "auto" else ("rdp" if sampled else "gaussian")
    steps = mask.sum(axis=0)
    bounded = np.isfinite(sens.delta).all()

    points = np.union1d(checkpoints, [num_steps])          # sorted, with the end

    def curves(z, q, how):
        return np.stack([_agent_curve(z[:, i], mask[:, i], q[i], sens.local_size[i],
                                      sens.batch_size, delta, points, how)
                         for i in range(n_agents)], axis=1)

    position = None
    if not bounded:
        curve = np.full((points.size, n_agents), np.inf)
        unbounded, z_min = "gradient", np.full(n_agents, np.inf)
        notes.append("ε = ∞: a datum's gradient is unbounded without clipping")
    else:
        z = noise / (drift * sens.delta[None, :])
        if mech.tracker is not None and mech.tracker_noise is not None:
            sigma = np.broadcast_to(np.asarray(mech.tracker_noise, np.float64).reshape(
                num_steps, -1), (num_steps, n_agents))
            z = 1.0 / np.sqrt(z ** -2.0 + (sens.delta[None, :] / sigma) ** 2)
            notes.append(f"private {mech.tracker}: its Gaussian public copies and the position "
                         "are one Gaussian mechanism per step")
        z_min = np.where(steps > 0, np.where(mask, z, np.inf).min(axis=0), np.inf)
        unbounded = mech.tracker if mech.tracker_noise is None else None
        if unbounded is None:
            curve = curves(z, sens.sampling, name)
        else:
            curve = np.full((points.size, n_agents), np.inf)
            notes.append(f"ε = ∞: the {mech.tracker} messages carry gradients without noise")
            static = _static_matrix(network)
            if static is None or isinstance(algorithm, PushDIGingSGLD):
                notes.append("position messages alone: derived for a static undirected "
                             "network only (pass `network`)")
            else:
                gain = tracker_gain(static, num_steps)
                z_pos = noise / (drift * (sens.delta * (1.0 + gain))[None, :])
                how = "gaussian" if accountant == "auto" else accountant
                position = curves(z_pos, np.ones(n_agents), how)[-1]
                notes.append("position messages alone: tracker sensitivity Δ(1 + A_i), "
                             f"A = {np.round(gain, 3).tolist()}, no amplification")
    keep = np.searchsorted(points, checkpoints)
    epsilon = curve[-1]
    return PrivacyReport(np.asarray(epsilon, np.float64), delta, num_steps, checkpoints,
                         curve[keep], steps, z_min, sens.delta, sens.sampling, name, unbounded,
                         position, tuple(notes))
