"""Parameters as pytrees: the array leaves are the parameters, every other leaf is static.

The equinox convention (``eqx.partition(params, eqx.is_array)``): an ``eqx.nn.MLP``'s
activation functions, an int or a string are configuration, not parameters. Compiled loops and
``jax.grad`` work on the array leaves only; the user's functions see ``static.combine(arrays)``,
the full parameters. The runner (:func:`dgsgld.sample`) and :class:`dgsgld.Potential`'s public
methods both go through :func:`split_static` and :func:`potential_on_arrays`.
"""

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax

from .types import PyTree


class Static(NamedTuple):
    """The non-array leaves of the parameters (``eqx.partition(params, eqx.is_array)[1]``),
    flattened so that it is hashable: wrapped user functions then reuse compiled runs."""

    treedef: Any
    leaves: tuple

    def combine(self, arrays: PyTree) -> PyTree:
        return eqx.combine(arrays, jax.tree.unflatten(self.treedef, self.leaves))


def split_static(tree: PyTree) -> tuple[PyTree, Static | None]:
    """``(array leaves, static part)``; the static part is ``None`` when every leaf is an array
    (then ``tree`` itself is returned: plain parameters pay nothing)."""
    if all(eqx.is_array(leaf) for leaf in jax.tree.leaves(tree)):
        return tree, None
    arrays, static = eqx.partition(tree, eqx.is_array)
    leaves, treedef = jax.tree.flatten(static)
    return arrays, Static(treedef, tuple(leaves))


@dataclasses.dataclass(frozen=True)  # hashable by value, and weak-referenceable for jax's caches
class OnFull:
    """A user function called with the full parameters ``static.combine(arrays)``.

    ``kind``: ``"params"`` (``fn(params, *rest)``), ``"grad"`` (a gradient oracle: its
    non-array output leaves dropped) or ``"state"`` (``fn(state)``, ``state.position`` full).
    """

    fn: Callable
    static: Static
    kind: str

    def __call__(self, first, *rest):
        if self.kind == "state":
            return self.fn(first._replace(position=self.static.combine(first.position)))
        out = self.fn(self.static.combine(first), *rest)
        return eqx.filter(out, eqx.is_array) if self.kind == "grad" else out


def potential_on_arrays(potential, static: Static):
    """A copy of ``potential`` whose user functions see the full parameters while it (and
    ``jax.grad`` inside it) works on the array leaves only."""
    potential = copy.copy(potential)
    for field, kind in (("log_likelihood", "params"), ("log_prior", "params"),
                        ("log_agent_prior", "params"), ("gradient_fn", "grad")):
        if getattr(potential, field, None) is not None:
            # A copy of a frozen module: set a field the way eqx.Module.__init__ does.
            object.__setattr__(potential, field, OnFull(getattr(potential, field), static, kind))
    return potential
