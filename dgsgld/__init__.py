"""dgsgld: decentralized stochastic gradient Langevin sampling over time-varying networks.

Write a model as JAX functions, split the data across agents, pick a network schedule, and get
every chain of an experiment from one compiled call::

    potential = dgsgld.Potential(log_likelihood, log_prior, data)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(step_size=0.01), potential, mixing, init, key,
                          num_steps=100)

The rooms, each a subpackage: :mod:`~dgsgld.model` (potentials, data splits, numpyro),
:mod:`~dgsgld.gradients` (gradient estimators), :mod:`~dgsgld.samplers`,
:mod:`~dgsgld.networks`, :mod:`~dgsgld.communication` (channels), :mod:`~dgsgld.runner`
(``sample``, checkpoints, saved traces), :mod:`~dgsgld.parallel` (placements over devices and
processes), :mod:`~dgsgld.evaluate` (distances, streamed metrics, diagnostics, plots),
:mod:`~dgsgld.theory` (bounds and exact laws), :mod:`~dgsgld.tuning` (the warm-up
``dgsgld.warmup``, step sizes, learned weights) and :mod:`~dgsgld.posteriors` (benchmark
targets with stored NUTS references).
"""

# First: Ctrl-C during `python -m dgsgld`'s imports ends the process at once.
from ._cli import interrupt as _interrupt  # noqa: F401

# isort: split
from . import communication as communication
from . import evaluate as evaluate
from . import gradients as gradients
from . import model as model
from . import networks as networks
from . import parallel as parallel
from . import runner as runner
from . import samplers as samplers
from ._version import __version__ as __version__
from .model import Potential as Potential
from .model import pad_agent_data as pad_agent_data
from .networks.checked import CheckedNetwork as CheckedNetwork
from .networks.checked import checked_network as checked_network
from .parallel import Agents as Agents
from .parallel import Chains as Chains
from .parallel import Processes as Processes
from .runner import Divergence as Divergence
from .runner import DivergenceError as DivergenceError
from .runner import Output as Output
from .runner import Trace as Trace
from .runner import sample as sample
from .runner import sample_chunked as sample_chunked
from .samplers import DESGHMC as DESGHMC
from .samplers import DESGLD as DESGLD
from .samplers import DULA as DULA
from .samplers import EXTRASGLD as EXTRASGLD
from .samplers import SGLD as SGLD
from .samplers import DESGHMCState as DESGHMCState
from .samplers import DESGLDState as DESGLDState
from .samplers import DIGingSGHMC as DIGingSGHMC
from .samplers import DIGingSGHMCState as DIGingSGHMCState
from .samplers import DIGingSGLD as DIGingSGLD
from .samplers import DIGingState as DIGingState
from .samplers import DULAState as DULAState
from .samplers import EXTRAState as EXTRAState
from .samplers import PushDIGingSGLD as PushDIGingSGLD
from .samplers import PushDIGingState as PushDIGingState
from .samplers import PushSumSGLD as PushSumSGLD
from .samplers import PushSumState as PushSumState
from .samplers import SamplingAlgorithm as SamplingAlgorithm
from .samplers import SGLDState as SGLDState
from .samplers.noise import fast_normal as fast_normal

__all__ = [
    # running
    "sample", "sample_chunked", "Output", "Trace", "Divergence", "DivergenceError",
    "checked_network", "CheckedNetwork", "Chains", "Agents", "Processes",
    # the model
    "Potential", "pad_agent_data", "fast_normal",
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
    # adaptation
    "warmup",
]

#: The rooms that load on first use (``dgsgld.theory``...): heavier set-up code that a run does
#: not need. Every other room is imported above.
_LAZY = ("posteriors", "theory", "tuning")


def __getattr__(name):
    if name == "warmup":  # the decentralized warm-up (dgsgld.tuning.adaptation), on first use
        from .tuning.adaptation import warmup

        globals()["warmup"] = warmup  # an attribute from now on, like the eager names
        return warmup
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dgsgld' has no attribute {name!r}")
