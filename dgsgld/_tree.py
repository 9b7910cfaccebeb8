"""Pytree helpers shared by the samplers: mixing, Gaussian noise, step-size resolution."""

import math

import jax
import jax.numpy as jnp
import optax

from . import _validation
from ._types import Array, PRNGKey, PyTree, StepSize


def mix(matrix: Array, tree: PyTree) -> PyTree:
    """Apply a mixing matrix across the agent axis of every leaf.

    ``matrix`` is ``(N, N)`` with ``matrix[i, j]`` the weight agent ``i`` puts on agent ``j``;
    each leaf is ``(N, ...)``. Returns ``W @ leaf`` for every leaf.
    """

    def one(leaf):
        flat = leaf.reshape(leaf.shape[0], -1)
        return (matrix.astype(leaf.dtype) @ flat).reshape(leaf.shape)

    return jax.tree.map(one, tree)


def _flat_normal(key: PRNGKey, shape, dtype) -> Array:
    # Leaves with a short last axis (d = 6) are drawn as one flat vector, then reshaped: the
    # same numbers as jax.random.normal(key, shape) (the generators count elements in
    # row-major order), but XLA:CPU vectorises the generator along the long flat axis, 1.2-2x
    # faster there. With a long last axis the reshape costs more than it saves (1.7x slower
    # at d = 1000), so those are drawn in their shape. Measured in benchmarks/.
    if len(shape) > 1 and shape[-1] >= 128:
        return jax.random.normal(key, shape, dtype)
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def normal_like(key: PRNGKey, tree: PyTree) -> PyTree:
    """Standard normal noise with the structure, shapes and dtypes of ``tree``."""
    return optax.tree_utils.tree_random_like(key, tree, _flat_normal)


def langevin_update(base: PyTree, drift: PyTree, noise: PyTree, step_size: Array) -> PyTree:
    """``base - step_size * drift + sqrt(2 step_size) * noise`` leaf by leaf."""
    scale = jnp.sqrt(2.0 * step_size)

    def one(b, d, w):
        # On flat vectors: XLA:CPU vectorises elementwise loops (and the noise generator fused
        # into them) along the last axis, which is short for (N, d) leaves with small d.
        eta, sd = step_size.astype(b.dtype), scale.astype(b.dtype)
        flat = b.reshape(-1) - eta * d.reshape(-1) + sd * w.reshape(-1)
        return flat.reshape(b.shape)

    return jax.tree.map(one, base, drift, noise)


def resolve_step_size(step_size: StepSize, count: Array) -> Array:
    """The step size at iteration ``count``: a constant or ``schedule(count)``."""
    if callable(step_size):
        return jnp.asarray(step_size(count))
    return jnp.asarray(step_size)


def as_step_size(step_size: StepSize) -> StepSize:
    """Store constants as arrays so changing them does not retrace compiled runs.

    Checked here, when a sampler is built: a constant must be a finite positive scalar, a
    schedule must give one at count 0 (``dgsgld.sample`` checks its last count too).
    """
    _validation.check_step_size(step_size)
    if callable(step_size):
        return step_size
    return jnp.asarray(step_size, dtype=jnp.result_type(float))


def tree_sub(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.subtract, a, b)


def tree_add(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.add, a, b)
