"""A reduction over ``vmap``'s batch: for work that only some members of a batch need."""

import jax
import jax.numpy as jnp

from .types import Array

__all__ = ["any_in_batch"]


@jax.custom_batching.custom_vmap
def any_in_batch(flag: Array) -> Array:
    """``flag`` (a boolean scalar) itself; under ``vmap``, whether it holds for ANY member of
    the batch, unbatched, so that a ``lax.cond`` on it stays a branch (a batched predicate turns
    ``cond`` into a ``select`` that computes both branches). Under nested ``vmap`` s it reduces
    over all of them. For gating work whose result is then selected per member."""
    return flag


@any_in_batch.def_vmap
def _any_in_batch_rule(axis_size, in_batched, flag):
    del axis_size, in_batched
    return any_in_batch(jnp.any(flag, axis=0)), False
