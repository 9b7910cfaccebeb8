"""What the hardware allows: the Gaussian noise alone and the mixing products alone.

* noise floor: all ``T C N d`` standard normals of a run drawn in ONE jitted call of
  ``jax.random.normal(dgsgld._random.fast_key(key), (T C N d,))``, the run's PRNG as
  ``dgsgld.sample`` converts it (the numbers of
  ``jax.random.normal``, bit for bit; written out for threefry keys, 3x faster on CPU than
  ``jax.random.normal``'s rolled loop; other keys go through ``jax.random``); the NumPy figure
  draws the same count with ``Generator.standard_normal``.
* mixing floor: the ``T`` products ``W⁽ᵏ⁾ @ X`` of the run, all chains batched into the columns
  (``X`` of shape ``(N, 2 C d)`` for DIGing-SGLD's positions and trackers), as a ``lax.scan``.

``noise_shape_effect`` measures the same normals drawn in the shape ``(T, C, N, d)``: XLA:CPU
vectorises the generator along the last axis, so a short last axis (``d = 6``) is slower than
one flat axis although the numbers are identical.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import _random

from .harness import compile_jax, time_calls


def _normal(key, shape, dtype=jnp.float32):
    """The normals ``dgsgld.sample`` draws: ``jax.random`` on the key as the runner converts it."""
    return jax.random.normal(_random.fast_key(key), shape, dtype)


def noise(key, count: int, repeats: int, dtype=jnp.float32):
    """``(Timing, compiled)`` of drawing ``count`` normals in one call."""
    compiled, _ = compile_jax(lambda k: _normal(k, (count,), dtype), key)
    return time_calls(lambda: compiled(key), repeats), compiled


def jax_random_noise(key, count: int, repeats: int, dtype=jnp.float32):
    """The same normals from ``jax.random.normal`` itself."""
    compiled, _ = compile_jax(lambda k: jax.random.normal(k, (count,), dtype), key)
    return time_calls(lambda: compiled(key), repeats)


def noise_shaped(key, shape, repeats: int, dtype=jnp.float32):
    compiled, _ = compile_jax(lambda k: _normal(k, shape, dtype), key)
    return time_calls(lambda: compiled(key), repeats)


def numpy_noise(count: int, repeats: int, dtype=np.float32):
    rng = np.random.default_rng(0)
    return time_calls(lambda: rng.standard_normal(count, dtype=dtype), repeats, warmup=0)


def mixing(stack, num_chains: int, dim: int, num_steps: int, repeats: int, products: int = 2):
    """``(Timing, compiled)`` of ``num_steps`` products ``W⁽ᵏ⁾ @ X``, ``X`` of shape
    ``(N, products · C · d)`` (``products = 2`` for DIGing-SGLD's ``W x`` and ``W y``);
    ``stack`` is ``(P, N, N)`` (dense) or an object with ``matrix_at(k)`` and ``num_agents``."""
    n = stack.shape[-1] if hasattr(stack, "shape") else stack.num_agents
    dtype = getattr(stack, "dtype", jnp.float32)
    x0 = jnp.ones((n, products * num_chains * dim), dtype)

    def run(stack, x):
        def body(x, k):
            w = stack.matrix_at(k) if hasattr(stack, "matrix_at") else stack[k % stack.shape[0]]
            return w @ x, None

        return jax.lax.scan(body, x, jnp.arange(num_steps))[0]

    compiled, _ = compile_jax(run, stack, x0)
    return time_calls(lambda: compiled(stack, x0), repeats), compiled


def _unit_interval(bits: jax.Array, open_at_zero: bool) -> jax.Array:
    """float32 uniforms from the top 23 bits: ``[0, 1)``, or ``(0, 1]`` with ``open_at_zero``."""
    one = jax.lax.bitcast_convert_type((bits >> 9) | np.uint32(0x3F800000), jnp.float32)
    return 2.0 - one if open_at_zero else one - 1.0


def _erf_inv_normals(bits):
    """``jax.random.normal``'s transform: ``√2 erf⁻¹(2u − 1)``."""
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
    return np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(
        jnp.maximum(lo, 2.0 * _unit_interval(bits, False) - 1.0))


def _box_muller_normals(bits):
    """Box–Muller on the same words: two normals per pair of uniforms."""
    half = bits.shape[0] // 2
    radius = jnp.sqrt(-2.0 * jnp.log(_unit_interval(bits[:half], True)))
    angle = np.float32(2 * np.pi) * _unit_interval(bits[half:], False)
    return jnp.concatenate([radius * jnp.cos(angle), radius * jnp.sin(angle)])


def normal_transforms(key, count: int, repeats: int) -> dict:
    """Seconds to turn ``count`` random words into normals: JAX's ``erf⁻¹`` transform against
    Box–Muller (the candidate fast-noise option), and to draw the words themselves."""
    bits_fn, _ = compile_jax(lambda k: jax.random.bits(k, (count,), jnp.uint32), key)
    bits = jax.block_until_ready(bits_fn(key))
    out = {"bits_s": time_calls(lambda: bits_fn(key), repeats).median}
    for name, fn in (("erf_inv_s", _erf_inv_normals), ("box_muller_s", _box_muller_normals)):
        compiled, _ = compile_jax(fn, bits)
        out[name] = time_calls(lambda: compiled(bits), repeats).median
    z = np.asarray(jax.jit(_box_muller_normals)(bits), np.float64)
    out["box_muller_moments"] = [float(z.mean()), float(z.var()), float((z**4).mean())]
    out["count"] = count
    return out
