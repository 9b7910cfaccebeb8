"""A network's rows on one device: the mixing operand of a sampler whose ``N`` agents are split
in contiguous blocks of ``R = N / D`` rows over ``D`` devices (a mesh axis inside
``jax.shard_map``, :class:`dgsgld.parallel.devices.Agents`).

Each operand's ``@`` takes the device's ``(R, k)`` rows of ``x`` and returns its rows of
``W⁽ᵏ⁾ @ x``, exchanging rows with the other devices over the mesh axis:

* :class:`RowBlock` — the device's rows of a dense ``W⁽ᵏ⁾``; all-gathers ``x`` (the simplest
  exchange, optimal for dense ``W``).
* :class:`HaloRows` — the device's rows of a stored sparse snapshot
  (:class:`dgsgld.networks.sparse.SparseSchedule`); receives only the rows its agents listen to,
  with one ``jax.lax.ppermute`` per device offset, as planned once on the host by
  :func:`exchange_plan` (:class:`ExchangePlan`), and sums them in the snapshot format's order.
* :class:`GatheredRows` — the device's rows of a sparse snapshot generated on the fly (its
  neighbour pattern is unknown before the step); all-gathers ``x``.

:func:`split_rows` turns a network into the operand whose agent axis the devices split (on the
host); :func:`rows_at` gives, inside ``shard_map``, the device's operand of ``W⁽ᵏ⁾``.
Each operand answers a communication channel's questions (the protocol of
:mod:`dgsgld.communication.operand`): its ``num_agents`` and ``own_rows``, and either
``gather`` (:class:`RowBlock`, :class:`GatheredRows`: a channel that needs the whole network,
over a dense stack, or over gossip on one-way links of an undirected schedule, runs on every
device and keeps the device's rows) or the questions of a neighbour exchange
(:class:`HaloRows`). A channel's public copies travel over an exchange of their own
(``exchange_plan(..., copies=True)``, :attr:`HaloRows.copies`). Dropped links and inactive
agents need no more than a device's rows: :meth:`HaloRows.without` rewrites them from draws
every device makes for all ``N`` agents, with :func:`~dgsgld.communication.links.cut_links`,
the rule the dense matrices use too (on a directed network, the dropped weight kept by its
sender from :attr:`HaloRows.sent`); a gossip round is drawn the same way from the snapshot's
links, which every device holds (``exchange_plan(..., support=True)``,
:meth:`HaloRows.gossip`).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import validation as _validation
from .._util.types import Array
from ..communication.links import cut_links
from ..networks import sparse
from ..networks._mixing import MixingStack, is_directed_network

__all__ = ["ExchangePlan", "GatheredRows", "HaloRows", "RowBlock", "copy_slots",
           "exchange_plan", "rows_at", "split_rows", "symmetric_links"]


class _DeviceRows(eqx.Module):
    """What the rows of every device answer a communication channel, besides ``num_agents``
    (:mod:`dgsgld.communication.operand`): the device's rows of arrays over all ``N`` agents,
    and arrays over the device's agents gathered from all devices, over the mesh axis
    ``axis_name`` of each subclass (a field declared there, so that each keeps its own field
    order)."""

    def own_rows(self, tree, num_agents: int):
        """The device's rows ``first : first + R`` (``R = N / D``) of every leaf of ``tree``
        with ``num_agents`` = ``N`` rows; other leaves as they are."""
        size = num_agents // jax.lax.axis_size(self.axis_name)
        first = jax.lax.axis_index(self.axis_name) * size
        return jax.tree.map(
            lambda x: jax.lax.dynamic_slice_in_dim(x, first, size)
            if jnp.ndim(x) and jnp.shape(x)[0] == num_agents else x, tree)

    def _gathered(self, tree):
        """Every leaf of ``tree`` with an agent axis (``(R, ...)``, ``ndim ≥ 1``) all-gathered
        to ``(N, ...)`` over the mesh axis, in agent order; scalars as they are."""
        return jax.tree.map(
            lambda x: jax.lax.all_gather(x, self.axis_name, axis=0, tiled=True)
            if jnp.ndim(x) else x, tree)


class RowBlock(_DeviceRows):
    """This device's block of rows ``W[first : first + R]`` of ``W⁽ᵏ⁾``, as the samplers'
    mixing operand: ``block @ x_local`` all-gathers the agents' rows of ``x`` over the mesh axis
    and returns the device's rows of ``W @ x``. The only communication of an agent-sharded step.

    Attributes:
        rows: ``(R, N)``.
        axis_name: the mesh axis the agents are split over (inside ``shard_map``).
    """

    rows: Array
    axis_name: str = eqx.field(static=True)

    def astype(self, dtype) -> "RowBlock":
        return RowBlock(self.rows.astype(dtype), self.axis_name)

    @property
    def num_agents(self) -> int:
        """``N``: the device's ``R`` rows times the devices of the mesh axis."""
        return self.rows.shape[0] * jax.lax.axis_size(self.axis_name)

    def gather(self, tree):
        """``(W⁽ᵏ⁾, tree)``: the whole snapshot ``(N, N)``, the blocks of all devices
        all-gathered, and every leaf of ``tree`` with an agent axis gathered to ``(N, ...)``:
        what a channel mixes on every device as on one."""
        return (jax.lax.all_gather(self.rows, self.axis_name, axis=0, tiled=True),
                self._gathered(tree))

    def __matmul__(self, local: Array) -> Array:
        """``(R, k)`` local rows -> ``(R, k)`` rows of ``W @ x``."""
        return self.rows @ jax.lax.all_gather(local, self.axis_name, axis=0, tiled=True)


class GatheredRows(_DeviceRows):
    """This device's rows of a sparse ``W⁽ᵏ⁾`` generated on the fly (its neighbour pattern is
    unknown before the step): ``block @ x_local`` all-gathers ``x`` as :class:`RowBlock` does,
    applies the whole snapshot and keeps the device's rows, the single-device arithmetic.

    Attributes:
        matrix: the snapshot (:mod:`dgsgld.networks.sparse` format), ``N`` rows.
        first: the device's first agent; ``size``: its number of agents ``R`` (static).
        axis_name: the mesh axis the agents are split over.
    """

    matrix: Any
    first: Array
    size: int = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)

    def astype(self, dtype) -> "GatheredRows":
        return GatheredRows(self.matrix.astype(dtype), self.first, self.size, self.axis_name)

    @property
    def num_agents(self) -> int:
        """``N``: the device's ``R`` rows times the devices of the mesh axis."""
        return self.size * jax.lax.axis_size(self.axis_name)

    def gather(self, tree):
        """``(W⁽ᵏ⁾, tree)``: the whole snapshot, which every device holds, and every leaf of
        ``tree`` with an agent axis gathered to ``(N, ...)``: what a channel mixes on every
        device as on one."""
        return self.matrix, self._gathered(tree)

    def __matmul__(self, local: Array) -> Array:
        """``(R, k)`` local rows -> ``(R, k)`` rows of ``W @ x``."""
        full = jax.lax.all_gather(local, self.axis_name, axis=0, tiled=True)
        return jax.lax.dynamic_slice_in_dim(self.matrix @ full, self.first, self.size)


class HaloRows(_DeviceRows):
    """This device's rows of a sparse ``W⁽ᵏ⁾`` with a neighbour exchange: ``block @ x_local``
    receives, with one ``jax.lax.ppermute`` per device offset, only the rows of other devices'
    agents that this device's agents listen to, and returns the device's rows of ``W @ x``.

    Built by :meth:`ExchangePlan.rows`. Row ``i``'s neighbours index the concatenation
    ``[x_local (R); rows received from offset offsets[0] (M_0); ...]``.

    Attributes:
        neighbors: ``(R, K)`` int32 positions in that concatenation.
        weights: ``(R, K)``, ``W[i, neighbour]``; ``diagonal``: ``(R,)``, ``W[i, i]``.
        sends: per offset ``o``, ``(M_o,)`` int32: the local rows device ``+ o`` needs.
        sources: ``(M,)`` int32, ``M = Σ_o M_o``: the agent (of all ``N``) of each received
            row, in the concatenation's order (padding: the sender's first agent).
        listeners: ``(R, L)`` int32, per agent ``j`` of the device its out-neighbours, the
            agents ``i ≠ j`` (of all ``N``) with ``W[i, j] ≠ 0``, padded with ``-1``:
            :meth:`out_degrees` counts them.
        sent: ``(R, L)``, the weight ``W[i, j]`` of each of those links (padding 0): what
            agent ``j`` gives out to each, which stays with ``j`` when the link is dropped on
            a directed network (:meth:`without` with ``keep="columns"``).
        offsets: device offsets ``o`` (static): send to ``d + o``, receive from ``d - o``.
        num_devices, axis_name: the mesh axis (static).
        ordered: sum the ``K`` terms one after another, as
            :class:`~dgsgld.networks.sparse.CirculantMixing` does, instead of one contraction
            as ``NeighborMixing``: the single-device arithmetic of the snapshot's format.
        copies: ``None``, or the exchange of public copies: a ``HaloRows`` of the period's
            union, row ``i``'s ``L`` neighbours every agent ``j ≠ i`` it ever listens to (its
            :attr:`neighbors` index ``[own rows; rows received]``), which carries every
            update of ``x̂_j`` to each device that keeps a copy of it.
        slots: ``(R, K)`` int32 with :attr:`copies`: where each of this snapshot's terms finds
            its agent among ``[x̂_i; copies of x̂ of the L union neighbours]`` (0: the agent
            itself, the padding).
        support: ``None``, or ``(N, K)`` int32, the whole snapshot's links on every device:
            row ``i``'s agents ``j ≠ i`` with ``W[i, j] ≠ 0`` (padding: ``i``), from which a
            gossip round is drawn for all ``N`` agents (:meth:`linked`, :meth:`gossip`).
    """

    neighbors: Array
    weights: Array
    diagonal: Array
    sends: tuple[Array, ...]
    sources: Array
    listeners: Array
    sent: Array
    offsets: tuple[int, ...] = eqx.field(static=True)
    num_devices: int = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)
    ordered: bool = eqx.field(static=True)
    copies: "HaloRows | None" = None
    slots: Array | None = None
    support: Array | None = None

    def astype(self, dtype) -> "HaloRows":
        return eqx.tree_at(lambda h: (h.weights, h.diagonal), self,
                           (self.weights.astype(dtype), self.diagonal.astype(dtype)))

    @property
    def num_agents(self) -> int:
        """``N``: the device's ``R`` rows times the devices of the mesh axis."""
        return self.diagonal.shape[0] * jax.lax.axis_size(self.axis_name)

    def out_degrees(self) -> Array:
        """``(R,)`` int32, the device's agents' out-degrees ``#{i ≠ j : W[i, j] ≠ 0}``."""
        return jnp.sum(self.listeners >= 0, axis=1, dtype=jnp.int32)

    def self_weights(self) -> Array:
        """``(R,)``, ``W[i, i]`` of the device's agents (:attr:`diagonal`)."""
        return self.diagonal

    def agents(self) -> tuple[Array, Array]:
        """``(own (R,), neighbours (R, K))`` int32: the device's agents and the agent (of all
        ``N``) behind each of their neighbour terms."""
        size = self.diagonal.shape[0]
        own = jax.lax.axis_index(self.axis_name) * size + jnp.arange(size, dtype=jnp.int32)
        return own, jnp.concatenate([own, self.sources])[self.neighbors]

    def without(self, link_up, held: Array | None = None, keep: str = "rows") -> "HaloRows":
        """These rows with the links ``j → i`` where ``link_up(i, j)`` is False dropped and
        the agents of ``held`` ``(R,)`` bool made ``e_i``, and :attr:`listeners` (the
        out-degrees) and :attr:`support` (the whole snapshot's links) cut alike. ``link_up``
        maps broadcastable int32 arrays of agents (of all ``N``) to bools; it must hold on
        ``i = j``. Every device knows the draws of all ``N`` agents, so the rows are
        rewritten without exchange.

        ``keep="rows"`` (:func:`~dgsgld.communication.links.cut_links`): a dropped weight
        moves to its row's diagonal (the receiver's), a held row is ``e_i``.
        ``keep="columns"`` (a directed network): it stays with its sender,
        ``W'[j, j] = W[j, j] + Σ_{i: dropped j → i} W[i, j]`` from :attr:`sent`, so columns
        keep their sums; a held agent keeps everything (``W'[j, j] = 1``) and ``link_up`` must
        be False on its out-links (the single-device rule,
        :func:`dgsgld.communication.drop_links`).

        The neighbour exchange still carries every row of the snapshot's support (its shapes
        are static): only the weights change, not what :meth:`receive` sends."""
        if keep not in ("rows", "columns"):
            raise ValueError(f"`keep` must be 'rows' or 'columns'; got {keep!r}.")
        own, agents = self.agents()
        linked = self.listeners >= 0
        listening = linked & link_up(jnp.maximum(self.listeners, 0), own[:, None])
        kept = link_up(own[:, None], agents)
        zero = jnp.zeros_like(self.sent)
        if keep == "rows":
            weights, diagonal = cut_links(self.weights, self.diagonal, kept, held)
        else:
            weights = jnp.where(kept, self.weights, jnp.zeros_like(self.weights))
            dropped = jnp.where(linked & ~listening, self.sent, zero)
            diagonal = self.diagonal + jnp.sum(dropped, axis=-1)
            if held is not None:
                diagonal = jnp.where(held, jnp.ones_like(diagonal), diagonal)
        out = eqx.tree_at(lambda h: (h.weights, h.diagonal, h.listeners, h.sent), self,
                          (weights, diagonal, jnp.where(listening, self.listeners, -1),
                           jnp.where(listening, self.sent, zero)))
        if self.support is None:
            return out
        every = jnp.arange(self.support.shape[0], dtype=self.support.dtype)[:, None]
        support = jnp.where(link_up(every, self.support), self.support, every)
        return eqx.tree_at(lambda h: h.support, out, support)

    def linked(self) -> Array:
        """``(N, N)`` bool, ``W[i, j] ≠ 0`` for ``i ≠ j``: the whole snapshot's links, as every
        device knows them from :attr:`support`.

        Raises:
            ValueError: without :attr:`support` (``exchange_plan(..., support=True)``).
        """
        if self.support is None:
            raise ValueError("these rows hold only the device's neighbourhoods; plan the "
                             "exchange with exchange_plan(..., support=True) to draw gossip.")
        n = self.support.shape[0]
        links = jnp.zeros((n, n), bool).at[jnp.arange(n)[:, None], self.support].set(True)
        return links & ~jnp.eye(n, dtype=bool)

    def gossip(self, choose) -> "HaloRows":
        """The device's rows of the gossip matrix of the links ``pick = choose(links)`` picks
        among the snapshot's (:meth:`linked`; ``pick`` ``(N, N)`` bool, ``pick[i, j]``: ``j``
        sends half its value to ``i``, drawn for all ``N`` agents by every device; symmetric
        on an undirected network): ``½`` on each picked link, the rest of each column on its
        diagonal (``1 − ½ · #{i : pick[i, j]}``), and :attr:`listeners` cut to the picked
        partners. The exchange still carries every row of the snapshot's support (static
        shapes); the terms not picked weigh 0."""
        pick = choose(self.linked())
        own, agents = self.agents()
        # A term counts once per agent: a row listing an agent twice keeps the first term.
        k = agents.shape[1]
        repeated = jnp.any((agents[:, :, None] == agents[:, None, :])
                           & jnp.tril(jnp.ones((k, k), bool), -1)[None], axis=2)
        picked = pick[own[:, None], agents] & (agents != own[:, None]) & ~repeated
        half = jnp.where(picked, jnp.asarray(0.5, self.weights.dtype),
                         jnp.zeros((), self.weights.dtype))
        picks = jnp.sum(pick[:, own] & (jnp.arange(pick.shape[0])[:, None] != own[None, :]),
                        axis=0)
        diagonal = 1 - jnp.asarray(0.5, self.weights.dtype) * picks.astype(self.weights.dtype)
        listening = (self.listeners >= 0) & pick[jnp.maximum(self.listeners, 0), own[:, None]]
        sent = jnp.where(listening, jnp.asarray(0.5, self.sent.dtype),
                         jnp.zeros((), self.sent.dtype))
        return eqx.tree_at(lambda h: (h.weights, h.diagonal, h.listeners, h.sent), self,
                           (half, diagonal, jnp.where(listening, self.listeners, -1), sent))

    def receive(self, local: Any) -> Any:
        """The rows other devices' agents send this device: every leaf of ``local``
        (``(R, ...)``) -> ``(M, ...)``, one ``ppermute`` per offset, agents :attr:`sources`."""
        def one(leaf):
            parts = []
            for send, offset in zip(self.sends, self.offsets):
                pairs = [(j, (j + offset) % self.num_devices) for j in range(self.num_devices)]
                parts.append(jax.lax.ppermute(leaf[send], self.axis_name, pairs))
            return jnp.concatenate(parts) if parts else leaf[:0]

        return jax.tree.map(one, local)

    def mix_payloads(self, local: Array, payload: Any, expand) -> Array:
        """``(R, k)`` rows of ``W @ q`` when only payloads travel: ``local`` the device's rows
        of ``q`` ``(R, k)``, ``payload`` theirs (leaves ``(R, ...)``, sent by :meth:`receive`),
        and ``expand(agents, received)`` the ``(M, k)`` rows of ``q`` of the senders ``agents``
        (``(M,)`` of all ``N``, :attr:`sources`) from their received payloads."""
        return self.combine(local, expand(self.sources, self.receive(payload)))

    def combine(self, local: Array, received: Array) -> Array:
        """``(R, k)`` rows of ``W @ x`` from the device's rows ``local`` ``(R, k)`` and the
        :meth:`receive` d rows ``(M, k)``, in the snapshot format's order."""
        return self.combine_terms(local, jnp.concatenate([local, received])[self.neighbors])

    def combine_terms(self, local: Array, gathered: Array) -> Array:
        """``(R, k)`` rows of ``W @ x`` from the device's rows ``local`` ``(R, k)`` and each
        row's ``K`` neighbour terms ``gathered`` ``(R, K, k)``, in the snapshot format's
        order."""
        out = self.diagonal[:, None] * local
        if not self.ordered:
            return out + jnp.einsum("nk,nkf->nf", self.weights, gathered)
        for k in range(self.neighbors.shape[1]):
            out = out + self.weights[:, k, None] * gathered[:, k]
        return out

    def __matmul__(self, local: Array) -> Array:
        """``(R, k)`` local rows -> ``(R, k)`` rows of ``W @ x``."""
        return self.combine(local, self.receive(local))


class ExchangePlan(eqx.Module):
    """Who sends which rows to whom, for every snapshot of a sparse schedule whose agents are
    split in contiguous blocks over ``D`` devices: the tables of :class:`HaloRows`, built once
    on the host (:func:`exchange_plan`). Leaves carry a leading ``P`` (snapshot) axis; rows
    and sends an agent or device axis that ``shard_map`` splits.

    Attributes:
        neighbors, weights: ``(P, N, K)``; ``diagonal``: ``(P, N)`` (as :class:`HaloRows`, per
            snapshot, rows of all devices stacked).
        sends: per offset, ``(P, D, M_o)`` int32, indexed by the sending device.
        sources: ``(P, D, M)`` int32, indexed by the receiving device; ``listeners``:
            ``(P, N, L)`` int32 and ``sent`` ``(P, N, L)`` (as :class:`HaloRows`).
        offsets, ordered: as :class:`HaloRows`.
        copies: ``None``, or the plan (``P = 1``) of the union of the period's snapshots,
            which carries the updates of public copies (:attr:`HaloRows.copies`).
        slots: ``(P, N, K)`` int32 with :attr:`copies` (:attr:`HaloRows.slots`).
        support: ``None``, or ``(P, N, K)`` int32, every snapshot's links
            (:attr:`HaloRows.support`), which every device holds whole.
    """

    neighbors: Array
    weights: Array
    diagonal: Array
    sends: tuple[Array, ...]
    sources: Array
    listeners: Array
    sent: Array
    offsets: tuple[int, ...] = eqx.field(static=True)
    ordered: bool = eqx.field(static=True)
    copies: "ExchangePlan | None" = None
    slots: Array | None = None
    support: Array | None = None

    @property
    def period(self) -> int:
        return self.diagonal.shape[0]

    @property
    def rows_received(self) -> int:
        """Rows each device receives per exchange (padded to the busiest snapshot and device)."""
        return sum(s.shape[-1] for s in self.sends)

    def rows(self, k, axis_name: str, num_devices: int) -> HaloRows:
        """:class:`HaloRows` of ``W⁽ᵏ⁾`` inside ``shard_map`` (this device's block of every
        table; ``k`` may be traced)."""
        p = k % self.period
        copies = None if self.copies is None else self.copies.rows(0, axis_name, num_devices)
        return HaloRows(self.neighbors[p], self.weights[p], self.diagonal[p],
                        tuple(s[p, 0] for s in self.sends), self.sources[p, 0],
                        self.listeners[p], self.sent[p], self.offsets, num_devices,
                        axis_name, self.ordered,
                        copies, None if self.slots is None else self.slots[p],
                        None if self.support is None else self.support[p])

    @property
    def copy_slots(self) -> int:
        """``L``, the copies of public copies each agent keeps (:attr:`copies`; 0 without)."""
        return 0 if self.copies is None else self.copies.neighbors.shape[-1]


def _neighbour_lists(schedule: sparse.SparseSchedule):
    """``(neighbors (P, N, K), weights (P, N, K), diagonal (P, N), ordered)`` of any sparse
    format, each row's terms in the order its format sums them (edge lists: sender order)."""
    snaps = jax.tree.map(np.asarray, schedule.snapshots)
    period, n = schedule.period, schedule.num_agents
    if isinstance(snaps, sparse.CirculantMixing):
        shifts = np.asarray(snaps.shifts, np.int64)
        nbr = (np.arange(n)[:, None] + shifts[None, :]) % n
        nbr = np.broadcast_to(nbr, (period, n, shifts.size))
        return nbr, np.repeat(snaps.weights[:, None, :], n, axis=1), snaps.diagonal, True
    if isinstance(snaps, sparse.NeighborMixing):
        return snaps.neighbors, snaps.weights, snaps.diagonal, False
    counts = np.stack([np.bincount(r, minlength=n) for r in snaps.receivers])      # (P, N)
    k_max = max(int(counts.max()), 1)
    nbr = np.tile(np.arange(n)[None, :, None], (period, 1, k_max))    # padding: self, weight 0
    wts = np.zeros((period, n, k_max), snaps.weights.dtype)
    for p in range(period):
        rows = snaps.receivers[p]
        slot = np.arange(rows.size) - np.searchsorted(rows, rows)
        nbr[p, rows, slot], wts[p, rows, slot] = snaps.senders[p], snaps.weights[p]
    return nbr, wts, snaps.diagonal, False


def exchange_plan(schedule: sparse.SparseSchedule, num_devices: int,
                  copies: bool = False, support: bool = False) -> ExchangePlan:
    """The :class:`ExchangePlan` of ``schedule`` (concrete snapshots) with its ``N`` agents in
    ``num_devices`` contiguous blocks.

    Device ``d`` needs, from device ``e``, the rows of ``e``'s agents that appear in the
    neighbour lists of ``d``'s agents; they travel at offset ``o = (d - e) mod D``, padded to
    the most any device needs at that offset in any snapshot (``M_o`` rows; fixed shapes).
    ``copies``: also plan the exchange of public copies (:attr:`ExchangePlan.copies`): every
    agent ``i`` keeps a copy of each agent ``j ≠ i`` in a neighbour list of ``i`` in some
    snapshot of the period. ``support``: also keep every snapshot's links whole on every
    device (:attr:`ExchangePlan.support`), to draw gossip rounds; as a gossip partner's row
    must be among those received, the links of an undirected schedule must be symmetric
    (:func:`symmetric_links`: a round sends both ways), while on a directed one
    (``network_kind="column_stochastic"``) an agent pushes to an out-neighbour, whose rows
    include it.

    Raises:
        ValueError: if ``N`` is not a multiple of ``num_devices``, or with ``support`` if an
            undirected snapshot's links are not symmetric.
    """
    nbr, wts, diag, ordered = _neighbour_lists(schedule)
    plan = _plan(nbr, wts, diag, ordered, num_devices)
    if support:
        if not is_directed_network(schedule) and not _symmetric(nbr, wts):
            raise ValueError("`schedule`: gossip over a neighbour exchange needs symmetric "
                             "links (W[i, j] != 0 iff W[j, i] != 0 in every snapshot).")
        own = np.arange(nbr.shape[1])[None, :, None]
        linked = np.where((wts != 0) & (nbr != own), nbr, own).astype(np.int32)
        plan = eqx.tree_at(lambda e: e.support, plan, jnp.asarray(linked),
                           is_leaf=lambda x: x is None)
    if not copies:
        return plan
    union, slots = _union(nbr)
    n = nbr.shape[1]
    ones = (union != np.arange(n)[:, None]).astype(wts.dtype)
    listened = _plan(union[None], ones[None], np.zeros((1, n), diag.dtype), False, num_devices)
    return eqx.tree_at(lambda e: (e.copies, e.slots), plan, (listened, jnp.asarray(slots)),
                       is_leaf=lambda x: x is None)


def symmetric_links(schedule: sparse.SparseSchedule) -> bool:
    """Whether every snapshot of ``schedule`` (concrete) has symmetric links,
    ``W[i, j] ≠ 0`` iff ``W[j, i] ≠ 0``: what a gossip round over its neighbour exchange
    needs (``exchange_plan(..., support=True)``)."""
    nbr, wts, _, _ = _neighbour_lists(schedule)
    return _symmetric(nbr, wts)


def _symmetric(nbr: np.ndarray, wts: np.ndarray) -> bool:
    """Whether the links ``j → i`` (``W[i, j] ≠ 0``, ``i ≠ j``) of neighbour lists ``(P, N, K)``
    are symmetric, from the sorted ``(i, j)`` and ``(j, i)`` pairs (no dense ``N × N``)."""
    period, n, _ = nbr.shape
    receiver = np.broadcast_to(np.arange(n, dtype=np.int64)[:, None], nbr.shape[1:])
    for p in range(period):
        link = (wts[p] != 0) & (nbr[p] != receiver)
        i, j = receiver[link], nbr[p][link].astype(np.int64)
        if not np.array_equal(np.unique(i * n + j), np.unique(j * n + i)):
            return False
    return True


def copy_slots(schedule: sparse.SparseSchedule) -> int:
    """``L``, the most agents ``j ≠ i`` one agent ``i`` listens to over the period of
    ``schedule`` (concrete): the copies of public copies it keeps over a neighbour exchange
    (:attr:`ExchangePlan.copy_slots`)."""
    return _union(_neighbour_lists(schedule)[0])[0].shape[1]


def _union(nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(union (N, L), slots (P, N, K))`` of neighbour lists ``nbr`` ``(P, N, K)``: per agent
    ``i`` the sorted agents ``j ≠ i`` of its lists over the period (padding: ``i``), and
    where each term of each snapshot finds its agent in ``[i; union[i]]`` (0: ``i``)."""
    period, n, _ = nbr.shape
    heard = [np.unique(nbr[:, i][nbr[:, i] != i]) for i in range(n)]
    width = max([h.size for h in heard] + [1])
    union = np.tile(np.arange(n)[:, None], (1, width))
    slots = np.zeros(nbr.shape, np.int32)
    for i, h in enumerate(heard):
        union[i, :h.size] = h
        other = nbr[:, i] != i
        slots[:, i][other] = 1 + np.searchsorted(h, nbr[:, i][other])
    return union, slots


def _plan(nbr, wts, diag, ordered, num_devices: int) -> ExchangePlan:
    """:func:`exchange_plan` of neighbour lists ``(P, N, K)`` (without copies)."""
    period, n, k = nbr.shape
    if n % num_devices:
        raise ValueError(f"the number of agents ({n}) must be a multiple of the number of "
                         f"devices ({num_devices}).")
    size = n // num_devices
    # needed[o][p][d]: sorted local rows of device (d - o) % D that device d needs at snapshot p.
    needed = [[[None] * num_devices for _ in range(period)] for _ in range(num_devices)]
    for p in range(period):
        for d in range(num_devices):
            cols = np.unique(nbr[p, d * size:(d + 1) * size])
            for o in range(1, num_devices):
                e = (d - o) % num_devices
                needed[o][p][d] = cols[(cols >= e * size) & (cols < (e + 1) * size)] - e * size
    widths = {o: max(len(needed[o][p][d]) for p in range(period) for d in range(num_devices))
              for o in range(1, num_devices)}
    offsets = tuple(o for o in range(1, num_devices) if widths[o])
    local = np.empty_like(nbr, dtype=np.int32)
    sends = []
    for o in offsets:
        send = np.zeros((period, num_devices, widths[o]), np.int32)
        for p in range(period):
            for d in range(num_devices):
                rows = needed[o][p][d]
                send[p, (d - o) % num_devices, :len(rows)] = rows
        sends.append(send)
    for p in range(period):
        for d in range(num_devices):
            block = nbr[p, d * size:(d + 1) * size]
            own = (block >= d * size) & (block < (d + 1) * size)
            position = np.where(own, block - d * size, -1)
            base = size
            for o in offsets:
                e = (d - o) % num_devices
                rows = needed[o][p][d]
                inside = (block >= e * size) & (block < (e + 1) * size)
                position[inside] = base + np.searchsorted(rows, block[inside] - e * size)
                base += widths[o]
            local[p, d * size:(d + 1) * size] = position
    # sources[p, d]: the agents of the rows device d receives, offset after offset.
    sources = np.zeros((period, num_devices, sum(widths[o] for o in offsets)), np.int32)
    for d in range(num_devices):
        senders = [((d - o) % num_devices) * size + send[:, (d - o) % num_devices]
                   for o, send in zip(offsets, sends)]
        if senders:
            sources[:, d] = np.concatenate(senders, axis=1)
    # listeners[p, j]: j's out-neighbours, the distinct rows i ≠ j with W[i, j] ≠ 0, sorted;
    # sent[p, j]: those weights W[i, j].
    receiver = np.broadcast_to(np.arange(n)[:, None], (n, k))
    pairs = []
    for p in range(period):
        link = (wts[p] != 0) & (nbr[p] != receiver)
        pair, first = np.unique(nbr[p][link] * n + receiver[link], return_index=True)
        pairs.append((pair // n, pair % n, wts[p][link][first]))    # sender-major order
    width = max([int(np.bincount(j, minlength=n).max()) for j, _, _ in pairs if j.size] + [0])
    listeners = np.full((period, n, width), -1, np.int32)
    sent = np.zeros((period, n, width), wts.dtype)
    for p, (j, i, w) in enumerate(pairs):
        slot = np.arange(j.size) - np.searchsorted(j, j)
        listeners[p, j, slot], sent[p, j, slot] = i, w
    return ExchangePlan(jnp.asarray(local), jnp.asarray(wts), jnp.asarray(diag),
                        tuple(jnp.asarray(s) for s in sends), jnp.asarray(sources),
                        jnp.asarray(listeners), jnp.asarray(sent), offsets, ordered)


def split_rows(network, num_devices: int, exchange: bool = True, copies: bool = False,
               support: bool = False):
    """``network`` as the operand whose agent axis (axis 1 of every leaf) ``shard_map`` splits
    over ``num_devices`` devices: the ``(P, N, N)`` matrices of a dense stack, the
    :class:`ExchangePlan` of a sparse schedule, or a schedule generated on the fly as it is
    (every device holds it whole).

    Args:
        network: a mixing with ``matrix_at`` (:func:`~dgsgld.networks._mixing.as_mixing`).
        num_devices: ``D``.
        exchange: plan a sparse schedule's neighbour exchange; ``False`` keeps it whole on
            every device (:class:`GatheredRows`, whose whole snapshot a communication channel
            mixes with, :meth:`GatheredRows.gather`).
        copies: with the exchange, plan that of public copies too (:func:`exchange_plan`).
        support: with the exchange, keep every snapshot's links on every device, to draw
            gossip rounds (:func:`exchange_plan`).

    Raises:
        ValueError: if ``network`` is a sparse schedule with traced snapshots.
    """
    if isinstance(network, MixingStack):
        return network.matrices
    if isinstance(network, sparse.SparseSchedule) and exchange:
        if not _validation.is_concrete_tree(network):
            raise ValueError("`mixing`: a sparse schedule's snapshots must be concrete (not "
                             "traced) to plan the neighbour exchange of placement=Agents.")
        return exchange_plan(network, num_devices, copies, support)
    return network


def rows_at(operand, k, first, size: int, axis_name: str, num_devices: int):
    """Inside ``shard_map``: the device's mixing operand of ``W⁽ᵏ⁾`` (``k`` may be traced).

    Args:
        operand: the device's block of :func:`split_rows`'s operand.
        first: the device's first agent; ``size``: its number of agents ``R``.
        axis_name, num_devices: the mesh axis the agents are split over.

    Returns:
        A :class:`RowBlock`, :class:`HaloRows` or :class:`GatheredRows`.
    """
    if isinstance(operand, ExchangePlan):
        return operand.rows(k, axis_name, num_devices)
    if hasattr(operand, "matrix_at"):
        snapshot = operand.matrix_at(k)
        if isinstance(snapshot, jax.Array):
            return RowBlock(jax.lax.dynamic_slice_in_dim(snapshot, first, size), axis_name)
        return GatheredRows(snapshot, first, size, axis_name)
    return RowBlock(operand[k % operand.shape[0]], axis_name)
