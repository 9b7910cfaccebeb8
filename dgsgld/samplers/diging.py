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
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax.numpy as jnp

from .._util import private as _private
from .._util import tree as _tree
from .._util.types import Array, PRNGKey, PyTree
from ..communication import Channel, as_channel, hold, init_states, send
from ..gradients import GradientEstimator, as_estimator
from .base import SamplingAlgorithm

__all__ = ["DIGingState", "DIGingSGLD"]


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
    normal=jax.random.normal, channel=None)``.

    ``step_size`` a constant or a schedule ``count -> η`` (e.g. from optax); ``estimator``
    from :mod:`dgsgld.gradients` (default: plain mini-batches); ``channel`` a
    :class:`dgsgld.communication.Channel` (default: exact mixing).
    """

    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
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
        eta, grad_key, _, noise = self._step_inputs(key, state, noise, potential.grad)
        mixed, channel = send(self.channel, key, state.channel, "position", mixing_matrix,
                              state.position, state.count, private=private)
        position = _tree.langevin_update(mixed, self._precondition(state.tracker, state.position),
                                         noise, eta)
        grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        mixed_tracker, channel = send(self.channel, key, channel, "tracker", mixing_matrix,
                                      state.tracker, state.count, private=private)
        tracker = _tree.tree_add(mixed_tracker, _tree.tree_sub(grad, state.grad))
        tracker = _private.where(private, grad, tracker)  # a private leaf's own gradient
        new = DIGingState(position, tracker, grad, state.count + 1, est, channel)
        new = hold(self.channel, key, state, new, mixing_matrix)
        return new
