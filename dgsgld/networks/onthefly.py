"""Schedules generated inside the compiled loop: ``W⁽ᵏ⁾`` is built from ``fold_in(key, k)``.

A precomputed schedule stores ``(P, N, N)`` matrices; these store a key and build the matrix
of iteration ``k`` when :func:`dgsgld.sample` asks for it (``matrix_at(k)``), so a run of 10⁶
iterations with a new random graph at every one of them needs no stack at all. Each family
draws its graphs from the same law as its precomputed counterpart in
:mod:`dgsgld.networks.schedules` and applies the same weight rule (computed in the run's float
precision), so the two are interchangeable in distribution; the draws themselves differ (JAX
keys here, NumPy generators there).

* :func:`barbell_on_the_fly` — two cliques and one uniformly drawn bridge per iteration.
* :func:`lollipop_on_the_fly` — clique plus a path of random length, joined by random links.
* :func:`link_failures_on_the_fly` — each edge of a base graph down with probability ``p``.
* :func:`one_peer_exponential_on_the_fly` — deterministic, ``i ↔ i ± 2^(k mod log₂N)``.

``period=P`` makes the schedule repeat every ``P`` iterations (``W⁽ᵏ⁾`` uses
``fold_in(key, k mod P)``), like the paper's 50-iteration cycle; ``period=None`` never repeats.
:meth:`OnTheFlySchedule.materialize` gives the dense stack of the first iterations for host-side
checks (:func:`dgsgld.networks.validate_schedule`, :func:`dgsgld.networks.delta`) — ``sample``
does not validate schedule objects, it only asks them for matrices.

Output format: dense ``(N, N)`` matrices for the clique-based families; for link failures and
the one-peer graph, neighbour lists (:class:`dgsgld.networks.sparse.NeighborMixing`) when the
graph is sparse (``format="auto"``: ``N >= 64`` and at most 10 % of the pairs linked), so that
an iteration costs ``O(|E| d)``.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import sparse
from .weights import as_adjacency

__all__ = [
    "OnTheFlySchedule",
    "barbell_on_the_fly",
    "link_failures_on_the_fly",
    "lollipop_on_the_fly",
    "one_peer_exponential_on_the_fly",
]


def _as_key(seed: Any) -> jax.Array:
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return jax.random.key(int(seed))
    if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return seed
    if isinstance(seed, jax.Array) and seed.dtype == jnp.uint32:
        return jax.random.wrap_key_data(seed)
    raise ValueError(f"`key` must be an int seed or a JAX PRNG key; got {type(seed).__name__}.")


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def _check_period(period: Any) -> int | None:
    return None if period is None else _positive_int(period, "period")


def _metropolis(adj: jax.Array, eps: float, dtype) -> jax.Array:
    """Eq. (4.1) on a (traced) boolean adjacency: ``1/(max(deg_i, deg_j) + eps)`` on edges."""
    deg = jnp.sum(adj, axis=1).astype(dtype)
    edge = 1.0 / (jnp.maximum(deg[:, None], deg[None, :]) + jnp.asarray(eps, dtype))
    w = jnp.where(adj, edge, 0.0)
    return w + jnp.diag(1.0 - jnp.sum(w, axis=1))


class OnTheFlySchedule(eqx.Module):
    """Base of the on-the-fly schedules: a key, a size, an optional period.

    Attributes:
        key: the schedule's PRNG key (a leaf: a new key reuses the compiled run).
        num_agents: ``N`` (static).
        period: ``P`` or ``None`` (static).
        dtype: weight dtype (static).
    """

    key: jax.Array
    num_agents: int = eqx.field(static=True)
    period: int | None = eqx.field(static=True)
    dtype: Any = eqx.field(static=True)

    def _build(self, key: jax.Array, k: jax.Array):  # pragma: no cover - interface
        raise NotImplementedError

    def matrix_at(self, k) -> Any:
        """``W⁽ᵏ⁾`` (``k`` may be traced): an ``(N, N)`` array or a sparse mixing matrix."""
        k = jnp.asarray(k, jnp.int32)
        if self.period is not None:
            k = k % self.period
        return self._build(jax.random.fold_in(self.key, k), k)

    def materialize(self, num: int) -> np.ndarray:
        """Dense ``(num, N, N)`` float64 stack of ``W⁽⁰⁾, …, W⁽ⁿᵘᵐ⁻¹⁾`` (host-side checks)."""
        num = _positive_int(num, "num")

        def dense(k):
            w = self.matrix_at(k)
            return w.todense() if hasattr(w, "todense") else w

        return np.asarray(jax.jit(jax.vmap(dense))(jnp.arange(num)), dtype=np.float64)


class _Barbell(OnTheFlySchedule):
    eps: float = eqx.field(static=True)

    def _build(self, key, k):
        n, half = self.num_agents, (self.num_agents + 1) // 2
        left_key, right_key = jax.random.split(key)
        left = jax.random.randint(left_key, (), 0, half)
        right = jax.random.randint(right_key, (), half, n)
        i = jnp.arange(n)
        side = i < half
        adj = (side[:, None] == side[None, :]) & (i[:, None] != i[None, :])
        bridge = (((i[:, None] == left) & (i[None, :] == right))
                  | ((i[:, None] == right) & (i[None, :] == left)))
        return _metropolis(adj | bridge, self.eps, self.dtype)


def barbell_on_the_fly(num_agents: int, key: Any = 0, *, period: int | None = None,
                       eps: float = 1e-6, dtype: Any = jnp.float32) -> OnTheFlySchedule:
    """The paper's time-varying barbell, drawn at each iteration (see
    :func:`~dgsgld.networks.barbell`).

    Agents ``0..⌈N/2⌉−1`` and ``⌈N/2⌉..N−1`` form two cliques; one agent of each, drawn
    uniformly, are linked. Weights eq. (4.1) with ``eps``.

    Args:
        num_agents: ``N >= 2``. key: int seed or JAX key. period: ``P`` or ``None``.
        eps: ``ε̂`` of eq. (4.1). dtype: weight dtype.

    Example:
        >>> s = barbell_on_the_fly(6, key=0)
        >>> s.matrix_at(3).shape
        (6, 6)
    """
    n = _positive_int(num_agents, "num_agents", 2)
    return _Barbell(_as_key(key), n, _check_period(period), dtype, float(eps))


class _Lollipop(OnTheFlySchedule):
    r_min: int = eqx.field(static=True)
    r_max: int = eqx.field(static=True)
    num_links: int = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def _build(self, key, k):
        n = self.num_agents
        length_key, link_key = jax.random.split(key)
        r = jax.random.randint(length_key, (), self.r_min, self.r_max + 1)
        m = n - r                                              # clique 0..m-1, path m..n-1
        i = jnp.arange(n)
        # num_links distinct clique agents, uniformly: the smallest of i.i.d. uniforms.
        u = jnp.where(i < m, jax.random.uniform(link_key, (n,)), 2.0)
        linked = jnp.zeros(n, bool).at[jax.lax.top_k(-u, self.num_links)[1]].set(True)
        a, b = i[:, None], i[None, :]
        clique = (a < m) & (b < m) & (a != b)
        path = (a >= m) & (b >= m) & (jnp.abs(a - b) == 1)
        links = (linked[:, None] & (b == m)) | (linked[None, :] & (a == m))
        return _metropolis(clique | path | links, self.eps, self.dtype)


def lollipop_on_the_fly(num_agents: int, key: Any = 0, *, period: int | None = None,
                        branch_lengths: tuple[int, int] = (3, 4), num_links: int = 3,
                        eps: float = 1e-6, dtype: Any = jnp.float32) -> OnTheFlySchedule:
    """The paper's generalized lollipop ``L^s_{m,r}``, drawn at each iteration
    (see :func:`~dgsgld.networks.lollipop` for the law: ``r ~ U{r_min..r_max}``, clique of the first
    ``m = N − r`` agents, path ``m..N−1``, ``s`` distinct clique agents linked to agent ``m``).

    Example:
        >>> s = lollipop_on_the_fly(8, key=1)
        >>> s.matrix_at(0).shape
        (8, 8)
    """
    n = _positive_int(num_agents, "num_agents", 2)
    r_min, r_max = (int(r) for r in branch_lengths)
    s = _positive_int(num_links, "num_links")
    if not 1 <= r_min <= r_max:
        raise ValueError("`branch_lengths` must satisfy 1 <= r_min <= r_max; "
                         f"got {branch_lengths!r}.")
    if n - r_max < s:
        raise ValueError(f"the clique (N - r_max = {n - r_max} agents) is smaller than "
                         f"num_links = {s}.")
    return _Lollipop(_as_key(key), n, _check_period(period), dtype, r_min, r_max, s, float(eps))


class _LinkFailures(OnTheFlySchedule):
    edges: jax.Array            # (E, 2) int32, undirected edges i < j of the base graph
    slot_edge: jax.Array        # (N, K) int32, edge of each neighbour slot (E for padding)
    neighbors: jax.Array        # (N, K) int32, padding = self
    p: float = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    dense: bool = eqx.field(static=True)

    def _build(self, key, k):
        n = self.num_agents
        num_edges = self.edges.shape[0]
        up = jax.random.uniform(key, (num_edges,)) >= self.p   # P(up) = 1 - p, as the generator
        up_slot = jnp.concatenate([up, jnp.zeros((1,), bool)])[self.slot_edge]   # (N, K)
        if self.dense:
            adj = jnp.zeros((n, n), bool)
            adj = (adj.at[self.edges[:, 0], self.edges[:, 1]].set(up)
                   .at[self.edges[:, 1], self.edges[:, 0]].set(up))
            return _metropolis(adj, self.eps, self.dtype)
        deg = jnp.sum(up_slot, axis=1).astype(self.dtype)
        edge = 1.0 / (jnp.maximum(deg[:, None], deg[self.neighbors])
                      + jnp.asarray(self.eps, self.dtype))
        weights = jnp.where(up_slot, edge, 0.0)
        return sparse.NeighborMixing(self.neighbors, weights, 1.0 - jnp.sum(weights, axis=1))


def _weight_eps(weights: str, eps: float) -> float:
    if weights == "metropolis_hastings":
        return 1.0                     # 1 / (1 + max(deg_i, deg_j))
    if weights == "metropolis":
        return float(eps)
    raise ValueError(f"`weights` must be 'metropolis' or 'metropolis_hastings'; got {weights!r}.")


def _sparse_format(fmt: str, n: int, num_directed_edges: int) -> bool:
    """True for dense output."""
    if fmt not in ("auto", "dense", "neighbors"):
        raise ValueError(f"`format` must be 'auto', 'dense' or 'neighbors'; got {fmt!r}.")
    if fmt == "auto":
        return not (n >= 64 and num_directed_edges <= 0.1 * n * n)
    return fmt == "dense"


def link_failures_on_the_fly(base_graph: Any, p: float, key: Any = 0, *, period: int | None = None,
                             weights: str = "metropolis_hastings", eps: float = 1e-6,
                             format: str = "auto", dtype: Any = jnp.float32) -> OnTheFlySchedule:
    """Random link failures drawn at each iteration (see :func:`~dgsgld.networks.link_failures`):
    each edge of ``base_graph`` is down independently with probability ``p``; the weights are
    recomputed on the surviving graph.

    Args:
        base_graph: networkx graph or ``(N, N)`` adjacency.
        p: failure probability in ``[0, 1]``. key: int seed or JAX key. period: ``P`` or ``None``.
        weights: ``"metropolis_hastings"`` (default, as the precomputed generator) or
            ``"metropolis"`` (eq. 4.1 with ``eps``).
        format: ``"auto"``, ``"dense"`` or ``"neighbors"`` (see the module docstring).

    Example:
        >>> import networkx as nx
        >>> s = link_failures_on_the_fly(nx.cycle_graph(6), p=0.3, key=0)
        >>> s.matrix_at(0).shape
        (6, 6)
    """
    base = as_adjacency(base_graph)
    if base.ndim != 2:
        raise ValueError(f"expected one (N, N) base graph; got shape {base.shape}.")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"`p` must lie in [0, 1]; got {p!r}.")
    n = base.shape[0]
    iu, ju = np.nonzero(np.triu(base, k=1))
    edge_id = np.full((n, n), iu.size, np.int64)
    edge_id[iu, ju] = edge_id[ju, iu] = np.arange(iu.size)
    deg = base.sum(axis=1)
    k_max = max(int(deg.max()), 1)
    nbr = np.tile(np.arange(n)[:, None], (1, k_max))
    slot_edge = np.full((n, k_max), iu.size, np.int64)
    rows, cols = np.nonzero(base)
    slot = np.arange(rows.size) - np.searchsorted(rows, rows)
    nbr[rows, slot] = cols
    slot_edge[rows, slot] = edge_id[rows, cols]
    dense = _sparse_format(format, n, rows.size)
    return _LinkFailures(
        _as_key(key), n, _check_period(period), dtype,
        jnp.asarray(np.stack([iu, ju], axis=1), jnp.int32), jnp.asarray(slot_edge, jnp.int32),
        jnp.asarray(nbr, jnp.int32), float(p), _weight_eps(weights, eps), dense,
    )


class _OnePeer(OnTheFlySchedule):
    levels: int = eqx.field(static=True)
    dense: bool = eqx.field(static=True)

    def _build(self, key, k):
        del key
        n = self.num_agents
        hop = jnp.left_shift(1, k % self.levels)
        i = jnp.arange(n)
        nbr = jnp.stack([(i + hop) % n, (i - hop) % n], axis=1)
        # Metropolis–Hastings on a 2-regular graph: 1/3 per peer; when both peers coincide
        # (hop = N/2) the single peer gets 1/2, split here over the two slots.
        w = jnp.where(2 * hop == n, 0.25, 1.0 / 3.0).astype(self.dtype)
        weights = jnp.full((n, 2), w, self.dtype)
        mixing = sparse.NeighborMixing(nbr.astype(jnp.int32), weights, 1.0 - 2.0 * weights[:, 0])
        return mixing.todense() if self.dense else mixing


def one_peer_exponential_on_the_fly(num_agents: int, *, format: str = "auto",
                                    dtype: Any = jnp.float32) -> OnTheFlySchedule:
    """The one-peer exponential graph of :func:`~dgsgld.networks.one_peer_exponential` built at
    each iteration: agent ``i`` linked to ``(i ± 2^τ) mod N``, ``τ = k mod log₂N``, weights
    ``1/3`` (``1/2`` when the two peers coincide). Deterministic: no key.

    Example:
        >>> s = one_peer_exponential_on_the_fly(8, format="dense")
        >>> float(s.matrix_at(0)[0, 1])
        0.3333333432674408
    """
    n = _positive_int(num_agents, "num_agents", 2)
    if n & (n - 1):
        raise ValueError(f"`num_agents` must be a power of two; got {n}.")
    levels = int(math.log2(n))
    dense = _sparse_format(format, n, 2 * n)
    return _OnePeer(jax.random.key(0), n, None, dtype, levels, dense)
