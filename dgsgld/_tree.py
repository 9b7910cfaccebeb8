"""Pytree helpers shared by the samplers: mixing, Gaussian noise, step-size resolution."""

import jax
import jax.numpy as jnp
import optax

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


def normal_like(key: PRNGKey, tree: PyTree) -> PyTree:
    """Standard normal noise with the structure, shapes and dtypes of ``tree``."""
    return optax.tree_utils.tree_random_like(key, tree, jax.random.normal)


def langevin_update(base: PyTree, drift: PyTree, noise: PyTree, step_size: Array) -> PyTree:
    """``base - step_size * drift + sqrt(2 step_size) * noise`` leaf by leaf."""
    scale = jnp.sqrt(2.0 * step_size)

    def one(b, d, w):
        return b - step_size.astype(b.dtype) * d + scale.astype(b.dtype) * w

    return jax.tree.map(one, base, drift, noise)


def resolve_step_size(step_size: StepSize, count: Array) -> Array:
    """The step size at iteration ``count``: a constant or ``schedule(count)``."""
    if callable(step_size):
        return jnp.asarray(step_size(count))
    return jnp.asarray(step_size)


def as_step_size(step_size: StepSize) -> StepSize:
    """Store constants as arrays so changing them does not retrace compiled runs."""
    if callable(step_size):
        return step_size
    return jnp.asarray(step_size, dtype=jnp.result_type(float))


def tree_sub(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.subtract, a, b)


def tree_add(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.add, a, b)
