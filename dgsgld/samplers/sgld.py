"""Centralized SGLD (ULA with full batches) on the pooled potential ``f = sum_i f_i``.

    x⁺ = x − η ∇̃f(x) + √(2η) w,

and with ``preconditioner=M`` (``S Sᵀ = M``) ``x⁺ = x − η M ∇̃f(x) + √(2η) S w``.

The reference that the decentralized samplers are compared with: one sampler that sees all the
data. Positions carry no agent axis; the gradient estimate sums every agent's local estimator
(a stratified mini-batch when the potential has a ``batch_size``).

Step-size scale: the network average of the decentralized samplers moves like centralized SGLD
on ``f / N`` with noise ``√(2η/N)``, i.e. like this sampler with step ``η / N``.

The state keeps ``∇̃f(x)`` like DE-SGLD's (see :mod:`dgsgld.samplers.de`).
"""

from typing import ClassVar, NamedTuple

import jax.numpy as jnp

from .._util import tree as _tree
from .._util.types import Array, PRNGKey, PyTree
from .base import SamplingAlgorithm

__all__ = ["SGLDState", "SGLD"]


class SGLDState(NamedTuple):
    """``position`` leaves ``(*param_shape)``; ``grad`` the stochastic gradient at
    ``position`` the next step uses (``None``: drawn there); ``count`` the iteration number."""

    position: PyTree
    grad: PyTree
    count: Array


class SGLD(SamplingAlgorithm):
    """Centralized SGLD: ``SGLD(step_size, *, normal=jax.random.normal)``, with ``step_size``
    a constant or a schedule ``count -> η``. ``step`` ignores ``mixing_matrix`` (the samplers'
    common signature); :func:`dgsgld.sample` refuses a ``mixing`` for it."""

    decentralized: ClassVar[bool] = False
    name: ClassVar[str] = "SGLD"

    def init(self, position: PyTree, potential, key: PRNGKey) -> SGLDState:
        return SGLDState(position, potential.pooled_grad(position, key), jnp.zeros((), jnp.int32))

    def step(
        self, key: PRNGKey, state: SGLDState, potential, mixing_matrix: Array | None = None,
        noise: PyTree | None = None,
    ) -> SGLDState:
        del mixing_matrix
        eta, grad_key, grad, noise = self._step_inputs(key, state, noise)
        position = _tree.langevin_update(state.position,
                                         self._precondition(grad, state.position), noise, eta)
        new_grad = potential.pooled_grad(position, grad_key)
        return SGLDState(position, new_grad, state.count + 1)
