"""Push-sum Langevin samplers for directed time-varying networks (column-stochastic ``C⁽ᵏ⁾``).

Mixing convention: ``x⁺ = C x``, ``C[i, j]`` is what agent ``j`` sends to agent ``i``; columns
sum to 1, rows need not (:mod:`dgsgld.networks.directed`). Push-sum runs every quantity as a
*mass* ``u`` next to a scalar weight ``v`` per agent (``v⁽⁰⁾ = 1``, ``v⁺ = C v``, deterministic)
and reads positions as ``x = u / v``. Column stochasticity conserves ``Σ_i u_i``, ``Σ_i v_i = N``
and the tracker's ``Σ_i y_i``, and pushes ``u`` towards ``v · (Σ_i u_i / N)``, so every ``x_i``
approaches the network average ``ū = Σ_i u_i / N``. With ``s_i`` the noise scale of agent ``i``:

Push-DIGing-SGLD (Push-DIGing of Nedić, Olshevsky & Shi 2017 in the combine-then-adapt order of
DIGing-SGLD, eqs. 3.2-3.3), state ``(x, y, v, ∇̃F(x))``, ``y⁽⁰⁾ = ∇̃F(x⁽⁰⁾)``::

    v⁺ = C v,    u⁺ = C (v ⊙ x) − η y + s ⊙ w,    x⁺ = u⁺ / v⁺,
    y⁺ = C y + ∇̃F(x⁺) − ∇̃F(x).

The stochastic gradient at ``x⁺`` is drawn once, used in ``y⁺``, kept and subtracted at the
next step (eq. 3.5), so ``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` at every iteration. On a doubly stochastic
schedule ``v ≡ 1`` and this is DIGing-SGLD.

Push-sum SGLD, the baseline of Kolesov & Kungurtsev ("Decentralized Langevin dynamics over a
directed graph", arXiv 2103.05444): subgradient-push (Nedić & Olshevsky 2015) with Langevin
noise, no tracking, each agent's own gradient at its ratio ``x_i = u_i / v_i``::

    u = v ⊙ x − α ∇̃F(x) + s ⊙ w,    v⁺ = C v,    x⁺ = (C u) / v⁺,

with a decaying step ``α_k`` (any schedule ``count -> α``, e.g. from optax; a constant runs
too). On a doubly stochastic schedule it is DE-SGLD in adapt-then-combine order,
``x⁺ = W (x − α ∇̃F(x) + √(2α) w)``.

Where the noise enters (``noise_rule="mass"``, the default): ``s_i = √(2η v_i)`` with the
weight ``v_i`` that the noise is added with (``v⁺`` for Push-DIGing-SGLD, ``v`` for push-sum
SGLD).

1. Exactness of the average. Summing the ``u``-update,
   ``ū⁺ = ū − (η/N) Σ_i g_i + (1/N) Σ_i s_i w_i`` with ``Σ_i g_i = Σ_i y_i`` (or the gradients
   themselves): ULA on ``f = Σ_i f_i`` at step ``η/N`` — the chain whose law tends to the
   posterior ``∝ exp(−f)`` as ``η → 0`` — if and only if ``Σ_i s_i² = 2ηN``. Any other total
   leaves a variance bias that does not vanish with ``η``: ``√(2η)`` on every *position*
   (``s_i = √(2η) v_i``) inflates the posterior variance by ``mean(v²) ≥ 1``.
2. Locality. ``s_i`` may depend only on what agent ``i`` knows (``η``, ``v_i``). For
   ``Σ_i s(v_i)² = 2ηN`` to hold for every weight vector (``v ≥ 0``, ``Σ v = N``), ``s²`` must be
   affine: ``s(v)² = 2η (1 + a (v − 1))`` with ``a ∈ [−1/(N−1), 1]``. ``a = 0`` is the uniform
   ``√(2η)`` of [35]'s update.
3. The agents' own noise. In ``x = u / v`` agent ``i`` receives variance ``s_i² / v_i²``
   ``= 2η (1 + a (v_i − 1)) / v_i²``; the largest over agents (the lightest agent) is smallest
   at ``a = 1``, the end of the admissible range: ``s_i² = 2η v_i``. Then each agent's update
   is an exact local Langevin step at its own step ``η_i = η / v_i``: for push-sum SGLD
   ``u_i = v_i (x_i − η_i ∇̃f_i(x_i) + √(2η_i) w_i)``, a Langevin step on ``f_i`` followed by the
   push-sum average of the agents' proposals; for Push-DIGing-SGLD
   ``x_i⁺ = Σ_j A_ij x_j − η_i y_i + √(2η_i) w_i`` with the row-stochastic
   ``A_ij = C_ij v_j / v_i⁺``. Drift and diffusion are split among the agents in proportion to
   their weights, as the tracker splits the gradient (``y_i ≈ v_i ȳ``).

Read-out. Push-DIGing-SGLD reads ``x⁺`` right after its noise, as DIGing-SGLD (eq. 3.2) does,
so each agent's position carries a fresh variance ``2η / v_i⁺`` on top of the average's; push-sum
SGLD reads its positions after the push-sum average of the agents' proposals, which averages
that fresh noise (at the price of a network bias where the local potentials disagree, which
the tracker removes).

Channels (:mod:`dgsgld.communication`): the mass ``u`` (and Push-DIGing's tracker ``y``) goes
through the channel like any message; the weight ``v`` is sent exact beside the mass over the
same used matrix ``C'`` (:func:`dgsgld.communication.send_mass`). A dropped one-way link's
weight stays with its sender and an inactive agent's row and column are ``e_i``, so ``C'`` is
column stochastic: ``Σ_i v_i = N`` and, with exact or error-feedback messages,
``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` still hold. Between rounds (``every``, ``probability``) neither
``u`` nor ``v`` is mixed, and an agent's step is a local Langevin step at ``η / v_i``.

``noise_rule="uniform"`` gives ``s_i = √(2η)`` (``a = 0``, the update as printed in [35]). Both are
exact for the average; they differ in the agents' spread around it, most where ``v`` is uneven
(``tests/samplers/test_pushsum.py`` compares their exact laws).

With ``preconditioner=M`` (``S Sᵀ = M``, the same on every agent) the drift is ``η M y`` resp.
``α M ∇̃F(x)`` and the noise ``s ⊙ (S w)``, agent by agent: the average is then preconditioned
ULA on ``f`` at step ``η/N`` under the same condition ``Σ_i s_i² = 2ηN``.
"""

from typing import ClassVar, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._util import private as _private
from .._util import tree as _tree
from .._util.types import Array, PRNGKey, PyTree
from ..communication import Channel, as_channel, hold, init_states, send, send_mass
from ..gradients import GradientEstimator, as_estimator
from .base import SamplingAlgorithm

__all__ = [
    "PushDIGingSGLD",
    "PushDIGingState",
    "PushSumSGLD",
    "PushSumState",
]

NoiseRule = Literal["mass", "uniform"]


def _noise_rule(rule) -> str:
    if rule not in ("mass", "uniform"):
        raise ValueError(f"`noise_rule` must be 'mass' or 'uniform'; got {rule!r}.")
    return rule


def _initial_weight(position: PyTree) -> Array:
    """``v⁽⁰⁾ = 1``, ``(N, 1)`` in the dtype of the first position leaf.

    A column, not ``(N,)``: the runner keeps a leaf's chain axis last when its own last axis is
    shorter than the number of chains, and ``C v`` must then be the same product, with the
    same rounding, as for the positions, whatever the number of chains.
    """
    leaf = jax.tree.leaves(position)[0]
    return jnp.ones(jnp.shape(leaf)[:1] + (1,), jnp.result_type(leaf))


def _per_agent(v: Array, tree: PyTree) -> PyTree:
    """``v (N, 1)`` broadcast to every leaf's ``(N, ...)`` shape and dtype."""
    return jax.tree.map(
        lambda leaf: jnp.broadcast_to(
            v.astype(leaf.dtype).reshape(v.shape[:1] + (1,) * (leaf.ndim - 1)), leaf.shape),
        tree,
    )


def _reciprocal(v: Array) -> Array:
    """``1 / v`` of the ``(N, 1)`` weights, for the read-out ``x = u ⊙ (1 / v)``.

    XLA rewrites a division by a broadcast ``u / v`` into ``u * (1 / v)`` where the divisor is
    still a broadcast in its graph (one device) and not where it has been folded into a layout
    (inside ``shard_map``): the two round apart by an ulp. Written out, the read-out is one
    correctly rounded reciprocal and one product on every runner.
    """
    return 1.0 / v


def _mass(v: Array, rule: str) -> Array:
    """``s² / (2η)`` per agent: ``v`` (``"mass"``) or 1 (``"uniform"``)."""
    return v if rule == "mass" else jnp.ones_like(v)


class PushDIGingState(NamedTuple):
    """Network state of Push-DIGing-SGLD; leaves ``(N, *param_shape)`` unless stated.

    Attributes:
        position: ``x⁽ᵏ⁾ = u⁽ᵏ⁾ / v⁽ᵏ⁾``.
        tracker: ``y⁽ᵏ⁾`` (a mass: ``y_i ≈ v_i`` times the network-average gradient).
        weight: ``v⁽ᵏ⁾``, ``(N, 1)``, the push-sum weights (sum ``N``).
        grad: ``∇̃F(x⁽ᵏ⁾)``, the stochastic gradient drawn at ``x⁽ᵏ⁾``.
        count: iteration number ``k`` (scalar int).
        estimator: the gradient estimator's state (``()`` for plain mini-batches).
        channel: the channel states of the messages ``position`` (the mass ``u``, sent with
            the weight) and ``tracker`` (:mod:`dgsgld.communication`; ``()`` without one).
    """

    position: PyTree
    tracker: PyTree
    weight: Array
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


class PushDIGingSGLD(SamplingAlgorithm):
    """Push-DIGing-SGLD (module docstring): ``PushDIGingSGLD(step_size, estimator=None, *,
    noise_rule="mass", normal=jax.random.normal, channel=None)``.

    Over a directed (column-stochastic) schedule, with a constant step or a schedule
    ``count -> η``; ``estimator`` from :mod:`dgsgld.gradients`; ``noise_rule`` where the
    Langevin noise enters (``"mass"``: ``√(2η v_i)``, derived in :mod:`dgsgld.samplers.pushsum`;
    ``"uniform"``: ``√(2η)``); ``channel`` a :class:`dgsgld.communication.Channel` for the
    mass and tracker messages (the weights go exact beside the masses:
    :func:`dgsgld.communication.send_mass`).
    """

    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    noise_rule: str = eqx.field(default="mass", converter=_noise_rule, static=True,
                                kw_only=True)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    network_kind: ClassVar[str] = "column_stochastic"
    name: ClassVar[str] = "Push-DIGing-SGLD"

    def init(self, position: PyTree, potential, key: PRNGKey) -> PushDIGingState:
        """``v⁽⁰⁾ = 1``, ``y⁽⁰⁾ = ∇̃F(x⁽⁰⁾)``."""
        grad, est = self.estimator.start(potential, position, key)
        channel = init_states(self.channel, potential.private_mask(position), position=position,
                              tracker=grad)
        return PushDIGingState(position, grad, _initial_weight(position), grad,
                               jnp.zeros((), jnp.int32), est, channel)

    def step(self, key: PRNGKey, state: PushDIGingState, potential, mixing_matrix: Array,
             noise: PyTree | None = None) -> PushDIGingState:
        """One iteration with the column-stochastic ``C⁽ᵏ⁾ (N, N)``."""
        private = potential.private_mask(state.position)
        eta, grad_key, _, noise = self._step_inputs(key, state, noise)
        u = jax.tree.map(jnp.multiply, _per_agent(state.weight, state.position), state.position)
        mixed, weight, channel = send_mass(self.channel, key, state.channel, "position",
                                           mixing_matrix, u, state.weight, state.count,
                                           private=private)
        scale2 = 2.0 * eta

        def one(b, d, mass, inv, w):
            e = eta.astype(b.dtype)
            return (b - e * d + jnp.sqrt(scale2.astype(b.dtype) * mass) * w) * inv

        position = _tree.in_noise_shape(
            one, noise, mixed, self._precondition(state.tracker, state.position),
            _per_agent(_mass(weight, self.noise_rule), mixed),
            _per_agent(_reciprocal(weight), mixed))
        grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        mixed_tracker, channel = send(self.channel, key, channel, "tracker", mixing_matrix,
                                      state.tracker, state.count, directed=True, private=private)
        tracker = _tree.tree_add(mixed_tracker, _tree.tree_sub(grad, state.grad))
        tracker = _private.where(private, grad, tracker)  # a private leaf's own gradient
        new = PushDIGingState(position, tracker, weight, grad, state.count + 1, est, channel)
        return hold(self.channel, key, state, new, mixing_matrix)


class PushSumState(NamedTuple):
    """Network state of push-sum SGLD: ``position`` ``x = u / v`` leaves
    ``(N, *param_shape)``; ``weight`` ``v (N, 1)``; ``grad = ∇̃F(x)`` like ``position``
    (``None``: drawn by the next step); ``count``; the estimator's state; the channel state of
    the message ``position`` (the mass ``u`` with the weight; ``()`` without a channel)."""

    position: PyTree
    weight: Array
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


class PushSumSGLD(SamplingAlgorithm):
    """Push-sum SGLD, the baseline of Kolesov & Kungurtsev (module docstring):
    ``PushSumSGLD(step_size, estimator=None, *, noise_rule="mass", normal=jax.random.normal,
    channel=None)``.

    ``step_size`` is ``α_k``: a decaying schedule ``count -> α`` as there (e.g.
    ``optax.polynomial_schedule`` or :class:`dgsgld.samplers.PolynomialDecay`) or a constant;
    ``estimator``, ``noise_rule`` and ``channel`` as for :class:`PushDIGingSGLD`.
    """

    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    noise_rule: str = eqx.field(default="mass", converter=_noise_rule, static=True,
                                kw_only=True)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    network_kind: ClassVar[str] = "column_stochastic"
    name: ClassVar[str] = "Push-Sum-SGLD"

    def init(self, position: PyTree, potential, key: PRNGKey) -> PushSumState:
        grad, est = self.estimator.start(potential, position, key)
        return PushSumState(position, _initial_weight(position), grad, jnp.zeros((), jnp.int32),
                            est, init_states(self.channel, potential.private_mask(position),
                                             position=position))

    def step(self, key: PRNGKey, state: PushSumState, potential, mixing_matrix: Array,
             noise: PyTree | None = None) -> PushSumState:
        private = potential.private_mask(state.position)
        alpha, grad_key, grad, noise = self._step_inputs(key, state, noise)
        scale2 = 2.0 * alpha

        def one(x, d, mass, v, w):
            a = alpha.astype(x.dtype)
            return v * x - a * d + jnp.sqrt(scale2.astype(x.dtype) * mass) * w

        u = _tree.in_noise_shape(
            one, noise, state.position, self._precondition(grad, state.position),
            _per_agent(_mass(state.weight, self.noise_rule), state.position),
            _per_agent(state.weight, state.position))
        mixed, weight, channel = send_mass(self.channel, key, state.channel, "position",
                                           mixing_matrix, u, state.weight, state.count,
                                           private=private)
        position = jax.tree.map(jnp.multiply, mixed, _per_agent(_reciprocal(weight), mixed))
        new_grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        new = PushSumState(position, weight, new_grad, state.count + 1, est, channel)
        return hold(self.channel, key, state, new, mixing_matrix)
