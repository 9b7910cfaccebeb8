"""Who takes part in a step, and how long it lasts: stragglers and the simulated clock.

A :class:`~dgsgld.communication.Channel`'s ``activity`` makes each agent active at a step with
a probability, or by a fixed pattern; its :class:`Clock` draws per-agent compute times, and an
agent not done by the clock's deadline sits the step out too (:func:`active_agents`). An
inactive agent takes no step and sends nothing (:func:`dgsgld.communication.hold`). Each step's
simulated seconds add up in the channel state (:func:`elapsed_time`).

Randomness: the active agents are drawn from ``fold_in(key, activity tag)`` and the compute
times from ``fold_in(key, clock tag)`` of the step's key, shared by all messages of the step
and by the state update.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PRNGKey

__all__ = ["Clock", "active_agents", "elapsed_time"]

#: Tag of the step's activity draw (stragglers), shared by its messages and the state update.
_ACTIVE_TAG = 0x636F6D61
#: Tag of the step's compute-time draw (the simulated clock), shared like the activity.
_CLOCK_TAG = 0x636F6D74


def _seconds(value, name: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not (0 <= float(value) < math.inf) or (not allow_zero and float(value) == 0):
        raise ValueError(f"`{name}` must be a finite number of seconds "
                         f"{'>= 0' if allow_zero else '> 0'}; got {value!r}.")
    return float(value)


def _compute_times(compute):
    """A positive number, or one per agent (kept as a tuple: static and hashable)."""
    if isinstance(compute, (int, float, np.number)) and not isinstance(compute, bool):
        return _seconds(compute, "compute", allow_zero=False)
    values = np.asarray(compute, dtype=object)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("`compute` must be a positive number of seconds or one per agent; "
                         f"got {compute!r}.")
    return tuple(_seconds(v, "compute", allow_zero=False) for v in values)


def _jitter(jitter) -> float:
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float, np.number)) \
            or not 0 <= float(jitter) <= 1:
        raise ValueError(f"`jitter` must be a number in [0, 1]; got {jitter!r}.")
    return float(jitter)


class Clock(eqx.Module):
    """Simulated time of synchronous rounds (:class:`~dgsgld.communication.Channel`'s ``clock``).

    At every step agent ``i`` computes for ``t_i = c_i (1 − jitter + jitter · E_i)`` seconds,
    ``E_i ~ Exp(1)`` independently (mean ``c_i``; ``jitter = 0``: exactly ``c_i``,
    ``jitter = 1``: exponential). A step lasts until the slowest active agent is done,
    ``max_i t_i``, and, when a ``deadline`` is set, at most ``deadline``: an agent not done by
    then is inactive at that step, as a straggler of ``activity`` (it takes no step and sends
    nothing). A step that is a round (messages sent) adds ``latency``. The elapsed seconds
    are :func:`elapsed_time` of a state, a float32 sum (relative rounding at most ``k · 2⁻²⁴``
    after ``k`` steps).

    Attributes:
        compute: ``c``, mean seconds of one step, one number for every agent or one per agent
            (slow agents: larger ``c_i``).
        jitter: in ``[0, 1]``, how random the compute times are.
        latency: seconds a round's messages take.
        deadline: ``None`` (wait for every agent) or the seconds after which a round goes on
            without the agents not done.
    """

    compute: Any = eqx.field(default=1.0, static=True, converter=_compute_times)
    jitter: float = eqx.field(default=0.0, static=True, converter=_jitter)
    latency: float = eqx.field(default=0.0, static=True,
                               converter=lambda v: _seconds(v, "latency"))
    deadline: float | None = eqx.field(
        default=None, static=True,
        converter=lambda v: None if v is None else _seconds(v, "deadline", allow_zero=False))

    def times(self, key: PRNGKey, num_agents: int) -> Array:
        """``(N,)`` float32 compute times of the step whose key is ``key``."""
        if isinstance(self.compute, tuple):
            if len(self.compute) != num_agents:
                raise ValueError(f"`compute` has {len(self.compute)} agents; the network has "
                                 f"{num_agents}.")
            mean = jnp.asarray(self.compute, jnp.float32)
        else:
            mean = jnp.full((num_agents,), self.compute, jnp.float32)
        if self.jitter == 0:
            return mean
        e = jax.random.exponential(jax.random.fold_in(key, _CLOCK_TAG), (num_agents,))
        return mean * (1 - self.jitter + self.jitter * e)

    def duration(self, times: Array, active: Array | None, talk) -> Array:
        """Seconds of a step: the slowest of the agents that are not stragglers by
        ``activity`` (``active``: ``(N,)`` bool, deadline not applied; ``None``: all), capped
        at the deadline, plus the latency when ``talk`` (``None``: always a round)."""
        busy = times if active is None else jnp.where(active, times, 0.0)
        step = jnp.max(busy)
        if self.deadline is not None:
            step = jnp.minimum(step, self.deadline)
        if self.latency:
            step = step + (self.latency if talk is None
                           else jnp.where(talk, self.latency, 0.0))
        return step


def _activity(activity):
    """``activity``: a probability in (0, 1], or a ``(P, N)`` pattern of 0/1 (kept as a tuple
    of tuples of bools: static and hashable)."""
    message = ("`activity` must be a number in (0, 1] or a (period, num_agents) pattern of "
               f"0/1 or bools; got {activity!r}.")
    if isinstance(activity, (int, float, np.number)) and not isinstance(activity, bool):
        if not 0 < float(activity) <= 1:
            raise ValueError(message)
        return float(activity)
    try:
        pattern = np.asarray(activity)
    except Exception:  # noqa: BLE001 - anything that is no array is refused below
        pattern = None
    if pattern is None or pattern.ndim != 2 or pattern.size == 0 or not (
            pattern.dtype == bool or (np.issubdtype(pattern.dtype, np.number)
                                      and np.isin(pattern, (0, 1)).all())):
        raise ValueError(message)
    return tuple(tuple(bool(a) for a in row) for row in pattern)


def active_agents(channel: Any, key: PRNGKey, count, num_agents: int):
    """``(N,)`` bool, the agents active at the step of ``key`` (the step's key) and iteration
    ``count``: drawn by ``activity`` and, with a :class:`Clock` that has a deadline, done
    computing by it; ``None`` when all always are (no channel, ``activity=1``, no deadline)."""
    if channel is None:
        return None
    times = None if channel.clock is None else channel.clock.times(key, num_agents)
    return _with_deadline(channel, _by_activity(channel, key, count, num_agents), times)


def _with_deadline(channel: Any, active, times):
    """``active`` (``None``: all) less the agents not done by the clock's deadline."""
    if times is None or channel.clock.deadline is None:
        return active
    done = times <= channel.clock.deadline
    return done if active is None else active & done


def _by_activity(channel: Any, key: PRNGKey, count, num_agents: int):
    """The agents active by ``activity`` alone (``None``: all)."""
    if channel is None or channel.activity == 1.0:
        return None
    if isinstance(channel.activity, tuple):
        pattern = np.asarray(channel.activity, bool)
        if pattern.shape[1] != num_agents:
            raise ValueError(
                f"`activity` pattern has {pattern.shape[1]} agents per row; the network has "
                f"{num_agents}."
            )
        return jnp.asarray(pattern)[jnp.asarray(count) % pattern.shape[0]]
    return jax.random.uniform(jax.random.fold_in(key, _ACTIVE_TAG), (num_agents,)) \
        < channel.activity


def elapsed_time(state) -> Array:
    """Simulated seconds so far, ``(...)`` float32, of a sampler state run with a channel
    that has a :class:`Clock` (usable as ``Output(trace_fn=elapsed_time)`` for a
    per-iteration trace, to plot results against simulated time)."""
    channels = getattr(state, "channel", ())
    if not channels or isinstance(channels["position"].elapsed, tuple):
        raise ValueError(
            "`state` has no simulated clock: run the sampler with channel=dgsgld."
            "communication.Channel(clock=Clock(...)) to measure simulated time."
        )
    return channels["position"].elapsed

