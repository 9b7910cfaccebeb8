"""Communication channels: what a decentralized sampler's agents send each other at a step.

Every message a sampler sends over the network (``x`` in DE-SGLD, D-ULA and DE-SGHMC; ``x``
and the tracker ``y`` in DIGing-SGLD and DIGing-SGHMC; ``x⁽ᵏ⁾`` and ``x⁽ᵏ⁺¹⁾`` in EXTRA-SGLD)
goes through :func:`send`, which returns the message mixed over the network, ``W x`` with
exact communication. A sampler without a channel (``channel=None``, the default) mixes
exactly as ``W @ x`` and keeps no channel state. A :class:`Channel` keeps a
:class:`ChannelState` per message in the sampler state's ``channel`` field (threaded by the
runner like the estimator state) and mixes as follows, agent ``i`` receiving from its
in-neighbours ``j`` (``W[i, j] ≠ 0``, ``j ≠ i``) and knowing its own ``x_i`` exactly:

- ``Channel()``: exact, ``W @ x`` (the same numbers as no channel), with bytes counted;
- ``Channel(compressor)``: agent ``j`` sends ``q_j = C(x_j)``;
  ``mixed_i = W[i, i] x_i + Σ_{j≠i} W[i, j] q_j``;
- ``Channel(compressor, error_feedback=True)``: CHOCO-gossip (Koloskova, Stich and Jaggi,
  2019). Every agent keeps public copies ``x̂`` (``x̂⁽⁰⁾ = 0``); agent ``j`` sends
  ``q_j = C(x_j − x̂_j)`` (``C`` in its contractive form, :meth:`Compressor.contract`),
  everyone updates ``x̂_j ← x̂_j + q_j``, and ``mixed = x + γ (W − I) x̂`` with ``γ`` =
  ``consensus``.

When messages are sent (each composes with the modes above):

- ``every=τ``: rounds at iterations ``k ≡ 0 (mod τ)`` only, local steps (``mixed = x``,
  nothing sent, public copies kept) in between;
- ``probability=p``: each round happens with probability ``p`` for all agents at once; with
  ``per_link=True`` instead every undirected link of the snapshot is up with probability
  ``p`` independently, and the used matrix is ``W'`` with the weights of the links that are
  down moved to the endpoints' diagonals (:func:`drop_links`: row sums kept, a symmetric
  doubly stochastic ``W`` stays symmetric doubly stochastic). Bytes: the out-degrees of
  ``W'``. ``p = 1`` is the channel without it, bit for bit;
- ``threshold=δ`` (event trigger): every agent keeps the copy ``x̂_j`` its neighbours last
  received (``x̂⁽⁰⁾ = 0``; every agent sends at its first round); at a round agent ``j`` sends
  only if ``‖x_j − x̂_j‖₂ > δ`` (its whole flat message), and then ``x̂_j ← C(x_j)``
  (``x̂_j ← x̂_j + C(x_j − x̂_j)`` with error feedback). Its neighbours mix with ``x̂``:
  ``mixed_i = W[i, i] x_i + Σ_{j≠i} W[i, j] x̂_j`` (CHOCO's formula with error feedback).
  ``δ = 0`` sends whenever the message moved, which is always-on mixing;
- ``gossip="edge"`` or ``"matching"``: randomized gossip, one random link or a random
  matching of the snapshot's links carries the round, each pair averaging
  (:func:`gossip_matrix`; :func:`gossip_outcomes` lists its outcomes with their
  probabilities);
- ``clock=Clock(...)``: simulated time. Per-agent compute times each step, a latency per
  round, and an optional deadline past which slow agents are stragglers as with
  ``activity`` (:class:`Clock`, :func:`elapsed_time`);
- ``activity=q`` (or a ``(P, N)`` 0/1 pattern): stragglers. Each agent is active at a step
  with probability ``q`` (:func:`active_agents`); an inactive agent takes no step
  (:func:`hold` keeps its rows of the sampler state) and sends nothing, and the step mixes
  with ``W'``: every link of an inactive agent dropped as in :func:`drop_links` (the weight
  its active neighbours put on it moved to their diagonals) and its own row ``e_i``, so
  ``W'`` is symmetric doubly stochastic when ``W`` is. It still receives (public copies stay
  known to all neighbours): an active agent sends to all its out-neighbours, an inactive one
  nothing. ``q = 1`` is the channel without it, bit for bit.

Directed networks (the push-sum samplers, column-stochastic ``C``): :func:`send_mass` sends
the mass ``u`` through the channel and the weight ``v`` exact beside it over the same used
matrix; a dropped one-way link (each direction drawn on its own) leaves its weight on the
sender's diagonal, and an inactive agent's row and column are ``e_i``, so the used matrix stays
column stochastic (:func:`drop_links` with ``keep="columns"``).

With error feedback the network sum is kept exactly: ``I − W`` has zero column sums, so
``Σ_i mixed_i = Σ_i x_i`` whatever the compressor, and DIGing's tracking invariant
``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` holds up to rounding. Without it, ``Σ_i mixed_i − Σ_i x_i =
Σ_j (1 − W[j, j]) (q_j − x_j)``: zero-mean noise for an unbiased compressor (the tracker sum
random-walks), a drift for a biased one.

Compressors act on each agent's message as one flat vector of ``d`` entries (all leaves,
row-major, concatenated). Bytes: agent ``j`` sends one message to each out-neighbour
(``W[i, j] ≠ 0``, ``i ≠ j``) of that step's ``W⁽ᵏ⁾``; a message of ``d`` entries of ``b`` bits
(32 for float32) is encoded as

=================  ================================================================
``identity()``     ``b d`` bits (dense)
``top_k(f)``       ``k (b + 32)`` bits: ``k = ⌈f d⌉`` values and their int32 indices
``random_k(f)``    ``k b`` bits: values only (the indices follow from shared randomness)
``quantize(s)``    ``d (1 + ⌈log₂(s + 1)⌉) + b`` bits: sign and level per entry, one norm
``sign()``         ``d + b`` bits: one sign bit per entry, one scale
=================  ================================================================

rounded up to whole bytes per message, the bytes of :meth:`Compressor.payload` (quantize's and
sign's bits packed into uint8), which is what a neighbour exchange sends between devices.

A message with public copies (error feedback, an event trigger) goes instead to every agent
that keeps a copy of ``x̂_j``: on a time-varying network that is every agent that ever listens
to ``j`` (``W⁽ᵏ⁾[i, j] ≠ 0`` at some ``k``, :func:`listener_counts`), as each update of the
copy must reach them all or the copies part. :func:`dgsgld.sample` sets these counts
(:attr:`Channel.listeners`) from the network; on a static network they are its out-degrees.
:func:`messages_sent` counts the point-to-point messages, :meth:`Channel.bytes_sent` turns
them into bytes.

Randomness: the channel's key of a step is ``fold_in(key, tag of the message)`` of the step's
key, and agent ``i``'s is ``split(that, N)[i]``; the round and the links that are up are drawn
from ``fold_in(key, round tag)`` and the active agents from ``fold_in(key, activity tag)``,
shared by all messages of the step (DIGing's ``x`` and ``y`` go over the same links). The
noise and gradient keys (``split(key)``) are untouched, so a channel changes no other draw,
and a chain's draws do not depend on how chains are batched.
"""

import math
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree
from ..networks._mixing import as_mixing

__all__ = [
    "Channel",
    "ChannelState",
    "Clock",
    "Compressor",
    "Identity",
    "Quantize",
    "RandomK",
    "Sign",
    "TopK",
    "active_agents",
    "drop_links",
    "elapsed_time",
    "gossip_matrix",
    "gossip_outcomes",
    "hold",
    "identity",
    "init_states",
    "link_mask",
    "listener_counts",
    "messages_sent",
    "out_degrees",
    "quantize",
    "random_k",
    "send",
    "send_mass",
    "sign",
    "top_k",
]

#: Per-message tags folded into the step key: one channel key per message of a step.
_TAGS = {"position": 0x636F6D30, "tracker": 0x636F6D31, "next_position": 0x636F6D32}
#: Tag of the draws shared by a step's messages: whether the round happens, which links are up.
_ROUND_TAG = 0x636F6D72
#: Tag of the step's activity draw (stragglers), shared by its messages and the state update.
_ACTIVE_TAG = 0x636F6D61
#: Tag of the step's gossip draw (which links carry the round), folded into the round key.
_GOSSIP_TAG = 0x636F6D67
#: Tag of the step's compute-time draw (the simulated clock), shared like the activity.
_CLOCK_TAG = 0x636F6D74


def _seconds(value, name: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not (0 <= float(value) < math.inf) or (not allow_zero and float(value) == 0):
        raise ValueError(f"`{name}` must be a finite number of seconds "
                         f"{'>= 0' if allow_zero else '> 0'}; got {value!r}.")
    return float(value)


def _compute_times(compute):
    """A positive number, or one per agent (kept as a tuple: static and hashable)."""
    if isinstance(compute, (int, float, np.number)) and not isinstance(compute, bool):
        return _seconds(compute, "compute", allow_zero=False)
    values = np.asarray(compute, dtype=object)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("`compute` must be a positive number of seconds or one per agent; "
                         f"got {compute!r}.")
    return tuple(_seconds(v, "compute", allow_zero=False) for v in values)


def _jitter(jitter) -> float:
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float, np.number)) \
            or not 0 <= float(jitter) <= 1:
        raise ValueError(f"`jitter` must be a number in [0, 1]; got {jitter!r}.")
    return float(jitter)


class Clock(eqx.Module):
    """Simulated time of synchronous rounds (:class:`Channel`'s ``clock``).

    At every step agent ``i`` computes for ``t_i = c_i (1 − jitter + jitter · E_i)`` seconds,
    ``E_i ~ Exp(1)`` independently (mean ``c_i``; ``jitter = 0``: exactly ``c_i``,
    ``jitter = 1``: exponential). A step lasts until the slowest active agent is done,
    ``max_i t_i``, and, when a ``deadline`` is set, at most ``deadline``: an agent not done by
    then is inactive at that step, as a straggler of ``activity`` (it takes no step and sends
    nothing). A step that is a round (messages sent) adds ``latency``. The elapsed seconds
    are :func:`elapsed_time` of a state, a float32 sum (relative rounding at most ``k · 2⁻²⁴``
    after ``k`` steps).

    Attributes:
        compute: ``c``, mean seconds of one step, one number for every agent or one per agent
            (slow agents: larger ``c_i``).
        jitter: in ``[0, 1]``, how random the compute times are.
        latency: seconds a round's messages take.
        deadline: ``None`` (wait for every agent) or the seconds after which a round goes on
            without the agents not done.
    """

    compute: Any = eqx.field(default=1.0, static=True, converter=_compute_times)
    jitter: float = eqx.field(default=0.0, static=True, converter=_jitter)
    latency: float = eqx.field(default=0.0, static=True,
                               converter=lambda v: _seconds(v, "latency"))
    deadline: float | None = eqx.field(
        default=None, static=True,
        converter=lambda v: None if v is None else _seconds(v, "deadline", allow_zero=False))

    def times(self, key: PRNGKey, num_agents: int) -> Array:
        """``(N,)`` float32 compute times of the step whose key is ``key``."""
        if isinstance(self.compute, tuple):
            if len(self.compute) != num_agents:
                raise ValueError(f"`compute` has {len(self.compute)} agents; the network has "
                                 f"{num_agents}.")
            mean = jnp.asarray(self.compute, jnp.float32)
        else:
            mean = jnp.full((num_agents,), self.compute, jnp.float32)
        if self.jitter == 0:
            return mean
        e = jax.random.exponential(jax.random.fold_in(key, _CLOCK_TAG), (num_agents,))
        return mean * (1 - self.jitter + self.jitter * e)

    def duration(self, times: Array, active: Array | None, talk) -> Array:
        """Seconds of a step: the slowest of the agents that are not stragglers by
        ``activity`` (``active``: ``(N,)`` bool, deadline not applied; ``None``: all), capped
        at the deadline, plus the latency when ``talk`` (``None``: always a round)."""
        busy = times if active is None else jnp.where(active, times, 0.0)
        step = jnp.max(busy)
        if self.deadline is not None:
            step = jnp.minimum(step, self.deadline)
        if self.latency:
            step = step + (self.latency if talk is None
                           else jnp.where(talk, self.latency, 0.0))
        return step


def _unit_interval(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not 0 < float(value) <= 1:
        raise ValueError(f"`{name}` must be a number in (0, 1]; got {value!r}.")
    return float(value)


def _fraction(fraction) -> float:
    return _unit_interval(fraction, "fraction")


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


class ChannelState(NamedTuple):
    """Per-message state of a :class:`Channel`.

    Attributes:
        public: the public copies ``x̂`` (leaves like the message, ``(N, ...)``) with error
            feedback or an event trigger; ``()`` without.
        sent: ``(N,)`` int32, the point-to-point messages each agent has sent so far.
        heard: ``(N,)`` bool with an event trigger: whether the agent's neighbours hold a copy
            of it yet (it sends at its first round whatever the threshold); ``()`` without.
        elapsed: float32 scalar, the simulated seconds so far, in the ``position`` message's
            state of a channel with a :class:`Clock`; ``()`` otherwise.
        copies: ``(N, L, d)`` over a neighbour exchange (``Channel.copy_slots`` ``= L``):
            agent ``i``'s copies of the flat public copies ``x̂_j`` of the ``L`` agents it ever
            listens to (:attr:`~dgsgld.parallel.rows.HaloRows.copies`), equal to theirs;
            ``()`` otherwise.
    """

    public: PyTree
    sent: Array
    heard: Any = ()
    elapsed: Any = ()
    copies: Any = ()


def _consensus(consensus) -> float:
    return _unit_interval(consensus, "consensus")


def _probability(probability) -> float:
    return _unit_interval(probability, "probability")


def _threshold(threshold):
    """``None``, a float, or per message a tuple of ``(name, float | None)`` pairs (static and
    hashable) from a mapping ``{message name: threshold}`` (or from those pairs again, as
    ``dataclasses.replace`` passes them)."""
    if isinstance(threshold, tuple) and all(isinstance(p, tuple) and len(p) == 2
                                            for p in threshold):
        threshold = dict(threshold)
    if isinstance(threshold, dict):
        unknown = sorted(set(threshold) - set(_TAGS))
        if unknown:
            raise ValueError(
                f"`threshold` names unknown messages {unknown}; the messages are "
                f"{sorted(_TAGS)}.")
        return tuple(sorted((name, _threshold(value)) for name, value in threshold.items()))
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) \
            or not 0 <= float(threshold) < math.inf:
        raise ValueError(
            "`threshold` must be None, a finite number >= 0, or a dict of them by message "
            f"name; got {threshold!r}.")
    return float(threshold)


def _activity(activity):
    """``activity``: a probability in (0, 1], or a ``(P, N)`` pattern of 0/1 (kept as a tuple
    of tuples of bools: static and hashable)."""
    message = ("`activity` must be a number in (0, 1] or a (period, num_agents) pattern of "
               f"0/1 or bools; got {activity!r}.")
    if isinstance(activity, (int, float, np.number)) and not isinstance(activity, bool):
        if not 0 < float(activity) <= 1:
            raise ValueError(message)
        return float(activity)
    try:
        pattern = np.asarray(activity)
    except Exception:  # noqa: BLE001 - anything that is no array is refused below
        pattern = None
    if pattern is None or pattern.ndim != 2 or pattern.size == 0 or not (
            pattern.dtype == bool or (np.issubdtype(pattern.dtype, np.number)
                                      and np.isin(pattern, (0, 1)).all())):
        raise ValueError(message)
    return tuple(tuple(bool(a) for a in row) for row in pattern)


def _gossip(gossip):
    if gossip not in (None, "edge", "matching"):
        raise ValueError(f"`gossip` must be None, 'edge' or 'matching'; got {gossip!r}.")
    return gossip


def _every(every) -> int:
    return _validation.check_positive_int(every, name="every")


def _clock(clock):
    if clock is not None and not isinstance(clock, Clock):
        raise TypeError("`clock` must be None or a dgsgld.communication.Clock; got "
                        f"{type(clock).__name__}.")
    return clock


def _listeners(listeners):
    """``None`` or per agent a count ``>= 0`` (kept as a tuple of ints: static and hashable)."""
    if listeners is None:
        return None
    counts = np.asarray(listeners)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer) \
            or (counts < 0).any():
        raise ValueError("`listeners` must be None or one count >= 0 per agent, (N,) integers "
                         f"(listener_counts(network)); got {listeners!r}.")
    return tuple(int(c) for c in counts)


def _copy_slots(slots) -> int:
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 0:
        raise ValueError("`copy_slots` must be an int >= 0 (the copies of public copies each "
                         f"agent keeps; dgsgld.sample sets it); got {slots!r}.")
    return int(slots)


def _compressor(compressor) -> Compressor:
    if not isinstance(compressor, Compressor):
        raise TypeError(
            "`compressor` must be a dgsgld.communication compressor (identity(), top_k(f), "
            f"random_k(f), quantize(levels), sign()); got {type(compressor).__name__}."
        )
    return compressor


class Channel(eqx.Module):
    """How agents exchange a message (module docstring for the modes).

    Attributes:
        compressor: a :class:`Compressor` (default :func:`identity`: exact messages).
        error_feedback: CHOCO-gossip public copies (static).
        consensus: CHOCO's ``γ ∈ (0, 1]`` in ``x + γ (W − I) x̂``; used with error feedback
            only (biased compressors may need ``γ < 1``).
        every: ``τ``, communicate at iterations ``k ≡ 0 (mod τ)`` only; at the others no
            message is sent and ``mixed = x`` (a local step: ``W⁽ᵏ⁾`` replaced by ``I``,
            public copies kept). Default 1: every step.
        probability: ``p ∈ (0, 1]``. Without ``per_link``: each round happens with
            probability ``p`` for all agents at once (else a local step, as between rounds of
            ``every``). With ``per_link``: every undirected link ``{i, j}`` of the snapshot
            (``W[i, j] ≠ 0`` or ``W[j, i] ≠ 0``) is up with probability ``p``, independently,
            and a link that is down carries nothing either way; its weights move to the
            endpoints' diagonals, ``W'[i, i] = W[i, i] + Σ_{j down} W[i, j]``, so every row
            sum is kept and a symmetric doubly stochastic ``W`` stays so. Default 1: always.
        per_link: draw ``probability`` per link (static); not with error feedback or an event
            trigger, whose one public copy per agent needs every neighbour to receive it.
        threshold: event trigger (``None``: off). Agent ``j`` sends at a round only when
            ``‖x_j − x̂_j‖₂ > threshold`` (its whole flat message against the copy ``x̂_j`` its
            neighbours last received), and at its first round; its neighbours mix with
            ``x̂_j``. ``threshold = 0`` sends whenever the message moved: always-on mixing.
            A dict gives each message its own, e.g. ``{"position": 0.1, "tracker": 1.0}``
            (a message left out, or given ``None``, is sent at every round), for messages on
            different scales.
        activity: stragglers. A number ``q ∈ (0, 1]``: each agent is active at a step with
            probability ``q``, independently; or a ``(P, N)`` pattern of 0/1: agent ``i``
            active at iteration ``k`` iff ``pattern[k % P][i]`` (static). An inactive agent
            takes no step (its position, tracker, velocity, gradient and per-agent
            estimator leaves are kept: the vectorized gradient and noise are computed and
            discarded) and sends nothing (its public copies stay what its neighbours last
            received); it still receives (so every agent's public copy stays known to all
            its neighbours). Weights: every link of an inactive agent is dropped as in
            :func:`drop_links`, its row becomes ``e_i`` (it does not mix) and the weight its
            active neighbours put on it moves to their diagonals, so the used matrix stays
            symmetric doubly stochastic when ``W`` is, and DIGing's ``Σ_i y_i = Σ_i ∇̃f_i``
            still holds. Bytes: an active agent sends to all out-neighbours of the snapshot.
            Default 1: always active, bit for bit the channel without it.
        gossip: randomized gossip (static; ``None``: every link of the snapshot carries the
            round). ``"edge"``: one link of the snapshot, drawn uniformly, and its two agents
            average (``W'`` is ``I`` but for ``½`` on their 2 × 2 block); ``"matching"``: every
            agent proposes to one neighbour drawn uniformly, mutual proposals are matched and
            each matched pair averages. ``W'`` is symmetric doubly stochastic; an agent sends
            one message to its partner. On a directed (column-stochastic) network
            (:func:`gossip_matrix`): ``"edge"`` one one-way link ``j → i`` and ``"matching"``
            every agent pushing to one out-neighbour drawn uniformly, each with half its
            value (``C'[i, j] = C'[j, j] = ½``). Not with error feedback or an event trigger
            (their public copy needs every neighbour to receive it).
        clock: a :class:`Clock` (``None``: no simulated time): compute times per agent and
            step, the round's latency, and a deadline past which slow agents sit the step out.
        listeners: ``(N,)`` ints or ``None`` (static): how many agents receive each message of
            agent ``j`` that has public copies (error feedback, an event trigger), the agents
            that keep a copy of ``x̂_j``. :func:`dgsgld.sample` sets it to
            :func:`listener_counts` of its network (every agent that ever listens to ``j``);
            ``None`` counts the out-neighbours of the step's snapshot. Messages without public
            copies are always counted over the snapshot's out-neighbours.
        copy_slots: ``L`` (static), the copies of public copies each agent keeps for a
            neighbour exchange (:attr:`ChannelState.copies`); placement ``Agents`` sets it
            over a sparse schedule. 0: none (the whole network's public copies are at hand).
    """

    compressor: Compressor = eqx.field(default_factory=Identity, converter=_compressor)
    error_feedback: bool = eqx.field(default=False, static=True, converter=bool)
    consensus: float = eqx.field(default=1.0, static=True, converter=_consensus)
    every: int = eqx.field(default=1, static=True, converter=_every)
    probability: float = eqx.field(default=1.0, static=True, converter=_probability)
    per_link: bool = eqx.field(default=False, static=True, converter=bool)
    threshold: Any = eqx.field(default=None, static=True, converter=_threshold)
    activity: Any = eqx.field(default=1.0, static=True, converter=_activity)
    gossip: str | None = eqx.field(default=None, static=True, converter=_gossip)
    clock: Clock | None = eqx.field(default=None, converter=_clock)
    listeners: tuple[int, ...] | None = eqx.field(default=None, static=True,
                                                   converter=_listeners)
    copy_slots: int = eqx.field(default=0, static=True, converter=_copy_slots)

    def __check_init__(self):
        if self.per_link and self.has_public_copies:
            raise ValueError(
                "`per_link` drops cannot be combined with error feedback or an event trigger "
                "(one public copy per agent needs every neighbour to receive it); use "
                "per_link=False (rounds drawn for all agents at once)."
            )
        if self.gossip is not None and self.has_public_copies:
            raise ValueError(
                "`gossip` cannot be combined with error feedback or an event trigger (one "
                "public copy per agent needs every neighbour to receive it, and gossip reaches "
                "one partner)."
            )

    @property
    def has_public_copies(self) -> bool:
        """Whether some message keeps public copies ``x̂_j`` that every listener of ``j``
        holds (error feedback, or an event trigger on any message; :meth:`_public` per
        message)."""
        return self.error_feedback or self.threshold is not None

    def threshold_of(self, name: str | None = None) -> float | None:
        """The event trigger's threshold of message ``name`` (``None``: no trigger)."""
        if isinstance(self.threshold, tuple):
            return dict(self.threshold).get(name)
        return self.threshold

    def _public(self, name: str | None = None) -> bool:
        return self.error_feedback or self.threshold_of(name) is not None

    def init(self, message: PyTree, name: str | None = None) -> ChannelState:
        """State before the first step for message ``name`` shaped like ``message``
        (``(N, ...)``)."""
        num_agents = jax.tree.leaves(message)[0].shape[0]
        public = jax.tree.map(jnp.zeros_like, message) if self._public(name) else ()
        heard = jnp.zeros((num_agents,), bool) if self.threshold_of(name) is not None else ()
        elapsed = jnp.zeros((), jnp.float32) if self.clock is not None and name == "position" \
            else ()
        copies = ()
        if self.copy_slots and self._public(name):
            flat = _flat(message)
            copies = jnp.zeros((num_agents, self.copy_slots, flat.shape[1]), flat.dtype)
        return ChannelState(public, jnp.zeros((num_agents,), jnp.int32), heard, elapsed,
                            copies)

    def mix(self, key: PRNGKey, state: ChannelState, matrix, message: PyTree, count=0,
            round_key: PRNGKey | None = None, active: Array | None = None,
            directed: bool = False, name: str | None = None):
        """``(mixed, state)``: ``message`` (leaves ``(N, ...)``) sent over ``matrix``
        (``W⁽ᵏ⁾``, ``(N, N)`` or a sparse snapshot) at iteration ``count`` and mixed as the
        module docstring says. ``key`` draws the compressors; ``round_key`` whether the round
        happens or which links are up (shared by the messages of a step; default
        ``fold_in(key, ·)``); ``active`` ``(N,)`` bool the active agents (``None``: all;
        :func:`active_agents`); ``directed``: ``matrix`` is column stochastic (:meth:`plan`);
        ``name`` the message's (its threshold, :meth:`threshold_of`)."""
        if round_key is None:
            round_key = jax.random.fold_in(key, _ROUND_TAG)
        talk, used, degrees = self.plan(round_key, matrix, count, active, directed)
        sends = None if active is None else _local(used, active)
        mixed, new = self._mix(key, state, used, message, degrees, sends, name)
        if talk is None:
            return mixed, new
        return jax.tree.map(lambda a, b: jnp.where(talk, a, b), (mixed, new),
                            (message, state))

    def round(self, key: PRNGKey, matrix, count=0, directed: bool = False):
        """``(talk, used)`` of iteration ``count``: ``talk`` a scalar bool, whether this is a
        round (``None``: always), and ``used`` the matrix mixed with (``matrix`` itself unless
        links are dropped, then a dense ``(N, N)``). ``directed``: ``matrix`` is column
        stochastic (push-sum), each one-way link is drawn on its own and a dropped weight
        stays with its sender (:func:`drop_links` with ``keep="columns"``)."""
        talk = None
        if self.every > 1:
            talk = jnp.asarray(count) % self.every == 0
        if self.probability < 1 and not self.per_link:
            up = jax.random.uniform(key) < self.probability
            talk = up if talk is None else talk & up
        if self.probability < 1 and self.per_link:
            matrix = _cuttable(matrix)
            up = link_mask(key, _size(matrix), self.probability, directed=directed)
            matrix = drop_links(matrix, up, keep="columns" if directed else "rows")
        return talk, matrix

    def plan(self, round_key: PRNGKey, matrix, count=0, active: Array | None = None,
             directed: bool = False):
        """``(talk, used, degrees)`` of a step, shared by all its messages: whether it is a
        round (:meth:`round`), the matrix used (links dropped, inactive agents cut off:
        ``active`` ``(N,)`` bool or ``None``) and the messages ``(N,)`` each agent sends.
        A device's rows of a neighbour exchange (``HaloRows``) give its rows rewritten and
        its agents' ``(R,)`` messages."""
        talk, used = self.round(round_key, matrix, count, directed)
        if self.gossip is not None:
            gossip_key = jax.random.fold_in(round_key, _GOSSIP_TAG)
            if isinstance(used, rows.HaloRows):     # drawn for all N agents, rows kept
                used = used.gossip(_gossip_pick(gossip_key, used.linked(), self.gossip,
                                                directed))
            else:
                used = gossip_matrix(gossip_key, used, self.gossip, directed)
        degrees = out_degrees(used)
        if active is not None:
            used = _without_inactive(_cuttable(used), active,
                                     keep="columns" if directed else "rows")
            degrees = jnp.where(_local(used, active), degrees, 0)
        return talk, used, degrees

    def _mix(self, key, state, matrix, message, degrees, sends=None, name=None):
        """Mix over ``matrix`` (the one used); ``degrees`` ``(N,)``: messages an agent sends
        this round; ``sends`` ``(N,)`` bool (``None``: all) the agents that send at all;
        ``name`` the message's."""
        threshold = self.threshold_of(name)
        exact = isinstance(self.compressor, Identity) and not self._public(name)
        if self._public(name) and self.listeners is not None:
            # Every holder of a public copy receives each update (module docstring).
            total = rows.num_agents(matrix, degrees.shape[0])
            if len(self.listeners) != total:
                raise ValueError(f"`listeners` has {len(self.listeners)} counts for a network "
                                 f"of {total} agents.")
            degrees = _local(matrix, jnp.asarray(self.listeners, jnp.int32))
        if exact and sends is None:
            return _tree.mix(matrix, message), state._replace(sent=state.sent + degrees)
        fire, heard = sends, state.heard
        if threshold is not None:
            moved = jnp.sqrt(jnp.sum(_flat(_tree.tree_sub(message, state.public)) ** 2, 1))
            fire = (moved > threshold) | ~state.heard
            fire = fire if sends is None else fire & sends
            heard = state.heard | fire
        sent = state.sent + (degrees if fire is None else jnp.where(fire, degrees, 0))
        if isinstance(matrix, rows.HaloRows) and self._public(name):
            mixed, public, copies = self._mix_copies(key, state, matrix, message, fire)
            return mixed, state._replace(public=public, sent=sent, heard=heard, copies=copies)
        if not self.error_feedback:
            if exact:
                q, wq = message, None
            else:
                q, wq = _compress_mix(self.compressor, key, matrix, message)
            if threshold is not None:               # neighbours hold the last copy received
                q, wq = _select(fire, q, state.public), None
            diag = _diagonal(matrix)
            mixed = jax.tree.map(
                lambda wq, x, c: wq + _rows(diag, x) * (x - c),
                _tree.mix(matrix, q) if wq is None else wq, message, q)
            public = q if threshold is not None else state.public
            return mixed, state._replace(public=public, sent=sent, heard=heard)
        diff = _tree.tree_sub(message, state.public)
        keys = jax.random.split(key, jax.tree.leaves(message)[0].shape[0])
        contract = jax.vmap(self.compressor.contract)
        public = _tree.tree_add(state.public, _unflat(contract(keys, _flat(diff)), diff))
        if fire is not None:
            public = _select(fire, public, state.public)
        gamma = self.consensus
        mixed = jax.tree.map(
            lambda x, wh, h: x + jnp.asarray(gamma, x.dtype) * (wh - h),
            message, _tree.mix(matrix, public), public)
        return mixed, state._replace(public=public, sent=sent, heard=heard)

    def _mix_copies(self, key, state, matrix, message, fire):
        """``(mixed, public, copies)``: the public-copy modes of :meth:`_mix` over a neighbour
        exchange (``matrix`` a device's ``HaloRows`` with :attr:`~rows.HaloRows.copies`).

        Each device's agents compress (error feedback: ``x_j − x̂_j`` in the contractive form;
        an event trigger alone: ``x_j``) and update their ``x̂_j``; the payloads and whether
        they were sent (``fire`` ``(R,)``, ``None``: all) travel over the union's exchange, and
        every copy of ``x̂_j`` takes the same update, so the copies stay equal to ``x̂_j`` bit
        for bit. The snapshot's terms are then read from the copies and summed as the
        snapshot's format does on one device."""
        link = matrix.copies
        if link is None:
            raise ValueError("public copies over a neighbour exchange need the exchange of "
                             "copies planned: split_rows(..., copies=True) (dgsgld.sample "
                             "plans it under placement=Agents).")
        if isinstance(state.copies, tuple) or state.copies.shape[1] != link.neighbors.shape[1]:
            raise ValueError(
                "`state` holds no copies of the public copies for this neighbour exchange "
                f"(ChannelState.copies: {jax.tree.map(jnp.shape, state.copies)}, "
                f"{link.neighbors.shape[1]} per agent needed): a state made under another "
                "placement or network cannot continue here; run it where it was made.")
        flat, public = _flat(message), _flat(state.public)
        size, dim = flat.shape
        total = rows.num_agents(matrix, size)
        keys = jax.random.split(key, total)
        own = rows.own_rows(matrix, keys, total)
        comp = self.compressor
        if self.error_feedback:
            payload_fn, expand_fn, v = comp.contract_payload, comp.contract_expand, flat - public
        else:
            payload_fn, expand_fn, v = comp.payload, comp.expand, flat
        expand = jax.vmap(lambda k, p: expand_fn(k, p, dim))
        payload = jax.vmap(payload_fn)(own, v)
        if fire is None:                        # every agent sends: no flags travel
            payload_in = link.receive(payload)
            fire, fired = jnp.ones((size,), bool), jnp.ones((size, 1, 1), bool)
        else:                                   # a flag (one byte) per payload: sent or not
            payload_in, fire_in = link.receive((payload, fire))
            fired = jnp.concatenate([fire, fire_in])[link.neighbors][..., None]  # (R, L, 1)
        # Every update expanded in one program, and the owner's x̂_j and its copies updated by
        # one sum, so that every copy takes the very rounding its owner does (XLA may fuse an
        # expansion's last product with the sum).
        expanded = expand(jnp.concatenate([own, keys[link.sources]]),
                          jax.tree.map(lambda a, b: jnp.concatenate([a, b]), payload, payload_in))
        update = jnp.concatenate([expanded[:size, None], expanded[link.neighbors]], axis=1)
        held = jnp.concatenate([public[:, None], state.copies], axis=1)         # (R, 1 + L, d)
        took = jnp.concatenate([jnp.broadcast_to(fire[:, None, None], (size, 1, 1)),
                                jnp.broadcast_to(fired, (size, held.shape[1] - 1, 1))], axis=1)
        if self.error_feedback:
            held = jnp.where(took, held + update, held)
        else:                                   # neighbours hold the last message received
            held = jnp.where(took, update, held)
        new = held[:, 0]
        terms = jnp.take_along_axis(held, matrix.slots[:, :, None], axis=1)    # (R, K, d)
        wnew = _unflat(matrix.astype(new.dtype).combine_terms(new, terms), message)
        copies, new = held[:, 1:], _unflat(new, message)
        if self.error_feedback:
            gamma = self.consensus
            mixed = jax.tree.map(lambda x, wh, h: x + jnp.asarray(gamma, x.dtype) * (wh - h),
                                 message, wnew, new)
        else:
            diag = _diagonal(matrix)
            mixed = jax.tree.map(lambda wq, x, c: wq + _rows(diag, x) * (x - c),
                                 wnew, message, new)
        return mixed, new, copies

    def message_bytes(self, dim: int, dtype=jnp.float32) -> int:
        """Bytes of one message of ``dim`` entries of ``dtype``."""
        return -(-self.compressor.bits(int(dim), 8 * jnp.dtype(dtype).itemsize) // 8)

    def bytes_sent(self, state) -> np.ndarray:
        """Bytes each agent has sent, ``int64`` of shape ``state``'s counters' ``(..., N)``.

        ``state``: a sampler state run with this channel (e.g. ``trace.state``, leaves
        ``(num_chains, N, ...)``), whose ``position`` gives the message size. A push-sum
        state (one with a ``weight``) also sends its weight, one exact entry, with every
        ``position`` message (:func:`send_mass`).
        """
        counts = np.asarray(messages_sent(state), np.int64)
        leaves = jax.tree.leaves(state.position)
        lead = counts.ndim
        dim = sum(int(np.prod(np.shape(leaf)[lead:])) for leaf in leaves)
        dtype = jnp.result_type(*leaves)
        total = counts * self.message_bytes(dim, dtype)
        if getattr(state, "weight", None) is not None:
            weights = np.asarray(state.channel["position"].sent, np.int64)
            total = total + weights * jnp.dtype(jnp.result_type(state.weight)).itemsize
        return total


def link_mask(key: PRNGKey, num_agents: int, probability: float,
              directed: bool = False) -> Array:
    """``(N, N)`` bool, ``u = uniform(key, (N, N)) < probability``; the diagonal is up.
    Undirected (default): symmetric, link ``{i, j}`` (``i < j``) up iff ``u[i, j]`` (upper
    triangle). ``directed``: each one-way link ``j → i`` up iff ``u[i, j]``, independently."""
    up = jax.random.uniform(key, (num_agents, num_agents)) < probability
    eye = jnp.eye(num_agents, dtype=bool)
    if directed:
        return up | eye
    up = jnp.triu(up, 1)
    return up | up.T | eye


def gossip_matrix(key: PRNGKey, matrix, mode: str = "matching",
                  directed: bool = False) -> Array:
    """The ``(N, N)`` matrix of one gossip round on the links of ``matrix`` (``W[i, j] ≠ 0``,
    ``i ≠ j``: a link ``j → i``; undirected: either direction). Each picked link carries half
    of its sender's value, the rest stays on the diagonal.

    ``mode="edge"``: one link drawn uniformly (undirected: one pair ``{i, j}``, both ways).
    ``mode="matching"``, undirected: every agent ``j`` proposes to one neighbour drawn
    uniformly (``argmax`` of uniforms over its column), and mutual proposals are matched;
    directed: every agent pushes to the out-neighbour it draws. Undirected results are
    symmetric doubly stochastic, directed ones column stochastic. An agent without links keeps
    its value (``e_j``)."""
    dense = _dense(matrix)
    return _halves(jnp, _gossip_pick(key, dense != 0, mode, directed), dense.dtype)


def _gossip_pick(key: PRNGKey, links: Array, mode: str, directed: bool) -> Array:
    """``(N, N)`` bool, the links of one gossip round (:func:`gossip_matrix`) among ``links``
    (``(N, N)`` bool, ``links[i, j]``: ``j → i``; the diagonal is ignored)."""
    n = links.shape[0]
    links = links & ~jnp.eye(n, dtype=bool)
    if not directed:
        links = links | links.T
    score = jax.random.uniform(key, (n, n))
    if mode == "edge":
        candidates = links if directed else jnp.triu(links, 1)
        flat = jnp.argmax(jnp.where(candidates, score, -1.0))
        pick = (jnp.arange(n * n) == flat).reshape(n, n) & candidates
        if not directed:
            pick = pick | pick.T
    elif mode == "matching":
        choice = jnp.argmax(jnp.where(links, score, -1.0), axis=0)      # j's pick, by column
        pick = (jnp.arange(n)[:, None] == choice[None, :]) & links
        if not directed:
            pick = pick & pick.T                                        # mutual proposals
    else:
        raise ValueError(f"`mode` must be 'edge' or 'matching'; got {mode!r}.")
    return pick


def _halves(xp, pick, dtype):
    """The gossip matrix of the picked links ``pick`` (``(..., N, N)`` bool, ``pick[i, j]``:
    ``j`` sends half its value to ``i``): ``½`` on them, the rest of each column on its
    diagonal. ``xp``: ``jax.numpy`` or ``numpy``."""
    half = xp.where(pick, xp.asarray(0.5, dtype), xp.zeros((), dtype))
    eye = xp.eye(pick.shape[-1], dtype=dtype)
    return half + eye * (1 - xp.sum(half, axis=-2))[..., None, :]


#: Most proposal profiles (``Π_j deg_j``) :func:`gossip_outcomes` enumerates for a matching.
MAX_GOSSIP_PROFILES = 4096


def gossip_outcomes(matrix, mode: str = "matching") -> tuple[np.ndarray, np.ndarray]:
    """Every gossip matrix :func:`gossip_matrix` can draw on the undirected links of
    ``matrix`` (a concrete ``(N, N)``), with its probability: ``(matrices (K, N, N) float64,
    probabilities (K,))``, distinct matrices, probabilities summing to 1.

    ``"edge"``: the ``L`` links, each ``1 / L``. ``"matching"``: the ``Π_j deg_j`` proposal
    profiles (agent ``j`` proposes to each of its ``deg_j`` neighbours with probability
    ``1 / deg_j``, independently) are enumerated, at most :data:`MAX_GOSSIP_PROFILES`, and
    profiles giving the same matching are merged. No links: ``I`` with probability 1."""
    dense = np.asarray(_dense(matrix))
    n = dense.shape[0]
    links = (dense != 0) & ~np.eye(n, dtype=bool)
    links = links | links.T
    if mode == "edge":
        i, j = np.nonzero(np.triu(links, 1))
        pick = np.zeros((len(i), n, n), bool)
        pick[np.arange(len(i)), i, j] = pick[np.arange(len(i)), j, i] = True
    elif mode == "matching":
        options = [np.flatnonzero(links[:, j]) for j in range(n)]
        profiles = math.prod(max(len(o), 1) for o in options)
        if profiles > MAX_GOSSIP_PROFILES:
            raise ValueError(
                f"`mode`: a random matching is enumerated over its {profiles} proposal "
                f"profiles (Π_j deg_j), more than {MAX_GOSSIP_PROFILES}; use mode='edge' or "
                "a sparser network.")
        grids = np.meshgrid(*[o if len(o) else np.array([-1]) for o in options],
                            indexing="ij")
        choice = np.stack([g.ravel() for g in grids], axis=1)              # (profiles, N)
        pick = choice[:, None, :] == np.arange(n)[None, :, None]           # [i, j]: j → i
        pick = pick & pick.transpose(0, 2, 1)
    else:
        raise ValueError(f"`mode` must be 'edge' or 'matching'; got {mode!r}.")
    if len(pick) == 0:
        pick = np.zeros((1, n, n), bool)
    unique, counts = np.unique(pick.reshape(len(pick), -1), axis=0, return_counts=True)
    return (_halves(np, unique.reshape(-1, n, n), np.float64),
            counts / counts.sum())


def drop_links(matrix, up: Array, keep: str = "rows"):
    """``matrix`` (dense ``(N, N)``) with the links where ``up`` (``(N, N)`` bool) is False
    removed and their weight moved to a diagonal. ``keep="rows"``: to the receiver's,
    ``W'[i, i] = W[i, i] + Σ_{j: ¬up[i, j]} W[i, j]``, so row sums are kept; with ``W`` and
    ``up`` symmetric ``W'`` is symmetric, hence doubly stochastic when ``W`` is.
    ``keep="columns"``: to the sender's, ``C'[j, j] = C[j, j] + Σ_{i: ¬up[i, j]} C[i, j]``
    (what is not delivered stays where it was), so column sums are kept and a column-stochastic
    ``C`` stays column stochastic. The two agree when ``W`` and ``up`` are symmetric.
    ``matrix`` may be a device's rows of a neighbour exchange (``HaloRows``), rewritten alike
    (:meth:`~dgsgld.parallel.rows.HaloRows.without`)."""
    return _cut(matrix, lambda i, j: up[i, j], None, keep)


def _without_inactive(matrix, active: Array, keep: str = "rows"):
    """``matrix`` (dense, or a device's ``HaloRows``) with every link of
    an inactive agent dropped (:func:`drop_links`) and an inactive agent's row and column
    exactly ``e_i``: it neither mixes nor sends, and with ``keep="columns"`` nothing is pushed
    to it (its state is held, so a mass it received would be lost)."""
    return _cut(matrix, lambda i, j: active[i] & active[j], ~active, keep)


def _cut(matrix, link_up, held, keep: str):
    """The links ``j → i`` of ``matrix`` where ``link_up(i, j)`` is False dropped and the
    agents of ``held`` (``(N,)`` bool or ``None``) made ``e_i`` by
    :func:`~dgsgld.parallel.rows.cut_links`: on a dense ``(N, N)`` its rows (``keep="rows"``)
    or, transposed, its columns (``"columns"``); on a ``HaloRows`` the device's rows, by
    :meth:`~dgsgld.parallel.rows.HaloRows.without` (with ``"columns"`` a held sender's links
    are dropped, as a held column is ``e_j`` on a dense matrix)."""
    if keep not in ("rows", "columns"):
        raise ValueError(f"`keep` must be 'rows' or 'columns'; got {keep!r}.")
    if isinstance(matrix, rows.HaloRows):
        if keep == "columns" and held is not None:      # a held sender gives nothing out
            def link_up(i, j, up=link_up):
                return up(i, j) & ~held[j]
        return matrix.without(link_up, None if held is None else _local(matrix, held), keep)
    # keep="columns": the rows of the transpose, entry (j, i) the link j → i.
    dense = matrix if keep == "rows" else matrix.T
    agents = jnp.arange(dense.shape[0])
    receivers, senders = agents[:, None], agents[None, :]
    if keep == "columns":
        receivers, senders = senders, receivers
    eye = jnp.eye(dense.shape[0], dtype=bool)
    weights, diagonal = rows.cut_links(jnp.where(eye, jnp.zeros_like(dense), dense),
                                       jnp.diagonal(dense), link_up(receivers, senders), held)
    used = weights + jnp.diag(diagonal)
    return used if keep == "rows" else used.T


def active_agents(channel: "Channel | None", key: PRNGKey, count, num_agents: int):
    """``(N,)`` bool, the agents active at the step of ``key`` (the step's key) and iteration
    ``count``: drawn by ``activity`` and, with a :class:`Clock` that has a deadline, done
    computing by it; ``None`` when all always are (no channel, ``activity=1``, no deadline)."""
    if channel is None:
        return None
    times = None if channel.clock is None else channel.clock.times(key, num_agents)
    return _with_deadline(channel, _by_activity(channel, key, count, num_agents), times)


def _with_deadline(channel: "Channel", active, times):
    """``active`` (``None``: all) less the agents not done by the clock's deadline."""
    if times is None or channel.clock.deadline is None:
        return active
    done = times <= channel.clock.deadline
    return done if active is None else active & done


def _by_activity(channel: "Channel | None", key: PRNGKey, count, num_agents: int):
    """The agents active by ``activity`` alone (``None``: all)."""
    if channel is None or channel.activity == 1.0:
        return None
    if isinstance(channel.activity, tuple):
        pattern = np.asarray(channel.activity, bool)
        if pattern.shape[1] != num_agents:
            raise ValueError(
                f"`activity` pattern has {pattern.shape[1]} agents per row; the network has "
                f"{num_agents}."
            )
        return jnp.asarray(pattern)[jnp.asarray(count) % pattern.shape[0]]
    return jax.random.uniform(jax.random.fold_in(key, _ACTIVE_TAG), (num_agents,)) \
        < channel.activity


def hold(channel: "Channel | None", key: PRNGKey, old, new, matrix=None):
    """The sampler state ``new`` after a step from ``old`` with inactive agents' rows kept
    from ``old``: every leaf with a leading agent axis ``(N, ...)`` of every field but
    ``count`` and ``channel`` (the channel keeps its own: an inactive agent sent nothing).
    ``new`` itself when every agent is active. ``matrix``: the step's mixing operand; a
    device's rows of ``W⁽ᵏ⁾`` (placement ``Agents``, state leaves ``(R, ...)``) draws the
    activity of all ``N`` agents and keeps the device's rows."""
    if channel is None:
        return new
    num_agents = jax.tree.leaves(old.position)[0].shape[0]
    total = rows.num_agents(matrix, num_agents)
    active = active_agents(channel, key, old.count, total)
    if active is None:
        return new
    if total != num_agents:
        active = rows.own_rows(matrix, active, total)

    def keep(a, b):
        if jnp.ndim(a) == 0 or jnp.shape(a)[0] != num_agents:
            return a
        return jnp.where(_rows(active, a).astype(bool), a, b)

    return new._replace(**{
        name: jax.tree.map(keep, getattr(new, name), getattr(old, name))
        for name in new._fields if name not in ("count", "channel")})


def _select(mask: Array, a: PyTree, b: PyTree) -> PyTree:
    """Per agent: ``a`` where ``mask`` (``(N,)``), else ``b`` (leaves ``(N, ...)``)."""
    return jax.tree.map(lambda u, v: jnp.where(_rows(mask, u).astype(bool), u, v), a, b)


def messages_sent(state) -> Array:
    """Point-to-point messages each agent has sent so far, summed over the sampler's messages:
    ``(..., N)`` int32 from a state run with a :class:`Channel` (usable as
    ``Output(trace_fn=messages_sent)`` for a per-iteration trace)."""
    channels = getattr(state, "channel", ())
    if not channels:
        raise ValueError(
            "`state` has no channel state: run the sampler with channel=dgsgld.communication."
            "Channel(...) (sample's `channel` option) to count messages."
        )
    return sum(c.sent for c in channels.values())


def out_degrees(matrix) -> Array:
    """``(N,)`` int32: agent ``j``'s out-neighbours ``#{i ≠ j : W[i, j] ≠ 0}`` in ``matrix``
    (a device's rows of a neighbour exchange, ``HaloRows``: its agents' ``(R,)``)."""
    if isinstance(matrix, rows.HaloRows):
        return matrix.degrees
    links = _dense(matrix) != 0
    return (jnp.sum(links, axis=0) - jnp.diagonal(links)).astype(jnp.int32)


def listener_counts(mixing) -> tuple[int, ...]:
    """Per agent ``j``, the agents that ever listen to it: ``#{i ≠ j : W⁽ᵏ⁾[i, j] ≠ 0 for
    some k}`` over one period of ``mixing`` (any network :func:`dgsgld.sample` takes; a
    static one: its out-degrees), or ``N − 1`` for every agent when the schedule never
    repeats (``period=None``: any agent may listen). The :attr:`Channel.listeners` of a run
    with public copies."""
    mixing = as_mixing(mixing)
    if getattr(mixing, "period", None) is None:
        n = _dense(mixing.matrix_at(0)).shape[-1]
        return (n - 1,) * n
    links = np.asarray(_ever_linked(mixing))
    return tuple(int(c) for c in (links & ~np.eye(links.shape[0], dtype=bool)).sum(axis=0))


@eqx.filter_jit
def _ever_linked(mixing) -> Array:
    """``(N, N)`` bool: ``W⁽ᵏ⁾[i, j] ≠ 0`` at some ``k`` of the period (compiled once per
    network structure, as ``sample`` calls it for every run with public copies)."""
    return jax.lax.fori_loop(1, mixing.period,
                             lambda k, links: links | (_dense(mixing.matrix_at(k)) != 0),
                             _dense(mixing.matrix_at(0)) != 0)


def _dense(matrix) -> Array:
    return matrix if isinstance(matrix, (jax.Array, np.ndarray)) else matrix.todense()


def _cuttable(matrix):
    """``matrix`` in a form :func:`drop_links` rewrites: a device's ``HaloRows`` as it is,
    any other dense."""
    return matrix if isinstance(matrix, rows.HaloRows) else _dense(matrix)


def _size(matrix) -> int:
    """``N``, the network's agents, of a dense matrix or a device's ``HaloRows``."""
    return rows.num_agents(matrix, _diagonal(matrix).shape[0])


def _local(matrix, flags: Array) -> Array:
    """``flags`` ``(N,)`` of all agents, restricted to a device's rows of a neighbour exchange
    (``HaloRows``: ``(R,)``); as they are for any other ``matrix``."""
    if isinstance(matrix, rows.HaloRows):
        return rows.own_rows(matrix, flags, _size(matrix))
    return flags


def _diagonal(matrix) -> Array:
    if isinstance(matrix, rows.HaloRows):
        return matrix.diagonal
    return jnp.diagonal(_dense(matrix))


def _compress_mix(compressor: Compressor, key: PRNGKey, matrix, message: PyTree):
    """``(q, W q)``: every agent's compressed message ``q_j = C(x_j)`` (agent ``j``'s key
    ``split(key, N)[j]``; leaves like ``message``) and its mix over ``matrix``. Over a
    neighbour exchange (``HaloRows``: a device's rows under placement ``Agents``) the
    payloads travel (:meth:`Compressor.payload`), and the receivers expand them with their
    senders' keys: the same ``q`` as on one device."""
    flat = _flat(message)
    if not isinstance(matrix, rows.HaloRows):
        keys = jax.random.split(key, flat.shape[0])
        q = _unflat(jax.vmap(compressor.compress)(keys, flat), message)
        return q, _tree.mix(matrix, q)
    total = rows.num_agents(matrix, flat.shape[0])
    dim = flat.shape[1]
    keys = jax.random.split(key, total)
    own = rows.own_rows(matrix, keys, total)
    expand = jax.vmap(lambda k, p: compressor.expand(k, p, dim))
    payload = jax.vmap(compressor.payload)(own, flat)
    q = expand(own, payload)
    wq = matrix.astype(q.dtype).combine(q, expand(keys[matrix.sources], matrix.receive(payload)))
    return _unflat(q, message), _unflat(wq, message)


def _rows(diag: Array, leaf: Array) -> Array:
    """``diag`` (N,) shaped to broadcast over ``leaf``'s rows ``(N, ...)``."""
    return diag.astype(leaf.dtype).reshape((-1,) + (1,) * (leaf.ndim - 1))


def _flat(tree: PyTree) -> Array:
    """``(N, d)``: every leaf ``(N, ...)`` raveled per agent, concatenated."""
    leaves = jax.tree.leaves(tree)
    return jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in leaves], axis=1)


def _unflat(flat: Array, like: PyTree) -> PyTree:
    leaves, treedef = jax.tree.flatten(like)
    sizes = np.cumsum([int(np.prod(leaf.shape[1:])) for leaf in leaves])[:-1]
    parts = jnp.split(flat, sizes, axis=1)
    return jax.tree.unflatten(
        treedef, [p.reshape(leaf.shape).astype(leaf.dtype) for p, leaf in zip(parts, leaves)])


# -- what the samplers call -------------------------------------------------------------------


def init_states(channel: "Channel | None", **messages: PyTree) -> Any:
    """The sampler state's ``channel`` field: ``()`` without a channel, else one
    :class:`ChannelState` per named message (``position=x, tracker=y``)."""
    if channel is None:
        return ()
    return {name: channel.init(message, name) for name, message in messages.items()}


def send(channel: "Channel | None", key: PRNGKey, states, name: str, matrix, message: PyTree,
         count=0, directed: bool = False):
    """``(mixed, states)``: message ``name`` sent over ``matrix`` at iteration ``count``;
    ``W @ message`` exactly and ``states`` unchanged without a channel. ``directed``: a
    column-stochastic ``matrix`` (push-sum; :meth:`Channel.plan`)."""
    if channel is None:
        return _tree.mix(matrix, message), states
    mixed, _, states = _send(channel, key, states, name, matrix, message, count, directed)
    return mixed, states


def send_mass(channel: "Channel | None", key: PRNGKey, states, name: str, matrix,
              mass: PyTree, weight: Array, count=0):
    """``(mixed mass, mixed weight, states)``: a push-sum message, the mass ``u`` (leaves
    ``(N, ...)``) with the weight ``v`` ``(N, 1)``, pushed over the column-stochastic
    ``matrix`` at iteration ``count``. The mass goes through the channel like any message
    (compressed, with error feedback, triggered); the weight, one scalar per agent, is sent
    exact beside it over the same used matrix ``C'`` (the same round, links and active
    agents), ``v⁺ = C' v`` (``v`` itself when the step is no round), so that ``x = u / v``
    stays push-sum's ratio and ``Σ_i v_i`` is kept. ``C u`` and ``C v`` without a channel."""
    if channel is None:
        return _tree.mix(matrix, mass), _tree.mix(matrix, weight), states
    return _send(channel, key, states, name, matrix, mass, count, True, weight)


def _send(channel: "Channel", key: PRNGKey, states, name: str, matrix, message: PyTree,
          count, directed: bool, weight: Array | None = None):
    """The one body of :func:`send` and :func:`send_mass`: ``(mixed, mixed weight or None,
    states)``. The step's activity and compute times are drawn once here and serve the
    active set, the used matrix and the clock.

    ``matrix`` may be a device's rows of ``W⁽ᵏ⁾`` (placement ``Agents``, leaves ``(R, ...)``).
    Over a neighbour exchange (``HaloRows``) the step runs on the device's rows, its draws
    made for all ``N`` agents (the active agents and links that are up rewrite the device's
    rows, :meth:`Channel.plan`), and the compressed payloads travel (:func:`_compress_mix`);
    otherwise the message, its channel state and the weight are gathered over the devices,
    sent over the whole snapshot as on one device and the device's rows kept. Either way the
    draws, mixed values and counts are the unsharded run's."""
    if rows.is_rows(matrix) and not isinstance(matrix, rows.HaloRows):
        full = rows.whole(matrix)
        message, state, weight = rows.gather(matrix, (message, states[name], weight))
        num_agents = jax.tree.leaves(message)[0].shape[0]
        out = _send(channel, key, {name: state}, name, full, message, count, directed, weight)
        mixed, mixed_weight, new = rows.own_rows(matrix, out, num_agents)
        return mixed, mixed_weight, {**states, **new}
    # Draws for all N agents (over a neighbour exchange a device holds R of them).
    num_agents = rows.num_agents(matrix, jax.tree.leaves(message)[0].shape[0])
    by_activity = _by_activity(channel, key, count, num_agents)
    times = None if channel.clock is None else channel.clock.times(key, num_agents)
    active = _with_deadline(channel, by_activity, times)
    talk, used, degrees = channel.plan(jax.random.fold_in(key, _ROUND_TAG), matrix, count,
                                       active, directed)
    sends = None if active is None else _local(used, active)
    mixed, state = channel._mix(jax.random.fold_in(key, _TAGS[name]), states[name], used,
                                message, degrees, sends, name)
    mixed_weight = None if weight is None else _tree.mix(used, weight)
    if talk is not None:
        mixed, state, mixed_weight = jax.tree.map(
            lambda a, b: jnp.where(talk, a, b), (mixed, state, mixed_weight),
            (message, states[name], weight))
    if times is not None and not isinstance(state.elapsed, tuple):
        step = channel.clock.duration(times, by_activity, talk)
        state = state._replace(elapsed=state.elapsed + step.astype(state.elapsed.dtype))
    return mixed, mixed_weight, {**states, name: state}


def elapsed_time(state) -> Array:
    """Simulated seconds so far, ``(...)`` float32, of a sampler state run with a channel
    that has a :class:`Clock` (usable as ``Output(trace_fn=elapsed_time)`` for a
    per-iteration trace, to plot results against simulated time)."""
    channels = getattr(state, "channel", ())
    if not channels or isinstance(channels["position"].elapsed, tuple):
        raise ValueError(
            "`state` has no simulated clock: run the sampler with channel=dgsgld."
            "communication.Channel(clock=Clock(...)) to measure simulated time."
        )
    return channels["position"].elapsed


def as_channel(channel) -> "Channel | None":
    """The converter of the samplers' ``channel`` field: ``None`` or a :class:`Channel`."""
    if channel is not None and not isinstance(channel, Channel):
        raise TypeError(
            "`channel` must be None or a dgsgld.communication.Channel (e.g. "
            f"Channel(top_k(0.1), error_feedback=True)); got {type(channel).__name__}."
        )
    return channel


# Last: placing agents over devices imports the samplers, which import this module.
from ..parallel import rows  # noqa: E402
