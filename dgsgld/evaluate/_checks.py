"""Host checks of stored draws, shared by the scores computed in float64 on the host
(:func:`dgsgld.evaluate.ksd`, :func:`dgsgld.evaluate.empirical_w2` and the reference scores of
:mod:`dgsgld.posteriors.scores`)."""

from __future__ import annotations

import numpy as np

from .._util.types import Array


def host_draws(x: Array, name: str, dim: int | None = None) -> np.ndarray:
    """``x`` as a float64 array ``(num_draws >= 2, dim)`` of finite values, or a ``ValueError``
    naming ``name``."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"`{name}` must be (num_draws >= 2, dim); got shape {x.shape}.")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"`{name}` has {x.shape[1]} coordinates; expected {dim}.")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"`{name}` holds non-finite values.")
    return x
