"""Communication networks for decentralized sampling: mixing-matrix schedules and their diagnostics.

A schedule is a stack of ``P`` symmetric, doubly stochastic ``(N, N)`` mixing matrices used
cyclically, ``W⁽ᵏ⁾ = matrices[k % P]``, with ``x⁺ = W @ x`` (``W[i, j]`` is the weight agent ``i``
puts on agent ``j``). Generators return a :class:`Schedule` (an ``eqx.Module``) that
``dgsgld.sample`` accepts wherever it accepts a raw ``(P, N, N)`` array. Directed networks (one-way
links, column-stochastic weights, for the push-sum samplers) are :mod:`dgsgld.networks.directed`.

Everything about the network lives in this package: the mixing protocol ``matrix_at(k)``
(:mod:`~dgsgld.networks._mixing`), schedules and weights, sparse formats
(:mod:`~dgsgld.networks.sparse`) and on-the-fly schedules (:mod:`~dgsgld.networks.onthefly`),
their validation and spectral diagnostics, weight rules, and the checks ``dgsgld.sample`` runs on
a network (:mod:`~dgsgld.networks.checked`). Learned weights are :mod:`dgsgld.tuning`'s; a
device's rows of a network split over devices are :mod:`dgsgld.parallel`'s.
"""

from . import directed as directed
from . import onthefly as onthefly
from . import sparse as sparse
from .connectivity import check_joint_connectivity as check_joint_connectivity
from .connectivity import check_strong_connectivity as check_strong_connectivity
from .directed import DirectedSchedule as DirectedSchedule
from .directed import directed_barbell as directed_barbell
from .directed import directed_delta as directed_delta
from .directed import directed_lollipop as directed_lollipop
from .directed import directed_one_peer_exponential as directed_one_peer_exponential
from .directed import from_digraph as from_digraph
from .directed import from_digraphs as from_digraphs
from .directed import one_way_link_failures as one_way_link_failures
from .directed import out_degree_weights as out_degree_weights
from .directed import push_sum_weights as push_sum_weights
from .drawing import draw_snapshot as draw_snapshot
from .schedules import Schedule as Schedule
from .schedules import as_schedule as as_schedule
from .schedules import barbell as barbell
from .schedules import complete as complete
from .schedules import erdos_renyi as erdos_renyi
from .schedules import from_graph as from_graph
from .schedules import from_graphs as from_graphs
from .schedules import from_matrices as from_matrices
from .schedules import grid as grid
from .schedules import link_failures as link_failures
from .schedules import lollipop as lollipop
from .schedules import one_peer_exponential as one_peer_exponential
from .schedules import random_regular as random_regular
from .schedules import ring as ring
from .schedules import star as star
from .spectral import Delta as Delta
from .spectral import delta as delta
from .spectral import smallest_joint_connectivity_window as smallest_joint_connectivity_window
from .spectral import spectral_gap as spectral_gap
from .spectral import union_graph as union_graph
from .validation import validate_schedule as validate_schedule
from .weights import fastest_mixing_weights as fastest_mixing_weights
from .weights import max_degree_weights as max_degree_weights
from .weights import metropolis_hastings_weights as metropolis_hastings_weights
from .weights import metropolis_weights as metropolis_weights

__all__ = [
    "Delta",
    "DirectedSchedule",
    "check_strong_connectivity",
    "directed_barbell",
    "directed_delta",
    "directed_lollipop",
    "directed_one_peer_exponential",
    "from_digraph",
    "from_digraphs",
    "one_way_link_failures",
    "out_degree_weights",
    "push_sum_weights",
    "Schedule",
    "as_schedule",
    "barbell",
    "check_joint_connectivity",
    "complete",
    "delta",
    "draw_snapshot",
    "fastest_mixing_weights",
    "erdos_renyi",
    "from_graph",
    "from_graphs",
    "from_matrices",
    "grid",
    "link_failures",
    "lollipop",
    "max_degree_weights",
    "metropolis_hastings_weights",
    "metropolis_weights",
    "one_peer_exponential",
    "random_regular",
    "ring",
    "smallest_joint_connectivity_window",
    "spectral_gap",
    "star",
    "union_graph",
    "validate_schedule",
]
