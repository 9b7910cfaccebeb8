"""Sparse mixing: ``W @ x`` in ``O(|E| d)`` instead of ``O(N² d)`` for large, sparse networks.

Two formats, both ``eqx.Module`` s that implement ``W @ x`` for ``x`` of shape ``(N, F)`` and
therefore work wherever a dense ``(N, N)`` mixing matrix does (the samplers only ever compute
``W @ x``):

* :class:`NeighborMixing` — padded neighbour lists ``(N, K)``, ``K`` the largest degree:
  ``(W x)_i = W_ii x_i + Σ_k w_ik x_{nbr_ik}``. Gathers only (no scatter), the fast format
  when degrees are similar (rings, grids, link failures, one-peer graphs).
* :class:`EdgeMixing` — an edge list ``(E,)`` summed with ``jax.ops.segment_sum``: memory
  ``O(|E|)`` whatever the degree distribution (a star, a hub-and-spoke network).

:class:`SparseSchedule` stacks ``P`` snapshots (padded to a common size) and gives
``W⁽ᵏ⁾ = snapshot[k % P]`` through ``matrix_at(k)``, the protocol :func:`dgsgld.sample` uses
for schedule objects. :func:`from_dense` converts a dense stack or a
:class:`~dgsgld.networks.Schedule`; :func:`auto` converts only when it pays off.

Convention as everywhere in dgsgld: ``x⁺ = W @ x``, ``W[i, j]`` the weight agent ``i`` puts on
agent ``j``. The weights are those of the dense matrix, so results equal the dense run up to
floating-point summation order (float32 rounding).

Automatic choice (:func:`auto`): sparse when the densest snapshot has at most
``max_density · N²`` nonzero off-diagonal weights (default 10 %) and ``N >= min_agents``
(default 1000). Below that size the dense run is faster: ``dgsgld.sample`` keeps chains last
with dense matrices, and sparse snapshots, whose gathers move the chain axis to the front, run
chains first (a ring of 200 agents: dense 0.54 s, sparse 1.1 s; of 2000 agents: dense 3.1 s,
sparse 2.5 s; ``benchmarks/``). A dense ``(N, N) @ (N, F)`` product runs at matrix-multiply
speed, about ten times the rate of the gather-and-add of the sparse formats, hence the 10 %. Neighbour lists are chosen unless the largest degree exceeds four times the
mean degree (then padding would waste more than the edge list's scatter costs).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _validation
from ._types import Array

__all__ = [
    "EdgeMixing",
    "NeighborMixing",
    "SparseSchedule",
    "auto",
    "density",
    "from_dense",
]


def _check_operand(x: Array, n: int) -> None:
    if x.ndim < 1 or x.shape[0] != n:
        raise ValueError(f"sparse mixing of {n} agents needs an operand (N, ...) with N = {n}; "
                         f"got shape {x.shape}.")


class _Snapshot(eqx.Module):
    """What both sparse formats share: the shape and dtype read from ``diagonal`` (``(N,)``)
    and ``weights``, which each format declares as fields."""

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

    def astype(self, dtype) -> NeighborMixing:
        return NeighborMixing(self.neighbors, self.weights.astype(dtype), self.diagonal.astype(dtype))

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

    def astype(self, dtype) -> EdgeMixing:
        return EdgeMixing(self.receivers, self.senders, self.weights.astype(dtype),
                          self.diagonal.astype(dtype))

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
        dense = jnp.zeros((n, n), self.weights.dtype).at[self.receivers, self.senders].add(self.weights)
        return dense + jnp.diag(self.diagonal)


class SparseSchedule(eqx.Module):
    """``P`` sparse snapshots used cyclically: ``matrix_at(k)`` is snapshot ``k % P``.

    Attributes:
        snapshots: a :class:`NeighborMixing` or :class:`EdgeMixing` whose leaves carry a leading
            ``P`` axis (all snapshots padded to the same ``K`` or ``E``).
    """

    snapshots: NeighborMixing | EdgeMixing

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
        return int(np.prod(s.neighbors.shape[1:])) if isinstance(s, NeighborMixing) else int(s.senders.shape[1])

    @property
    def dtype(self):
        return self.snapshots.weights.dtype

    def matrix_at(self, k) -> NeighborMixing | EdgeMixing:
        """``W⁽ᵏ⁾``; ``k`` may be traced."""
        return jax.tree.map(lambda leaf: leaf[k % self.period], self.snapshots)

    def todense(self) -> Array:
        """The ``(P, N, N)`` dense stack."""
        return jnp.stack([self.matrix_at(p).todense() for p in range(self.period)])


def _dense_stack(mixing: Any) -> np.ndarray:
    if hasattr(mixing, "matrix_at") and not hasattr(mixing, "matrices"):
        raise ValueError("`mixing` is generated on the fly (it has `matrix_at` but no `matrices`); "
                         "convert a precomputed (P, N, N) stack instead.")
    stack = np.asarray(getattr(mixing, "matrices", mixing))
    if stack.ndim == 2:
        stack = stack[None]
    _validation.check_mixing(stack, name="mixing")
    return stack


def density(mixing: Any) -> float:
    """Largest fraction of nonzero off-diagonal weights over the snapshots, in ``[0, 1)``."""
    stack = _dense_stack(mixing)
    n = stack.shape[-1]
    off = (stack != 0) & ~np.eye(n, dtype=bool)
    return float(off.sum(axis=(1, 2)).max() / (n * n))


def from_dense(mixing: Any, *, format: str = "auto", dtype: Any = None) -> SparseSchedule:
    """Sparse snapshots of a dense ``(P, N, N)`` stack, ``(N, N)`` matrix or ``Schedule``.

    Args:
        mixing: the dense matrices (checked: symmetric, nonnegative, doubly stochastic).
        format: ``"neighbors"``, ``"edges"`` or ``"auto"`` (neighbour lists unless the largest
            degree exceeds four times the mean degree).
        dtype: weight dtype (default: that of ``mixing``, float32 for NumPy float64 input).

    Returns:
        :class:`SparseSchedule` with the same weights; ``matrix_at(k) @ x`` equals
        ``stack[k % P] @ x`` up to summation order.

    Example:
        >>> import numpy as np
        >>> ring = np.array([[.5, .25, 0, .25], [.25, .5, .25, 0], [0, .25, .5, .25], [.25, 0, .25, .5]])
        >>> s = from_dense(ring)
        >>> bool(np.allclose(s.matrix_at(0) @ np.eye(4), ring))
        True
    """
    if format not in ("auto", "neighbors", "edges"):
        raise ValueError(f"`format` must be 'auto', 'neighbors' or 'edges'; got {format!r}.")
    stack = _dense_stack(mixing)
    if dtype is None:
        dtype = jnp.float32 if stack.dtype == np.float64 and not jax.config.jax_enable_x64 else stack.dtype
    period, n, _ = stack.shape
    off = (stack != 0) & ~np.eye(n, dtype=bool)
    degrees = off.sum(axis=2)                                       # (P, N)
    k_max = max(int(degrees.max()), 1)
    if format == "auto":
        mean = max(float(degrees.mean()), 1e-12)
        format = "edges" if k_max > 4 * mean else "neighbors"
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
                               jnp.asarray(diagonal, dtype))
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
                           jnp.asarray(diagonal, dtype))
    return SparseSchedule(snaps)


def auto(mixing: Any, *, max_density: float = 0.1, min_agents: int = 1000):
    """``mixing`` as it is, or :func:`from_dense` of it when sparse mixing pays off.

    Sparse when ``N >= min_agents`` and the densest snapshot has at most ``max_density · N²``
    nonzero off-diagonal weights (see the module docstring for why these defaults).
    Schedules generated on the fly (``matrix_at`` without ``matrices``) and sparse schedules
    are returned as they are.
    """
    if isinstance(mixing, SparseSchedule) or (
        hasattr(mixing, "matrix_at") and not hasattr(mixing, "matrices")
    ):
        return mixing
    stack = _dense_stack(mixing)
    if stack.shape[-1] >= min_agents and density(stack) <= max_density:
        return from_dense(stack)
    return mixing
