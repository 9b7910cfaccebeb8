"""Checks of the options shared by the communication modules."""

import numpy as np


def unit_interval(value, name: str) -> float:
    """``value`` as a float in ``(0, 1]``; a ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not 0 < float(value) <= 1:
        raise ValueError(f"`{name}` must be a number in (0, 1]; got {value!r}.")
    return float(value)
