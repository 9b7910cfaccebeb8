"""JAX's threefry2x32 keys with the hash written out, registered as a ``jax.random`` implementation.

On CPU, XLA lowers JAX's threefry2x32 hash as a rolled five-iteration ``while`` loop. Inside
the runner's ``lax.scan`` every ``fold_in``, ``split`` and ``normal`` of every step then
becomes a nested loop with its own dispatch and buffer copies: two thirds of a paper-size run
(200 chains x 100 steps x 20 agents x d = 6) went there. Here the same hash is written out in
``lax`` integer ops, which XLA compiles to one vectorized loop (``benchmarks/README.md``).

The words are handed to their consumer through ``lax.optimization_barrier``, as JAX's loop
hands them over: the consumer (e.g. ``jax.random.normal``'s ``erf_inv``) is then a fusion of
its own that reads the words from memory, compiled as with JAX's own keys. Fused with the hash
instead, it may compile to other machine code (XLA:CPU of JAX 0.12 emitted scalar code for the
fused loop and vector code for JAX's), which rounds some normals differently in the last bit.

It is registered through JAX's extension point (``jax.extend.random.define_prng_impl``), so
library code calls plain ``jax.random``; only :func:`dgsgld.sample` converts the user's key
(:func:`fast_key`). The numbers are those of ``jax.random`` with JAX's default key
(``threefry2x32``, ``jax_threefry_partitionable`` on) bit for bit (``tests/runner/test_random.py``):
the same key gives the same draws in ``sample`` and in a user's own loop.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import define_prng_impl, threefry_prng_impl

from .._util.types import Array, PRNGKey

__all__ = ["IMPL", "fast_key"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x: Array, r: int) -> Array:
    return lax.bitwise_or(lax.shift_left(x, np.uint32(r)),
                          lax.shift_right_logical(x, np.uint32(32 - r)))


def threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """The Threefry-2x32 hash (20 rounds) of counters ``(x1, x2)`` under key ``(k1, k2)``.

    All ``uint32``; ``k1``, ``k2`` scalars and ``x1``, ``x2`` of one shape (or scalars). Same
    function as JAX's ``threefry2x32_p``. Written in ``lax`` ops, not ``jnp`` operators: it is
    traced at every lowering of a random primitive, and ``jnp``'s dispatch made it a quarter
    of the quick run's tracing and lowering time.
    """
    add, xor = lax.add, lax.bitwise_xor
    ks = (k1, k2, xor(xor(k1, k2), _PARITY))
    x1, x2 = add(x1, ks[0]), add(x2, ks[1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = add(x1, x2)
            x2 = xor(x1, _rotate_left(x2, r))
        x1 = add(x1, ks[(i + 1) % 3])
        x2 = add(add(x2, ks[(i + 2) % 3]), np.uint32(i + 1))
    return x1, x2


def _hash_counters(key: Array, shape: tuple[int, ...]) -> tuple[Array, Array]:
    """The hash of the 64-bit counters ``0, 1, ...`` laid out in ``shape`` (high, low words)."""
    lo = jnp.arange(math.prod(shape), dtype=jnp.uint32).reshape(shape)
    return threefry2x32(key[0], key[1], jnp.zeros(shape, jnp.uint32), lo)


# Raw keys are ``(2,)`` uint32, as for JAX's threefry2x32; the functions below are JAX's
# partitionable threefry (its default) with the hash above.


def _split(key: Array, shape: tuple[int, ...]) -> Array:
    if math.prod(shape) >= 2**32:
        return threefry_prng_impl.split(key, shape)
    y1, y2 = _hash_counters(key, tuple(shape))
    return jnp.stack([y1, y2], axis=-1)


def _fold_in(key: Array, data: Array) -> Array:
    y1, y2 = threefry2x32(key[0], key[1], np.uint32(0), jnp.asarray(data, jnp.uint32))
    return jnp.stack([y1, y2])


def _random_bits(key: Array, bit_width: int, shape: tuple[int, ...]) -> Array:
    if math.prod(shape) >= 2**32:
        return threefry_prng_impl.random_bits(key, bit_width, shape)
    y1, y2 = _hash_counters(key, tuple(shape))
    if bit_width == 64:
        bits = lax.shift_left(y1.astype(jnp.uint64), np.uint64(32)) | y2.astype(jnp.uint64)
    else:
        bits = y1 ^ y2
        if bit_width != 32:
            bits = bits.astype(jnp.dtype(f"uint{bit_width}"))
    # Materialized, not fused into the consumer: see the module doc.
    return lax.optimization_barrier(bits)


#: The key implementation; ``jax.random.key(seed, impl=IMPL)`` works too.
IMPL = define_prng_impl(
    key_shape=(2,),
    seed=threefry_prng_impl.seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="dgsgld_threefry2x32",
    tag="dfry",
)


def fast_key(key: PRNGKey) -> PRNGKey:
    """``key`` as a typed key of :data:`IMPL` when that gives the same numbers, else typed as is.

    Typed threefry2x32 keys and legacy ``uint32`` keys (``jax.random.PRNGKey(0)``, read as
    threefry2x32) are converted while ``jax_threefry_partitionable`` is on (JAX's default);
    with it off, legacy keys become typed threefry2x32 keys; keys of other implementations are
    returned unchanged. Works on arrays of keys and under ``jit``.
    """
    legacy = not jax.dtypes.issubdtype(jnp.result_type(key), jax.dtypes.prng_key)
    if legacy:
        data, impl = jnp.asarray(key), "threefry2x32"
    else:
        data, impl = None, str(jax.random.key_impl(key))
    if impl != "threefry2x32":
        return key
    if not jax.config.jax_threefry_partitionable:
        return jax.random.wrap_key_data(data, impl="threefry2x32") if legacy else key
    if data is None:
        data = jax.random.key_data(key)
    return jax.random.wrap_key_data(data, impl=IMPL)
