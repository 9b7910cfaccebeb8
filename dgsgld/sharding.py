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
for one device, DIGing-SGLD's ``N`` agents are split into blocks of ``N / D`` rows with
``jax.shard_map``. Each step, every device ``all_gather`` s the positions and the trackers
(``2 N F`` numbers received per device, ``F`` the parameter size) and multiplies its block of
rows of ``W⁽ᵏ⁾`` with them; the gradients stay local. The noise of the single-device run is
reproduced exactly by drawing the full ``(N, F)`` array on every device and keeping the
device's rows (``D``-fold redundant work on the noise, the price of bitwise-equal results).
Gathering is the simplest exchange and optimal for dense ``W``; for a sparse network a
neighbour exchange (``ppermute`` of boundary rows) would send less.

**Several hosts**: the same code runs on a multi-host cluster once every process has called
``jax.distributed.initialize``; ``jax.devices()`` then lists every host's devices::

    import jax, dgsgld
    from dgsgld import sharding
    jax.distributed.initialize(coordinator_address="10.0.0.1:1234",   # same on every host
                               num_processes=4, process_id=HOST_INDEX)
    mesh = jax.make_mesh((jax.device_count(),), ("chains",))
    # each host builds its contiguous slice of the initial positions (local_init):
    init = jax.make_array_from_process_local_data(
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("chains")), local_init)
    trace = sharding.sample_sharded(alg, potential, mixing, init, key, num_steps, mesh=mesh)
    # every host passes the same key; chain c uses fold_in(key, c) with c its global index.

Results are global ``jax.Array`` s sharded like the input; ``jax.experimental.multihost_utils
.process_allgather`` brings them to every host.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from . import _random, _tree
from .potential import Potential
from .run import Trace, as_mixing_stack, chain_keys, sample
from .samplers.base import step_keys
from .samplers.diging import DIGingSGLD, DIGingState

__all__ = ["agent_mesh", "chain_mesh", "sample_agent_sharded", "sample_sharded", "shard_chains"]


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
    """Place every leaf's leading (chain) axis across the mesh axis; scalars are replicated.

    Raises:
        ValueError: if the number of chains is not a multiple of the number of devices.
    """
    axis = _axis(mesh, axis_name)
    size = mesh.shape[axis]

    def place(leaf):
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
            chains must be a multiple of the number of devices. Arrays already sharded (e.g.
            built with ``jax.make_array_from_process_local_data`` on several hosts) are used
            as they are.
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
        mixing = mixing if hasattr(mixing, "matrix_at") else as_mixing_stack(mixing)
        mixing = jax.device_put(mixing, replicated)
    key = jax.device_put(key, replicated)
    return sample(algorithm, potential, mixing, init, key, num_steps, **kwargs)


# ------------------------------------------------------------------------ agents across devices


def agent_mesh(num_devices: int | None = None, axis_name: str = "agents") -> Mesh:
    """A one-axis mesh for :func:`sample_agent_sharded`."""
    return chain_mesh(num_devices, axis_name)


def sample_agent_sharded(algorithm: DIGingSGLD, potential: Potential, mixing, init, key,
                         num_steps: int, *, mesh: Mesh | None = None,
                         axis_name: str | None = None, store_positions: bool = True):
    """DIGing-SGLD with the agents split across devices (``shard_map``; see the module docstring).

    Same key scheme and same draws as :func:`dgsgld.sample` (chain ``c`` uses
    ``fold_in(key, c)``, step ``k`` of it ``fold_in(run_key, k)``), so the positions equal the
    single-device run's up to rounding of the distributed matrix products.

    Args:
        algorithm: a :class:`~dgsgld.DIGingSGLD` (``dgsgld.diging_sgld(step_size)``).
        potential: the agents' potentials; ``N`` must be a multiple of the number of devices.
        mixing: a dense ``(P, N, N)`` stack, ``(N, N)`` matrix or schedule with ``.matrices``.
        init: positions, an array ``(num_chains, N, *param_shape)``.
        key, num_steps: as for :func:`dgsgld.sample`.
        mesh: a one-axis mesh (default :func:`agent_mesh` over all devices).
        axis_name: its axis (default: the only one).
        store_positions: return the positions at every iteration.

    Returns:
        ``(positions, state)``: positions ``(num_chains, num_steps + 1, N, *param_shape)``
        (``None`` unless ``store_positions``) and the final :class:`~dgsgld.DIGingState`
        (leaves ``(num_chains, N, ...)``), both sharded along the agent axis.
    """
    if not isinstance(algorithm, DIGingSGLD):
        raise ValueError(f"`algorithm` must be dgsgld.diging_sgld(...); got {type(algorithm).__name__}.")
    if not isinstance(potential, Potential):
        raise ValueError(f"`potential` must be a dgsgld.Potential; got {type(potential).__name__}.")
    mesh = agent_mesh() if mesh is None else _auto(mesh)
    axis = _axis(mesh, axis_name)
    devices = mesh.shape[axis]
    n = potential.num_agents
    if n % devices:
        raise ValueError(f"the number of agents ({n}) must be a multiple of the number of devices "
                         f"on mesh axis {axis!r} ({devices}).")
    init = jnp.asarray(init)
    if init.ndim < 2 or init.shape[1] != n:
        raise ValueError(f"`init` must be (num_chains, {n}, *param_shape); got shape {init.shape}.")
    stack = as_mixing_stack(mixing)
    if hasattr(stack, "matrix_at") or stack.shape[1:] != (n, n):
        raise ValueError(f"`mixing` must be a dense (P, {n}, {n}) stack for agent sharding; got "
                         f"{getattr(stack, 'shape', type(stack).__name__)}.")
    num_steps = int(num_steps)
    block = n // devices
    spec_agents = PartitionSpec(None, axis)          # (chains, agents, ...)
    spec_rows = PartitionSpec(None, axis)            # (P, rows, N)
    spec_data = PartitionSpec(axis)                  # data leaves (N, n_local, ...)

    def local_grad(x_local, data_local, mask_local, grad_key, first_row):
        """Rows ``first_row ..`` of ``potential.grad(x, grad_key)`` from local data only."""
        counts, weights = potential._counts_weights(mask_local, block, x_local.dtype)
        return potential.grad_rows(x_local, data_local, counts, weights, grad_key, first_row)

    def per_device(init_local, stack_rows, data_local, mask_local, key):
        first_row = jax.lax.axis_index(axis) * block
        gather = lambda a: jax.lax.all_gather(a, axis, axis=0, tiled=True)
        num_chains = init_local.shape[0]
        split = jax.vmap(_random.split)(chain_keys(key, num_chains))
        init_keys, run_keys = split[:, 0], split[:, 1]

        def init_chain(x, k):
            g = local_grad(x, data_local, mask_local, k, first_row)
            return DIGingState(x, g, g, jnp.zeros((), jnp.int32))

        def step_chain(k_chain, state, w_rows):
            eta = _tree.resolve_step_size(algorithm.step_size, state.count)
            _, grad_key = step_keys(k_chain)
            # The whole network's noise (what dgsgld.sample draws), of which this device's rows.
            full = jnp.zeros((n, *state.position.shape[1:]), state.position.dtype)
            noise = jax.lax.dynamic_slice_in_dim(algorithm.noise(k_chain, full), first_row, block)
            x_all = gather(state.position).reshape(n, -1)
            mixed = (w_rows.astype(x_all.dtype) @ x_all).reshape(state.position.shape)
            position = _tree.langevin_update(mixed, state.tracker, noise, eta)
            grad = local_grad(position, data_local, mask_local, grad_key, first_row)
            y_all = gather(state.tracker).reshape(n, -1)
            mixed_y = (w_rows.astype(y_all.dtype) @ y_all).reshape(state.tracker.shape)
            tracker = mixed_y + (grad - state.grad)      # the engine's order of rounding
            return DIGingState(position, tracker, grad, state.count + 1)

        states = jax.vmap(init_chain)(init_local, init_keys)

        def body(states, _):
            k = states.count[0]
            keys = jax.vmap(_random.fold_in, (0, None))(run_keys, k)
            w_rows = stack_rows[k % stack_rows.shape[0]]
            states = jax.vmap(step_chain, (0, 0, None))(keys, states, w_rows)
            return states, (states.position if store_positions else None)

        final, kept = jax.lax.scan(body, states, None, length=num_steps)
        if store_positions:
            kept = jnp.concatenate([init_local[None], kept], axis=0)
            kept = jnp.moveaxis(kept, 0, 1)
        return kept, final

    state_spec = DIGingState(spec_agents, spec_agents, spec_agents, PartitionSpec())
    mask = potential.mask
    fn = jax.shard_map(
        per_device, mesh=mesh,
        in_specs=(spec_agents, spec_rows, spec_data,
                  PartitionSpec() if mask is None else spec_data, PartitionSpec()),
        out_specs=(PartitionSpec(None, None, axis) if store_positions else None, state_spec),
        check_vma=False,
    )
    positions, state = jax.jit(fn)(init, stack, potential.data, mask, key)
    return positions, state

