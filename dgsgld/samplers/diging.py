"""DIGing-SGLD: Langevin dynamics with DIGing gradient tracking (eqs. 3.2–3.3).

    x⁺ = W x − η y + √(2η) w,
    y⁺ = W y + ∇̃F(x⁺) − ∇̃F(x),        y⁽⁰⁾ = ∇̃F(x⁽⁰⁾).

The stochastic gradient at ``x⁺`` is drawn once, used in ``y⁺``, kept in the state and
subtracted again at the next step (eq. 3.5). Hence ``sum_i y_i = sum_i ∇̃f_i(x_i)`` holds at
every iteration up to rounding; re-drawing a mini-batch for the old point would break this and
let the average tracker random-walk.

With ``preconditioner=M`` the step is ``x⁺ = W x − η M y + √(2η) S w`` (``S Sᵀ = M``) and the
tracker is unchanged: the network average then moves like preconditioned Langevin dynamics,
``x̄⁺ = x̄ − (η/N) M Σ_i ∇̃f_i(x_i) + √(2η/N) S w̄``.

Private tracking (``tracking_noise=σ``): each agent sends a Gaussian public copy of its tracker,
``ŷ_j = y_j + ξ_j`` with ``ξ_j ~ N(0, σ² I)`` fresh at every step, mixes everyone's copies and
subtracts its own ``ξ_i``:

    y⁺ = W (y + ξ) − ξ + ∇̃F(x⁺) − ∇̃F(x) = W y + (W − I) ξ + ∇̃F(x⁺) − ∇̃F(x).

``1ᵀ(W − I) = 0``, so ``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` still holds exactly, and
``y_j − ∇̃f_j(x_j)`` is a function of the copies sent before: each copy is a Gaussian
mechanism on one gradient (:mod:`dgsgld.evaluate.privacy`). The copies go through the channel
like the tracker would. ``ξ`` is drawn from ``fold_in(key, tag)`` for all ``N`` agents (a
device keeps its rows), so without the option the run's draws are unchanged.
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._util import private as _private
from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree
from ..communication import Channel, as_channel, hold, init_states, operand, send
from ..gradients import GradientEstimator, as_estimator
from .base import SamplingAlgorithm

__all__ = ["DIGingState", "DIGingSGLD"]

#: ``fold_in`` tag of the tracking noise's key (distinct from the channel's tags).
_TRACKING_TAG = 0x74726B6E


def _tracking_noise(value):
    """``None``, or a positive constant (stored as an array) or schedule ``count -> σ``."""
    if value is None:
        return None
    _validation.check_step_size(value, name="tracking_noise")
    return _tree.as_step_size(value)


class DIGingState(NamedTuple):
    """Network state of DIGing-SGLD; every leaf is ``(N, *param_shape)`` except ``count``.

    Attributes:
        position: ``x⁽ᵏ⁾``.
        tracker: ``y⁽ᵏ⁾``, each agent's estimate of the network-average gradient (times N).
        grad: ``∇̃F(x⁽ᵏ⁾)``, the stochastic gradient drawn at ``x⁽ᵏ⁾``.
        count: iteration number ``k`` (scalar int).
        estimator: the gradient estimator's state (``()`` for plain mini-batches).
        channel: the channel states of the messages ``position`` and ``tracker``
            (:mod:`dgsgld.communication`; ``()`` without a channel).
    """

    position: PyTree
    tracker: PyTree
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


class DIGingSGLD(SamplingAlgorithm):
    """DIGing-SGLD over a time-varying network: ``DIGingSGLD(step_size, estimator=None, *,
    normal=jax.random.normal, channel=None, tracking_noise=None)``.

    ``step_size`` a constant or a schedule ``count -> η`` (e.g. from optax); ``estimator``
    from :mod:`dgsgld.gradients` (default: plain mini-batches); ``channel`` a
    :class:`dgsgld.communication.Channel` (default: exact mixing); ``tracking_noise`` ``None``
    (trackers sent exactly) or the standard deviation ``σ`` (a constant or a schedule
    ``count -> σ``) of the Gaussian public copies of the trackers (module docstring: private
    tracking).
    """

    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    tracking_noise: object = eqx.field(default=None, converter=_tracking_noise, kw_only=True)
    name: ClassVar[str] = "DIGing-SGLD"

    def init(self, position: PyTree, potential, key: PRNGKey) -> DIGingState:
        """State at ``k = 0``: ``y⁽⁰⁾ = ∇̃F(x⁽⁰⁾)``. ``position`` leaves are ``(N, ...)``."""
        grad, est = self.estimator.start(potential, position, key)
        channel = init_states(self.channel, potential.private_mask(position), position=position,
                              tracker=grad)
        return DIGingState(position, grad, grad, jnp.zeros((), jnp.int32), est, channel)

    def step(
        self, key: PRNGKey, state: DIGingState, potential, mixing_matrix: Array,
        noise: PyTree | None = None,
    ) -> DIGingState:
        """One iteration with mixing matrix ``W⁽ᵏ⁾`` of shape ``(N, N)``.

        ``noise``, if given, is the ``w`` of this step (default ``self.noise(key, position)``).
        """
        private = potential.private_mask(state.position)
        eta, grad_key, _, noise = self._step_inputs(key, state, noise)
        mixed, channel = send(self.channel, key, state.channel, "position", mixing_matrix,
                              state.position, state.count, private=private)
        position = _tree.langevin_update(mixed, self._precondition(state.tracker, state.position),
                                         noise, eta)
        grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        message, xi = state.tracker, None
        if self.tracking_noise is not None:
            xi = self._tracking_noise(key, state, mixing_matrix)
            message = _tree.tree_add(message, xi)
        mixed_tracker, channel = send(self.channel, key, channel, "tracker", mixing_matrix,
                                      message, state.count, private=private)
        if xi is not None:
            mixed_tracker = _tree.tree_sub(mixed_tracker, xi)
        tracker = _tree.tree_add(mixed_tracker, _tree.tree_sub(grad, state.grad))
        tracker = _private.where(private, grad, tracker)  # a private leaf's own gradient
        new = DIGingState(position, tracker, grad, state.count + 1, est, channel)
        new = hold(self.channel, key, state, new, mixing_matrix)
        return new

    def _tracking_noise(self, key: PRNGKey, state: DIGingState, mixing_matrix) -> PyTree:
        """``σ_k ξ`` shaped like the tracker: drawn for all ``N`` agents, this block's rows."""
        sigma = _tree.resolve_step_size(self.tracking_noise, state.count)
        rows = jax.tree.leaves(state.tracker)[0].shape[0]
        total = operand.num_agents(mixing_matrix, rows)
        full = jax.tree.map(lambda y: jnp.zeros((total, *y.shape[1:]), y.dtype), state.tracker)
        xi = _tree.normal_like(jax.random.fold_in(key, _TRACKING_TAG), full, self.normal)
        xi = operand.own_rows(mixing_matrix, xi, total)
        return jax.tree.map(lambda v: (sigma * v).astype(v.dtype), xi)
