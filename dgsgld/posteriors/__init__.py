"""Reference posteriors: benchmark targets, their stored NUTS references, and the scores of a
sample against a reference (:mod:`~dgsgld.posteriors.scores`; the metrics that need no
reference, such as :func:`dgsgld.evaluate.ksd` and :func:`dgsgld.evaluate.empirical_w2`, are
in :mod:`dgsgld.evaluate`)."""

from .references import Reference as Reference
from .references import available as available
from .references import load_reference as load_reference
from .scores import moment_errors as moment_errors
from .scores import predictive_scores as predictive_scores
from .targets import TARGETS as TARGETS
from .targets import Target as Target
from .targets import get_target as get_target
from .targets import hierarchical_private_potential as hierarchical_private_potential

__all__ = [
    "Reference",
    "TARGETS",
    "Target",
    "available",
    "get_target",
    "hierarchical_private_potential",
    "load_reference",
    "moment_errors",
    "predictive_scores",
]
