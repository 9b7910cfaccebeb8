"""Pytree helpers shared by the samplers: mixing, Gaussian noise, step-size resolution."""

import jax
import jax.numpy as jnp
import numpy as np

from . import validation as _validation
from .types import Array, PRNGKey, PyTree, StepSize


def mix(matrix: Array, tree: PyTree) -> PyTree:
    """Apply a mixing matrix across the agent axis of every leaf.

    ``matrix`` is ``(N, N)`` with ``matrix[i, j]`` the weight agent ``i`` puts on agent ``j``;
    each leaf is ``(N, ...)``. Returns ``W @ leaf`` for every leaf. ``matrix`` may also be an
    object with ``@`` on ``(N, k)`` arrays (:mod:`dgsgld.networks.sparse`).
    """

    def one(leaf):
        if isinstance(matrix, (jax.Array, np.ndarray)):
            return jnp.tensordot(matrix.astype(leaf.dtype), leaf, axes=1)
        flat = leaf.reshape(leaf.shape[0], -1)
        return (matrix.astype(leaf.dtype) @ flat).reshape(leaf.shape)

    return jax.tree.map(one, tree)


def normal_like(key: PRNGKey, tree: PyTree, normal=jax.random.normal) -> PyTree:
    """Standard normal noise with the structure, shapes and dtypes of ``tree``.

    One key per leaf from ``split(key, num_leaves)``, leaf ``i`` drawn flat as
    ``normal(keys[i], (size,), dtype)`` and reshaped: with the default, the numbers of
    ``optax.tree_utils.tree_random_like(key, tree)`` (JAX's normals depend on the position in
    row-major order, not on the shape). Drawn flat, so that a generator of the user's own gives
    the same numbers whatever layout the runner keeps (:func:`flatten_where`).
    """
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    noise = [normal(keys[i], (jnp.size(leaf),), leaf.dtype).reshape(jnp.shape(leaf))
             for i, leaf in enumerate(leaves)]
    return jax.tree.unflatten(treedef, noise)


def flatten_where(tree: PyTree, flat: PyTree) -> PyTree:
    """Each leaf of ``tree`` raveled to ``(size,)`` where the matching bool of ``flat`` is set."""
    return jax.tree.map(lambda leaf, f: jnp.ravel(leaf) if f else leaf, tree, flat)


def in_noise_shape(update, noise: PyTree, *trees: PyTree) -> PyTree:
    """``update(*leaves, w)`` leaf by leaf, computed in the shape of the noise leaf ``w``: that
    of the other leaves, or flat ``(size,)`` (the runner passes the noise flat when its loop
    keeps the chain axis first; then the fused update runs over one long axis on XLA:CPU
    instead of a short last one). The result has the shape of the first tree's leaves.
    """

    def one(w, *leaves):
        shape, size = jnp.shape(leaves[0]), jnp.size(leaves[0])
        if jnp.shape(w) not in (shape, (size,)):
            raise ValueError(
                f"`noise` leaves must be shaped like the position ({shape}) or flat ({size},); "
                f"got {jnp.shape(w)}."
            )
        out = update(*(jnp.reshape(leaf, jnp.shape(w)) for leaf in leaves), w)
        return jnp.reshape(out, shape)

    return jax.tree.map(one, noise, *trees)


def langevin_update(base: PyTree, drift: PyTree, noise: PyTree, step_size: Array) -> PyTree:
    """``base - step_size * drift + sqrt(2 step_size) * noise`` leaf by leaf
    (:func:`in_noise_shape`: ``noise`` leaves shaped like ``base`` or flat)."""
    scale = jnp.sqrt(2.0 * step_size)

    def one(b, d, w):
        return b - step_size.astype(b.dtype) * d + scale.astype(b.dtype) * w

    return in_noise_shape(one, noise, base, drift)


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
    return as_float_array(step_size)


def as_array(x):
    """Array-likes (lists, scalars) as NumPy arrays; arrays, NumPy or JAX (traced or not), as
    they are. For arguments of a ``jax.jit`` function, which takes a list for a pytree."""
    return x if isinstance(x, (jax.Array, np.ndarray)) else np.asarray(x)


def as_float_array(x) -> Array:
    """A sampler's constant as an array of the default float dtype. Host values (Python or
    NumPy numbers) are converted by NumPy and transferred: ``jnp.asarray`` would compile and
    run a conversion program for each."""
    dtype = jnp.result_type(float)
    if isinstance(x, jax.Array):   # on a device, or traced (``jax.grad``, ``vmap``)
        return jnp.asarray(x, dtype=dtype)
    return jax.device_put(np.asarray(x, dtype=dtype))


def tree_sub(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.subtract, a, b)


def tree_add(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.add, a, b)
