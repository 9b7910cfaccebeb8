"""Sparse mixing: ``W @ x`` in ``O(|E| d)`` instead of ``O(N² d)`` for large, sparse networks.

Three formats, all ``eqx.Module`` s that implement ``W @ x`` for ``x`` of shape ``(N, F)`` and
therefore work wherever a dense ``(N, N)`` mixing matrix does (the samplers only ever compute
``W @ x``):

* :class:`CirculantMixing` — shifts ``s_k`` and weights ``w_k`` of a circulant matrix (rings,
  circulant graphs: ``W[i, j]`` depends only on ``(j - i) mod N``):
  ``(W x)_i = W_ii x_i + Σ_k w_k x_{(i + s_k) mod N}``, one roll of ``x`` per shift. No index
  arrays, no gather: the cheapest format when it applies.
* :class:`NeighborMixing` — padded neighbour lists ``(N, K)``, ``K`` the largest degree:
  ``(W x)_i = W_ii x_i + Σ_k w_ik x_{nbr_ik}``. Gathers only (no scatter), the fast format
  when degrees are similar (grids, link failures, one-peer graphs).
* :class:`EdgeMixing` — an edge list ``(E,)`` summed with ``jax.ops.segment_sum``: memory
  ``O(|E|)`` whatever the degree distribution (a star, a hub-and-spoke network).

:class:`SparseSchedule` stacks ``P`` snapshots (padded to a common size) and gives
``W⁽ᵏ⁾ = snapshot[k % P]`` through ``matrix_at(k)``, the protocol :func:`dgsgld.sample` uses
for schedule objects. :func:`from_dense` converts a dense stack or a
:class:`~dgsgld.networks.Schedule`; :func:`auto` converts only when it pays off.

Convention as everywhere in dgsgld: ``x⁺ = W @ x``, ``W[i, j]`` the weight agent ``i`` puts on
agent ``j``. The weights are those of the dense matrix, so results equal the dense run up to
floating-point summation order (float32 rounding).

Automatic choice (:func:`auto`) from a cost model (:class:`CostModel`, :func:`cost`) fitted
to whole sampling runs, not a density threshold: the sparse formats' products are cheap at any
size, but their runs differ outside the product. :class:`CirculantMixing` keeps
``dgsgld.sample``'s chains-last loop (its product is one contraction, like the dense one); the
gathering formats run chains first (with the noise and the updates on flat leaves), which
costs more than a dense run's per-agent time outside the product. Where each format wins is
measured in ``benchmarks/targets.md`` (rings of 200 to 2 000 agents) and
``benchmarks/neighbour_crossover.md`` (dense against neighbour lists).
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import validation as _validation
from .._util.types import Array
from ._mixing import COLUMN_STOCHASTIC, is_directed_network, stochastic_sums

__all__ = [
    "CirculantMixing",
    "EdgeMixing",
    "NeighborMixing",
    "CostModel",
    "SparseSchedule",
    "auto",
    "cost",
    "density",
    "from_dense",
]


_FORMATS = ("auto", "circulant", "neighbors", "edges")


def _check_operand(x: Array, n: int) -> None:
    if x.ndim < 1 or x.shape[0] != n:
        raise ValueError(f"sparse mixing of {n} agents needs an operand (N, ...) with N = {n}; "
                         f"got shape {x.shape}.")


class _Snapshot(eqx.Module):
    """What the sparse formats share: the shape and dtype read from ``diagonal`` (``(N,)``)
    and ``weights``, which each format declares as fields, and the checks of a dense stack.

    A snapshot (leaves ``(N, ...)``) or a stack of them (``(P, N, ...)``) built from concrete
    arrays is checked when it is built (:func:`dgsgld.networks.validation.validate_sparse`:
    indices, repeated entries, then finite, symmetric, nonnegative and doubly stochastic, with
    the messages of a dense stack; with ``network_kind="column_stochastic"``, a directed
    network's: nonnegative and column stochastic); :func:`dgsgld.sample` checks it again, and
    checks a traced one inside the computation.

    ``network_kind`` (keyword, static): ``None``, or :data:`COLUMN_STOCHASTIC` for a directed
    network's snapshot, which only the push-sum samplers take.
    """

    network_kind: str | None = eqx.field(default=None, static=True, kw_only=True)

    def __check_init__(self):
        from .validation import validate_sparse

        if self.network_kind not in (None, COLUMN_STOCHASTIC):
            raise ValueError(f"`network_kind` must be None or {COLUMN_STOCHASTIC!r}; got "
                             f"{self.network_kind!r}.")
        validate_sparse(self, name="mixing", sums=stochastic_sums(self))

    def astype(self, dtype):
        """The same snapshot with its weights in ``dtype``. Rebuilt as a pytree, not through the
        constructor: the samplers call it every step, and the values are those checked."""
        return jax.tree.map(
            lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, self)

    @property
    def num_agents(self) -> int:
        return self.diagonal.shape[-1]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_agents, self.num_agents)

    @property
    def dtype(self):
        return self.weights.dtype


class NeighborMixing(_Snapshot):
    """One mixing matrix as padded neighbour lists.

    Attributes:
        neighbors: ``(N, K)`` int32, agent ``i``'s neighbours (padding: ``i`` itself).
        weights: ``(N, K)`` float, ``W[i, neighbors[i, k]]`` (padding: 0).
        diagonal: ``(N,)`` float, ``W[i, i]``.
    """

    neighbors: Array
    weights: Array
    diagonal: Array

    def __matmul__(self, x: Array) -> Array:
        """``W @ x`` for ``x`` of shape ``(N, ...)``."""
        _check_operand(x, self.num_agents)
        flat = x.reshape(x.shape[0], -1)
        gathered = flat[self.neighbors]                              # (N, K, F)
        out = self.diagonal[:, None] * flat + jnp.einsum("nk,nkf->nf", self.weights, gathered)
        return out.reshape(x.shape)

    def todense(self) -> Array:
        n = self.num_agents
        rows = jnp.broadcast_to(jnp.arange(n)[:, None], self.neighbors.shape)
        dense = jnp.zeros((n, n), self.weights.dtype).at[rows, self.neighbors].add(self.weights)
        return dense + jnp.diag(self.diagonal)


class EdgeMixing(_Snapshot):
    """One mixing matrix as an edge list (both directions of every undirected edge).

    Attributes:
        receivers: ``(E,)`` int32, sorted; ``senders``: ``(E,)`` int32; ``weights``: ``(E,)``,
            ``W[receivers[e], senders[e]]`` (padding edges have weight 0);
        diagonal: ``(N,)``, ``W[i, i]``.
    """

    receivers: Array
    senders: Array
    weights: Array
    diagonal: Array

    def __matmul__(self, x: Array) -> Array:
        """``W @ x`` for ``x`` of shape ``(N, ...)``."""
        _check_operand(x, self.num_agents)
        flat = x.reshape(x.shape[0], -1)
        messages = self.weights[:, None] * flat[self.senders]       # (E, F)
        summed = jax.ops.segment_sum(messages, self.receivers, num_segments=self.num_agents,
                                     indices_are_sorted=True)
        return (self.diagonal[:, None] * flat + summed).reshape(x.shape)

    def todense(self) -> Array:
        n = self.num_agents
        dense = jnp.zeros((n, n), self.weights.dtype).at[self.receivers, self.senders].add(
            self.weights)
        return dense + jnp.diag(self.diagonal)


def _roll_up(x: Array, shift: int) -> Array:
    """``jnp.roll(x, -shift, axis=0)`` (row ``i`` is ``x[(i + shift) mod N]``) as two slices,
    each zero-padded to ``N`` rows, added: unlike ``roll``'s concatenate, slice and pad keep a
    ``vmap``-ped axis where it is. Exact (each row is one slice's value plus zero)."""
    n = x.shape[0]
    rest = [(0, 0, 0)] * (x.ndim - 1)
    zero = jnp.zeros((), x.dtype)
    head = jax.lax.pad(x[shift:], zero, [(0, shift, 0)] + rest)
    tail = jax.lax.pad(x[:shift], zero, [(n - shift, 0, 0)] + rest)
    return head + tail


class CirculantMixing(_Snapshot):
    """One circulant mixing matrix (a ring, a circulant graph: ``W[i, j]`` depends only on
    ``(j - i) mod N``) as shifts: ``(W x)_i = W_ii x_i + Σ_k w_k x_{(i + s_k) mod N}``.

    Each term is a roll of ``x`` along the agent axis (two contiguous slices): no index array,
    no gather, and the chain axis may sit anywhere. The ``K + 1`` terms are summed by ONE
    contraction ``[W_ii, w_1, ..., w_K] · [x, roll_1 x, ..., roll_K x]``, so that under the
    runner's ``vmap`` the product is a ``dot`` like the dense ``W @ x``: it keeps the chain axis
    last (``chains_last``, read by :func:`dgsgld.sample`) where elementwise rolls let XLA:CPU
    put the chains first (5-8x slower noise and updates on short parameter axes).

    Attributes:
        shifts: static tuple of ``K`` nonzero offsets ``s_k`` in ``1..N-1``.
        weights: ``(K,)`` float, ``W[i, (i + s_k) mod N]``.
        diagonal: ``(N,)`` float, ``W[i, i]`` (the same value for every ``i``).
    """

    shifts: tuple[int, ...] = eqx.field(static=True)
    weights: Array
    diagonal: Array

    #: The runner may keep the chain axis last for this format (see the class docstring).
    chains_last: ClassVar[bool] = True

    def __matmul__(self, x: Array) -> Array:
        """``W @ x`` for ``x`` of shape ``(N, ...)``."""
        _check_operand(x, self.num_agents)
        terms = jnp.stack([x] + [_roll_up(x, shift) for shift in self.shifts])   # (K + 1, N, ...)
        weights = jnp.concatenate([self.diagonal[:1], self.weights]).astype(x.dtype)
        return jnp.tensordot(weights, terms, axes=1)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        # The dense matrix for host-side readers of any snapshot (the runner's connectivity
        # check reads unknown formats through np.asarray).
        return np.asarray(self.todense(), dtype=dtype)

    def todense(self) -> Array:
        n = self.num_agents
        cols = (jnp.arange(n)[:, None] + jnp.asarray(self.shifts, jnp.int32)[None, :]) % n
        rows = jnp.broadcast_to(jnp.arange(n)[:, None], cols.shape)
        dense = jnp.zeros((n, n), self.weights.dtype).at[rows, cols].add(
            jnp.broadcast_to(self.weights, cols.shape))
        return dense + jnp.diag(self.diagonal)


class SparseSchedule(eqx.Module):
    """``P`` sparse snapshots used cyclically: ``matrix_at(k)`` is snapshot ``k % P``.

    Attributes:
        snapshots: a :class:`NeighborMixing` or :class:`EdgeMixing` whose leaves carry a leading
            ``P`` axis (all snapshots padded to the same ``K`` or ``E``).
    """

    snapshots: NeighborMixing | EdgeMixing | CirculantMixing

    def __check_init__(self):
        if not isinstance(self.snapshots, _Snapshot):
            raise TypeError("`snapshots` must be a dgsgld.networks.sparse NeighborMixing, "
                            "EdgeMixing or CirculantMixing; got "
                            f"{type(self.snapshots).__name__}.")
        if jnp.ndim(self.snapshots.diagonal) != 2:
            raise ValueError(
                "`snapshots` must carry a leading period axis P (diagonal (P, N)); got diagonal of "
                f"shape {jnp.shape(self.snapshots.diagonal)}. Stack one snapshot as P = 1, e.g. "
                "jax.tree.map(lambda a: a[None], snapshot) (static shifts stay as they are).")

    @property
    def network_kind(self) -> str | None:
        """The snapshots' (``None``: symmetric, doubly stochastic; :data:`COLUMN_STOCHASTIC`: a
        directed network for the push-sum samplers, as :func:`from_dense` of a
        :class:`~dgsgld.networks.directed.DirectedSchedule` makes)."""
        return self.snapshots.network_kind

    @property
    def num_agents(self) -> int:
        return self.snapshots.diagonal.shape[-1]

    @property
    def period(self) -> int:
        return self.snapshots.diagonal.shape[0]

    @property
    def num_edges(self) -> int:
        """Stored (directed) entries per snapshot, padding included."""
        s = self.snapshots
        if isinstance(s, CirculantMixing):
            return self.num_agents * len(s.shifts)
        return (int(np.prod(s.neighbors.shape[1:])) if isinstance(s, NeighborMixing)
                else int(s.senders.shape[1]))

    @property
    def dtype(self):
        return self.snapshots.weights.dtype

    def matrix_at(self, k) -> NeighborMixing | EdgeMixing | CirculantMixing:
        """``W⁽ᵏ⁾``; ``k`` may be traced."""
        return jax.tree.map(lambda leaf: leaf[k % self.period], self.snapshots)

    def todense(self) -> Array:
        """The ``(P, N, N)`` dense stack."""
        return jnp.stack([self.matrix_at(p).todense() for p in range(self.period)])


def _dense_stack(mixing: Any) -> np.ndarray:
    """The ``(P, N, N)`` stack of ``mixing``, checked: symmetric and doubly stochastic, or
    column stochastic for a directed network (its ``network_kind`` says so)."""
    if hasattr(mixing, "matrix_at") and not hasattr(mixing, "matrices"):
        raise ValueError("`mixing` is generated on the fly (it has `matrix_at` but no `matrices`); "
                         "convert a precomputed (P, N, N) stack instead.")
    stack = np.asarray(getattr(mixing, "matrices", mixing))
    if stack.ndim == 2:
        stack = stack[None]
    _validation.check_mixing(stack, name="mixing", sums=stochastic_sums(mixing))
    return stack


def _circulant(stack: np.ndarray) -> tuple[tuple[int, ...], np.ndarray] | None:
    """``(shifts, first rows (P, N))`` when every snapshot is circulant (``W[i, j] = c[(j - i)
    mod N]`` up to float32 rounding), else ``None``."""
    n = stack.shape[-1]
    offset = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n     # (j - i) mod N
    first = stack[:, 0, :]
    tol = 4 * np.finfo(np.float32).eps * max(float(np.abs(first).max()), 1.0)
    for w, c in zip(stack, first):                                     # one (N, N) at a time
        if not np.allclose(w, c[offset], rtol=0, atol=tol):
            return None
    shifts = tuple(int(s) for s in np.flatnonzero(np.any(first[:, 1:] != 0, axis=0)) + 1)
    return shifts, first


def density(mixing: Any) -> float:
    """Largest fraction of nonzero off-diagonal weights over the snapshots, in ``[0, 1)``."""
    stack = _dense_stack(mixing)
    n = stack.shape[-1]
    off = (stack != 0) & ~np.eye(n, dtype=bool)
    return float(off.sum(axis=(1, 2)).max() / (n * n))


def from_dense(mixing: Any, *, format: str = "auto", dtype: Any = None) -> SparseSchedule:
    """Sparse snapshots of a dense ``(P, N, N)`` stack, ``(N, N)`` matrix or ``Schedule``.

    Args:
        mixing: the dense matrices (checked: symmetric, nonnegative, doubly stochastic), or a
            directed network (:class:`~dgsgld.networks.directed.DirectedSchedule`, checked
            column stochastic), whose snapshots keep its ``network_kind``: row ``i`` lists
            the agents ``i`` hears (``W[i, j] ≠ 0``: ``j → i``).
        format: ``"circulant"``, ``"neighbors"``, ``"edges"`` or ``"auto"`` (shifts when every
            snapshot is circulant, else neighbour lists unless the largest degree exceeds four
            times the mean degree).
        dtype: weight dtype (default: that of ``mixing``, float32 for NumPy float64 input).

    Returns:
        :class:`SparseSchedule` with the same weights; ``matrix_at(k) @ x`` equals
        ``stack[k % P] @ x`` up to summation order.

    Example:
        >>> import numpy as np
        >>> ring = np.array([[.5, .25, 0, .25], [.25, .5, .25, 0], [0, .25, .5, .25],
        ...                  [.25, 0, .25, .5]])
        >>> s = from_dense(ring)
        >>> bool(np.allclose(s.matrix_at(0) @ np.eye(4), ring))
        True
    """
    if format not in _FORMATS:
        raise ValueError(f"`format` must be one of {_FORMATS}; got {format!r}.")
    return _from_stack(_dense_stack(mixing), _kind(mixing), format, dtype)


def _kind(mixing: Any) -> str | None:
    """The ``network_kind`` of the sparse snapshots of ``mixing``."""
    return COLUMN_STOCHASTIC if is_directed_network(mixing) else None


def _from_stack(stack: np.ndarray, kind: str | None, format: str, dtype: Any) -> SparseSchedule:
    """:func:`from_dense` of a checked ``(P, N, N)`` stack, its snapshots of ``kind``."""
    if dtype is None:
        dtype = (jnp.float32 if stack.dtype == np.float64 and not jax.config.jax_enable_x64
                 else stack.dtype)
    period, n, _ = stack.shape
    if format == "auto":
        format = _auto_format(stack)
    if format == "circulant":
        circulant = _circulant(stack)
        if circulant is None:
            raise ValueError("`format='circulant'` needs circulant snapshots (W[i, j] a function "
                             "of (j - i) mod N); this `mixing` is not.")
        shifts, first = circulant
        diagonal = np.repeat(first[:, :1], n, axis=1)                 # (P, N)
        return SparseSchedule(CirculantMixing(shifts, jnp.asarray(first[:, list(shifts)], dtype),
                                              jnp.asarray(diagonal, dtype), network_kind=kind))
    off = (stack != 0) & ~np.eye(n, dtype=bool)
    degrees = off.sum(axis=2)                                       # (P, N)
    k_max = max(int(degrees.max()), 1)
    diagonal = np.stack([np.diag(w) for w in stack])
    if format == "neighbors":
        nbr = np.tile(np.arange(n)[None, :, None], (period, 1, k_max))   # padding: self, weight 0
        wts = np.zeros((period, n, k_max), stack.dtype)
        for p in range(period):
            rows, cols = np.nonzero(off[p])
            slot = np.arange(rows.size) - np.searchsorted(rows, rows)    # position within the row
            nbr[p, rows, slot] = cols
            wts[p, rows, slot] = stack[p, rows, cols]
        snaps = NeighborMixing(jnp.asarray(nbr, jnp.int32), jnp.asarray(wts, dtype),
                               jnp.asarray(diagonal, dtype), network_kind=kind)
    else:
        e_max = max(int(off.sum(axis=(1, 2)).max()), 1)
        rec = np.full((period, e_max), n - 1, np.int32)              # padding at the end: sorted
        snd = np.full((period, e_max), n - 1, np.int32)
        wts = np.zeros((period, e_max), stack.dtype)
        for p in range(period):
            rows, cols = np.nonzero(off[p])                          # row-major: rows sorted
            rec[p, : rows.size], snd[p, : rows.size] = rows, cols
            wts[p, : rows.size] = stack[p, rows, cols]
        snaps = EdgeMixing(jnp.asarray(rec), jnp.asarray(snd), jnp.asarray(wts, dtype),
                           jnp.asarray(diagonal, dtype), network_kind=kind)
    return SparseSchedule(snaps)


class CostModel(NamedTuple):
    """Modelled cost of one sampling step per agent, in units of a dense run's per-agent work.

    ``dense = N (1 + N / dense_crossover)``: per-agent work plus the ``N²`` product;
    ``sparse = N (loop + entry[format] (K + 1))``: per-agent work as the run with that format
    does it (``circulant_loop`` for :class:`CirculantMixing`, which keeps the chains-last loop;
    ``sparse_loop`` for the gathering formats, whose loop runs chains first), plus ``K + 1``
    stored entries per agent. Defaults fitted to whole DIGing-SGLD runs on rings of 200-2 000
    agents, 200 chains, d = 6 (the module docstring; ``python -m benchmarks.run --sections
    sparse`` and ``python -m benchmarks.neighbour_layouts --crossover ...``, XLA:CPU): dense
    ``a + b N`` per agent with ``a / b ≈ 143``; circulant and dense equal near N = 200,
    neighbour or edge lists and dense near N = 570 (measured: 480 and 620). Refit them on
    other hardware.
    """

    dense_crossover: float = 143.0
    sparse_loop: float = 4.0
    circulant_loop: float = 2.0
    entry: tuple[tuple[str, float], ...] = (("circulant", 0.17), ("neighbors", 0.33),
                                            ("edges", 0.30))


def cost(mixing: Any, format: str = "dense", model: CostModel = CostModel()) -> float:
    """:class:`CostModel`'s cost of one step of ``mixing`` in ``format`` (``"dense"`` or a sparse
    format; ``"auto"``: the format :func:`from_dense` would choose)."""
    return _cost(_dense_stack(mixing), format, model)


def _cost(stack: np.ndarray, format: str, model: CostModel) -> float:
    """:func:`cost` of a checked ``(P, N, N)`` stack."""
    n = stack.shape[-1]
    if format == "dense":
        return n * (1.0 + n / model.dense_crossover)
    if format == "auto":
        format = _auto_format(stack)
    if format not in dict(model.entry):
        raise ValueError(f"`format` must be 'dense' or one of {_FORMATS}; got {format!r}.")
    off = (stack != 0) & ~np.eye(n, dtype=bool)
    degrees = off.sum(axis=2)
    k = float(degrees.max() if format != "edges" else degrees.sum(axis=1).max() / n)
    loop = model.circulant_loop if format == "circulant" else model.sparse_loop
    return n * (loop + dict(model.entry)[format] * (k + 1.0))


def _auto_format(stack: np.ndarray) -> str:
    """The format ``from_dense(format="auto")`` picks (see there)."""
    if _circulant(stack) is not None:
        return "circulant"
    n = stack.shape[-1]
    degrees = ((stack != 0) & ~np.eye(n, dtype=bool)).sum(axis=2)
    return "edges" if degrees.max() > 4 * max(float(degrees.mean()), 1e-12) else "neighbors"


def auto(mixing: Any, *, model: CostModel = CostModel()):
    """``mixing`` as it is, or :func:`from_dense` of it when the sparse run is modelled cheaper.

    The modelled costs are :func:`cost` of the dense and of the automatic sparse format; sparse
    only when strictly cheaper. With the default model: a ring (circulant) from about 220
    agents on; a graph stored as neighbour lists from about ``143 (3 + 0.33 (K + 1))`` agents
    (degree 2: 570, degree 10: 950). Schedules generated on the fly (``matrix_at`` without
    ``matrices``) are returned as they are.
    """
    if hasattr(mixing, "matrix_at") and not hasattr(mixing, "matrices"):
        return mixing
    if isinstance(mixing, SparseSchedule):
        return mixing
    stack = _dense_stack(mixing)
    fmt = _auto_format(stack)
    if _cost(stack, fmt, model) < _cost(stack, "dense", model):
        return _from_stack(stack, _kind(mixing), fmt, None)   # a directed one stays directed
    return mixing
