"""One registry of the library's samplers: every class, each with its display name ``cls.name``.

Other code (the experiments, the benchmark, the exact laws' tests) takes its list of samplers
from :data:`ALL` and finds one by name with :func:`by_name`.
"""

from .base import SamplingAlgorithm
from .de import DESGLD
from .diging import DIGingSGLD
from .dula import DULA
from .extra import EXTRASGLD
from .pushsum import PushDIGingSGLD, PushSumSGLD
from .sghmc import DESGHMC, DIGingSGHMC
from .sgld import SGLD

__all__ = ["ALL", "by_name"]

#: Every sampler class of the library, in this order: the decentralized samplers for
#: undirected (doubly stochastic) networks, centralized SGLD, then the push-sum samplers for
#: directed (column-stochastic) ones. Each has a display name ``cls.name``.
ALL: tuple[type[SamplingAlgorithm], ...] = (
    DIGingSGLD, DESGLD, EXTRASGLD, DIGingSGHMC, DESGHMC, DULA, SGLD, PushDIGingSGLD, PushSumSGLD,
)


def by_name(name: str) -> type[SamplingAlgorithm]:
    """The sampler class of :data:`ALL` whose display name is ``name``.

    Args:
        name: a display name, e.g. ``"DIGing-SGLD"`` (``[cls.name for cls in ALL]`` lists them).

    Returns:
        The class, e.g. :class:`DIGingSGLD`.

    Raises:
        ValueError: naming ``name`` and the known names, for any other string.

    >>> by_name("DE-SGLD") is DESGLD
    True
    """
    for cls in ALL:
        if cls.name == name:
            return cls
    raise ValueError(f"`name` must be one of {[cls.name for cls in ALL]}; got {name!r}.")
