"""The samplers: each an ``init``/``step`` pair over NamedTuple state."""

from .base import SamplingAlgorithm as SamplingAlgorithm
from .de import DESGLD as DESGLD
from .de import DESGLDInfo as DESGLDInfo
from .de import DESGLDState as DESGLDState
from .de import de_sgld as de_sgld
from .diging import DIGingInfo as DIGingInfo
from .diging import DIGingSGLD as DIGingSGLD
from .diging import DIGingState as DIGingState
from .diging import diging_sgld as diging_sgld
from .extra import EXTRAInfo as EXTRAInfo
from .extra import EXTRASGLD as EXTRASGLD
from .extra import EXTRAState as EXTRAState
from .extra import extra_sgld as extra_sgld
from .sgld import SGLD as SGLD
from .sgld import SGLDInfo as SGLDInfo
from .sgld import SGLDState as SGLDState
from .sgld import sgld as sgld
