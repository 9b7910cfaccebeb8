"""Save a finished :class:`dgsgld.Trace` to one ``.npz`` file and load it back, without pickle.

The file holds every array leaf of the trace (positions, values, ensemble, the final state and
the :class:`dgsgld.Divergence` record) as ``a0, a1, ...`` and, under ``__meta__``, UTF-8 JSON
describing the pytree around them::

    dgsgld.traceio.save_trace("run.npz", trace, metadata={"step_size": 0.01})
    trace = dgsgld.traceio.load_trace("run.npz")
    dgsgld.sample(algorithm, potential, mixing, trace.state, key, 1000)  # continue the run

The structure is described with the node types JSON can name: ``None``, dicts (string keys),
tuples, lists and NamedTuples (class and fields; dgsgld's own state classes are rebuilt as
themselves, any other NamedTuple as a ``collections.namedtuple`` of the same name and fields,
so it unpacks, indexes and compares the same). Any other node (an ``eqx.Module`` of
parameters, a custom pytree) is saved by its array leaves; loading it needs ``like=``, a pytree
of the same structure (e.g. the positions or trace of a short run), from which the node types
and non-array leaves (an MLP's activation) are taken. Arrays come back as the type they were
saved from (``jax.Array`` or NumPy), PRNG key arrays as keys. The file opens with
``np.load(path, allow_pickle=False)``: reading it never runs code.
"""

from __future__ import annotations

import collections
import importlib
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .run import Divergence, Trace

__all__ = ["save_trace", "load_trace", "read_metadata"]

_FORMAT, _VERSION, _META = "dgsgld.trace", 1, "__meta__"


def _is_namedtuple(node) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _describe(node, arrays: dict, path: str) -> dict:
    """JSON description of ``node``; array leaves are appended to ``arrays`` (``a<i>``)."""
    if node is None:
        return {"t": "none"}
    if isinstance(node, dict):
        keys = list(node)
        if not all(isinstance(k, str) for k in keys):
            raise ValueError(
                f"Cannot save `{path}`: dict keys must be strings to be written as JSON; got "
                f"{[type(k).__name__ for k in keys]}."
            )
        return {"t": "dict", "keys": keys,
                "children": [_describe(node[k], arrays, f"{path}[{k!r}]") for k in keys]}
    if _is_namedtuple(node):
        cls = type(node)
        return {"t": "namedtuple", "module": cls.__module__, "name": cls.__qualname__,
                "fields": list(cls._fields),
                "children": [_describe(v, arrays, f"{path}.{f}") for f, v in
                             zip(cls._fields, node)]}
    if isinstance(node, (tuple, list)):
        return {"t": type(node).__name__,
                "children": [_describe(v, arrays, f"{path}[{i}]") for i, v in enumerate(node)]}
    if _is_leaf_value(node):
        return _leaf(node, arrays)
    # Any other pytree node: its leaves only; the node types come from `like=` on load.
    leaves = jax.tree.leaves(node)
    return {"t": "opaque", "type": f"{type(node).__module__}.{type(node).__qualname__}",
            "path": path,
            "leaves": [_leaf(v, arrays) if _is_leaf_value(v) else {"t": "static"}
                       for v in leaves]}


def _is_leaf_value(node) -> bool:
    return isinstance(node, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def _leaf(value, arrays: dict) -> dict:
    name = f"a{len(arrays)}"
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        arrays[name] = np.asarray(jax.random.key_data(value))
        return {"t": "key", "a": name, "impl": str(jax.random.key_impl(value))}
    kind = ("jax" if isinstance(value, jax.Array) else
            "numpy" if isinstance(value, (np.ndarray, np.generic)) else type(value).__name__)
    arrays[name] = np.asarray(value)
    return {"t": "leaf", "a": name, "kind": kind}


def save_trace(path: str | Path, trace: Trace, *, metadata: dict | None = None) -> Path:
    """Write ``trace`` (every field, the final state and the divergence record) to ``path``.

    Args:
        path: the file; ``.npz`` is appended when missing (as ``np.savez`` does).
        trace: a :class:`dgsgld.Trace`.
        metadata: optional JSON-serializable dict stored with it (see :func:`read_metadata`).

    Returns:
        The path written.

    Raises:
        ValueError: when ``trace`` is not a Trace, a dict key is not a string, or
            ``metadata`` is not JSON-serializable.
    """
    if not isinstance(trace, Trace):
        raise ValueError(f"`trace` must be a dgsgld.Trace; got {type(trace).__name__}.")
    arrays: dict[str, np.ndarray] = {}
    tree = _describe(trace, arrays, "trace")
    meta = {"format": _FORMAT, "version": _VERSION, "tree": tree, "metadata": metadata or {}}
    try:
        text = json.dumps(meta)
    except TypeError as err:
        raise ValueError(f"`metadata` must be JSON-serializable: {err}") from err
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    arrays[_META] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    np.savez(path, **arrays)
    return path


def _open(path) -> tuple[Any, dict]:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"`path` {str(path)!r} does not exist.")
    files = np.load(path, allow_pickle=False)
    if _META not in files.files:
        raise ValueError(f"`path` {str(path)!r} is not a dgsgld trace (no {_META!r} entry).")
    meta = json.loads(files[_META].tobytes().decode("utf-8"))
    if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
        raise ValueError(
            f"`path` {str(path)!r} has format {meta.get('format')!r} version "
            f"{meta.get('version')!r}; this dgsgld reads {_FORMAT!r} version {_VERSION}."
        )
    return files, meta


def read_metadata(path: str | Path) -> dict:
    """The ``metadata`` dict saved with a trace by :func:`save_trace`."""
    return _open(path)[1]["metadata"]


def _restore_leaf(desc: dict, files):
    value = files[desc["a"]]
    if desc["t"] == "key":
        return jax.random.wrap_key_data(jnp.asarray(value), impl=desc["impl"])
    kind = desc["kind"]
    if kind == "jax":
        return jnp.asarray(value)
    if kind == "numpy":
        return value
    return {"bool": bool, "int": int, "float": float, "complex": complex}[kind](value)


def _namedtuple_class(desc: dict):
    """dgsgld's own NamedTuples as themselves; any other as an equivalent namedtuple."""
    module, name, fields = desc["module"], desc["name"], desc["fields"]
    if module == "dgsgld" or module.startswith("dgsgld."):
        cls = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part, None)
        if isinstance(cls, type) and list(getattr(cls, "_fields", ())) == fields:
            return cls
    return collections.namedtuple(name.rsplit(".", 1)[-1], fields)


def _build(desc: dict, files, like):
    t = desc["t"]
    if t == "none":
        return None
    if t in ("leaf", "key"):
        return _restore_leaf(desc, files)
    if t == "dict":
        return {k: _build(c, files, _child(like, k)) for k, c in zip(desc["keys"],
                                                                     desc["children"])}
    if t == "namedtuple":
        cls = type(like) if _is_namedtuple(like) else _namedtuple_class(desc)
        children = [_build(c, files, _child(like, i)) for i, c in enumerate(desc["children"])]
        return cls(*children)
    if t in ("tuple", "list"):
        children = [_build(c, files, _child(like, i)) for i, c in enumerate(desc["children"])]
        return tuple(children) if t == "tuple" else children
    if t == "opaque":
        if like is None:
            raise ValueError(
                f"`{desc['path']}` holds a {desc['type']}, a pytree node type that the file "
                "cannot describe; pass like= (a trace or pytree of the same structure, e.g. "
                "from a short run with the same model) to load it."
            )
        template, treedef = jax.tree.flatten(like)
        if len(template) != len(desc["leaves"]):
            raise ValueError(
                f"`like` for `{desc['path']}` has {len(template)} leaves; the file has "
                f"{len(desc['leaves'])}."
            )
        leaves = [t_leaf if d["t"] == "static" else _restore_leaf(d, files)
                  for d, t_leaf in zip(desc["leaves"], template)]
        return jax.tree.unflatten(treedef, leaves)
    raise ValueError(f"Unknown node type {t!r} in the file.")


def _child(like, key):
    """The part of the ``like`` template under ``key`` (``None`` when there is no template)."""
    if like is None:
        return None
    try:
        return like[key]
    except (KeyError, IndexError, TypeError):
        return None


def load_trace(path: str | Path, *, like: Any = None) -> Trace:
    """Read a trace written by :func:`save_trace`.

    Args:
        path: the ``.npz`` file.
        like: optional template with the structure of the saved trace (a :class:`Trace`, e.g.
            from a short run of the same model), needed only when the trace holds pytree nodes
            other than dicts, tuples, lists, NamedTuples and ``None`` (e.g. ``eqx.Module``
            parameters); its node types and non-array leaves are used, its values are not.

    Returns:
        The :class:`dgsgld.Trace`, equal leaf by leaf (values, dtypes, shapes) to the saved one.
    """
    files, meta = _open(path)
    trace = _build(meta["tree"], files, like)
    if not isinstance(trace, Trace) or not isinstance(trace.divergence, Divergence):
        raise ValueError(f"`path` {str(path)!r} does not hold a dgsgld.Trace.")
    return trace
