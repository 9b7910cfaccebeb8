"""What the hardware allows: the Gaussian noise alone and the mixing products alone.

* noise floor: all ``T C N d`` standard normals of a run drawn in ONE jitted call of
  ``jax.random.normal(dgsgld.runner._random.fast_key(key), (T C N d,))``, the run's PRNG as
  ``dgsgld.sample`` converts it (the numbers of
  ``jax.random.normal``, bit for bit; written out for threefry keys, 3x faster on CPU than
  ``jax.random.normal``'s rolled loop; other keys go through ``jax.random``); the NumPy figure
  draws the same count with ``Generator.standard_normal``.
* mixing floor: the ``T`` products ``W⁽ᵏ⁾ @ X`` of the run, all chains batched into the columns
  (``X`` of shape ``(N, 2 C d)`` for DIGing-SGLD's positions and trackers), as a ``lax.scan``.

The noise variants (:class:`NoiseVariant`, :func:`ppnd7_normals`) take the noise of a paper-size
run apart inside ``dgsgld.sample``: JAX's normal against another exact inverse CDF, two normals
per hash, rbg keys, Box–Muller, ``log u`` alone, uniform noise (no transform) and no noise at
all. They are measurements, not options; the shipped option is ``normal=dgsgld.fast_normal``
(:mod:`dgsgld.samplers.noise`, a table inverse CDF without transcendentals), measured beside them
through the samplers' own ``normal`` field (``benchmarks/run.py``, ``noise_section``).

``noise_shape_effect`` measures the same normals drawn in the shape ``(T, C, N, d)``: XLA:CPU
vectorises the generator along the last axis, so a short last axis (``d = 6``) is slower than
one flat axis although the numbers are identical.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld.runner import _random as _random
from dgsgld.samplers.base import step_keys

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


# Wichura's PPND7 (Applied Statistics 37, 1988, algorithm AS 241): the normal quantile to about
# 1e-7, a rational function of q² in the centre (|q| ≤ 0.425) and of √(−log min(p, 1 − p)) in the
# tails. Its third region (that root > 5, p < 1.4e-11) is never reached from 23-bit uniforms.
_PPND7 = {
    "centre": ((3.3871327179, 50.434271938, 159.29113202, 59.109374720),
               (1.0, 17.895169469, 78.757757664, 67.187563600)),
    "tail": ((1.4234372777, 2.7568153900, 1.3067284816, 0.17023821103),
             (1.0, 0.73700164250, 0.12021132975, 0.0)),
}


def _horner(coefficients, x):
    out = coefficients[-1]
    for c in coefficients[-2::-1]:
        out = out * x + c
    return out


def centred_uniform(bits: jax.Array) -> jax.Array:
    """``q = p − 1/2`` for ``p`` on the midpoints ``(k + 1/2) / 2²³``: symmetric about 0, never
    0 or ±1/2. Built from integers: a float ``u − 1.5 + 2⁻²⁴`` is reassociated by XLA and rounds
    to ``−1/2`` (then ``log 0``)."""
    odd = jax.lax.bitcast_convert_type((bits >> 8) | np.uint32(1), jnp.int32) - np.int32(2**23)
    return odd.astype(jnp.float32) * np.float32(2.0**-24)


def ppnd7_normals(bits: jax.Array) -> jax.Array:
    """float32 normals from 32-bit words by PPND7 (one log, one square root, one division);
    both regions share one Horner pass with coefficients selected per element."""
    q = centred_uniform(bits)
    centre = jnp.abs(q) <= np.float32(0.425)
    tail = jnp.sqrt(-jnp.log(np.float32(0.5) - jnp.abs(q))) - np.float32(1.6)
    x = jnp.where(centre, np.float32(0.180625) - q * q, tail)
    (a, b), (c, d) = _PPND7["centre"], _PPND7["tail"]
    pick = lambda u, v: [jnp.where(centre, np.float32(s), np.float32(t)) for s, t in zip(u, v)]  # noqa: E731
    return jnp.where(centre, q, jnp.sign(q)) * _horner(pick(a, c), x) / _horner(pick(b, d), x)


#: What ``dgsgld.fast_normal`` is, for the tables.
FAST_NORMAL_WHAT = ("dgsgld.fast_normal, the shipped option (`normal=`): a table inverse CDF "
                    "(23 × 128 lines) on the same words, no log/sqrt/division")


def normal_transforms(key, count: int, repeats: int) -> dict:
    """Seconds to turn ``count`` random words into normals: JAX's ``erf⁻¹`` transform against
    PPND7, Box–Muller and ``dgsgld.fast_normal``'s table, and to draw the words themselves; the
    largest error of JAX's transform, PPND7 and the table against the exact quantile over all
    2²³ inputs."""
    from scipy.special import ndtri

    from dgsgld.samplers.noise import normals_from_bits

    bits_fn, _ = compile_jax(lambda k: jax.random.bits(k, (count,), jnp.uint32), key)
    bits = jax.block_until_ready(bits_fn(key))
    out = {"bits_s": time_calls(lambda: bits_fn(key), repeats).median}
    for name, fn in (("erf_inv_s", _erf_inv_normals), ("box_muller_s", _box_muller_normals),
                     ("ppnd7_s", ppnd7_normals), ("fast_normal_s", normals_from_bits)):
        compiled, _ = compile_jax(fn, bits)
        out[name] = time_calls(lambda: compiled(bits), repeats).median
    for name, fn in (("box_muller", _box_muller_normals), ("ppnd7", ppnd7_normals),
                     ("fast_normal", normals_from_bits)):
        z = np.asarray(jax.jit(fn)(bits), np.float64)
        out[f"{name}_moments"] = [float(z.mean()), float(z.var()), float((z**4).mean())]
    # Largest error against the exact quantile of the uniform each transform computes (the
    # midpoint (k + 1/2) / 2²³ for PPND7, k / 2²³ for JAX's, k = 0 left out: -inf there).
    k = np.arange(2**23, dtype=np.uint32)
    words = jnp.asarray(k << np.uint32(9))
    z = np.asarray(jax.jit(ppnd7_normals)(words), np.float64)
    out["ppnd7_max_error"] = float(np.max(np.abs(z - ndtri((k + 0.5) / 2**23))))
    z = np.asarray(jax.jit(normals_from_bits)(words), np.float64)
    out["fast_normal_max_error"] = float(np.max(np.abs(z - ndtri((k + 0.5) / 2**23))))
    z = np.asarray(jax.jit(_erf_inv_normals)(words), np.float64)[1:]
    out["erf_inv_max_error"] = float(np.max(np.abs(z - ndtri(k[1:] / 2**23))))
    out["count"] = count
    return out


# ------------------------------------------------------------------ noise inside the real run

#: ``name -> (what it is, draw(key, shape))`` of one leaf's noise; "erf_inv" is what every
#: sampler draws by default (``jax.random.normal``; the option ``normal=dgsgld.fast_normal`` is
#: measured through the sampler itself). "log", "uniform" and "none" are not normal: floors.
NOISE_TRANSFORMS = {
    "erf_inv": ("jax.random.normal (√2 erf⁻¹(2u − 1)), the toolkit's noise",
                lambda k, shape: jax.random.normal(k, shape)),
    "ppnd7": ("PPND7 inverse CDF (AS 241) on the same words",
              lambda k, shape: ppnd7_normals(jax.random.bits(k, shape, jnp.uint32))),
    "both_words": ("JAX's normal from both 32-bit words of each threefry hash (half the hashes)",
                   lambda k, shape: _erf_inv_normals(_both_words(k, shape))),
    "rbg": ("jax.random.normal on an 'rbg' key (XLA's RngBitGenerator) made from the step's key",
            lambda k, shape: jax.random.normal(_rbg_key(k, "rbg"), shape)),
    "unsafe_rbg": ("the same on an 'unsafe_rbg' key",
                   lambda k, shape: jax.random.normal(_rbg_key(k, "unsafe_rbg"), shape)),
    "box_muller": ("Box–Muller, r cos θ from two words (one normal per pair)",
                   lambda k, shape: _box_muller_pair(*jax.random.split(k), shape)),
    "log": ("log u alone: the transcendental that every exact transform above needs (NOT normal)",
            lambda k, shape: jnp.log(_unit_interval(jax.random.bits(k, shape, jnp.uint32), True))),
    "uniform": ("√3 (2u − 1): the words with no normal transform (variance 1, NOT normal)",
                lambda k, shape: np.float32(np.sqrt(3.0)) * (
                    2.0 * _unit_interval(jax.random.bits(k, shape, jnp.uint32), False) - 1.0)),
    "none": ("zero noise: no keys, words or transform (NOT a sampler)", None),
}


def _both_words(key, shape):
    """``prod(shape)`` words from half as many hashes, the two outputs of each laid end to end
    instead of XOR-ed into one: the words of ``jax.random.bits`` with
    ``jax_threefry_partitionable`` off (JAX's layout before its current default)."""
    n, half = int(np.prod(shape)), (int(np.prod(shape)) + 1) // 2
    data = jax.random.key_data(key)
    counters = np.arange(2 * half, dtype=np.uint32) % np.uint32(max(n, 1))  # odd n: a 0 pads
    first, second = _random.threefry2x32(data[0], data[1], jnp.asarray(counters[:half]),
                                         jnp.asarray(counters[half:]))
    return jnp.concatenate([first, second])[:n].reshape(shape)


def _rbg_key(key, impl: str):
    """An ``impl`` key (4 words) from a threefry key's 2 words: ``dgsgld.sample`` refuses rbg
    keys (their draws depend on batching), so the benchmark makes one per step instead."""
    data = jax.random.key_data(key)
    return jax.random.wrap_key_data(jnp.concatenate([data, ~data]), impl=impl)


def _box_muller_pair(k1, k2, shape):
    radius = jnp.sqrt(-2.0 * jnp.log(_unit_interval(jax.random.bits(k1, shape, jnp.uint32), True)))
    angle = np.float32(2 * np.pi) * _unit_interval(jax.random.bits(k2, shape, jnp.uint32), False)
    return radius * jnp.cos(angle)


class NoiseVariant(dgsgld.DIGingSGLD):
    """DIGing-SGLD whose noise ``w`` comes from ``NOISE_TRANSFORMS[transform]`` (a measurement
    device: the runner draws through ``algorithm.noise``, so only the transform changes)."""

    transform: str = eqx.field(static=True, default="erf_inv")

    def noise(self, key, position):
        draw = NOISE_TRANSFORMS[self.transform][1]
        if draw is None:
            return jax.tree.map(jnp.zeros_like, position)
        leaves, treedef = jax.tree.flatten(position)
        keys = jax.random.split(step_keys(key)[0], len(leaves))
        return jax.tree.unflatten(treedef, [draw(keys[i], jnp.shape(leaf)).astype(leaf.dtype)
                                            for i, leaf in enumerate(leaves)])
