"""Placements: where :func:`dgsgld.sample`'s one compiled loop runs. ``placement=Chains(...)``
shards the chains over devices, ``Agents(...)`` the agents (a device holds a block of agents
and exchanges rows with its neighbours), ``Processes(...)`` spans processes or hosts
(``jax.distributed``). Built on JAX's SPMD machinery (``jax.sharding``, ``shard_map``).
"""

from .devices import Agents as Agents
from .devices import Chains as Chains
from .devices import agent_mesh as agent_mesh
from .devices import chain_mesh as chain_mesh
from .devices import place as place
from .devices import shard_chains as shard_chains
from .processes import Processes as Processes
from .processes import agent_block as agent_block
from .processes import agent_potential as agent_potential
from .processes import chain_block as chain_block
from .processes import gather as gather
from .processes import initialize as initialize
from .processes import launch as launch
from .processes import load_process_state as load_process_state
from .processes import save_process_state as save_process_state

__all__ = [
    "Chains", "Agents", "Processes",
    "agent_mesh", "chain_mesh", "place", "shard_chains",
    "agent_block", "agent_potential", "chain_block", "gather", "initialize", "launch",
    "load_process_state", "save_process_state",
]
