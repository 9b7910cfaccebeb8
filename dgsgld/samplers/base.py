"""What every sampler is: a frozen pytree holding its configuration, with pure ``init``/``step``.

A sampler is an ``eqx.Module`` so that a constant step size is an array leaf: changing it, or
``vmap``-ing over a grid of step sizes, reuses the compiled run, and ``jax.grad`` flows to it.

Decentralized samplers work on a *network state*: a pytree whose leaves are ``(N, ...)``, one
row per agent. ``step(key, state, potential, mixing_matrix)`` takes the per-step inputs as
arguments, so the same function serves ``dgsgld.sample`` and a user's own loop.
"""

from typing import ClassVar

import equinox as eqx

from .._types import Array, PRNGKey, PyTree, StepSize


class SamplingAlgorithm(eqx.Module):
    """Interface of the samplers (documentation and ``isinstance`` only).

    Attributes:
        step_size: a positive constant or a schedule ``count -> step size``.
        decentralized: ``True`` when positions carry an agent axis and a mixing matrix is used.
    """

    step_size: StepSize
    decentralized: ClassVar[bool] = True

    def init(self, position: PyTree, potential, key: PRNGKey):  # pragma: no cover - interface
        raise NotImplementedError

    def step(self, key: PRNGKey, state, potential, mixing_matrix: Array | None):  # pragma: no cover
        raise NotImplementedError
