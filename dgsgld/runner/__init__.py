"""Running a sampler: :func:`sample` (every chain of an experiment in one compiled call), long
runs in checkpointed chunks (:func:`sample_chunked`), traces saved to and loaded from disk,
and progress reports.

The route of one step: :func:`sample` validates on the host once, then its compiled loop
(:mod:`dgsgld.runner.loop`) ``lax.scan``-s the sampler's ``step`` over iterations and ``vmap``-s
it over chains. Placements over devices and processes (:mod:`dgsgld.parallel`) run the same loop.
"""

from .checkpoint import CheckpointDir as CheckpointDir
from .checkpoint import CheckpointError as CheckpointError
from .checkpoint import read_checkpoint as read_checkpoint
from .checkpoint import sample_chunked as sample_chunked
from .loop import Divergence as Divergence
from .loop import DivergenceError as DivergenceError
from .loop import Output as Output
from .loop import Trace as Trace
from .loop import sample as sample
from .progress import ProgressBar as ProgressBar
from .traceio import load_trace as load_trace
from .traceio import read_metadata as read_metadata
from .traceio import save_trace as save_trace

__all__ = [
    "sample", "Output", "Trace", "Divergence", "DivergenceError",
    "sample_chunked", "read_checkpoint", "CheckpointDir", "CheckpointError",
    "save_trace", "load_trace", "read_metadata", "ProgressBar",
]
