"""The one mixing protocol of the runner: ``matrix_at(k) -> W⁽ᵏ⁾``.

Everything :func:`dgsgld.sample` accepts as ``mixing`` has it: :class:`MixingStack` (which a bare
array becomes), ``dgsgld.networks.Schedule`` (a :class:`MixingStack` with graphs), sparse and
on-the-fly schedules. ``W[i, j]`` is the weight agent ``i`` puts on agent ``j``: ``x⁺ = W @ x``.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import validation as _validation
from .._util.types import Array

__all__ = ["COLUMN_STOCHASTIC", "MixingStack", "abstract_matrix", "as_mixing",
           "is_directed_network", "stochastic_sums"]

#: The ``network_kind`` of column-stochastic (directed) networks and of the samplers that need
#: them (push-sum); networks without one are symmetric and doubly stochastic.
COLUMN_STOCHASTIC = "column_stochastic"


def is_directed_network(mixing) -> bool:
    """Whether ``mixing`` is a column-stochastic network (its ``network_kind`` says so)."""
    return getattr(mixing, "network_kind", None) == COLUMN_STOCHASTIC


def stochastic_sums(mixing) -> str:
    """The ``sums`` its matrices are checked for (:func:`dgsgld._util.validation.check_mixing`):
    ``"columns"`` for a directed network (no symmetry), else ``"both"``."""
    return "columns" if is_directed_network(mixing) else "both"


class MixingStack(eqx.Module):
    """``P`` dense mixing matrices used cyclically: ``matrix_at(k) = matrices[k % P]``.

    Checked to be finite, symmetric, nonnegative and doubly stochastic (traced stacks: shapes
    only).

    Args:
        matrices: ``(P, N, N)``, or one ``(N, N)`` matrix (``P = 1``).
    """

    matrices: Array

    def __init__(self, matrices):
        if isinstance(matrices, jax.Array):   # on a device, or traced
            stack = matrices[None] if matrices.ndim == 2 else matrices
        else:   # host data: shaped by NumPy and transferred, with no eager program per shape
            host = np.asarray(matrices)
            stack = jax.device_put(host[None] if host.ndim == 2 else host)
        self.matrices = stack
        _validation.check_mixing(self.matrices, name="mixing")

    @property
    def num_agents(self) -> int:
        """``N``, the number of agents."""
        return self.matrices.shape[-1]

    @property
    def period(self) -> int:
        """``P``, the number of distinct matrices before the schedule repeats."""
        return self.matrices.shape[0]

    def matrix_at(self, k) -> Array:
        """``W⁽ᵏ⁾ = matrices[k % P]``, shape ``(N, N)``; ``k`` may be traced."""
        return self.matrices[k % self.period]


def as_mixing(mixing):
    """``mixing`` if it has ``matrix_at(k)``, else the array wrapped in a :class:`MixingStack`."""
    if mixing is None or callable(getattr(mixing, "matrix_at", None)):
        return mixing
    return MixingStack(mixing)


def abstract_matrix(mixing):
    """``mixing.matrix_at(k)`` traced abstractly: a ``jax.ShapeDtypeStruct`` for a dense stack,
    the format's own object for a sparse one. Makes no array, so it runs no program."""
    return jax.eval_shape(mixing.matrix_at, jax.ShapeDtypeStruct((), jnp.int32))


def num_agents_of(schedule: Any) -> int:
    """``N`` of a schedule object: its ``num_agents``, else read from ``matrix_at(0)``'s shape."""
    n = getattr(schedule, "num_agents", None)
    if n is not None:
        return int(n)
    w = abstract_matrix(schedule)
    shape = tuple(getattr(w, "shape", ()))
    if len(shape) != 2 or shape[0] != shape[1]:
        raise TypeError(
            "`mixing`.matrix_at(k) must return an (N, N) array or a dgsgld.networks.sparse "
            f"snapshot; got {type(w).__name__}" + (f" of shape {shape}." if shape else ".")
        )
    return shape[0]


def _dense_snapshot(schedule: Any, k):
    w = schedule.matrix_at(k)
    return w.todense() if hasattr(w, "todense") else jnp.asarray(w)
