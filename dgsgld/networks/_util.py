"""Small argument helpers shared by the network generators and checks."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: Snapshots of a schedule generated on the fly whose union is checked when no window is given.
DEFAULT_CONNECTIVITY_WINDOW = 100


def _rng(seed: Any) -> np.random.Generator:
    """A NumPy generator from an int, a ``numpy.random.Generator`` or a JAX PRNG key."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return np.random.default_rng(int(seed))
    if isinstance(seed, jax.Array):
        if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
            seed = jax.random.key_data(seed)
        return np.random.default_rng(np.asarray(seed, dtype=np.uint32).ravel().tolist())
    raise TypeError(
        f"seed must be an int, a numpy Generator or a JAX key; got {type(seed).__name__}"
    )


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def on_the_fly_window(schedule: Any, window: int | None) -> int:
    """Snapshots of an on-the-fly schedule checked: ``window`` (default
    :data:`DEFAULT_CONNECTIVITY_WINDOW`), at most the period."""
    num = int(window or DEFAULT_CONNECTIVITY_WINDOW)
    period = getattr(schedule, "period", None)
    return num if period is None else min(num, int(period))
