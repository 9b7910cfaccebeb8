"""A faster standard normal on the same counter-based bits: an inverse-CDF table.

``jax.random.normal`` turns each 32-bit word into ``√2 erf⁻¹(2u − 1)``: a log, a square root
and two degree-9 polynomials per number, about a fifth of a paper-size DIGing-SGLD run on
XLA:CPU (``benchmarks/targets.md``). :func:`fast_normal` turns the same words,
``jax.random.bits(key, shape)``, into normals with two table reads and one multiply-add:

* the top 23 bits give ``p = (k + ½) / 2²³`` (the 23 bits of ``jax.random``'s float32 uniform,
  at the midpoint: ``p`` is never 0 or 1 and the law is exactly symmetric about 0);
* ``m = min(p, 1 − p)`` as a float32 has an exponent (one of 23 octaves, ``2⁻²⁴ ≤ m < ½``);
  exponent and the top 7 mantissa bits index ``23 · 128`` intervals, a geometric grid that is
  as fine, relatively, in the tails as in the centre (a 23 KB table);
* on each interval ``Φ⁻¹`` is a line in the next 12 mantissa bits.

Largest error against ``Φ⁻¹(p)`` over all 2²³ inputs: 2.5e-6 (``jax.random.normal``'s own
transform: 2.2e-5 against the quantile of its uniform); ``|z| < 5.3``. No transcendental, no
division, so on XLA:CPU it costs little more than the bits (``docs/results/performance.md``;
the option in ``docs/guide/samplers.md``).

Since both invert the normal CDF at the same uniform, the numbers are close to
``jax.random.normal``'s for the same key (within 1e-5 where ``|z| < 3``, 3e-4 where
``|z| < 4``, up to 0.08 beyond, where the midpoint matters) but not equal: a different run, with
the same law to the accuracy of ``tests/samplers/test_noise.py``. They do not depend on ``jit``,
``vmap`` or how chains are batched, nor on whether XLA fuses the multiply-add.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PRNGKey

__all__ = ["fast_normal"]

_INDEX_BITS = 7  # intervals per octave: 2**7
_OCTAVES = 23  # m = min(p, 1 - p) in [2^-24, 1/2)
_T_BITS = 12  # the position t in an interval, to 12 bits; slopes have 12 significant bits,
# so that slope * t is exact in float32: a + slope * t is then one rounding whether or not XLA
# contracts it into a fused multiply-add: eager and jit give the same numbers (tested), and so
# should any backend with round-to-nearest float32 (every other step is exact; GPU untested).
_SHIFT = 23 - _INDEX_BITS
_FIRST = (127 - 24) << _INDEX_BITS  # biased exponent of 2^-24, then the index bits


def _lower_quantile(p: np.ndarray) -> np.ndarray:
    """``Φ⁻¹(p)`` for ``0 < p ≤ ½`` in float64 to ~1e-15: Abramowitz–Stegun 26.2.23
    (``|error| < 4.5e-4``), then three Halley steps on ``Φ(z) = erfc(−z/√2)/2``."""
    t = np.sqrt(-2.0 * np.log(p))
    z = -(t - (2.515517 + t * (0.802853 + t * 0.010328))
          / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))))
    erfc = np.frompyfunc(math.erfc, 1, 1)
    for _ in range(3):
        u = (0.5 * erfc(-z / math.sqrt(2.0)).astype(np.float64) - p) * math.sqrt(2 * math.pi) \
            * np.exp(0.5 * z * z)
        z = z - u / (1.0 + 0.5 * z * u)
    return z


@functools.cache
def _table() -> tuple[np.ndarray, np.ndarray]:
    """``(intercept, slope)``, each ``(23 · 128,)`` float32: ``−Φ⁻¹(m) ≈ a + b t`` on interval
    ``i``, least squares at 12 Chebyshev nodes of ``t ∈ [0, 1)``, ``b`` rounded to 12
    significant bits and ``a`` refitted for ``t`` truncated to 12 bits. Built on first use."""
    bins = np.arange(_OCTAVES << _INDEX_BITS)
    octave, j = np.divmod(bins, 1 << _INDEX_BITS)
    width = 2.0 ** (octave - 24.0 - _INDEX_BITS)
    t = 0.5 - 0.5 * np.cos(np.pi * (np.arange(12) + 0.5) / 12)
    z = -_lower_quantile(2.0 ** (octave - 24.0)[:, None] + j[:, None] * width[:, None]
                         + width[:, None] * t)  # (bins, nodes)
    tc = t - t.mean()
    slope = (tc * z).sum(1) / (tc**2).sum()
    mantissa, exponent = np.frexp(slope)
    slope = np.ldexp(np.round(mantissa * 2.0**12), exponent - 12)
    # t is used truncated to 12 bits, on average 2^-13 below its value
    intercept = (z - slope[:, None] * t).mean(1) + slope * 2.0**-(_T_BITS + 1)
    return intercept.astype(np.float32), slope.astype(np.float32)


def normals_from_bits(bits: Array) -> Array:
    """float32 standard normals from ``uint32`` words (same shape): the transform of
    :func:`fast_normal`."""
    # q = p - 1/2 from integers: an odd multiple of 2^-24, |q| < 1/2, so m = 1/2 - |q| is exact.
    odd = jax.lax.bitcast_convert_type((bits >> 8) | np.uint32(1), jnp.int32) - np.int32(2**23)
    q = odd.astype(jnp.float32) * np.float32(2.0**-24)
    m = jax.lax.bitcast_convert_type(np.float32(0.5) - jnp.abs(q), jnp.int32)
    index = (m >> _SHIFT) - np.int32(_FIRST)  # in [0, 23 · 128) by construction
    t = ((m & np.int32((1 << _SHIFT) - 1)) >> (_SHIFT - _T_BITS)).astype(jnp.float32)
    t = t * np.float32(2.0**-_T_BITS)
    intercept, slope = (jnp.asarray(c).at[index].get(mode="promise_in_bounds") for c in _table())
    z = intercept + slope * t  # -Φ⁻¹(m) ≥ 0
    return jnp.where(q < 0, -z, z)


def fast_normal(key: PRNGKey, shape: tuple[int, ...] = (), dtype=float) -> Array:
    """Standard normals of ``shape`` from ``jax.random.bits(key, shape)`` by a table inverse
    CDF (module docstring): a drop-in for ``jax.random.normal`` with other numbers.

    Use it as a sampler's noise: ``dgsgld.DIGingSGLD(0.01, normal=dgsgld.fast_normal)`` (any
    sampler class), or ``dataclasses.replace(sampler, normal=dgsgld.fast_normal)``.

    Computed in float32 from 23-bit uniforms and cast to ``dtype`` (a float dtype): for
    float64 work the default ``jax.random.normal`` keeps float64 resolution.

    >>> z = fast_normal(jax.random.key(0), (2, 3))
    >>> z.shape, z.dtype
    ((2, 3), dtype('float32'))
    """
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"`dtype` must be a float dtype; got {dtype}.")
    shape = tuple(shape)
    return normals_from_bits(jax.random.bits(key, shape, jnp.uint32)).astype(dtype)
