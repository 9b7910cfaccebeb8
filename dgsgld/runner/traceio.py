"""Save a finished :class:`dgsgld.Trace` to one ``.npz`` file and load it back, without pickle.

The file holds every array leaf of the trace (positions, values, ensemble, the final state and
the :class:`dgsgld.Divergence` record) as ``a0, a1, ...`` and, under ``__meta__``, UTF-8 JSON
describing the pytree around them::

    dgsgld.runner.traceio.save_trace("run.npz", trace, metadata={"step_size": 0.01})
    trace = dgsgld.runner.traceio.load_trace("run.npz")
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

Every leaf's shape and dtype is recorded in the JSON and checked against the array's header
before its data is read (files of format version 1, which did not record them, are read with
the header's own). A damaged or hostile file is refused with one ``ValueError`` naming the file
and what is wrong: not a regular file, not a zip archive, a description that is not JSON or
does not describe a trace, an entry missing, extra, of another shape or dtype, of object dtype,
larger than the file, or compressed entries that would inflate past 256 MiB in all (save_trace
writes none).
"""

from __future__ import annotations

import collections
import json
import keyword
import os
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _npz as _npz
from .loop import Divergence, Trace

__all__ = ["save_trace", "load_trace", "read_metadata"]

_FORMAT, _VERSION, _META = "dgsgld.trace", 2, "__meta__"
#: Versions read: 1 did not record the leaves' shapes and dtypes.
_READS = (1, 2)
#: Largest JSON description read (bytes), and most bytes compressed entries may inflate to.
_MAX_META_BYTES, _MAX_COMPRESSED = 1 << 26, 1 << 28
_KINDS = ("jax", "numpy", "bool", "int", "float", "complex")


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
        arrays[name] = data = np.asarray(jax.random.key_data(value))
        desc = {"t": "key", "a": name, "impl": str(jax.random.key_impl(value))}
    else:
        kind = ("jax" if isinstance(value, jax.Array) else
                "numpy" if isinstance(value, (np.ndarray, np.generic)) else type(value).__name__)
        arrays[name] = data = np.asarray(value)
        desc = {"t": "leaf", "a": name, "kind": kind}
    return {**desc, "shape": list(data.shape), "dtype": data.dtype.str}


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


class _Refused(ValueError):
    """What is wrong with a trace file (the caller names the file)."""


def _fail(path, what: str) -> ValueError:
    return ValueError(f"Trace file {str(path)!r} {what}; it is not a trace written by "
                      "dgsgld.runner.traceio.save_trace, or it was damaged since.")


def _read(path, leaves: bool):
    """``(meta, arrays)`` of a trace file, every entry checked before its data is read
    (``leaves=False``: the description only, ``arrays`` empty)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"`path` {str(path)!r} does not exist.")
    try:
        with _npz.Archive(os.path.realpath(path), max_compressed=_MAX_COMPRESSED) as archive:
            if _META not in archive.names:
                raise ValueError(f"`path` {str(path)!r} is not a dgsgld trace (no {_META!r} "
                                 "entry).")

            def meta_header(shape, dtype):
                if len(shape) != 1 or dtype != np.uint8 or shape[0] > _MAX_META_BYTES:
                    return (f"of shape {shape} and dtype {dtype}; expected UTF-8 bytes (uint8, "
                            f"at most {_MAX_META_BYTES})")
                return None

            raw = archive.read(_META, meta_header)
            try:
                meta = json.loads(raw.tobytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise _Refused(f"has a {_META!r} entry that is not UTF-8 JSON ({err})") from None
            if not isinstance(meta, dict):
                raise _Refused(f"has a {_META!r} entry that is not a JSON object")
            if meta.get("format") != _FORMAT or meta.get("version") not in _READS:
                raise ValueError(
                    f"`path` {str(path)!r} has format {meta.get('format')!r} version "
                    f"{meta.get('version')!r}; this dgsgld reads {_FORMAT!r} versions "
                    f"{', '.join(map(str, _READS))}."
                )
            if not isinstance(meta.get("metadata"), dict):
                raise _Refused("has no `metadata` object in its description")
            specs: dict = {}
            _check_tree(meta.get("tree"), "trace", specs, meta["version"] >= 2)
            archive.check_names([*specs, _META])
            arrays = {}
            for name, spec in specs.items() if leaves else ():
                arrays[name] = archive.read(name, _leaf_check(spec))
    except _npz.ArchiveError as err:
        raise _fail(path, str(err)) from None
    except _Refused as err:
        raise _fail(path, str(err)) from None
    except OSError as err:
        raise _fail(path, f"is unreadable ({type(err).__name__}: {err})") from err
    return meta, arrays


def _leaf_check(spec):
    def wrong(shape, dtype):
        if dtype.kind not in "biufc":
            return f"of dtype {dtype}, not a number"
        if spec is not None and [list(shape), dtype.str] != spec:
            return (f"of shape {shape} and dtype {dtype}; the description records "
                    f"{tuple(spec[0])} and {np.dtype(spec[1])}")
        return None

    return wrong


def _check_tree(desc, path: str, specs: dict, recorded: bool) -> None:
    """Refuse a description that is not one ``save_trace`` writes; collect its leaves' names
    and (``recorded``) their ``[shape, dtype]``."""

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise _Refused(f"has a malformed description at `{path}`: {what}")

    need(isinstance(desc, dict) and isinstance(desc.get("t"), str), "not a node")
    t = desc["t"]
    if t in ("leaf", "key"):
        name = desc.get("a")
        need(isinstance(name, str) and name != _META and name not in specs,
             f"entry name {name!r} missing or used twice")
        if t == "key":
            need(isinstance(desc.get("impl"), str), "a key without its implementation")
        else:
            need(desc.get("kind") in _KINDS, f"leaf kind {desc.get('kind')!r}")
        spec = None
        if recorded and t == "leaf" and desc["kind"] not in ("jax", "numpy"):
            need(desc.get("shape") == [], f"a Python {desc['kind']} of shape {desc.get('shape')}")
        if recorded:
            shape, dtype = desc.get("shape"), desc.get("dtype")
            need(isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)
                 and isinstance(dtype, str), "no shape and dtype recorded")
            try:
                spec = [shape, np.dtype(dtype).str]
            except TypeError:
                need(False, f"dtype {dtype!r}")
        specs[name] = spec
        return
    if t == "none":
        return
    children = desc.get("children")
    if t in ("dict", "namedtuple", "tuple", "list"):
        need(isinstance(children, list), "no children")
    if t == "dict":
        keys = desc.get("keys")
        need(isinstance(keys, list) and all(isinstance(k, str) for k in keys)
             and len(keys) == len(children) and len(set(keys)) == len(keys), "bad keys")
        labels = [f"[{k!r}]" for k in keys]
    elif t == "namedtuple":
        fields, name = desc.get("fields"), desc.get("name")
        need(isinstance(fields, list) and all(_identifier(f) for f in fields)
             and len(fields) == len(children) and len(set(fields)) == len(fields)
             and isinstance(desc.get("module"), str) and isinstance(name, str)
             and _identifier(name.rsplit(".", 1)[-1]), "bad NamedTuple fields or name")
        labels = [f".{f}" for f in fields]
    elif t in ("tuple", "list"):
        labels = [f"[{i}]" for i in range(len(children))]
    elif t == "opaque":
        leaves = desc.get("leaves")
        need(isinstance(leaves, list) and isinstance(desc.get("type"), str)
             and isinstance(desc.get("path"), str), "an opaque node without its leaves")
        for i, leaf in enumerate(leaves):
            if not (isinstance(leaf, dict) and leaf.get("t") == "static"):
                _check_tree(leaf, f"{path}<leaf {i}>", specs, recorded)
        return
    else:
        need(False, f"node type {t!r}")
    for label, child in zip(labels, children):
        _check_tree(child, path + label, specs, recorded)


def _identifier(name) -> bool:
    """A name ``collections.namedtuple`` accepts as a field (or class) name."""
    return (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
            and not name.startswith("_"))


def read_metadata(path: str | Path) -> dict:
    """The ``metadata`` dict saved with a trace by :func:`save_trace`."""
    return _read(path, leaves=False)[0]["metadata"]


def _restore_leaf(desc: dict, files):
    value = files[desc["a"]]
    if desc["t"] == "key":
        try:
            return jax.random.wrap_key_data(jnp.asarray(value), impl=desc["impl"])
        except (ValueError, TypeError, KeyError) as err:
            raise _Refused(f"has a key `{desc['a']}` that JAX cannot rebuild as a "
                           f"{desc['impl']!r} key ({type(err).__name__}: {err})") from None
    kind = desc["kind"]
    if kind == "jax":
        return jnp.asarray(value)
    if kind == "numpy":
        return value
    if np.shape(value) != ():
        raise _Refused(f"has a Python {kind} `{desc['a']}` of shape {np.shape(value)}")
    return {"bool": bool, "int": int, "float": float, "complex": complex}[kind](value)


def _namedtuple_class(desc: dict):
    """dgsgld's own NamedTuples as themselves; any other as an equivalent namedtuple."""
    module, name, fields = desc["module"], desc["name"], desc["fields"]
    if module == "dgsgld" or module.startswith("dgsgld."):
        cls = sys.modules.get(module)  # only modules already imported: reading runs no code
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
    meta, arrays = _read(path, leaves=True)
    try:
        trace = _build(meta["tree"], arrays, like)
    except _Refused as err:
        raise _fail(path, str(err)) from None
    if not isinstance(trace, Trace) or not isinstance(trace.divergence, Divergence):
        raise ValueError(f"`path` {str(path)!r} does not hold a dgsgld.Trace.")
    return trace
