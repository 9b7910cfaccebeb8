"""DIGing-SGLD: Langevin dynamics with DIGing gradient tracking (eqs. 3.2–3.3).

    x⁺ = W x − η y + √(2η) w,
    y⁺ = W y + ∇̃F(x⁺) − ∇̃F(x),        y⁽⁰⁾ = ∇̃F(x⁽⁰⁾).

The stochastic gradient at ``x⁺`` is drawn once, used in ``y⁺``, kept in the state and
subtracted again at the next step (eq. 3.5). Hence ``sum_i y_i = sum_i ∇̃f_i(x_i)`` holds at
every iteration up to rounding; re-drawing a mini-batch for the old point would break this and
let the average tracker random-walk.
"""

from typing import NamedTuple

import equinox as eqx

import jax.numpy as jnp

from .. import _tree
from ..gradients import GradientEstimator, as_estimator
from .._types import Array, PRNGKey, PyTree, StepSize
from .base import SamplingAlgorithm

__all__ = ["DIGingState", "DIGingInfo", "DIGingSGLD", "diging_sgld"]


class DIGingState(NamedTuple):
    """Network state of DIGing-SGLD; every leaf is ``(N, *param_shape)`` except ``count``.

    Attributes:
        position: ``x⁽ᵏ⁾``.
        tracker: ``y⁽ᵏ⁾``, each agent's estimate of the network-average gradient (times N).
        grad: ``∇̃F(x⁽ᵏ⁾)``, the stochastic gradient drawn at ``x⁽ᵏ⁾``.
        count: iteration number ``k`` (scalar int).
        estimator: the gradient estimator's state (``()`` for plain mini-batches).
    """

    position: PyTree
    tracker: PyTree
    grad: PyTree
    count: Array
    estimator: PyTree = ()


class DIGingInfo(NamedTuple):
    """Per-step diagnostics (dropped by the compiler when unused)."""

    step_size: Array


class DIGingSGLD(SamplingAlgorithm):
    """DIGing-SGLD over a time-varying network; ``DIGingSGLD(step_size)`` equals
    :func:`diging_sgld`."""

    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)

    def init(self, position: PyTree, potential, key: PRNGKey) -> DIGingState:
        """State at ``k = 0``: ``y⁽⁰⁾ = ∇̃F(x⁽⁰⁾)``. ``position`` leaves are ``(N, ...)``."""
        grad, est = self.estimator.start(potential, position, key)
        return DIGingState(position, grad, grad, jnp.zeros((), jnp.int32), est)

    def step(
        self, key: PRNGKey, state: DIGingState, potential, mixing_matrix: Array,
        noise: PyTree | None = None,
    ) -> tuple[DIGingState, DIGingInfo]:
        """One iteration with mixing matrix ``W⁽ᵏ⁾`` of shape ``(N, N)``.

        ``noise``, if given, is the ``w`` of this step (default ``self.noise(key, position)``).
        """
        eta, grad_key, _, noise = self._step_inputs(key, state, noise, potential.grad)
        position = _tree.langevin_update(
            _tree.mix(mixing_matrix, state.position), state.tracker, noise, eta
        )
        grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        tracker = _tree.tree_add(
            _tree.mix(mixing_matrix, state.tracker), _tree.tree_sub(grad, state.grad)
        )
        return DIGingState(position, tracker, grad, state.count + 1, est), DIGingInfo(eta)


def diging_sgld(step_size: StepSize, estimator: GradientEstimator | None = None) -> DIGingSGLD:
    """DIGing-SGLD with a constant step size or a schedule ``count -> η`` (e.g. from optax);
    ``estimator`` from :mod:`dgsgld.gradients` (default: plain mini-batches)."""
    return DIGingSGLD(step_size, estimator)
