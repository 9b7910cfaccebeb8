"""Shape and type aliases used in signatures and docstrings.

Conventions: arrays are chain-major, ``(chain, iteration, agent, *param_shape)``;
a *network state* holds one pytree whose leaves have a leading agent axis ``(N, ...)``.
"""

from collections.abc import Callable
from typing import Any, TypeAlias

import jax

Array: TypeAlias = jax.Array
ArrayLike: TypeAlias = jax.typing.ArrayLike
PRNGKey: TypeAlias = jax.Array
PyTree: TypeAlias = Any
#: A step size: a positive float, or a schedule ``count -> float`` (optax schedules work).
StepSize: TypeAlias = float | Array | Callable[[Array], Array]

__all__ = ["Array", "ArrayLike", "PRNGKey", "PyTree", "StepSize"]
