"""Where the chain axis lives inside ``dgsgld.sample``'s loop, and a way to keep it there.

``dgsgld.sample`` runs one chain's ``step`` under ``vmap`` with the chain axis of small leaves
last (:func:`chain_axis`). Inside the step, ``vmap`` places the chain axis of each intermediate
wherever its batching rule puts it: a gradient from ``jax.grad`` of a per-datum likelihood
comes out as ``(N, C, d)``. When such a value meets the state ``(N, d, C)`` in an elementwise
op, ``vmap`` moves both chain axes to the front; XLA then stores the loop's state in transposed
layouts and cannot fold the gradient's final transpose into its matrix product.

:func:`keep_chain_axis` is the identity whose batching rule puts the chain axis where the loop
keeps it. It acts only while :func:`chain_layout` is active (``dgsgld.sample`` activates it
around its loop) and only on the axis of that many chains; elsewhere it changes nothing.
Measured in ``benchmarks/``: the paper-size DIGing-SGLD run keeps every state leaf in plain
row-major layout and runs 1.2-1.4x faster; every number it draws is unchanged.
"""

import contextlib
import contextvars
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ._types import PyTree

__all__ = ["chain_axis", "chain_layout", "chains_last", "keep_chain_axis"]


def chain_axis(per_chain_shape: tuple[int, ...], num_chains: int) -> int:
    """``-1`` (last) or ``0``: where a leaf of one chain's state keeps the chain axis.

    XLA:CPU vectorises elementwise work along the last axis and runs a stack of per-chain
    ``(N, d)`` products as one matrix product when chains are last. With the chain axis first,
    a paper-size leaf ``(200, 20, 6)`` is processed in runs of 6 floats and the gradient's
    products need transposes. A leaf keeps its chains first when its own last axis is at
    least as long (d = 1000 with 200 chains). Measured in ``benchmarks/``.
    """
    return -1 if len(per_chain_shape) >= 1 and num_chains > per_chain_shape[-1] else 0


# (num_chains, per-chain shape -> axis) while a sampling loop is being traced, else None.
_LAYOUT: contextvars.ContextVar[tuple[int, Callable] | None] = contextvars.ContextVar(
    "dgsgld_chain_layout", default=None
)


@contextlib.contextmanager
def chain_layout(num_chains: int, axis: Callable[[tuple[int, ...]], int]):
    """While tracing inside this context, :func:`keep_chain_axis` moves an axis of
    ``num_chains`` to ``axis(per_chain_shape)`` (``0`` or ``-1``)."""
    token = _LAYOUT.set((num_chains, axis))
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def chains_last(per_chain_shapes) -> bool:
    """Whether the sampling loop being traced keeps the chain axis last for leaves of these
    per-chain shapes (all of them); ``False`` outside :func:`chain_layout`."""
    layout = _LAYOUT.get()
    return layout is not None and all(layout[1](tuple(s)) == -1 for s in per_chain_shapes)


_keep_p = Primitive("dgsgld_keep_chain_axis")
_keep_p.def_impl(lambda x: x)
_keep_p.def_abstract_eval(lambda x: x)
mlir.register_lowering(_keep_p, lambda ctx, x: [x])
# The identity is linear: its tangent goes through it, its cotangent comes back unchanged.
ad.deflinear2(_keep_p, lambda ct, x: [ct])


def _keep_batched(args, dims):
    (x,), (dim,) = args, dims
    layout = _LAYOUT.get()
    if dim is not None and layout is not None and x.shape[dim] == layout[0]:
        per_chain = x.shape[:dim] + x.shape[dim + 1:]
        target = x.ndim - 1 if layout[1](per_chain) == -1 else 0
        x, dim = jnp.moveaxis(x, dim, target), target
    return _keep_p.bind(x), dim


batching.primitive_batchers[_keep_p] = _keep_batched


def keep_chain_axis(tree: PyTree) -> PyTree:
    """``tree`` unchanged; under ``dgsgld.sample``'s ``vmap`` its chain axis goes where the
    loop keeps it (see the module docstring). Leaves must be arrays."""
    return jax.tree.map(_keep_p.bind, tree)
