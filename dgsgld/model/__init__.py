"""The model: each agent's potential from a user's per-datum log-likelihood and prior, data
split across agents, and numpyro models as potentials.

:class:`Potential` holds the agents' data (leaves ``(num_agents, local_size, ...)``) and gives
``f_i`` and its (mini-batch) gradient; :func:`split_iid`, :func:`split_by_label` and
:func:`split_dirichlet` deal a pooled data set to agents; :meth:`Potential.from_numpyro` turns a
numpyro model into a potential (the ``numpyro`` extra), :func:`constrain` maps its unconstrained
draws back.
"""

from .data import AgentSplit as AgentSplit
from .data import quantile_bins as quantile_bins
from .data import split_by_label as split_by_label
from .data import split_dirichlet as split_dirichlet
from .data import split_iid as split_iid
from .potential import Potential as Potential
from .potential import pad_agent_data as pad_agent_data
from .potential import stack_potentials as stack_potentials
from .ppl import NumpyroModel as NumpyroModel
from .ppl import Site as Site
from .ppl import constrain as constrain
from .ppl import init_params as init_params
from .ppl import numpyro_model as numpyro_model

__all__ = [
    "Potential", "pad_agent_data", "stack_potentials",
    "AgentSplit", "quantile_bins", "split_by_label", "split_dirichlet", "split_iid",
    "NumpyroModel", "Site", "constrain", "init_params", "numpyro_model",
]
