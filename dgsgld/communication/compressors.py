"""Compressors: what an agent's message becomes on the wire.

A :class:`Compressor` acts on each agent's message as one flat vector of ``d`` entries, gives
what the receivers reconstruct (:meth:`Compressor.compress`), what travels
(:meth:`Compressor.payload`, rebuilt by :meth:`Compressor.expand`) and its size
(:meth:`Compressor.bits`; the encodings' table is :mod:`dgsgld.communication`'s). Built by
:func:`identity`, :func:`top_k`, :func:`random_k`, :func:`quantize` and :func:`sign`.
"""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PRNGKey, PyTree
from ._checks import unit_interval

__all__ = ["MAX_LEVELS", "Compressor", "Identity", "Quantize", "RandomK", "Sign", "TopK",
           "identity", "quantize", "random_k", "sign", "top_k"]


def _fraction(fraction) -> float:
    return unit_interval(fraction, "fraction")


class Compressor(eqx.Module):
    """A compression operator ``C`` on one agent's flat message ``v`` of shape ``(d,)``.

    ``compress(key, v) -> (d,)`` is what the receivers reconstruct; ``bits(d, b)`` the size of
    its encoding for entries of ``b`` bits. ``unbiased``: ``E[C(v)] = v``. ``contract(key, v)``
    is the form error feedback uses, a contraction ``E‖C(v) − v‖² ≤ (1 − δ)‖v‖²`` with
    ``δ > 0`` (CHOCO's assumption): ``compress`` itself for the biased compressors, an
    unbiased one scaled down (the same message, so the same bits).
    """

    unbiased: ClassVar[bool] = False

    def compress(self, key: PRNGKey, v: Array) -> Array:  # pragma: no cover - interface
        raise NotImplementedError

    def contract(self, key: PRNGKey, v: Array) -> Array:
        return self.contract_expand(key, self.contract_payload(key, v), v.shape[0])

    def contract_payload(self, key: PRNGKey, v: Array) -> PyTree:
        """What travels for :meth:`contract` (default: :meth:`payload`)."""
        return self.payload(key, v)

    def contract_expand(self, key: PRNGKey, payload: PyTree, dim: int) -> Array:
        """:meth:`contract`'s ``(dim,)`` from :meth:`contract_payload` (default:
        :meth:`expand`)."""
        return self.expand(key, payload, dim)

    def payload(self, key: PRNGKey, v: Array) -> PyTree:
        """What travels for ``C(v)``, a pytree of arrays (default: ``C(v)`` itself, dense);
        the receiver rebuilds ``C(v)`` with :meth:`expand` and the same ``key``."""
        return self.compress(key, v)

    def expand(self, key: PRNGKey, payload: PyTree, dim: int) -> Array:
        """``C(v)`` of shape ``(dim,)`` from :meth:`payload`'s output."""
        return payload

    def bits(self, dim: int, value_bits: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError


class Identity(Compressor):
    """No compression: ``C(v) = v``, ``b d`` bits."""

    unbiased: ClassVar[bool] = True

    def compress(self, key, v):
        return v

    def bits(self, dim, value_bits):
        return dim * value_bits


def _largest(u: Array, k: int) -> Array:
    """``(d,)`` bool, the ``k`` largest of the unsigned integers ``u`` ``(d,)``, a tie at the
    ``k``-th place going to the lower indices (the set ``lax.top_k`` returns).

    A bitwise search for the ``k``-th largest value ``t`` (one count of ``u ≥ candidate``
    per bit), then, among the entries equal to ``t``, for the index below which enough of
    them lie (one count per bit of ``d``): ``O(d)`` per pass and no sort, several times
    cheaper than ``lax.top_k`` on a CPU (``benchmarks/compressor_cost.md``).
    """
    width = u.dtype.itemsize * 8

    def value_bit(i, t):
        candidate = t | jnp.left_shift(jnp.ones((), u.dtype), (width - 1 - i).astype(u.dtype))
        return jnp.where(jnp.sum(u >= candidate, dtype=jnp.int32) >= k, candidate, t)

    # Loop carries start from `u` and `need` so that they vary along what these vary along
    # (a shard_map's manual axes, under placement Agents), as the loops' outputs do.
    t = jax.lax.fori_loop(0, width, value_bit, u[0] & 0)
    greater = u > t
    need = k - jnp.sum(greater, dtype=jnp.int32)
    tied = u == t
    index = jnp.arange(u.shape[0], dtype=jnp.int32)
    top = max(1, (u.shape[0] - 1).bit_length())

    # The largest cut with fewer than `need` ties below it: the tie at `cut` is the last kept.
    def index_bit(i, cut):
        candidate = cut | jnp.left_shift(1, top - 1 - i)
        below = jnp.sum(tied & (index < candidate), dtype=jnp.int32)
        return jnp.where(below < need, candidate, cut)

    cut = jax.lax.fori_loop(0, top, index_bit, need & 0)
    return greater | (tied & (index <= cut))


def _magnitudes(v: Array) -> Array:
    """``|v|``'s bits as unsigned integers of the same width, ordered as ``|v|``."""
    return jax.lax.bitcast_convert_type(jnp.abs(v), jnp.dtype(f"uint{v.dtype.itemsize * 8}"))


def _positions(mask: Array, k: int) -> Array:
    """The ``k`` indices where ``mask`` ``(d,)`` holds ``k`` trues, ascending, int32."""
    return jnp.nonzero(mask, size=k)[0].astype(jnp.int32)


class TopK(Compressor):
    """The ``k = ⌈fraction · d⌉`` entries of largest magnitude, the rest zero (biased; a tie
    at the ``k``-th place keeps the lower indices); values and int32 indices:
    ``k (b + 32)`` bits."""

    fraction: float = eqx.field(converter=_fraction, static=True)

    def k(self, dim: int) -> int:
        return max(1, math.ceil(self.fraction * dim - 1e-9))

    def _kept(self, v: Array) -> Array:
        return _largest(_magnitudes(v), self.k(v.shape[0]))

    def compress(self, key, v):
        return jnp.where(self._kept(v), v, jnp.zeros_like(v))

    def contract(self, key, v):
        return self.compress(key, v)

    def payload(self, key, v):
        """``(values (k,), int32 indices (k,))``, by ascending index."""
        index = _positions(self._kept(v), self.k(v.shape[0]))
        return v[index], index

    def expand(self, key, payload, dim):
        values, index = payload
        return jnp.zeros((dim,), values.dtype).at[index].set(values)

    def bits(self, dim, value_bits):
        return self.k(dim) * (value_bits + 32)


class RandomK(Compressor):
    """``k = ⌈fraction · d⌉`` entries chosen uniformly without replacement, scaled by ``d / k``
    (unbiased: each entry is kept with probability ``k / d``); values only, ``k b`` bits (the
    receivers draw the same indices from the shared key).

    The kept entries are those of the ``k`` largest of ``d`` uniform float32 keys (cheaper
    than a permutation: ``benchmarks/compressor_cost.md``). Every ``k``-subset is equally
    likely but for a tie of two keys (23 random bits each) at the ``k``-th place, which has
    probability about ``d / 2²⁴`` per draw (``3e-4`` at ``d = 4810``) and then keeps the
    lower index.
    """

    fraction: float = eqx.field(converter=_fraction, static=True)
    unbiased: ClassVar[bool] = True

    def k(self, dim: int) -> int:
        return max(1, math.ceil(self.fraction * dim - 1e-9))

    def _kept(self, key, dim: int) -> Array:
        uniform = jax.random.uniform(key, (dim,))
        return _largest(jax.lax.bitcast_convert_type(uniform, jnp.uint32), self.k(dim))

    def _index(self, key, dim: int) -> Array:
        """The kept entries' indices, ``(k,)`` ascending."""
        return _positions(self._kept(key, dim), self.k(dim))

    def _scale(self, dim: int, dtype) -> Array:
        return jnp.asarray(dim / self.k(dim), dtype)

    def compress(self, key, v):
        d = v.shape[0]
        return jnp.where(self._kept(key, d), v * self._scale(d, v.dtype), jnp.zeros_like(v))

    def contract(self, key, v):
        """The kept entries unscaled (``δ = k / d``)."""
        return jnp.where(self._kept(key, v.shape[0]), v, jnp.zeros_like(v))

    def contract_payload(self, key, v):
        """:meth:`contract`'s kept entries, ``(k,)`` by ascending index."""
        return v[self._index(key, v.shape[0])]

    def payload(self, key, v):
        """The ``k`` kept values scaled, ``(k,)`` by ascending index; the indices follow
        from ``key``."""
        d = v.shape[0]
        return v[self._index(key, d)] * self._scale(d, v.dtype)

    def expand(self, key, payload, dim):
        return jnp.zeros((dim,), payload.dtype).at[self._index(key, dim)].set(payload)

    def bits(self, dim, value_bits):
        return self.k(dim) * value_bits


#: The largest ``levels``: the levels ``ξ ∈ {0, ..., s}`` are integers in float32 exactly.
MAX_LEVELS = 2**24


def _levels(levels) -> int:
    if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels < 1 \
            or levels > MAX_LEVELS:
        raise ValueError(f"`levels` must be an integer >= 1 and <= 2**24; got {levels!r}.")
    return int(levels)


def _pack_bits(bits: Array) -> Array:
    """``(n,)`` bool -> ``(⌈n / 8⌉,)`` uint8, bit ``i`` of the message in bit ``i mod 8`` of
    byte ``⌊i / 8⌋`` (the last byte padded with zeros)."""
    padded = jnp.pad(bits.astype(jnp.uint8), (0, -bits.shape[0] % 8)).reshape(-1, 8)
    return jnp.sum(padded << jnp.arange(8, dtype=jnp.uint8)[None], axis=1, dtype=jnp.uint8)


def _unpack_bits(packed: Array, count: int) -> Array:
    """The first ``count`` bits of :func:`_pack_bits`'s bytes, ``(count,)`` bool."""
    bits = (packed[:, None] >> jnp.arange(8, dtype=jnp.uint8)[None]) & 1
    return bits.reshape(-1)[:count].astype(bool)


def _signs(negative: Array, dtype) -> Array:
    """``(d,)`` ``±1`` of ``dtype`` from the sign bits (``True``: ``−1``)."""
    return jnp.where(negative, -jnp.ones((), dtype), jnp.ones((), dtype))


class Quantize(Compressor):
    """Stochastic quantization to ``s`` = ``levels`` levels (QSGD, Alistarh et al. 2017):
    ``C(v)_i = ‖v‖₂ sign(v_i) ξ_i / s`` with ``ξ_i = ⌊r_i⌋ + Bernoulli(r_i − ⌊r_i⌋)``,
    ``r_i = s |v_i| / ‖v‖₂`` (unbiased); ``d (1 + ⌈log₂(s + 1)⌉) + b`` bits: per entry a
    sign bit and ``ξ_i`` in ``L = ⌈log₂(s + 1)⌉`` bits, packed (:meth:`payload`), and the
    norm. ``1 <= s <= 2**24``."""

    levels: int = eqx.field(converter=_levels, static=True)
    unbiased: ClassVar[bool] = True

    def level_bits(self) -> int:
        """``L = ⌈log₂(s + 1)⌉`` (``s``'s bit length), the bits of one level ``ξ``."""
        return self.levels.bit_length()

    def compress(self, key, v):
        # Through the payload, as the receivers across devices rebuild it: a formula without
        # the packing gives the same numbers alone, but XLA rounds the error-feedback update
        # around it differently, and a run would depend on its placement.
        return self.expand(key, self.payload(key, v), v.shape[0])

    def payload(self, key, v):
        """``(codes, norm)``: ``codes`` ``(⌈d (1 + L) / 8⌉,)`` uint8, entry ``i``'s sign bit
        (set for ``v_i < 0``) then ``ξ_i``'s ``L`` bits, least significant first; ``norm``
        ``‖v‖₂``, a scalar of ``v``'s dtype."""
        s = self.levels
        norm = jnp.sqrt(jnp.sum(v * v))
        safe = jnp.where(norm > 0, norm, jnp.ones_like(norm))
        # r ≤ s exactly; rounding must not make ξ = s + 1, which L bits may not hold.
        r = jnp.minimum(s * jnp.abs(v) / safe, jnp.asarray(s, v.dtype))
        low = jnp.floor(r)
        up = jax.random.uniform(key, v.shape, v.dtype) < r - low
        xi = (low + up.astype(v.dtype)).astype(jnp.uint32)
        levels = (xi[:, None] >> jnp.arange(self.level_bits(), dtype=jnp.uint32)[None]) & 1
        bits = jnp.concatenate([(v < 0)[:, None], levels.astype(bool)], axis=1)
        return _pack_bits(bits.reshape(-1)), norm

    def expand(self, key, payload, dim):
        codes, norm = payload
        width = 1 + self.level_bits()
        bits = _unpack_bits(codes, dim * width).reshape(dim, width)
        weights = jnp.left_shift(jnp.uint32(1), jnp.arange(width - 1, dtype=jnp.uint32))
        xi = jnp.sum(bits[:, 1:].astype(jnp.uint32) * weights[None], axis=1).astype(norm.dtype)
        return jnp.where(norm > 0, norm * _signs(bits[:, 0], norm.dtype) * xi / self.levels,
                         jnp.zeros_like(xi))

    def contract_expand(self, key, payload, dim):
        """``C(v) / τ`` with ``τ = 1 + min(d / s², √d / s)`` (QSGD's variance bound plus 1)."""
        s = self.levels
        tau = 1.0 + min(dim / s**2, math.sqrt(dim) / s)
        q = self.expand(key, payload, dim)
        return q / jnp.asarray(tau, q.dtype)

    def bits(self, dim, value_bits):
        return dim * (1 + self.level_bits()) + value_bits


class Sign(Compressor):
    """Scaled sign, ``C(v)_i = (‖v‖₁ / d) σ_i`` with ``σ_i = −1`` for ``v_i < 0`` and ``+1``
    otherwise (biased): one bit per entry carries no third value, so an exact zero is sent as
    ``+``. A contraction, ``‖C(v) − v‖² = ‖v‖² − ‖v‖₁² / d``; ``d + b`` bits, the packed sign
    bits and the scale (:meth:`payload`)."""

    def compress(self, key, v):
        return self.expand(key, self.payload(key, v), v.shape[0])

    def payload(self, key, v):
        """``(signs, scale)``: ``signs`` ``(⌈d / 8⌉,)`` uint8, bit ``i`` set for ``v_i < 0``;
        ``scale`` ``‖v‖₁ / d``, a scalar of ``v``'s dtype."""
        return _pack_bits(v < 0), jnp.mean(jnp.abs(v))

    def expand(self, key, payload, dim):
        signs, scale = payload
        return scale * _signs(_unpack_bits(signs, dim), scale.dtype)

    def bits(self, dim, value_bits):
        return dim + value_bits


def identity() -> Identity:
    """No compression (dense messages)."""
    return Identity()


def top_k(fraction: float) -> TopK:
    """Top-``k`` sparsification with ``k = ⌈fraction · d⌉``."""
    return TopK(fraction)


def random_k(fraction: float) -> RandomK:
    """Unbiased random-``k`` sparsification with ``k = ⌈fraction · d⌉``."""
    return RandomK(fraction)


def quantize(levels: int) -> Quantize:
    """Unbiased stochastic quantization to ``levels`` levels."""
    return Quantize(levels)


def sign() -> Sign:
    """Scaled sign compression."""
    return Sign()

