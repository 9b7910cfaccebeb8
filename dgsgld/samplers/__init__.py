"""The samplers: each an ``eqx.Module`` whose class is its constructor, with ``init``/``step``
over NamedTuple state; their constant preconditioners
(:mod:`dgsgld.samplers.precondition`); and one registry of the library's samplers
(:data:`dgsgld.samplers.registry.ALL`, :func:`dgsgld.samplers.registry.by_name`)."""

from .base import SamplingAlgorithm as SamplingAlgorithm
from .de import DESGLD as DESGLD
from .de import DESGLDState as DESGLDState
from .diging import DIGingSGLD as DIGingSGLD
from .diging import DIGingState as DIGingState
from .dula import DULA as DULA
from .dula import DULAState as DULAState
from .dula import PolynomialDecay as PolynomialDecay
from .extra import EXTRASGLD as EXTRASGLD
from .extra import EXTRAState as EXTRAState
from .precondition import DensePreconditioner as DensePreconditioner
from .precondition import DiagonalPreconditioner as DiagonalPreconditioner
from .precondition import LowRankPreconditioner as LowRankPreconditioner
from .precondition import Preconditioner as Preconditioner
from .pushsum import PushDIGingSGLD as PushDIGingSGLD
from .pushsum import PushDIGingState as PushDIGingState
from .pushsum import PushSumSGLD as PushSumSGLD
from .pushsum import PushSumState as PushSumState
from .registry import ALL as ALL
from .registry import by_name as by_name
from .sghmc import DESGHMC as DESGHMC
from .sghmc import DESGHMCState as DESGHMCState
from .sghmc import DIGingSGHMC as DIGingSGHMC
from .sghmc import DIGingSGHMCState as DIGingSGHMCState
from .sgld import SGLD as SGLD
from .sgld import SGLDState as SGLDState
