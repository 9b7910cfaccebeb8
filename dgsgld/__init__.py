"""dgsgld: decentralized stochastic gradient Langevin sampling over time-varying networks.

Write a model as JAX functions, split the data across agents, pick a network schedule, and get
every chain of an experiment from one compiled call::

    potential = dgsgld.Potential(log_likelihood, log_prior, data)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(step_size=0.01), potential, mixing, init, key,
                          num_steps=100)
"""

from . import _interrupt as _interrupt  # first: Ctrl-C during `python -m dgsgld`'s imports
from . import metrics as metrics
from .noise import fast_normal as fast_normal
from .potential import Potential as Potential
from .potential import pad_agent_data as pad_agent_data
from .run import Divergence as Divergence
from .run import DivergenceError as DivergenceError
from .run import Output as Output
from .run import Trace as Trace
from .run import sample as sample
from .networks.checked import CheckedNetwork as CheckedNetwork
from .networks.checked import checked_network as checked_network
from .checkpoint import sample_chunked as sample_chunked
from .samplers import DESGLD as DESGLD
from .samplers import DIGingSGLD as DIGingSGLD
from .samplers import EXTRASGLD as EXTRASGLD
from .samplers import SGLD as SGLD
from .samplers import DESGLDState as DESGLDState
from .samplers import DIGingState as DIGingState
from .samplers import EXTRAState as EXTRAState
from .samplers import SamplingAlgorithm as SamplingAlgorithm
from .samplers import SGLDState as SGLDState
from . import gradients as gradients
from . import communication as communication
from .samplers import DESGHMC as DESGHMC
from .samplers import DIGingSGHMC as DIGingSGHMC
from .samplers import DULA as DULA
from .samplers import DESGHMCState as DESGHMCState
from .samplers import DIGingSGHMCState as DIGingSGHMCState
from .samplers import DULAState as DULAState
from .samplers import PushDIGingState as PushDIGingState
from .samplers import PushSumState as PushSumState
from .samplers import PushDIGingSGLD as PushDIGingSGLD
from .samplers import PushSumSGLD as PushSumSGLD
from .sharding import Agents as Agents
from .sharding import Chains as Chains
from .distributed import Processes as Processes

__version__ = "0.1.0"

# The names above; the subpackages that load on first use (``__getattr__``) are left out, so
# that ``from dgsgld import *`` loads nothing more than ``import dgsgld``.
__all__ = [
    # running
    "sample", "sample_chunked", "Output", "Trace", "Divergence", "DivergenceError",
    "checked_network", "CheckedNetwork", "Chains", "Agents", "Processes",
    # the model
    "Potential", "pad_agent_data", "gradients", "metrics", "fast_normal",
    # samplers
    "SamplingAlgorithm",
    "SGLD", "SGLDState",
    "DIGingSGLD", "DIGingState",
    "DESGLD", "DESGLDState",
    "EXTRASGLD", "EXTRAState",
    "DIGingSGHMC", "DIGingSGHMCState",
    "DESGHMC", "DESGHMCState",
    "DULA", "DULAState",
    "PushDIGingSGLD", "PushDIGingState",
    "PushSumSGLD", "PushSumState",
]


def __getattr__(name):
    # Subpackages with heavier set-up code load on first use.
    lazy = {"networks", "theory", "experiments", "diagnostics", "checkpoint", "progress",
            "streaming", "sharding", "stepsize", "tuning", "traceio", "distributed",
            "data", "predictive", "ppl", "plots", "posteriors"}
    if name in lazy:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dgsgld' has no attribute {name!r}")
