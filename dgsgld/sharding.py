"""Runs spread over several devices: chains sharded with ``jax.sharding``, agents with ``shard_map``.

**Chains across devices** (:func:`sample_sharded`): the chains of :func:`dgsgld.sample` are
independent, so their axis is split over a one-axis mesh (``NamedSharding``) and the compiler
partitions the whole run along it; nothing is exchanged between devices during the run.
Chain ``c`` draws from ``fold_in(key, c)`` whatever device it lands on, so every chain makes the
same draws as in the single-device run with the same key, and the results agree to
floating-point rounding: matrix products over a different number of chains per device may
round differently in the last bit (``~1e-7`` relative in float32, ``~1e-16`` in float64), as
they also do on one device between runs with different numbers of chains.

**Agents across devices** (:func:`sample_agent_sharded`): for networks or models too large
for one device, a decentralized sampler's ``N`` agents are split into blocks of ``N / D`` rows
with ``jax.shard_map``, and the sampler's own ``step`` runs on each block: its mixing matrix is a
:class:`RowBlock`, whose ``@`` all-gathers the agents' rows and multiplies the device's rows of
``W⁽ᵏ⁾``, and its potential an :class:`AgentRows`, the device's agents only. Each step a device
receives ``(N - N / D) F`` numbers per chain and per mixed quantity (``F`` the parameter size;
DIGing-SGLD mixes positions and trackers); the gradients stay local. The noise of the
single-device run is reproduced exactly by drawing the full ``(N, F)`` array on every device and
keeping the device's rows (``D``-fold redundant work on the noise, the price of equal draws).
Gathering is the simplest exchange and optimal for dense ``W``. A sparse schedule
(:class:`dgsgld.sparse.SparseSchedule`) is instead split into an :class:`ExchangePlan`, built
once on the host: per snapshot, which rows each device needs from each other device; its
:class:`HaloRows` receives only those, with one ``jax.lax.ppermute`` per device offset (a ring:
one row from each side instead of ``N - N / D``), and sums them in the snapshot format's own
order. Sparse snapshots generated on the fly (:class:`GatheredRows`) are all-gathered.

**Several processes** (hosts): :mod:`dgsgld.distributed`. The mesh of
:func:`sample_agent_sharded` may span processes (inputs are placed with :func:`place`).
:func:`sample_sharded` may not: :func:`dgsgld.sample` checks its inputs on the host, so across
processes each process runs its own block of chains (``dgsgld.distributed.chain_block``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

import equinox as eqx
import numpy as np

from . import _params, _random, _validation, sparse
from ._types import Array, PRNGKey, PyTree
from .potential import Potential
from ._mixing import MixingStack, abstract_matrix, as_mixing
from .run import CheckedNetwork
from .run import (Divergence, Output, Trace, _check_output, _first_bad_agent, _with_static,
                  chain_keys, sample)
from .samplers.base import SamplingAlgorithm

__all__ = ["AgentRows", "ExchangePlan", "GatheredRows", "HaloRows", "RowBlock", "agent_mesh",
           "chain_mesh", "exchange_plan", "place", "sample_agent_sharded", "sample_sharded",
           "shard_chains"]


def chain_mesh(num_devices: int | None = None, axis_name: str = "chains") -> Mesh:
    """A one-axis mesh over the first ``num_devices`` devices (default: all)."""
    n = jax.device_count() if num_devices is None else int(num_devices)
    if not 1 <= n <= jax.device_count():
        raise ValueError(f"`num_devices` must be between 1 and {jax.device_count()}; got {num_devices!r}.")
    return jax.make_mesh((n,), (axis_name,), axis_types=(AxisType.Auto,), devices=jax.devices()[:n])


def _auto(mesh: Mesh) -> Mesh:
    """The mesh with automatic (compiler-propagated) sharding on every axis: the runner's
    ``vmap`` over chains mixes sharded positions with replicated keys, which explicit-sharding
    meshes reject."""
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def _axis(mesh: Mesh, axis_name: str | None) -> str:
    if axis_name is None:
        if len(mesh.axis_names) != 1:
            raise ValueError(f"give `axis_name`: the mesh has axes {mesh.axis_names}.")
        return mesh.axis_names[0]
    if axis_name not in mesh.axis_names:
        raise ValueError(f"`axis_name` {axis_name!r} is not an axis of the mesh {mesh.axis_names}.")
    return axis_name


def shard_chains(tree: Any, mesh: Mesh, axis_name: str | None = None) -> Any:
    """Place every array leaf's leading (chain) axis across the mesh axis; scalars are
    replicated; non-array leaves (an ``eqx.nn.MLP``'s activation) are static and kept as they are.

    Raises:
        ValueError: if the number of chains is not a multiple of the number of devices.
    """
    axis = _axis(mesh, axis_name)
    size = mesh.shape[axis]

    def place(leaf):
        if not eqx.is_array_like(leaf):
            return leaf
        leaf = jnp.asarray(leaf)
        if leaf.ndim == 0:
            return jax.device_put(leaf, NamedSharding(mesh, PartitionSpec()))
        if leaf.shape[0] % size:
            raise ValueError(
                f"the number of chains ({leaf.shape[0]}) must be a multiple of the number of "
                f"devices on mesh axis {axis!r} ({size})."
            )
        return jax.device_put(leaf, NamedSharding(mesh, PartitionSpec(axis)))

    return jax.tree.map(place, tree)


def sample_sharded(algorithm, potential: Potential, mixing, init, key, num_steps: int, *,
                   mesh: Mesh | None = None, axis_name: str | None = None, **kwargs) -> Trace:
    """:func:`dgsgld.sample` with the chains split across the devices of ``mesh``.

    Args:
        algorithm, potential, mixing, key, num_steps, **kwargs: as for :func:`dgsgld.sample`.
        init: ``(num_chains, N, ...)`` positions or a previous ``trace.state``; the number of
            chains must be a multiple of the number of devices. One process only (across
            processes: :func:`dgsgld.distributed.chain_block`).
        mesh: a one-axis mesh (default :func:`chain_mesh` over all devices).
        axis_name: the mesh axis of the chains (default: the mesh's only axis).

    Returns:
        The :class:`~dgsgld.Trace` of :func:`dgsgld.sample`, its chain axes sharded over the mesh;
        equal to the single-device run for the same key up to rounding (module docstring).
    """
    mesh = chain_mesh() if mesh is None else _auto(mesh)
    axis = _axis(mesh, axis_name)
    replicated = NamedSharding(mesh, PartitionSpec())
    # A previous trace.state shards the same way: its iteration counter is one number per chain.
    init = shard_chains(init, mesh, axis)
    potential = jax.device_put(potential, replicated)
    if mixing is not None:
        mixing = jax.device_put(as_mixing(mixing), replicated)
    key = jax.device_put(key, replicated)
    return sample(algorithm, potential, mixing, init, key, num_steps, **kwargs)


# ------------------------------------------------------------------------ agents across devices


def agent_mesh(num_devices: int | None = None, axis_name: str = "agents") -> Mesh:
    """A one-axis mesh for :func:`sample_agent_sharded`."""
    return chain_mesh(num_devices, axis_name)


class RowBlock(eqx.Module):
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

    def __matmul__(self, local: Array) -> Array:
        """``(R, k)`` local rows -> ``(R, k)`` rows of ``W @ x``."""
        return self.rows @ jax.lax.all_gather(local, self.axis_name, axis=0, tiled=True)


class AgentRows(eqx.Module):
    """``potential`` restricted to agents ``first, ..., first + R - 1`` whose data it holds:
    ``grad`` gives those rows of ``potential.grad(all positions, key)`` (same draws)."""

    potential: Potential
    first: Array

    def grad(self, positions: PyTree, key: PRNGKey) -> PyTree:
        pot, leaf = self.potential, jax.tree.leaves(positions)[0]
        counts, weights = pot._counts_weights(pot.mask, leaf.shape[0], leaf.dtype)
        return pot.grad_rows(positions, pot.data, counts, weights, key, self.first)


class GatheredRows(eqx.Module):
    """This device's rows of a sparse ``W⁽ᵏ⁾`` generated on the fly (its neighbour pattern is
    unknown before the step): ``block @ x_local`` all-gathers ``x`` as :class:`RowBlock` does,
    applies the whole snapshot and keeps the device's rows, the single-device arithmetic.

    Attributes:
        matrix: the snapshot (``dgsgld.sparse`` format), ``N`` rows.
        first: the device's first agent; ``size``: its number of agents ``R`` (static).
        axis_name: the mesh axis the agents are split over.
    """

    matrix: Any
    first: Array
    size: int = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)

    def astype(self, dtype) -> "GatheredRows":
        return GatheredRows(self.matrix.astype(dtype), self.first, self.size, self.axis_name)

    def __matmul__(self, local: Array) -> Array:
        """``(R, k)`` local rows -> ``(R, k)`` rows of ``W @ x``."""
        full = jax.lax.all_gather(local, self.axis_name, axis=0, tiled=True)
        return jax.lax.dynamic_slice_in_dim(self.matrix @ full, self.first, self.size)


class HaloRows(eqx.Module):
    """This device's rows of a sparse ``W⁽ᵏ⁾`` with a neighbour exchange: ``block @ x_local``
    receives, with one ``jax.lax.ppermute`` per device offset, only the rows of other devices'
    agents that this device's agents listen to, and returns the device's rows of ``W @ x``.

    Built by :meth:`ExchangePlan.rows`. Row ``i``'s neighbours index the concatenation
    ``[x_local (R); rows received from offset offsets[0] (M_0); ...]``.

    Attributes:
        neighbors: ``(R, K)`` int32 positions in that concatenation.
        weights: ``(R, K)``, ``W[i, neighbour]``; ``diagonal``: ``(R,)``, ``W[i, i]``.
        sends: per offset ``o``, ``(M_o,)`` int32: the local rows device ``+ o`` needs.
        offsets: device offsets ``o`` (static): send to ``d + o``, receive from ``d - o``.
        num_devices, axis_name: the mesh axis (static).
        ordered: sum the ``K`` terms one after another, as :class:`~dgsgld.sparse.
            CirculantMixing` does, instead of one contraction as ``NeighborMixing``: the
            single-device arithmetic of the snapshot's format.
    """

    neighbors: Array
    weights: Array
    diagonal: Array
    sends: tuple[Array, ...]
    offsets: tuple[int, ...] = eqx.field(static=True)
    num_devices: int = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)
    ordered: bool = eqx.field(static=True)

    def astype(self, dtype) -> "HaloRows":
        return eqx.tree_at(lambda h: (h.weights, h.diagonal), self,
                           (self.weights.astype(dtype), self.diagonal.astype(dtype)))

    def __matmul__(self, local: Array) -> Array:
        """``(R, k)`` local rows -> ``(R, k)`` rows of ``W @ x``."""
        parts = [local]
        for send, offset in zip(self.sends, self.offsets):
            pairs = [(j, (j + offset) % self.num_devices) for j in range(self.num_devices)]
            parts.append(jax.lax.ppermute(local[send], self.axis_name, pairs))
        gathered = jnp.concatenate(parts)[self.neighbors]                  # (R, K, k)
        out = self.diagonal[:, None] * local
        if not self.ordered:
            return out + jnp.einsum("nk,nkf->nf", self.weights, gathered)
        for k in range(self.neighbors.shape[1]):
            out = out + self.weights[:, k, None] * gathered[:, k]
        return out


class ExchangePlan(eqx.Module):
    """Who sends which rows to whom, for every snapshot of a sparse schedule whose agents are
    split in contiguous blocks over ``D`` devices: the tables of :class:`HaloRows`, built once
    on the host (:func:`exchange_plan`). Leaves carry a leading ``P`` (snapshot) axis; rows
    and sends an agent or device axis that ``shard_map`` splits.

    Attributes:
        neighbors, weights: ``(P, N, K)``; ``diagonal``: ``(P, N)`` (as :class:`HaloRows`, per
            snapshot, rows of all devices stacked).
        sends: per offset, ``(P, D, M_o)`` int32, indexed by the sending device.
        offsets, ordered: as :class:`HaloRows`.
    """

    neighbors: Array
    weights: Array
    diagonal: Array
    sends: tuple[Array, ...]
    offsets: tuple[int, ...] = eqx.field(static=True)
    ordered: bool = eqx.field(static=True)

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
        return HaloRows(self.neighbors[p], self.weights[p], self.diagonal[p],
                        tuple(s[p, 0] for s in self.sends), self.offsets, num_devices,
                        axis_name, self.ordered)


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


def exchange_plan(schedule: sparse.SparseSchedule, num_devices: int) -> ExchangePlan:
    """The :class:`ExchangePlan` of ``schedule`` (concrete snapshots) with its ``N`` agents in
    ``num_devices`` contiguous blocks.

    Device ``d`` needs, from device ``e``, the rows of ``e``'s agents that appear in the
    neighbour lists of ``d``'s agents; they travel at offset ``o = (d - e) mod D``, padded to
    the most any device needs at that offset in any snapshot (``M_o`` rows; fixed shapes).

    Raises:
        ValueError: if ``N`` is not a multiple of ``num_devices``.
    """
    nbr, wts, diag, ordered = _neighbour_lists(schedule)
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
    return ExchangePlan(jnp.asarray(local), jnp.asarray(wts), jnp.asarray(diag),
                        tuple(jnp.asarray(s) for s in sends), offsets, ordered)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def place(tree: PyTree, mesh: Mesh, specs: PyTree) -> PyTree:
    """Every leaf as a global array on ``mesh`` with its ``PartitionSpec`` from ``specs``.

    Arrays already spread over several processes are kept as they are (e.g. data built with
    ``jax.make_array_from_process_local_data``); any other leaf must hold the whole value on
    every process, which each process cuts to its devices' part (works on one host and many).
    """

    def one(leaf, spec):
        if _is_key(leaf):
            data = one(jax.random.key_data(leaf), spec)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return leaf
        value = np.asarray(leaf)
        return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec),
                                            lambda index: value[index])

    return jax.tree.map(one, tree, specs)


def _agent_specs(tree: PyTree, num_agents: int, axis: str, agent_axis: int) -> PyTree:
    """``PartitionSpec`` s splitting axis ``agent_axis`` of leaves that have ``num_agents``
    there; other leaves (per-chain counters, tables) replicated."""

    def one(leaf):
        shape = jnp.shape(leaf)
        if len(shape) > agent_axis and shape[agent_axis] == num_agents:
            return PartitionSpec(*([None] * agent_axis), axis)
        return PartitionSpec()

    return jax.tree.map(one, tree)


def sample_agent_sharded(algorithm, potential: Potential, mixing, init, key, num_steps: int, *,
                         mesh: Mesh | None = None, axis_name: str | None = None,
                         output: Output = Output(), chain_offset: int = 0,
                         allow_disconnected: bool = False) -> Trace:
    """A decentralized sampler with its agents split across the devices of ``mesh``.

    Runs the sampler's own ``init``/``step`` inside ``jax.shard_map`` with a
    :class:`RowBlock` as mixing matrix and an :class:`AgentRows` potential: each device holds
    and differentiates only its agents' data, and the mixing is the only exchange. Same keys and
    draws as :func:`dgsgld.sample` (chain ``c`` uses ``fold_in(key, chain_offset + c)``, step
    ``k`` ``fold_in(run_key, k)``; each device keeps its rows of the whole network's noise), so
    the results equal the single-device run's up to rounding of the distributed products. The
    mesh may span several processes (:mod:`dgsgld.distributed`).

    Args:
        algorithm: a decentralized sampler (``dgsgld.diging_sgld(...)``, ``de_sgld``, ...).
        potential: the agents' potentials; ``N`` must be a multiple of the number of devices.
            Its data may be a global array holding on each process only that process's agents
            (:func:`dgsgld.distributed.agent_potential`).
        mixing: a dense ``(P, N, N)`` stack, ``(N, N)`` matrix or schedule with ``.matrices``
            (rows split over the devices, all rows gathered each step); a
            :class:`dgsgld.sparse.SparseSchedule` (neighbour exchange: :func:`exchange_plan`);
            or an on-the-fly schedule whose ``matrix_at(k)`` is a dense ``(N, N)`` array or a
            sparse snapshot (computed whole on every device, rows gathered).
        init: positions ``(num_chains, N, *param_shape)`` (leaves of a pytree), or the
            ``state`` of an earlier call's trace to continue it.
        key, num_steps: as for :func:`dgsgld.sample`.
        mesh: a one-axis mesh (default :func:`agent_mesh` over all devices).
        axis_name: its axis (default: the only one).
        output: what to keep, as for :func:`dgsgld.sample`; here every iteration's positions
            or none (``Output(positions=False)``): other options are refused.
        chain_offset: global index of the first chain (a block of chains run elsewhere).
        allow_disconnected: run a dense stack that is not jointly connected over its period
            (refused by default, as by :func:`dgsgld.sample`).

    Returns:
        A :class:`~dgsgld.Trace`: ``positions`` leaves ``(num_chains, num_steps + 1, N, ...)``
        (``None`` with ``Output(positions=False)``), the final ``state``, both split along the agent
        axis, and ``divergence`` (first non-finite iteration and agent per chain).
    """
    if not isinstance(algorithm, SamplingAlgorithm) or not algorithm.decentralized:
        raise ValueError("`algorithm` must be a decentralized sampler such as "
                         f"dgsgld.diging_sgld(...); got {type(algorithm).__name__}.")
    if not isinstance(potential, Potential):
        raise ValueError(f"`potential` must be a dgsgld.Potential; got {type(potential).__name__}.")
    _validation.check_key(key)
    num_steps = _validation.check_positive_int(num_steps, name="num_steps")
    output = _check_output(output, num_steps)
    unsupported = [f"{name}={getattr(output, name)!r}" for name in ("thin", "burn_in", "trace_fn",
                   "ensemble_fn") if getattr(output, name) != Output._field_defaults[name]]
    if unsupported:
        raise ValueError(f"`output` of sample_agent_sharded keeps positions only; got "
                         f"{', '.join(unsupported)}. Thin or summarise the returned positions.")
    if isinstance(chain_offset, bool) or not isinstance(chain_offset, (int, np.integer)) \
            or chain_offset < 0:
        raise ValueError(f"`chain_offset` must be a non-negative int; got {chain_offset!r}.")
    mesh = agent_mesh() if mesh is None else _auto(mesh)
    axis = _axis(mesh, axis_name)
    devices = mesh.shape[axis]
    n = potential.num_agents
    if n % devices:
        raise ValueError(f"the number of agents ({n}) must be a multiple of the number of devices "
                         f"on mesh axis {axis!r} ({devices}).")
    resume = isinstance(init, tuple) and hasattr(init, "_fields") and hasattr(init, "count")
    # Static leaves (an eqx.nn.MLP's activation) stay out of the loop, as in dgsgld.sample.
    positions, static = _params.split_static(init.position if resume else init)
    if static is not None:
        init = init._replace(position=positions) if resume else positions
        potential = _params.potential_on_arrays(potential, static)
    shapes = [jnp.shape(leaf) for leaf in jax.tree.leaves(positions)]
    if not shapes or any(len(s) < 2 or s[1] != n for s in shapes) or len({s[0] for s in shapes}) != 1:
        raise ValueError(f"`init` leaves must be (num_chains, {n}, *param_shape); got shapes "
                         f"{shapes}.")
    # A CheckedNetwork's connectivity was checked when it was built: as dgsgld.sample does,
    # run it without checking again.
    prechecked = isinstance(mixing, CheckedNetwork)
    if prechecked:
        mixing = mixing.mixing
    stack = as_mixing(mixing)
    if not hasattr(stack, "matrix_at"):
        raise ValueError("`mixing` must be a mixing stack or schedule; got "
                         f"{type(mixing).__name__}.")
    if not (prechecked or allow_disconnected) and _validation.is_concrete_tree(stack):
        from .networks.validation import check_joint_connectivity

        check_joint_connectivity(stack, name="mixing")  # as dgsgld.sample does
    w0 = abstract_matrix(stack)
    if getattr(w0, "shape", None) != (n, n):
        raise ValueError(f"`mixing` must hold ({n}, {n}) matrices; got {getattr(w0, 'shape', w0)}.")
    if isinstance(stack, MixingStack):  # dense: its rows are split over the devices
        stack = stack.matrices
    elif isinstance(stack, sparse.SparseSchedule):  # stored snapshots: a neighbour exchange
        if not _validation.is_concrete_tree(stack):
            raise ValueError("`mixing`: a sparse schedule's snapshots must be concrete (not "
                             "traced) to plan the neighbour exchange.")
        stack = exchange_plan(stack, devices)
    key = _random.fast_key(key)  # the runner's key implementation: the same numbers, faster
    impl = jax.random.key_impl(key) if _is_key(key) else None
    key_data = key if impl is None else jax.random.key_data(key)
    specs = _agent_in_specs(potential, stack, init, axis)
    args = place((init, stack, potential, key_data), mesh, specs)
    kept, final, div = _agent_run(algorithm, *args, mesh=mesh, axis=axis, resume=resume,
                                  impl=impl, num_steps=num_steps, chain_offset=int(chain_offset),
                                  store_positions=output.stores_positions)
    return _with_static(Trace(kept, None, None, final, div), static)


def _keys(key_data, impl):
    return key_data if impl is None else jax.random.wrap_key_data(key_data, impl=impl)


def _agent_in_specs(potential, stack, init, axis):
    """``PartitionSpec`` s of ``(init, mixing, potential, key)``: agent axes split, the rest
    (counters, key, mini-batch tables) replicated."""
    n = potential.num_agents
    pot_specs = jax.tree_util.tree_map_with_path(
        lambda path, _: PartitionSpec(axis) if path[0].name in ("data", "mask") else PartitionSpec(),
        potential)
    if hasattr(stack, "matrix_at"):     # generated on the fly: whole on every device
        mix_specs = jax.tree.map(lambda _: PartitionSpec(), stack)
    else:                               # dense rows, or an ExchangePlan's per-device tables
        mix_specs = jax.tree.map(lambda _: PartitionSpec(None, axis), stack)
    return _agent_specs(init, n, axis, 1), mix_specs, pot_specs, PartitionSpec()


@eqx.filter_jit
def _agent_run(algorithm, init, stack, potential, key_data, *, mesh, axis, resume, impl,
               num_steps, chain_offset, store_positions):
    """The compiled agent-sharded run (cached per configuration and shapes)."""
    n, devices = potential.num_agents, mesh.shape[axis]
    block = n // devices
    on_the_fly = hasattr(stack, "matrix_at")
    positions = init.position if resume else init
    num_chains = jax.tree.leaves(positions)[0].shape[0]

    def per_device(state0, stack_rows, potential, key_data):
        run_key = key_data if impl is None else jax.random.wrap_key_data(key_data, impl=impl)
        first = jax.lax.axis_index(axis) * block
        local = AgentRows(potential, first)
        split = jax.vmap(jax.random.split)(chain_keys(run_key, num_chains, chain_offset))
        init_keys, run_keys = split[:, 0], split[:, 1]
        states = state0 if resume else jax.vmap(algorithm.init, (0, None, 0))(
            state0, local, init_keys)

        def noise(k, position):
            # This device's rows of the whole network's noise, the draws of dgsgld.sample.
            full = jax.tree.map(lambda p: jnp.zeros((n, *p.shape[1:]), p.dtype), position)
            return jax.tree.map(lambda w: jax.lax.dynamic_slice_in_dim(w, first, block),
                                algorithm.noise(k, full))

        def one_step(carry, _):
            states, div = carry
            k = states.count[0]
            if isinstance(stack_rows, ExchangePlan):
                w = stack_rows.rows(k, axis, devices)
            elif on_the_fly:
                snapshot = stack_rows.matrix_at(k)
                w = (RowBlock(jax.lax.dynamic_slice_in_dim(snapshot, first, block), axis)
                     if isinstance(snapshot, jax.Array)
                     else GatheredRows(snapshot, first, block, axis))
            else:
                w = RowBlock(stack_rows[k % stack_rows.shape[0]], axis)
            keys = jax.vmap(jax.random.fold_in, (0, None))(run_keys, k)
            step = lambda kc, s: algorithm.step(kc, s, local, w, noise(kc, s.position))[0]  # noqa: E731
            states = jax.vmap(step)(keys, states)
            # First non-finite local agent of each chain; combined over devices after the
            # loop, so that the mixing stays the only exchange per step.
            bad, bad_agent = jax.vmap(lambda p: _first_bad_agent(p, True))(states.position)
            new = bad & (div.iteration < 0)
            div = Divergence(jnp.where(new, k + 1, div.iteration).astype(jnp.int32),
                             jnp.where(new, first + bad_agent, div.agent).astype(jnp.int32))
            return (states, div), (states.position if store_positions else None)

        none = jnp.full((num_chains,), -1, jnp.int32)
        (final, div), kept = jax.lax.scan(one_step, (states, Divergence(none, none)), None,
                                          length=num_steps)
        never = jnp.iinfo(jnp.int32).max
        iteration = jax.lax.pmin(jnp.where(div.iteration < 0, never, div.iteration), axis)
        agent = jax.lax.pmin(jnp.where(div.iteration == iteration, div.agent, n), axis)
        div = Divergence(jnp.where(iteration == never, -1, iteration),
                         jnp.where(iteration == never, -1, agent))
        if store_positions:
            kept = jax.tree.map(lambda a, b: jnp.moveaxis(jnp.concatenate([a[None], b]), 0, 1),
                                states.position, kept)
        return kept, final, div
    in_specs = _agent_in_specs(potential, stack, init, axis)
    state = init if resume else jax.eval_shape(
        jax.vmap(algorithm.init, (0, None, 0)), positions, potential,
        chain_keys(_keys(key_data, impl), num_chains))
    pos_specs = None
    if store_positions:
        pos_specs = jax.tree.map(lambda s: PartitionSpec(None, *s),
                                 _agent_specs(positions, n, axis, 1))
    fn = jax.shard_map(
        per_device, mesh=mesh, in_specs=in_specs,
        out_specs=(pos_specs, _agent_specs(state, n, axis, 1),
                   Divergence(PartitionSpec(), PartitionSpec())),
        check_vma=False,
    )
    return fn(init, stack, potential, key_data)
