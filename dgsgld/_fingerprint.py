"""Fingerprints: everything that determines a run's numbers, as named, comparable fields.

``describe(obj, name)`` walks ``obj`` and returns ``[(field, description), ...]`` in a fixed
order: equinox modules and dataclasses field by field (settings before arrays), pytree containers through
``jax.tree_util.tree_flatten_with_path``, arrays as shape, dtype and a SHA-256 of their bytes
(small ones by value), and functions as their qualified name plus a hash of their bytecode and
constants, their defaults, the values they close over and the module-level values they read.

Limits (a checkpoint cannot vouch for these): a function's hash covers its own code and what
it reaches directly (closure cells, defaults, globals of its own module, one level of functions
of the same module); code of other modules, attribute values read at run time and C
extensions are named, not hashed. Bytecode differs between Python versions, so a fingerprint
is only comparable under the same Python minor version.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import types

import jax
import numpy as np

#: Arrays with at most this many entries are described by value, larger ones by hash.
_SHOW_VALUES = 8
#: How deep ``describe`` follows nested objects (closures of closures, modules in modules).
_MAX_DEPTH = 8


def _array_description(x) -> str:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(x))
        return f"key<{impl}> " + _array_description(jax.random.key_data(x))
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
        elif isinstance(x, (tuple, list, dict)):
            out.append((path, f"{type(x).__qualname__} of {len(x)}"))
            children, _ = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
            for key_path, child in children:
                walk(child, path + jax.tree_util.keystr(key_path), depth + 1, module)
        elif hasattr(x, "__dict__"):
            out.append((path, f"{type(x).__module__}.{type(x).__qualname__}"))
            for key in sorted(vars(x)):
                walk(vars(x)[key], f"{path}.{key}", depth + 1, module)
        else:
            text = repr(x)
            if " at 0x" in text or len(text) > 200:
                text = f"{type(x).__module__}.{type(x).__qualname__}"
            out.append((path, text))

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
