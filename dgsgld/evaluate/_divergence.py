"""What "diverged" means, in one place: the runner, the agent-sharded runner and the diagnostics
all use these functions.

A chain has diverged at an iteration when some coordinate of its position is non-finite or its
magnitude reaches ``threshold`` times the chain's starting scale::

    diverged(x⁽ᵏ⁾)  ⇔  not  max |x⁽ᵏ⁾| < threshold · max(1, max |x⁽⁰⁾|)

(maxima over every agent, leaf and coordinate of the chain; ``x⁽⁰⁾`` the position the call
started from, the first draw for bare draws). A stable Langevin chain stays within a few
posterior widths of the posterior, so its distance from the start is bounded by that of the
posterior; an unstable one grows geometrically (by ``|1 − η L|`` per step on a quadratic) and
crosses any fixed bound after a few more iterations, long before it overflows. The default
``threshold = 1e8`` leaves eight orders of magnitude between a chain's start (or 1) and the
alarm; raise it for a model whose parameters legitimately travel further, or pass ``inf`` to
flag non-finite positions only.

The bound compares a chain with its own start, not with the other chains: when the step size
is too large every chain blows up together. A run split into calls (``init=trace.state``)
measures each call from its own start.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PyTree

__all__ = ["DEFAULT_THRESHOLD", "check_threshold", "describe", "first_bad_agent", "reference",
           "diverged_draws", "schedule_cause"]

#: Default ``divergence_threshold``: a chain is diverged once ``max |x|`` reaches this many
#: times ``max(1, max |x⁽⁰⁾|)``.
DEFAULT_THRESHOLD = 1e8


def check_threshold(threshold, *, name: str = "divergence_threshold") -> float:
    """A threshold must be a real number above 1 (``inf``: non-finite positions only)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer,
                                                                 np.floating)):
        raise ValueError(f"`{name}` must be a number > 1 (or math.inf); got {threshold!r}.")
    value = float(threshold)
    if math.isnan(value) or value <= 1:
        raise ValueError(f"`{name}` must be a number > 1 (or math.inf); got {threshold!r}.")
    return value


def describe(threshold: float, item: str = "position", start: str = "initial position") -> str:
    """The definition, for messages (``item``: what is checked; ``start``: its reference)."""
    if math.isinf(threshold):
        return f"a non-finite {item}"
    return (f"a non-finite {item}, or one at least divergence_threshold = {threshold:g} times "
            f"max(1, the chain's largest |{start}|)")


def _magnitude(leaf: Array) -> Array:
    """``|leaf|`` in at least float32, so that the bound does not overflow a narrow dtype."""
    return jnp.abs(leaf).astype(jnp.promote_types(jnp.result_type(leaf), jnp.float32))


def reference(position: PyTree) -> Array:
    """``max(1, max |x⁽⁰⁾|)`` of one chain's position (any pytree; NaN propagates)."""
    largest = [jnp.max(_magnitude(leaf), initial=0.0) for leaf in jax.tree.leaves(position)]
    return jnp.maximum(jnp.max(jnp.stack(largest)), 1.0)


def first_bad_agent(position: PyTree, scale: Array, threshold, decentralized: bool):
    """``(diverged, first diverged agent)`` of one chain's position against ``threshold ·
    scale`` (``scale`` from :func:`reference`); agent ``0`` for a centralized position."""
    bound = jnp.asarray(threshold, scale.dtype) * scale
    # One compare-and-reduce per leaf, as cheap as an isfinite check: `|x| < bound` is False
    # for NaN and ±inf as for a value past the bound.
    if decentralized:
        ok = [jnp.all((_magnitude(leaf) < bound).reshape(leaf.shape[0], -1), axis=1)
              for leaf in jax.tree.leaves(position)]
        bad = ~jnp.all(jnp.stack(ok), axis=0)
        return jnp.any(bad), jnp.argmax(bad).astype(jnp.int32)
    ok = jnp.stack([jnp.all(_magnitude(leaf) < bound) for leaf in jax.tree.leaves(position)])
    return ~jnp.all(ok), jnp.zeros((), jnp.int32)


def diverged_draws(leaves: list, threshold: float) -> np.ndarray:
    """``(chain,)`` bool on the host: chains of draws (leaves ``(chain, draw, ...)``, floating)
    with a draw that has diverged from the chain's first draw (the definition above)."""
    largest = first = None
    for leaf in leaves:
        a = np.abs(np.asarray(leaf).reshape(np.shape(leaf)[0], np.shape(leaf)[1], -1),
                   dtype=np.float64)
        m, f = a.max(axis=(1, 2), initial=0.0), a[:, 0].max(axis=1, initial=0.0)
        # np.max propagates NaN; fmax would drop it.
        largest = m if largest is None else np.maximum(largest, m)
        first = f if first is None else np.maximum(first, f)
    with np.errstate(invalid="ignore", over="ignore"):
        return ~(largest < threshold * np.maximum(first, 1.0))


#: Valid range of each schedule a sampler may carry: ``(attribute, low (exclusive), high)``.
_SCHEDULES = (("step_size", 0.0, math.inf), ("consensus", 0.0, 1.0))


def schedule_cause(algorithm, start: int, iteration: int) -> str | None:
    """A schedule that left its valid range before ``iteration``, named as the cause.

    Evaluates each schedule of ``algorithm`` (``step_size``; ``consensus`` of D-ULA) at counts
    ``start .. iteration - 1`` (the steps that led to the divergence reported at
    ``iteration``); returns the message for the first count outside the range (non-finite, or
    outside ``(0, ∞)`` for a step size, ``(0, 1]`` for a consensus weight), else ``None``.
    """
    counts = np.arange(int(start), max(int(iteration), int(start) + 1), dtype=np.int32)
    for attr, low, high in _SCHEDULES:
        schedule = getattr(algorithm, attr, None)
        if not callable(schedule):
            continue
        try:
            values = np.asarray(jax.jit(jax.vmap(lambda k: jnp.asarray(schedule(k))))(counts),
                                np.float64)
        except Exception:  # noqa: BLE001 - a schedule that cannot be vmapped: not diagnosed
            continue
        if values.shape != counts.shape:
            continue
        bad = ~(np.isfinite(values) & (values > low) & (values <= high))
        if bad.any():
            at = int(np.argmax(bad))
            valid = "positive and finite" if math.isinf(high) else f"in (0, {high:g}]"
            return (f"The `{attr}` schedule leaves its valid range mid-run: it gives "
                    f"{float(values[at]):g} at count {int(counts[at])} (it must be {valid} at "
                    f"every iteration; it gives {float(values[0]):g} at count {int(counts[0])}). "
                    "Fix the schedule")
    return None
