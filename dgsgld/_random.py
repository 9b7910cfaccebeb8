"""The few ``jax.random`` functions the sampling loop calls, written to fuse inside a scan.

On CPU, XLA lowers JAX's threefry2x32 hash as a rolled five-iteration ``while`` loop (it keeps
compile times down). Inside the runner's ``lax.scan`` every ``fold_in``, ``split`` and
``normal`` of every step then becomes a nested loop with its own dispatch and buffer copies:
two thirds of a paper-size run (200 chains x 100 steps x 20 agents x d = 6) went there. Here
the same hash is written out in ``jnp`` integer ops, which XLA fuses into the consumer of the
numbers, e.g. the Langevin update. 3x faster per draw on CPU, and no loop-in-loop.

The numbers are those of ``jax.random`` bit for bit (``tests/test_random.py``): keys of the
default ``threefry2x32`` implementation with ``jax_threefry_partitionable`` on (JAX's default)
take the written-out path; any other key, or that flag off, calls ``jax.random`` itself.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._types import Array, PRNGKey

__all__ = ["fold_in", "split", "normal", "uniform", "bits"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x: Array, r: int) -> Array:
    return lax.shift_left(x, np.uint32(r)) | lax.shift_right_logical(x, np.uint32(32 - r))


def threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """The Threefry-2x32 hash (20 rounds) of counters ``(x1, x2)`` under key ``(k1, k2)``.

    All ``uint32``, broadcast together. Same function as JAX's ``threefry2x32_p``.
    """
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _written_out(key) -> bool:
    """Whether ``key`` is a typed threefry key whose numbers this module reproduces."""
    dtype = getattr(key, "dtype", None)
    return (
        dtype is not None
        and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
        and jnp.shape(key) == ()
        and str(jax.random.key_impl(key)) == "threefry2x32"
        and bool(jax.config.jax_threefry_partitionable)
    )


def _halves(key) -> tuple[Array, Array]:
    data = jax.random.key_data(key)
    return data[0], data[1]


def _wrap(y1: Array, y2: Array, key) -> PRNGKey:
    return jax.random.wrap_key_data(jnp.stack([y1, y2], axis=-1), impl=jax.random.key_impl(key))


def _counters(size: int) -> tuple[Array, Array]:
    # Element j of a draw hashes the 64-bit counter j as (high word, low word).
    return jnp.zeros((size,), jnp.uint32), jnp.arange(size, dtype=jnp.uint32)


def fold_in(key: PRNGKey, data) -> PRNGKey:
    """``jax.random.fold_in(key, data)``."""
    if not _written_out(key):
        return jax.random.fold_in(key, data)
    k1, k2 = _halves(key)
    y1, y2 = threefry2x32(k1, k2, np.uint32(0), jnp.asarray(data, jnp.uint32))
    return _wrap(y1, y2, key)


def split(key: PRNGKey, num: int = 2) -> PRNGKey:
    """``jax.random.split(key, num)``: ``num`` keys, shape ``(num,)``."""
    if not _written_out(key):
        return jax.random.split(key, num)
    k1, k2 = _halves(key)
    y1, y2 = threefry2x32(k1, k2, *_counters(num))
    return _wrap(y1, y2, key)


def _bits(key, size: int, width: int) -> Array:
    k1, k2 = _halves(key)
    y1, y2 = threefry2x32(k1, k2, *_counters(size))
    if width == 32:
        return y1 ^ y2
    return lax.shift_left(y1.astype(jnp.uint64), np.uint64(32)) | y2.astype(jnp.uint64)


def _unit_floats(key, size: int, dtype) -> Array:
    """Uniform ``[0, 1)`` floats from the mantissa bits, as ``jax.random.uniform`` makes them."""
    finfo = jnp.finfo(dtype)
    width = finfo.bits
    uint = jnp.uint32 if width == 32 else jnp.uint64
    bits = lax.shift_right_logical(_bits(key, size, width), uint(width - finfo.nmant))
    one = np.array(1.0, dtype).view(uint)
    return lax.bitcast_convert_type(bits | one, dtype) - np.array(1.0, dtype)


def _supported(key, shape, dtype) -> bool:
    return (
        _written_out(key)
        and jnp.dtype(dtype) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))
        and math.prod(shape) < 2**32
    )


def uniform(key: PRNGKey, shape=(), dtype=float, minval: float = 0.0, maxval: float = 1.0) -> Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)`` for Python-number bounds."""
    shape = tuple(shape)
    dtype = jnp.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if not (_supported(key, shape, dtype) and isinstance(minval, (int, float))
            and isinstance(maxval, (int, float))):
        return jax.random.uniform(key, shape, dtype, minval, maxval)
    return _uniform(key, shape, dtype, float(minval), float(maxval))


# Compiled as one unit, like jax.random's own functions, so that XLA contracts the same
# multiply-adds into FMAs and even eager calls give jax.random's floats bit for bit.
@partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _uniform(key, shape, dtype, minval, maxval):
    lo, hi = np.asarray(minval, dtype), np.asarray(maxval, dtype)
    floats = _unit_floats(key, math.prod(shape), dtype)
    return lax.max(lo, (floats * (hi - lo) + lo).reshape(shape))


def normal(key: PRNGKey, shape=(), dtype=float) -> Array:
    """``jax.random.normal(key, shape, dtype)`` (real dtypes)."""
    shape = tuple(shape)
    dtype = jnp.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if not _supported(key, shape, dtype):
        return jax.random.normal(key, shape, dtype)
    return _normal(key, shape, dtype)


@partial(jax.jit, static_argnums=(1, 2))
def _normal(key, shape, dtype):
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform(key, shape, dtype, float(lo), 1.0)
    return np.array(np.sqrt(2), dtype) * lax.erf_inv(u)


def bits(key: PRNGKey, shape=()) -> Array:
    """``jax.random.bits(key, shape)``: uniform ``uint32`` words."""
    shape = tuple(shape)
    if not (_written_out(key) and math.prod(shape) < 2**32):
        return jax.random.bits(key, shape, jnp.uint32)
    return _bits(key, math.prod(shape), 32).reshape(shape)
