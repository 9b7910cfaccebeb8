"""Agent-private parameter leaves: which leaves of the parameters never leave their agent.

A model may hold, beside its shared parameters ``φ`` (one copy per agent, mixed over the
network), private parameters ``θ_i``: one value per agent, never mixed and never sent. Which
leaves are private is declared once, on the :class:`dgsgld.Potential` (``private=``), as

- a sequence of names: the top-level keys of a dict, or attribute names of a NamedTuple or an
  ``eqx.Module`` (``private=("intercept",)``); every leaf below such a key is private;
- a pytree of bools shaped like the parameters or a prefix of them (``{"w": False,
  "b": True}``; a bool at a subtree covers all of its leaves), as optax's masks;
- a function ``params -> such a pytree`` (``private=lambda p: ...``).

:class:`PrivateSpec` holds the declaration, hashable (a static field of the potential), and
:meth:`PrivateSpec.mask` resolves it against a parameter pytree: a pytree of bools with the
parameters' structure, or ``None`` when no leaf is private, so that everything built on it
runs today's program when nothing is private. The helpers below split a message into its
shared leaves (``None`` at the private ones: pytree maps skip them) and put it back together.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .types import PyTree


def _key_name(entry) -> Any:
    """The name of a path entry: a dict key, an attribute or a sequence index."""
    for field in ("key", "name", "idx"):
        if hasattr(entry, field):
            return getattr(entry, field)
    return entry


@dataclasses.dataclass(frozen=True)
class PrivateSpec:
    """Which parameter leaves are private (module docstring), in a hashable form.

    Attributes:
        keys: top-level names whose leaves are private, or ``None``.
        treedef: the structure of a bool mask (with ``leaves``), or ``None``.
        leaves: the mask's bools in the order of ``treedef``.
        fn: a function ``params -> mask``, or ``None``.
    """

    keys: tuple | None = None
    treedef: Any = None
    leaves: tuple = ()
    fn: Callable | None = None

    @classmethod
    def of(cls, private) -> "PrivateSpec | None":
        """The spec of a user's ``private=`` argument (``None``: nothing private)."""
        if private is None or isinstance(private, PrivateSpec):
            return private
        if callable(private) and not isinstance(private, eqx.Module):  # a Module is a mask
            return cls(fn=private)
        if isinstance(private, str):
            return cls(keys=(private,))
        if isinstance(private, (list, tuple, set, frozenset)) and private and all(
                isinstance(k, str) for k in private):
            return cls(keys=tuple(private))
        leaves, treedef = jax.tree.flatten(private)
        if not leaves or not all(isinstance(b, bool) or (jnp.ndim(b) == 0 and jnp.result_type(b)
                                                         == jnp.bool_) for b in leaves):
            raise ValueError(
                "`private` must be None, names of top-level keys/attributes (a str or a "
                "sequence of str), a pytree of bools shaped like the parameters (or a prefix "
                f"of them) or a function params -> such a pytree; got {private!r}.")
        return cls(treedef=treedef, leaves=tuple(bool(b) for b in leaves))

    def mask(self, params: PyTree) -> PyTree | None:
        """A pytree of bools with the structure of ``params`` (``True`` at private leaves),
        or ``None`` when no leaf of ``params`` is private."""
        if self.keys is not None:
            found = set()

            def by_key(path, _):
                name = _key_name(path[0]) if path else None
                found.add(name)
                return name in self.keys

            mask = jax.tree_util.tree_map_with_path(by_key, params)
            missing = [k for k in self.keys if k not in found]
            if missing:
                raise ValueError(
                    f"`private` names {missing}, which the parameters do not hold; their "
                    f"top-level names are {sorted(str(n) for n in found)}.")
        else:
            prefix = (self.fn(params) if self.fn is not None
                      else jax.tree.unflatten(self.treedef, self.leaves))
            try:
                mask = jax.tree.map(lambda m, sub: jax.tree.map(lambda _: bool(m), sub),
                                    prefix, params)
            except (ValueError, TypeError) as err:
                raise ValueError(
                    f"`private` mask {jax.tree.structure(prefix)} is not shaped like the "
                    f"parameters {jax.tree.structure(params)} or a prefix of them: {err}"
                ) from err
        return mask if any(jax.tree.leaves(mask)) else None


def shared_part(tree: PyTree, mask: PyTree | None) -> PyTree:
    """``tree`` with its private leaves replaced by ``None`` (``tree`` itself without a
    mask): what an agent may send."""
    if mask is None:
        return tree
    return jax.tree.map(lambda x, p: None if p else x, tree, mask)


def private_part(tree: PyTree, mask: PyTree) -> PyTree:
    """``tree`` with its shared leaves replaced by ``None``."""
    return jax.tree.map(lambda x, p: x if p else None, tree, mask)


def merge(shared: PyTree, tree: PyTree, mask: PyTree | None) -> PyTree:
    """The leaves of ``shared`` (from :func:`shared_part`) at the shared positions and those
    of ``tree`` at the private ones."""
    if mask is None:
        return shared
    shared_leaves = iter(jax.tree.leaves(shared))
    leaves, treedef = jax.tree.flatten(tree)
    out = [x if p else next(shared_leaves) for x, p in zip(leaves, jax.tree.leaves(mask))]
    return jax.tree.unflatten(treedef, out)


def where(mask: PyTree | None, private: PyTree, shared: PyTree) -> PyTree:
    """Leaf by leaf: ``private``'s leaf at private positions, ``shared``'s elsewhere."""
    if mask is None:
        return shared
    return jax.tree.map(lambda p, a, b: a if p else b, mask, private, shared)


def has_shared(mask: PyTree | None) -> bool:
    """Whether any leaf is shared (``True`` without a mask)."""
    return mask is None or not all(jax.tree.leaves(mask))
