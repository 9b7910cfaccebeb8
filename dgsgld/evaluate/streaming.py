"""Metrics computed inside the compiled run, so that long runs need not store their trace.

Each metric is a :class:`Metric`, an ``eqx.Module`` called on the states, for
:func:`dgsgld.sample`: an ensemble metric (``per_chain=False``, passed as ``ensemble_fn``: called
on the states of ALL chains at each kept iteration, leaves ``(num_chains, N, *param_shape)``) or
a per-chain one (``per_chain=True``, passed as ``trace_fn``: called on one chain's state).
:class:`dgsgld.Output` refuses a metric passed as the other kind. The runner stores only what
the metrics return, so the memory of a run is that of the metric, ``O(num_kept · N)`` for
per-agent W2, instead of the ``O(num_chains · num_kept · N · d)`` of the positions; ``thin``
reduces ``num_kept`` further::

    w2 = dgsgld.evaluate.streamed_per_agent_w2(post_mean, post_cov)
    trace = dgsgld.sample(alg, potential, mixing, init, key, num_steps=10_000,
                          output=dgsgld.Output(thin=10, ensemble_fn=w2))
    trace.ensemble              # (1001, N): W2 of every agent at iterations 0, 10, ..., 10 000

The functions :func:`streamed_moments`, :func:`streamed_per_agent_w2`, :func:`streamed_ksd`,
:func:`streamed_consensus_error`, :func:`streamed_accuracy` and :func:`combine` are the only
constructors of the metrics: they check their arguments and return the module. A streamed
metric gives at each kept iteration what a function of :mod:`dgsgld.evaluate` gives from the
stored trace, and computes it with that function: ``streamed_per_agent_w2`` with
:func:`~dgsgld.evaluate.per_agent_w2`'s W2, ``streamed_consensus_error`` with
:func:`~dgsgld.evaluate.consensus_error`, ``streamed_accuracy`` with
:func:`~dgsgld.evaluate.label_accuracy`, ``streamed_ksd`` with the Stein kernel of
:func:`~dgsgld.evaluate.ksd`, ``streamed_moments`` with
:func:`~dgsgld.evaluate.empirical_moments`.

A metric's arrays (a target's mean and covariance, a test set) are its pytree leaves, traced by
``dgsgld.sample`` rather than compiled in as constants: two metrics of the same kind whose
arrays have the same shapes and dtypes, and whose functions (``score``, ``predict``,
``flatten``) are the same objects, share one compilation; a function that is itself an
``eqx.Module`` adds its arrays to the leaves. A metric's flags (``full``, ``per_chain``, ``c``,
``beta``) are static.

Positions may be an array or a pytree; metrics of the parameter vector need an array of shape
``(..., N, d)`` (flatten a pytree first, e.g. with ``flatten=``).

Moments over chains use ``ddof = 1`` like :func:`dgsgld.evaluate.empirical_moments`, so the
streamed values equal those computed afterwards from ``trace.positions``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._util import validation as _validation
from .._util.types import Array, PyTree
from . import distances
from .predictive import label_accuracy
from .stein import _check_kernel, _kernel_matrix

__all__ = [
    "Metric",
    "Moments",
    "SteinSums",
    "combine",
    "pool_ksd",
    "pool_moments",
    "streamed_accuracy",
    "streamed_consensus_error",
    "streamed_per_agent_w2",
    "streamed_ksd",
    "streamed_moments",
]


class Metric(eqx.Module):
    """A streamed metric: ``states -> pytree of arrays``, evaluated inside the compiled run.

    Every metric has the attribute ``per_chain``: ``True`` for a ``trace_fn`` (called on one
    chain's state), ``False`` for an ``ensemble_fn`` (called on the states of all chains),
    ``None`` for a :func:`combine` of functions that are not metrics.
    """

    @abc.abstractmethod
    def __call__(self, states) -> PyTree:
        """The metric of ``states`` (one chain's state, or all chains' when ensemble)."""


class _Ensemble(Metric):
    """A metric over the chains only (no per-chain form)."""

    @property
    def per_chain(self) -> bool:
        return False


def _vector(position: PyTree, flatten: Callable[[PyTree], Array] | None) -> Array:
    """The positions as one array ``(..., N, d)``."""
    if flatten is not None:
        return flatten(position)
    if isinstance(position, jax.Array) or hasattr(position, "shape"):
        return position
    raise ValueError(
        "positions are a pytree; pass `flatten=` mapping them to an array of shape (..., N, d) "
        "(e.g. lambda p: jnp.concatenate([leaf.reshape(*leaf.shape[:2], -1) for leaf in "
        "jax.tree.leaves(p)], axis=-1) for leaves (C, N, ...))."
    )


class Moments(NamedTuple):
    """Moments over chains at one kept iteration.

    Attributes:
        mean: ``(N, d)`` (``(d,)`` for the centralized sampler).
        cov: ``(N, d, d)`` covariance (``ddof = 1``), or ``(N, d)`` variances when
            ``full=False``.
        num_chains: number of chains they come from (scalar), kept for :func:`pool_moments`.
    """

    mean: Array
    cov: Array
    num_chains: Array


def _check_flatten(flatten) -> None:
    if flatten is not None and not callable(flatten):
        raise TypeError(f"`flatten` must be a function of the positions or None; got "
                        f"{type(flatten).__name__}.")


def _check_per_chain(per_chain) -> bool:
    if not isinstance(per_chain, bool):
        raise TypeError(f"`per_chain` must be True or False; got {per_chain!r}.")
    return per_chain


class _Moments(_Ensemble):
    """:func:`streamed_moments`."""

    full: bool = eqx.field(static=True)
    flatten: Callable | None

    def __call__(self, states) -> Moments:
        x = _vector(states.position, self.flatten)
        c = x.shape[0]
        if c < 2:
            raise ValueError(f"moments over chains need at least 2 chains; got {c}.")
        if self.full:
            mean, cov = distances.empirical_moments(x, axis=0, ddof=1)
        else:
            mean = jnp.mean(x, axis=0)
            cov = jnp.sum((x - mean[None]) ** 2, axis=0) / (c - 1)
        return Moments(mean, cov, jnp.asarray(c, jnp.int32))


def streamed_moments(*, full: bool = True, flatten: Callable | None = None) -> Metric:
    """Ensemble metric: mean and covariance over chains of every agent's position.

    Args:
        full: full ``(d, d)`` covariances (:func:`dgsgld.evaluate.empirical_moments`);
            ``False`` keeps only the variances (memory ``O(N d)`` per kept iteration instead
            of ``O(N d²)``; use it for large ``d``).
        flatten: maps the positions pytree (leaves ``(C, N, ...)``) to ``(C, N, d)``.

    Returns:
        A :class:`Metric` ``states -> Moments``; ``trace.ensemble`` then holds leaves
        ``(num_kept, N, ...)``.
    """
    if not isinstance(full, bool):
        raise TypeError(f"`full` must be True or False; got {full!r}.")
    _check_flatten(flatten)
    return _Moments(full, flatten)


class _PerAgentW2(_Ensemble):
    """:func:`streamed_per_agent_w2`."""

    mean: Array
    cov: Array
    flatten: Callable | None

    def __call__(self, states) -> Array:
        m = _Moments(True, self.flatten)(states)
        if m.mean.shape[-1] != self.mean.shape[0]:
            raise ValueError(
                f"positions have dimension {m.mean.shape[-1]} but the target mean has "
                f"{self.mean.shape[0]}."
            )
        dtype = m.mean.dtype
        target_mean = jnp.broadcast_to(self.mean.astype(dtype), m.mean.shape)
        target_cov = jnp.broadcast_to(self.cov.astype(dtype), m.cov.shape)
        return distances.gaussian_w2(m.mean, m.cov, target_mean, target_cov)


def streamed_per_agent_w2(mean: Array, cov: Array, *, flatten: Callable | None = None) -> Metric:
    """Ensemble metric: each agent's W2 to the Gaussian target ``N(mean, cov)``.

    The agent's samples across chains are summarised by their mean and covariance (the
    paper's §4.1 metric), exactly as :func:`dgsgld.evaluate.per_agent_w2` does on a stored
    trace.

    Args:
        mean: ``(d,)`` target mean. cov: ``(d, d)`` target covariance (the metric's array
            leaves).
        flatten: maps the positions pytree to ``(C, N, d)``.

    Returns:
        A :class:`Metric` ``states -> (N,)`` (a scalar for the centralized sampler);
        ``trace.ensemble`` is ``(num_kept, N)``.
    """
    if jnp.ndim(mean) != 1 or jnp.shape(cov) != (jnp.shape(mean)[0],) * 2:
        raise ValueError(
            f"`mean` must be (d,) and `cov` (d, d); got shapes {jnp.shape(mean)} and "
            f"{jnp.shape(cov)}."
        )
    # The checks of distances.gaussian_w2 (finite, symmetric, PSD), now rather than at every
    # kept iteration inside the run.
    _validation.check_gaussian(mean, cov)
    _check_flatten(flatten)
    return _PerAgentW2(jnp.asarray(mean), jnp.asarray(cov), flatten)


class SteinSums(NamedTuple):
    """Stein kernel sums over chains at one kept iteration (:func:`streamed_ksd`).

    Attributes:
        total: ``(N,)`` (a scalar for the centralized sampler): ``Σ_{a,b} k_π(x_a, x_b)`` over
            all ordered pairs of chains ``a, b`` (``a = b`` included) of each agent's position.
        num_pairs: ``C²`` (scalar), kept for :func:`pool_ksd`.
    """

    total: Array
    num_pairs: Array


class _KSD(_Ensemble):
    """:func:`streamed_ksd`."""

    score: Callable[[Array], Array]
    c: float = eqx.field(static=True)
    beta: float = eqx.field(static=True)
    flatten: Callable | None

    def __call__(self, states) -> SteinSums:
        x = _vector(states.position, self.flatten)                 # (C, N, d) or (C, d)
        chains = x.shape[0]
        flat = x.reshape(-1, x.shape[-1])
        s = jax.vmap(self.score)(flat).reshape(x.shape).astype(x.dtype)
        per_agent = jnp.moveaxis(x, 0, -2)                         # (N, C, d) or (C, d)
        k = _kernel_matrix(per_agent, jnp.moveaxis(s, 0, -2), self.c, self.beta)
        total = jnp.sum(k, axis=(-2, -1))
        return SteinSums(total, jnp.asarray(chains * chains, jnp.int32))


def streamed_ksd(score: Callable[[Array], Array], *, c: float = 1.0, beta: float = -0.5,
                 flatten: Callable | None = None) -> Metric:
    """Ensemble metric: each agent's kernel Stein discrepancy over chains, streamed as sums.

    At each kept iteration the ``C`` chains' positions of agent ``i`` are ``C`` draws; their
    V-statistic is ``KSD_i² = Σ_{a,b} k_π(x_a, x_b) / C²`` with the IMQ Stein kernel
    ``k_π`` of ``(c² + ‖x − y‖²)^β`` (the kernel and defaults of :func:`dgsgld.evaluate.ksd`,
    which gives the same value from stored draws: :mod:`dgsgld.evaluate.stein`). Only
    the sum and ``C²`` are kept (:class:`SteinSums`), so that :func:`pool_ksd` can pool
    iterations. Cost per kept iteration ``O(N C² d)``, memory ``O(N)``.

    Args:
        score: ``x (d,) -> ∇ log π(x) (d,)``, the target's score (e.g. ``lambda x:
            -cov_inv @ (x - mean)``, or minus the sum over agents of a potential's full
            gradients). An ``eqx.Module`` score holding the target's arrays makes them the
            metric's leaves; a closure compiles them in.
        c, beta: the kernel's ``c > 0`` and ``β ∈ (−1, 0)``.
        flatten: maps the positions pytree (leaves ``(C, N, ...)``) to ``(C, N, d)``.

    Returns:
        A :class:`Metric` ``states -> SteinSums``; ``trace.ensemble`` then holds ``total
        (num_kept, N)`` and ``num_pairs (num_kept,)``; ``jnp.sqrt(total / num_pairs[:, None])``
        is each iteration's KSD per agent.
    """
    if not callable(score):
        raise TypeError(f"`score` must be a function x (d,) -> (d,); got {type(score).__name__}.")
    c, beta = _check_kernel(c, beta)
    _check_flatten(flatten)
    return _KSD(score, c, beta, flatten)


def pool_ksd(per_iteration: SteinSums, start: int = 0) -> Array:
    """``(N,)`` KSD per agent pooled over kept iterations ``start, start + 1, ...``:
    ``sqrt(Σ_t total_t / Σ_t C²)``, the root of the mean over iterations of the per-iteration
    ``KSD²`` of :func:`streamed_ksd` (pairs of chains at the same iteration only: no trace is
    kept to pair draws of different iterations).

    Args:
        per_iteration: ``trace.ensemble`` of a run with
            ``output=Output(ensemble_fn=streamed_ksd(...))``.
        start: first kept iteration used (burn-in = ``start * thin`` iterations).
    """
    total = per_iteration.total[start:]
    if total.shape[0] == 0:
        raise ValueError(f"`start` = {start} leaves no kept iteration of "
                         f"{per_iteration.total.shape[0]}.")
    pairs = jnp.sum(per_iteration.num_pairs[start:]).astype(total.dtype)
    return jnp.sqrt(jnp.maximum(jnp.sum(total, axis=0) / pairs, 0.0))


class _ConsensusError(Metric):
    """:func:`streamed_consensus_error`."""

    per_chain: bool = eqx.field(static=True)
    flatten: Callable | None

    def __call__(self, states) -> Array:
        x = _vector(states.position, self.flatten)
        if self.per_chain:
            return distances.consensus_error(x)
        return distances.ensemble_consensus_error(x)


def streamed_consensus_error(*, per_chain: bool = False,
                             flatten: Callable | None = None) -> Metric:
    """Root-mean-square distance of the agents to their network average.

    Args:
        per_chain: a per-chain metric (a ``trace_fn``: :func:`dgsgld.evaluate.consensus_error`,
            one value per chain and kept iteration, ``trace.values`` of shape
            ``(C, num_kept)``); by default an ensemble metric (an ``ensemble_fn``:
            :func:`dgsgld.evaluate.ensemble_consensus_error`, the root mean over chains of the
            squared error, the quantity of the paper's consensus bound; ``trace.ensemble`` of
            shape ``(num_kept,)``).
        flatten: maps the positions pytree to ``(..., N, d)``.

    Returns:
        A :class:`Metric`.
    """
    _check_flatten(flatten)
    return _ConsensusError(_check_per_chain(per_chain), flatten)


class _Accuracy(Metric):
    """:func:`streamed_accuracy`."""

    predict: Callable[[Any, Array], Array]
    inputs: PyTree
    labels: Array
    per_chain: bool = eqx.field(static=True)
    flatten: Callable | None

    def _one_chain(self, position) -> Array:
        def one_agent(params):
            return label_accuracy(self.predict(params, self.inputs), self.labels)

        return jax.vmap(one_agent)(position)

    def __call__(self, states) -> Array:
        position = states.position if self.flatten is None else self.flatten(states.position)
        if self.per_chain:
            return self._one_chain(position)
        return jnp.mean(jax.vmap(self._one_chain)(position), axis=0)


def streamed_accuracy(
    predict: Callable[[Any, Array], Array], inputs: PyTree, labels: Array,
    *, per_chain: bool = False, flatten: Callable | None = None,
) -> Metric:
    """Every agent's classification accuracy on a test set
    (:func:`dgsgld.evaluate.label_accuracy`).

    Args:
        predict: ``(params, inputs) -> predicted labels (n_test,)`` for ONE agent's parameters
            (e.g. ``lambda x, z: (z @ x > 0).astype(int)`` for logistic regression).
        inputs: the test inputs, passed to ``predict`` as they are. labels: ``(n_test,)``
            (both the metric's array leaves).
        per_chain: a per-chain metric (a ``trace_fn`` returning ``(N,)`` per chain,
            ``trace.values`` of shape ``(C, num_kept, N)``); by default an ensemble metric (an
            ``ensemble_fn`` returning the mean over chains ``(N,)``, ``trace.ensemble`` of
            shape ``(num_kept, N)``).
        flatten: maps the positions to the layout above (leaves ``(C, N, ...)``, or ``(N,
            ...)`` per chain), e.g. ``lambda x: x[:, None]`` to give the centralized
            sampler's ``(C, d)`` positions one agent.

    Returns:
        A :class:`Metric`.
    """
    if not callable(predict):
        raise TypeError(f"`predict` must be a function (params, inputs) -> labels; got "
                        f"{type(predict).__name__}.")
    labels = jnp.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"`labels` must be (n_test,); got shape {labels.shape}.")
    _check_flatten(flatten)
    return _Accuracy(predict, inputs, labels, _check_per_chain(per_chain), flatten)


class _Combined(Metric):
    """:func:`combine`. ``fns``: ``(name, metric)`` pairs in the order of their names (a dict's
    pytree order), a tuple rather than a dict so that the metric hashes by value (the runner
    wraps it with a model's static parameters)."""

    fns: tuple[tuple[str, Callable], ...]

    @property
    def per_chain(self) -> bool | None:
        kinds = {fn.per_chain for _, fn in self.fns if isinstance(fn, Metric)} - {None}
        return kinds.pop() if kinds else None

    def __call__(self, states) -> dict[str, Any]:
        return {name: fn(states) for name, fn in self.fns}


def combine(**fns: Callable) -> Metric:
    """Several metrics in one: ``combine(w2=..., ce=...)`` is a :class:`Metric` giving
    ``{"w2": ..., "ce": ...}``. Its metrics must all be per-chain or all ensemble metrics;
    other functions of the states (of the same kind) may be combined with them."""
    if not fns:
        raise ValueError("`combine` needs at least one metric, e.g. "
                         "combine(w2=streamed_per_agent_w2(m, S)).")
    for name, fn in fns.items():
        if not callable(fn):
            raise ValueError(f"`{name}` must be a function of the states; got {type(fn).__name__}.")
    kinds = {name: fn.per_chain for name, fn in fns.items()
             if isinstance(fn, Metric) and fn.per_chain is not None}
    if len(set(kinds.values())) > 1:
        per_chain = sorted(name for name, kind in kinds.items() if kind)
        ensemble = sorted(name for name, kind in kinds.items() if not kind)
        raise ValueError(
            f"`combine` mixes per-chain metrics ({', '.join(per_chain)}) with ensemble metrics "
            f"({', '.join(ensemble)}); combine each kind separately and pass them as "
            "`trace_fn` and `ensemble_fn`."
        )
    return _Combined(tuple(sorted(fns.items(), key=lambda item: item[0])))


def pool_moments(per_iteration: Moments, start: int = 0) -> tuple[Array, Array]:
    """Mean and covariance over chains AND kept iterations ``start, start + 1, ...``.

    Combines the per-iteration moments of :func:`streamed_moments` (``full=True``) without the
    trace, by the law of total covariance: with ``n = C T`` samples and ``m`` the mean of the
    ``m_t``, the pooled covariance is ``((C − 1) Σ_t Σ_t + C Σ_t (m_t − m)(m_t − m)ᵀ) / (n − 1)``
    (centred sums: no cancellation in float32). Equal, up to rounding, to the sample covariance
    of the stored positions ``trace.positions[:, start:]`` pooled over chains and iterations.

    Args:
        per_iteration: ``trace.ensemble`` of a run with
            ``output=Output(ensemble_fn=streamed_moments())``: leaves
            ``(num_kept, N, d)``, ``(num_kept, N, d, d)``, ``(num_kept,)``.
        start: first kept iteration used (burn-in = ``start * thin`` iterations).

    Returns:
        ``(mean (N, d), cov (N, d, d))``.
    """
    mean_t = per_iteration.mean[start:]
    cov_t = per_iteration.cov[start:]
    if cov_t.ndim != mean_t.ndim + 1:
        raise ValueError("`pool_moments` needs full covariances: stream with moments(full=True).")
    if mean_t.shape[0] == 0:
        raise ValueError(f"`start` = {start} leaves no kept iteration of "
                         f"{per_iteration.mean.shape[0]}.")
    c = per_iteration.num_chains[0].astype(mean_t.dtype)
    t = mean_t.shape[0]
    n = c * t
    mean = jnp.mean(mean_t, axis=0, keepdims=True)
    between = mean_t - mean
    mean = mean[0]
    spread = jnp.einsum("t...i,t...j->...ij", between, between)
    cov = ((c - 1) * jnp.sum(cov_t, axis=0) + c * spread) / (n - 1)
    return mean, cov
