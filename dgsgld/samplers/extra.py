"""EXTRA-SGLD: Langevin dynamics with EXTRA's correction, for static graphs.

EXTRA (Shi et al., 2015) written in the primal–dual form used by generalized EXTRA SGLD
(Gürbüzbalaban et al., arXiv 2412.01993), with ``W̃ = (I + W)/2`` and ``V² = (I − W)/2``:

    x⁺ = W̃ x − z − η ∇̃F(x) + √(2η) w,
    z⁺ = z + V² x⁺,                         z⁽⁰⁾ = 0,

where ``z = V y`` is the dual variable seen through ``V``, so no matrix square root is needed.
Eliminating ``z`` gives EXTRA's two-step form ``x⁽ᵏ⁺²⁾ = (I+W)x⁽ᵏ⁺¹⁾ − W̃x⁽ᵏ⁾ − η(∇̃F(x⁽ᵏ⁺¹⁾) −
∇̃F(x⁽ᵏ⁾)) + noise``. With full batches the fixed point has every agent at the minimiser of
``f``: the network-induced bias of DE-SGLD is gone.

Time-varying stacks: the step uses ``W⁽ᵏ⁾`` in both places. ``sum_i z_i = 0`` still holds (each
``I − W⁽ᵏ⁾`` has zero column sums), so the network average still follows centralized SGLD, but
the bias correction and the theory of [31] assume a static ``W``; use DIGing-SGLD there.

The state keeps ``∇̃F(x)`` like DE-SGLD's (see :mod:`dgsgld.samplers.de`). With
``preconditioner=M``: ``x⁺ = W̃ x − z − η M ∇̃F(x) + √(2η) S w``, ``z`` unchanged.
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._util import tree as _tree
from .._util.types import Array, PRNGKey, PyTree
from ..communication import Channel, as_channel, hold, init_states, send
from ..gradients import GradientEstimator, as_estimator
from .base import SamplingAlgorithm

__all__ = ["EXTRAState", "EXTRASGLD"]


class EXTRAState(NamedTuple):
    """``position`` and ``dual`` (``z``) leaves ``(N, *param_shape)``; ``grad`` the stochastic
    gradient at ``position`` the next step uses (``None``: drawn there); ``count`` the
    iteration; ``estimator`` the gradient estimator's state; ``channel`` the channel states of
    the messages ``position`` (``x⁽ᵏ⁾`` mixed for ``W̃ x``) and ``next_position`` (``x⁽ᵏ⁺¹⁾``
    mixed for ``z⁺``)."""

    position: PyTree
    dual: PyTree
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


class EXTRASGLD(SamplingAlgorithm):
    """EXTRA-SGLD: ``EXTRASGLD(step_size, estimator=None, *, normal=jax.random.normal,
    channel=None)``, with ``step_size`` a constant or a schedule ``count -> η``, ``estimator``
    from :mod:`dgsgld.gradients` (default: plain mini-batches) and ``channel`` a
    :class:`dgsgld.communication.Channel` (default: exact mixing)."""

    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    name: ClassVar[str] = "EXTRA-SGLD"

    def init(self, position: PyTree, potential, key: PRNGKey) -> EXTRAState:
        dual = jax.tree.map(jnp.zeros_like, position)
        grad, est = self.estimator.start(potential, position, key)
        channel = init_states(self.channel, potential.private_mask(position), position=position,
                              next_position=position)
        return EXTRAState(position, dual, grad, jnp.zeros((), jnp.int32), est, channel)

    def step(
        self, key: PRNGKey, state: EXTRAState, potential, mixing_matrix: Array,
        noise: PyTree | None = None,
    ) -> EXTRAState:
        private = potential.private_mask(state.position)
        eta, grad_key, grad, noise = self._step_inputs(key, state, noise)
        mixed, channel = send(self.channel, key, state.channel, "position", mixing_matrix,
                              state.position, state.count, private=private)
        # W̃ x − z = (x + W x)/2 − z
        base = jax.tree.map(lambda x, wx, z: 0.5 * (x + wx) - z, state.position, mixed, state.dual)
        position = _tree.langevin_update(base, self._precondition(grad, state.position), noise,
                                         eta)
        mixed_new, channel = send(self.channel, key, channel, "next_position", mixing_matrix,
                                  position, state.count, private=private)
        dual = jax.tree.map(lambda z, x, wx: z + 0.5 * (x - wx), state.dual, position, mixed_new)
        new_grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        new = EXTRAState(position, dual, new_grad, state.count + 1, est, channel)
        return hold(self.channel, key, state, new, mixing_matrix)
