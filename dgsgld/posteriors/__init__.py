"""Reference posteriors: benchmark targets, their stored NUTS references, and scores."""

from .references import Reference as Reference
from .references import available as available
from .references import load_reference as load_reference
from .targets import TARGETS as TARGETS
from .targets import Target as Target
from .targets import get_target as get_target
