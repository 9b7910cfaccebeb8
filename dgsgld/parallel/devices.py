"""Runs spread over several devices: chains sharded with ``jax.sharding``, agents with
``shard_map``.

**Chains across devices** (``dgsgld.sample(..., placement=Chains(mesh))``): the chains of
:func:`dgsgld.sample` are independent, so their axis is split over a one-axis mesh
(``NamedSharding``) and the compiler partitions the whole run along it; nothing is exchanged between
devices during the run. Chain ``c`` draws from ``fold_in(key, c)`` whatever device it lands on, so
every chain makes the same draws as in the single-device run with the same key, and the results
agree to floating-point rounding: matrix products over a different number of chains per device may
round differently in the last bit (``~1e-7`` relative in float32, ``~1e-16`` in float64), as they
also do on one device between runs with different numbers of chains.

**Agents across devices** (``dgsgld.sample(..., placement=Agents(mesh))``): for networks or models
too large for one device, a decentralized sampler's ``N`` agents are split into blocks of ``N / D``
rows with ``jax.shard_map``, and the sampler's own ``step`` runs on each block: its mixing matrix is
the device's rows of ``W⁽ᵏ⁾`` (:mod:`dgsgld.parallel.rows`; for a dense ``W`` a ``RowBlock``, whose
``@`` all-gathers the agents' rows and multiplies the device's rows of ``W⁽ᵏ⁾``), and its
potential an :class:`AgentRows`, the device's agents only. Each step a device
receives ``(N - N / D) F`` numbers per chain and per mixed quantity (``F`` the parameter size;
DIGing-SGLD mixes positions and trackers); the gradients stay local. The noise of the
single-device run is reproduced exactly by drawing the full ``(N, F)`` array on every device and
keeping the device's rows (``D``-fold redundant work on the noise, the price of equal draws).
Gathering is the simplest exchange and optimal for dense ``W``. A sparse schedule
(:class:`dgsgld.networks.sparse.SparseSchedule`) is instead split into an ``ExchangePlan``,
built once on the host: per snapshot, which rows each device needs from each other device; its
``HaloRows`` receives only those, with one ``jax.lax.ppermute`` per device offset (a ring: one
row from each side instead of ``N - N / D``), and sums them in the snapshot format's own order.
Sparse snapshots generated on the fly (``GatheredRows``) are all-gathered. This module places
the run (meshes, ``shard_map``, partition specs); the row operands are the network's.

**Several processes** (hosts): :mod:`dgsgld.parallel.processes`. The mesh of ``Agents`` may span
processes (inputs are placed with :func:`place`). That of ``Chains`` may not: :func:`dgsgld.sample`
checks its inputs on the host, so across processes each process runs its own block of chains
(``dgsgld.parallel.processes.chain_block``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .._util.types import Array, PRNGKey, PyTree
from .._util.validation import is_concrete_tree
from ..model.potential import Potential
from ..networks.directed import is_directed_network
from ..networks.sparse import SparseSchedule
from ..runner.loop import Divergence, Prepared, Trace, _execute_here, _loop, chain_keys
from .rows import copy_slots, rows_at, split_rows, symmetric_links

__all__ = ["AgentBlock", "AgentRows", "Agents", "Chains", "agent_mesh", "chain_mesh", "place",
           "shard_chains"]


def chain_mesh(num_devices: int | None = None, axis_name: str = "chains") -> Mesh:
    """A one-axis mesh over the first ``num_devices`` devices (default: all)."""
    n = jax.device_count() if num_devices is None else int(num_devices)
    if not 1 <= n <= jax.device_count():
        raise ValueError(f"`num_devices` must be between 1 and {jax.device_count()}; "
                         f"got {num_devices!r}.")
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


def _replicate(tree: Any, mesh: Mesh) -> Any:
    """Every array leaf of ``tree`` whole on every device of ``mesh``."""
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda x: jax.device_put(x, replicated) if eqx.is_array(x) else x, tree)


@dataclasses.dataclass(frozen=True)
class Chains:
    """Placement (``dgsgld.sample(..., placement=Chains(mesh))``): the chains split over one
    axis of ``mesh``; the compiler partitions the loop along it and nothing is exchanged.

    Attributes:
        mesh: a mesh (default :func:`chain_mesh` over all devices); one process only (across
            processes: ``placement=Processes()``).
        axis_name: the mesh axis of the chains (default: the mesh's only axis).
    """

    mesh: Mesh | None = None
    axis_name: str | None = None

    def execute(self, prep: Prepared, every: int, token) -> Trace:
        mesh = chain_mesh() if self.mesh is None else _auto(self.mesh)
        axis = _axis(mesh, self.axis_name)
        # A previous trace.state shards the same way: its iteration counter is one number per
        # chain.
        prep = prep._replace(
            state=None if prep.state is None else shard_chains(prep.state, mesh, axis),
            positions=shard_chains(prep.positions, mesh, axis),
            potential=_replicate(prep.potential, mesh), stack=_replicate(prep.stack, mesh),
            key=_replicate(prep.key, mesh))
        return _execute_here(prep, every, token)


# ------------------------------------------------------------------------ agents across devices


def agent_mesh(num_devices: int | None = None, axis_name: str = "agents") -> Mesh:
    """A one-axis mesh for ``placement=Agents(mesh)``."""
    return chain_mesh(num_devices, axis_name)


class AgentRows(eqx.Module):
    """``potential`` restricted to agents ``first, ..., first + R - 1`` whose data (and mask)
    it holds: ``grad`` gives those rows of ``potential.grad(all positions, key)`` (same draws),
    ``full_grad`` and ``batch_indices`` those rows of the potential's; the gradient estimators
    read the rest of the potential (``data``, ``mask``, the user's functions) through it."""

    potential: Potential
    first: Array

    def __getattr__(self, name):
        # Settings and the user's functions of the whole potential (`num_agents` is N);
        # its `data` and `mask` hold this device's rows only.
        if name.startswith("__") or name in ("potential", "first"):
            raise AttributeError(name)
        return getattr(self.potential, name)

    def grad(self, positions: PyTree, key: PRNGKey) -> PyTree:
        pot, leaf = self.potential, jax.tree.leaves(positions)[0]
        counts, weights = pot._counts_weights(leaf.shape[0], leaf.dtype)
        return pot.grad_rows(positions, pot.data, counts, weights, key, self.first)

    def full_grad(self, positions: PyTree) -> PyTree:
        pot, leaf = self.potential, jax.tree.leaves(positions)[0]
        _, weights = pot._counts_weights(leaf.shape[0], leaf.dtype)
        one = jax.grad(pot._local_value)
        return jax.vmap(one, in_axes=(0, 0, 0, None))(positions, pot.data, weights, 1.0)

    def batch_indices(self, key: PRNGKey) -> Array:
        num_rows = jax.tree.leaves(self.potential.data)[0].shape[0]
        return self.potential.batch_indices(key, self.first, num_rows)


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


@dataclasses.dataclass(frozen=True)
class Agents:
    """Placement (``dgsgld.sample(..., placement=Agents(mesh))``): a decentralized sampler's
    ``N`` agents split in blocks of ``N / D`` over one axis of ``mesh`` (module docstring).

    The loop of :func:`dgsgld.sample` runs inside ``jax.shard_map`` on an :class:`AgentBlock`:
    each device holds and differentiates only its agents' data, and the mixing operand's
    product is the only exchange per step. ``trace_fn``/``ensemble_fn`` see the whole network
    (the state is gathered at kept iterations only); ``on_divergence="stop"`` adds one
    reduction per kept iteration. The mesh may span processes (:mod:`dgsgld.parallel.processes`).
    A communication channel makes the single-device draws and counts: over a sparse schedule's
    neighbour exchange (a directed one's too) its compressed payloads travel (inactive agents
    and dropped links rewrite each device's rows, as do gossip rounds, drawn from the
    schedule's links that every device holds; public copies are kept per agent for the
    agents it listens to, ``Channel.copy_slots``). Over a dense stack or a schedule generated
    on the fly, and for gossip on an undirected schedule whose links are not symmetric (a
    partner's row might not be received), it gathers its message and state and mixes over
    the whole snapshot on every device, keeping the device's rows.

    Attributes:
        mesh: a mesh (default :func:`agent_mesh` over all devices); ``N`` must be a multiple of
            its axis' size.
        axis_name: its axis (default: the only one).
    """

    mesh: Mesh | None = None
    axis_name: str | None = None

    def configure(self, algorithm, stack):
        """``algorithm`` as this placement runs it over ``stack`` (before the state is made or
        checked): a channel with public copies over a sparse schedule's neighbour exchange
        keeps, per agent, copies of the public copies of the agents it ever listens to
        (:meth:`~dgsgld.communication.Channel.for_exchange` of
        :func:`~dgsgld.parallel.rows.copy_slots`)."""
        channel = getattr(algorithm, "channel", None)
        if (channel is None or not channel.has_public_copies
                or not isinstance(stack, SparseSchedule) or not is_concrete_tree(stack)):
            return algorithm
        configured = channel.for_exchange(copy_slots(stack))
        if configured is channel:
            return algorithm
        return eqx.tree_at(lambda a: a.channel, algorithm, configured)

    def execute(self, prep: Prepared, every: int, token) -> Trace:
        algorithm, potential = prep.algorithm, prep.potential
        if not algorithm.decentralized:
            raise ValueError(
                f"placement=Agents splits the agents of a decentralized sampler; "
                f"{type(algorithm).__name__} is centralized (no agent axis): use "
                "placement=Chains(mesh) or None."
            )
        mesh = agent_mesh() if self.mesh is None else _auto(self.mesh)
        axis = _axis(mesh, self.axis_name)
        devices = mesh.shape[axis]
        n = potential.num_agents
        if n % devices:
            raise ValueError(f"the number of agents ({n}) must be a multiple of the number of "
                             f"devices on mesh axis {axis!r} ({devices}).")
        channel = getattr(algorithm, "channel", None)
        copies = channel is not None and channel.copy_slots > 0       # set by configure
        gossip, exchange = channel is not None and channel.gossip is not None, True
        if (gossip and isinstance(prep.stack, SparseSchedule) and is_concrete_tree(prep.stack)
                and not is_directed_network(prep.stack)):
            # A gossip partner's row must be among those received: on an undirected
            # schedule, symmetric links (otherwise the snapshot stays whole on every device).
            exchange = gossip = symmetric_links(prep.stack)
        stack = split_rows(prep.stack, devices, copies=copies, exchange=exchange,
                           support=gossip)
        if copies and getattr(stack, "copy_slots", None) != channel.copy_slots:
            raise ValueError(f"`channel.copy_slots` is {channel.copy_slots} but the network's "
                             f"agents listen to up to {getattr(stack, 'copy_slots', 0)}; let "
                             "dgsgld.sample set it (copy_slots=0).")
        key = prep.key
        impl = jax.random.key_impl(key) if _is_key(key) else None
        key_data = key if impl is None else jax.random.key_data(key)
        resume = prep.state is not None
        init = prep.state if resume else prep.positions
        specs = _agent_in_specs(potential, stack, init, axis)
        args = place((init, stack, potential, key_data), mesh, specs)
        out = prep.output
        return _agent_run(prep.algorithm, *args, np.int32(token), np.int32(prep.chain_offset),
                          mesh=mesh, axis=axis, resume=resume, impl=impl,
                          num_chains=prep.num_chains, num_steps=prep.num_steps, thin=out.thin,
                          trace_fn=out.trace_fn, ensemble_fn=out.ensemble_fn,
                          store_positions=out.stores_positions,
                          stop=prep.on_divergence == "stop", every=every,
                          threshold=np.float32(prep.divergence_threshold))


def _keys(key_data, impl):
    return key_data if impl is None else jax.random.wrap_key_data(key_data, impl=impl)


def _agent_in_specs(potential, stack, init, axis):
    """``PartitionSpec`` s of ``(init, mixing, potential, key)``: agent axes split, the rest
    (counters, key, mini-batch tables) replicated."""
    n = potential.num_agents
    pot_specs = jax.tree_util.tree_map_with_path(
        lambda path, _: PartitionSpec(axis) if path[0].name in ("data", "mask", "counts")
        else PartitionSpec(), potential)
    if hasattr(stack, "matrix_at"):     # generated on the fly: whole on every device
        mix_specs = jax.tree.map(lambda _: PartitionSpec(), stack)
    else:                               # dense rows, or an ExchangePlan's per-device tables
        def spec(path, _):              # but an ExchangePlan's links, whole on every device
            whole = bool(path) and getattr(path[0], "name", None) == "support"
            return PartitionSpec() if whole else PartitionSpec(None, axis)
        mix_specs = jax.tree_util.tree_map_with_path(spec, stack)
    return _agent_specs(init, n, axis, 1), mix_specs, pot_specs, PartitionSpec()


class AgentBlock(eqx.Module):
    """The network as one device's loop sees it inside ``shard_map``: its block of ``R``
    agents (the protocol of :class:`dgsgld.runner.loop.Whole`).

    Attributes:
        potential: an :class:`AgentRows`.
        stack: the device's block of :func:`dgsgld.parallel.rows.split_rows`'s operand: rows
            of a dense ``(P, R, N)`` stack, of an ``ExchangePlan``, or a schedule generated on
            the fly (whole).
        first: the device's first agent; ``size``: ``R``; ``num_agents``: ``N`` (static).
        agent_leaves: per state leaf, whether it has the agent axis (axis 1, static).
        axis_name, num_devices: the mesh axis (static).
    """

    potential: AgentRows
    stack: Any
    first: Array
    size: int = eqx.field(static=True)
    num_agents: int = eqx.field(static=True)
    agent_leaves: tuple = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)
    num_devices: int = eqx.field(static=True)

    def matrix_at(self, k):
        return rows_at(self.stack, k, self.first, self.size, self.axis_name, self.num_devices)

    def noise(self, algorithm, key, position):
        # This device's rows of the whole network's noise, the draws of one device.
        full = jax.tree.map(lambda p: jnp.zeros((self.num_agents, *p.shape[1:]), p.dtype),
                            position)
        return jax.tree.map(lambda w: jax.lax.dynamic_slice_in_dim(w, self.first, self.size),
                            algorithm.noise(key, full))

    def gather(self, states):
        leaves, tree = jax.tree.flatten(states)
        return jax.tree.unflatten(tree, [
            jax.lax.all_gather(x, self.axis_name, axis=1, tiled=True) if split else x
            for x, split in zip(leaves, self.agent_leaves)])

    def any(self, flag):
        return jax.lax.pmax(flag.astype(jnp.int32), self.axis_name) > 0

    def max(self, value):
        return jax.lax.pmax(value, self.axis_name)

    def divergence(self, div: Divergence) -> Divergence:
        """First non-finite iteration, then agent, over the devices (one exchange per run)."""
        never = jnp.iinfo(jnp.int32).max
        iteration = jax.lax.pmin(jnp.where(div.iteration < 0, never, div.iteration),
                                 self.axis_name)
        agent = jax.lax.pmin(jnp.where(div.iteration == iteration, div.agent, self.num_agents),
                             self.axis_name)
        return Divergence(jnp.where(iteration == never, -1, iteration),
                          jnp.where(iteration == never, -1, agent))


@eqx.filter_jit
def _agent_run(algorithm, init, stack, potential, key_data, token, chain_offset, *, mesh, axis,
               resume, impl, num_chains, num_steps, thin, trace_fn, ensemble_fn,
               store_positions, stop, every, threshold):
    """:func:`dgsgld.runner.loop._loop` on an :class:`AgentBlock` per device (compiled once per
    configuration and shapes)."""
    n, devices = potential.num_agents, mesh.shape[axis]
    block = n // devices
    state = init if resume else jax.eval_shape(
        jax.vmap(algorithm.init, (0, None, 0)), init, potential,
        chain_keys(_keys(key_data, impl), num_chains))
    state_specs = _agent_specs(state, n, axis, 1)
    agent_leaves = tuple(spec != PartitionSpec() for spec in jax.tree.leaves(
        state_specs, is_leaf=lambda x: isinstance(x, PartitionSpec)))

    def per_device(init, stack, potential, key_data, token, chain_offset):
        first = jax.lax.axis_index(axis) * block
        app = AgentBlock(AgentRows(potential, first), stack, first, block, n, agent_leaves,
                         axis, devices)
        return _loop(algorithm, app, init if resume else None, None if resume else init,
                     _keys(key_data, impl), num_chains, num_steps, thin, trace_fn, ensemble_fn,
                     store_positions, stop, every, token, False, chain_offset, threshold)

    replicated = PartitionSpec()
    out_specs = Trace(PartitionSpec(None, None, axis) if store_positions else None,
                      None if trace_fn is None else replicated,
                      None if ensemble_fn is None else replicated,
                      state_specs, Divergence(replicated, replicated))
    in_specs = (*_agent_in_specs(potential, stack, init, axis), replicated, replicated)
    fn = jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                       check_vma=False)
    return fn(init, stack, potential, key_data, token, chain_offset)
