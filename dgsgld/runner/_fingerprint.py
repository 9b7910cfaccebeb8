"""Fingerprints: everything that determines a run's numbers, as named, comparable fields.

Two parts. :func:`program` hashes what a computation *does*: the jaxpr JAX traces from it on
given shapes (every primitive, its parameters, shapes and dtypes, sub-programs of loops,
conditionals and ``jit`` calls) together with the bytes of every constant and literal it holds.
Whatever the traced code is (a function, a class instance's ``__call__``, a helper in another
module or several calls deep, a module-level value read when it runs), if it changes what is
computed, the hash changes; if two processes trace the same computation, the hash is the same.
Equations whose results are unused are left out, so checks that run on the host (and are
skipped once cached) do not enter it.

``describe(obj, name)`` names the parts: it walks ``obj`` and returns ``[(field, description),
...]`` in a fixed order: equinox modules and dataclasses field by field (settings before
arrays), pytree containers through ``jax.tree_util.tree_flatten_with_path``, arrays as shape,
dtype and a SHA-256 of their bytes (small ones by value), and functions as their qualified
name plus a hash of their bytecode and constants, their defaults, the values they close over
and the module-level values they read (one level deep in the same module; functions of other
modules by name). A callable object's ``__call__`` is described as a function. The fields that
describe code (:func:`code_fields`) are there to *name* what changed; the program hash is what
vouches for it.

What the program hash cannot see: code run on the host from inside the computation
(``jax.pure_callback``, ``io_callback``, ``jax.debug.callback``), which is seen by name only;
custom differentiation rules that the traced computation does not use; and everything below
the jaxpr: the compiler and its flags, the device and the platform, which can round the same
program differently. JAX's version, which decides the jaxpr a function traces to, is a field of
its own.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import types

import jax
import numpy as np
from jax.extend import core as jex

#: Arrays with at most this many entries are described by value, larger ones by hash.
_SHOW_VALUES = 8
#: How deep ``describe`` follows nested objects (closures of closures, modules in modules).
_MAX_DEPTH = 8


def _spread(x) -> bool:
    """Whether ``x`` is an array spread over processes, of which this one holds a part."""
    return isinstance(x, jax.Array) and not x.is_fully_addressable


def _local_bytes(x) -> bytes:
    """The bytes of this process's shards of a spread array, in index order: each process
    describes the part it can read (its checkpoint vouches for its own data)."""
    shards = sorted(x.addressable_shards, key=lambda s: str(s.index))
    return b"".join(np.ascontiguousarray(np.asarray(s.data)).tobytes() for s in shards)


def _array_description(x) -> str:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(x))
        return f"key<{impl}> " + _array_description(jax.random.key_data(x))
    if _spread(x):
        digest = hashlib.sha256(_local_bytes(x)).hexdigest()[:16]
        return f"array {x.dtype}{list(x.shape)} over processes, this process's part sha256:{digest}"
    arr = np.asarray(x)
    if arr.size <= _SHOW_VALUES and arr.dtype.kind in "biuf":
        values = str(arr[()]) if arr.ndim == 0 else "[" + ", ".join(map(str, arr.ravel())) + "]"
        return f"{values} ({arr.dtype}{list(arr.shape) if arr.ndim else ''})"
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)  # no copy when contiguous
    digest = hashlib.sha256(flat).hexdigest()[:16]
    return f"array {arr.dtype}{list(arr.shape)} sha256:{digest}"


def _code_digest(code: types.CodeType) -> str:
    digest = hashlib.sha256()

    def add(c: types.CodeType) -> None:
        digest.update(c.co_code)
        digest.update(repr((c.co_argcount, c.co_kwonlyargcount, c.co_names, c.co_varnames,
                            c.co_freevars)).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                add(const)
            else:
                digest.update(repr(const).encode())

    add(code)
    return digest.hexdigest()[:16]


def _global_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return list(dict.fromkeys(names))


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic, jax.Array))


def describe(obj, name: str, *, _depth: int = 0, _module: str | None = None) -> list:
    """``[(field, description), ...]`` for ``obj`` and everything reachable from it."""
    out: list[tuple[str, str]] = []

    def walk(x, path: str, depth: int, module: str | None) -> None:
        if depth > _MAX_DEPTH:
            out.append((path, f"{type(x).__qualname__} (not followed deeper)"))
        elif x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
            out.append((path, repr(x)))
        elif _is_array(x):
            out.append((path, _array_description(x)))
        elif isinstance(x, functools.partial):
            out.append((path, "functools.partial"))
            walk(x.func, f"{path}.func", depth + 1, module)
            for i, arg in enumerate(x.args):
                walk(arg, f"{path}.args[{i}]", depth + 1, module)
            for key in sorted(x.keywords):
                walk(x.keywords[key], f"{path}.keywords[{key!r}]", depth + 1, module)
        elif isinstance(x, types.MethodType):
            walk(x.__func__, path, depth, module)
            walk(x.__self__, f"{path}.__self__", depth + 1, module)
        elif isinstance(x, types.FunctionType):
            function(x, path, depth, module)
        elif hasattr(x, "__wrapped__") and callable(x):  # jax.jit, functools.wraps
            out.append((path, f"wrapper {type(x).__qualname__}"))
            walk(x.__wrapped__, f"{path}.__wrapped__", depth + 1, module)
        elif isinstance(x, (types.ModuleType, type, types.BuiltinFunctionType)):
            out.append((path, f"{type(x).__name__} {getattr(x, '__qualname__', x.__name__)}"))
        elif dataclasses.is_dataclass(x):  # equinox modules, NamedTuple-free configs
            out.append((path, f"{type(x).__module__}.{type(x).__qualname__}"))
            values = [(f.name, getattr(x, f.name, None)) for f in dataclasses.fields(x)]
            # Settings before arrays, so that a changed setting (e.g. a batch size) is named
            # before the arrays derived from it.
            for key, value in sorted(values, key=lambda kv: _is_array(kv[1])):
                walk(value, f"{path}.{key}", depth + 1, module)
            method(x, path, depth)
        elif isinstance(x, (tuple, list, dict)):
            out.append((path, f"{type(x).__qualname__} of {len(x)}"))
            children, _ = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
            for key_path, child in children:
                walk(child, path + jax.tree_util.keystr(key_path), depth + 1, module)
        elif hasattr(x, "__dict__"):
            out.append((path, f"{type(x).__module__}.{type(x).__qualname__}"))
            for key in sorted(vars(x)):
                walk(vars(x)[key], f"{path}.{key}", depth + 1, module)
            method(x, path, depth)
        else:
            text = repr(x)
            if " at 0x" in text or len(text) > 200:
                text = f"{type(x).__module__}.{type(x).__qualname__}"
            out.append((path, text))

    def method(x, path: str, depth: int) -> None:
        call = getattr(type(x), "__call__", None)
        if isinstance(call, types.FunctionType) and depth < _MAX_DEPTH:
            function(call, f"{path}.__call__", depth + 1, None)

    def function(fn: types.FunctionType, path: str, depth: int, module: str | None) -> None:
        code = fn.__code__
        out.append((path, f"function {fn.__module__}.{fn.__qualname__} "
                          f"(code sha256:{_code_digest(code)})"))
        for i, default in enumerate(fn.__defaults__ or ()):
            walk(default, f"{path}.__defaults__[{i}]", depth + 1, fn.__module__)
        for key in sorted(fn.__kwdefaults__ or {}):
            walk(fn.__kwdefaults__[key], f"{path}.__kwdefaults__[{key!r}]", depth + 1,
                 fn.__module__)
        for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                value = None
            walk(value, f"{path}.<closure {var}>", depth + 1, fn.__module__)
        for var in _global_names(code):
            if var not in fn.__globals__:
                continue
            value = fn.__globals__[var]
            if isinstance(value, (types.ModuleType, type)):
                continue
            if isinstance(value, types.FunctionType) and (
                value.__module__ != fn.__module__ or module == fn.__module__
            ):
                # Functions of other modules (and beyond one level of the same module): named.
                out.append((f"{path}.<global {var}>", f"function {value.__module__}."
                                                      f"{value.__qualname__}"))
                continue
            walk(value, f"{path}.<global {var}>", depth + 1, fn.__module__)

    walk(obj, name, _depth, _module)
    return out


_CODE = ("function ", "wrapper ")


def code_fields(fingerprint) -> set[str]:
    """The fields of ``fingerprint`` (``[(field, description), ...]``) that describe code: a
    function (name and bytecode), what :func:`describe` found under it, and the programs of
    single functions (``<name>.<program>``). They name what changed; what the code computes
    is vouched for by the whole run's program."""
    roots = [f for f, d in fingerprint if d.startswith(_CODE)]
    return {f for f, _ in fingerprint
            if f.endswith(".<program>") or any(f == r or f.startswith(r + ".") for r in roots)}


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")


def _callable_name(x) -> str:
    name = getattr(x, "__qualname__", None) or type(x).__qualname__
    inner = getattr(x, "callback_func", None)  # a host callback's function
    if inner is not None and callable(inner):
        name += f"({_callable_name(inner)})"
    return f"{getattr(x, '__module__', None) or type(x).__module__}.{name}"


def _live(jaxpr) -> list:
    """The equations of ``jaxpr`` whose results are used (or that have effects), in order."""
    live = {v for v in jaxpr.outvars if isinstance(v, jex.Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(v in live for v in eqn.outvars):
            kept.append(eqn)
            live.update(v for v in eqn.invars if isinstance(v, jex.Var))
    return kept[::-1]


def program(fn, *args) -> str:
    """``"sha256:<hex> (<e> equations, <c> constants, <b> bytes)"`` of ``fn(*args)``'s jaxpr.

    ``args`` may be arrays or ``jax.ShapeDtypeStruct``; the hash covers the program (primitives,
    parameters, shapes, dtypes, sub-programs) and the bytes of its constants and literals.
    """
    closed = jax.make_jaxpr(fn)(*args)
    parts: list = []  # hashed at the end, separated by NULs
    counts = [0, 0, 0]
    avals: dict = {}

    def add(*items) -> None:
        parts.extend(str(item) for item in items)

    def aval(v) -> str:
        try:
            return avals[v.aval]
        except KeyError:
            avals[v.aval] = text = str(v.aval)
            return text
        except TypeError:  # an unhashable abstract value
            return str(v.aval)

    def value(x) -> None:
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            add("key", jax.random.key_impl(x))
            x = jax.random.key_data(x)
        if _spread(x):
            add("spread", x.dtype.str, x.shape)
            parts.append(_local_bytes(x))
            counts[1] += 1
            return
        arr = np.asarray(x)
        counts[1] += 1
        counts[2] += arr.nbytes
        add(arr.dtype.str, arr.shape)
        parts.append(np.ascontiguousarray(arr).tobytes())

    def param(x) -> None:
        if isinstance(x, jex.ClosedJaxpr):
            walk(x.jaxpr, x.consts, prune=False)
        elif isinstance(x, jex.Jaxpr):
            walk(x, [], prune=False)
        elif isinstance(x, (tuple, list)):
            add(type(x).__qualname__, len(x))
            for y in x:
                param(y)
        elif _is_array(x):
            value(x)
        elif callable(x) and not isinstance(x, type):
            add("callable", _callable_name(x))
        else:
            add(_ADDRESS.sub("", repr(x)))

    def walk(jaxpr, consts, prune: bool) -> None:
        names: dict = {}

        def var(v) -> None:
            if isinstance(v, jex.Literal):
                add("literal", aval(v))
                value(v.val)
            else:
                add(names.setdefault(v, len(names)), aval(v))

        eqns = _live(jaxpr) if prune else jaxpr.eqns
        used = {v for v in [*jaxpr.outvars, *(v for eqn in eqns for v in eqn.invars)]
                if isinstance(v, jex.Var)}
        add("jaxpr", len(jaxpr.constvars), len(jaxpr.invars), len(eqns))
        for v, c in zip(jaxpr.constvars, consts):
            var(v)
            if not prune or v in used:
                value(c)
        for v in jaxpr.invars:
            var(v)
        for eqn in eqns:
            counts[0] += 1
            add("eqn", eqn.primitive.name)
            for v in eqn.invars:
                var(v)
            for key in sorted(eqn.params):
                add(key)
                param(eqn.params[key])
            for v in eqn.outvars:
                var(v)
        for v in jaxpr.outvars:
            var(v)

    walk(closed.jaxpr, closed.consts, prune=True)
    digest = hashlib.sha256(b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts))
    return (f"program sha256:{digest.hexdigest()[:16]} ({counts[0]} equations, {counts[1]} "
            f"constants, {counts[2]} bytes)")
