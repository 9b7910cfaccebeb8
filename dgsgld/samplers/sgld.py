"""Centralized SGLD (ULA with full batches) on the pooled potential ``f = sum_i f_i``.

    x⁺ = x − η ∇̃f(x) + √(2η) w.

The reference that the decentralized samplers are compared with: one sampler that sees all the
data. Positions carry no agent axis; the gradient estimate sums every agent's local estimator
(a stratified mini-batch when the potential has a ``batch_size``).

Step-size scale: the network average of the decentralized samplers moves like centralized SGLD
on ``f / N`` with noise ``√(2η/N)``, i.e. like this sampler with step ``η / N``.

The state keeps ``∇̃f(x)`` like DE-SGLD's (see :mod:`dgsgld.samplers.de`).
"""

from typing import Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from .. import _tree
from .._types import Array, PRNGKey, PyTree, StepSize
from .base import SamplingAlgorithm

__all__ = ["SGLDState", "SGLDInfo", "SGLD", "sgld"]


class SGLDState(NamedTuple):
    """``position`` leaves ``(*param_shape)``; ``count`` the iteration number; ``grad`` the
    stochastic gradient at ``position`` the next step uses (``None``: drawn there)."""

    position: PyTree
    count: Array
    grad: PyTree = None


class SGLDInfo(NamedTuple):
    step_size: Array


class SGLD(SamplingAlgorithm):
    """Centralized SGLD (``SGLD(step_size)`` equals :func:`sgld`). ``step`` ignores
    ``mixing_matrix`` (the samplers' common signature); :func:`dgsgld.sample` refuses a
    ``mixing`` for it."""

    decentralized: ClassVar[bool] = False

    def init(self, position: PyTree, potential, key: PRNGKey) -> SGLDState:
        return SGLDState(position, jnp.zeros((), jnp.int32), potential.pooled_grad(position, key))

    def step(
        self, key: PRNGKey, state: SGLDState, potential, mixing_matrix: Array | None = None,
        noise: PyTree | None = None,
    ) -> tuple[SGLDState, SGLDInfo]:
        del mixing_matrix
        eta, grad_key, grad, noise = self._step_inputs(key, state, noise, potential.pooled_grad)
        position = _tree.langevin_update(state.position, grad, noise, eta)
        new_grad = potential.pooled_grad(position, grad_key)
        return SGLDState(position, state.count + 1, new_grad), SGLDInfo(eta)


def sgld(step_size: StepSize, *, normal: Callable = jax.random.normal) -> SGLD:
    """Centralized SGLD with a constant step size or a schedule ``count -> η``."""
    return SGLD(step_size, normal=normal)
