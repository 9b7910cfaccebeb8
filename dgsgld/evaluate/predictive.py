"""Scores of a posterior predictive from samples: what Bayesian deep-learning papers report.

Classification works from per-sample log-probabilities ``(S, P, K)`` (samples, points,
classes). The posterior predictive is the MEAN of the samples' probabilities,

    log p̂(y | x) = logsumexp_s log p_s(y | x) − log S      (:func:`log_predictive`),

not the mean of their logs (that would score a geometric mean and reward overconfidence).
The scores then take the predictive ``(P, K)``:

* :func:`accuracy`: fraction of points whose most probable class is the label (the fraction
  itself, from predicted labels, is :func:`label_accuracy`, which the streamed
  :func:`dgsgld.evaluate.streamed_accuracy` computes with too);
* :func:`nll`: mean negative log predictive probability of the label (nats);
* :func:`ece`: expected calibration error with equal-width confidence bins (15 by default):
  ``sum_b (n_b / P) |accuracy_b − mean confidence_b|``, confidence ``= max_k p̂_k``; bins are
  ``((b − 1)/B, b/B]``, the first also holding 0;
* :func:`brier`: multi-class Brier score ``mean_p sum_k (p̂_k − 1[y = k])²``, in ``[0, 2]``;
* :func:`entropy` and :func:`auroc`: out-of-distribution detection by predictive entropy,
  scored by the area under the ROC curve (the Mann–Whitney statistic; ties count one half).

Regression works from per-sample Gaussian predictive means and standard deviations ``(S, P)``:
:func:`rmse` of the predictive mean, and :func:`gaussian_nll`, the negative log density of the
mixture ``(1/S) sum_s N(y; μ_s, σ_s²)``, again by ``logsumexp``.

Every score is one compiled program (``jax.jit``, checked at tracing on shapes and dtypes):
on host arrays, op-by-op dispatch would compile each of its operations on its own.
:func:`label_accuracy`, the arithmetic the accuracies share, is traced into its callers'
programs.

Values are checked too: labels must lie in ``[0, K)``; every row of ``log_probs`` must be a
log-distribution, ``|logsumexp_k log p̂_k| <= tol`` with ``tol = max(1e-3, 10 K eps)``
(:func:`log_prob_tol`; ``-inf``, probability zero, is allowed, NaN and ``+inf`` are not), so
probabilities or logits passed in place of log-probabilities are refused; AUROC scores must not
be NaN; Gaussian means and targets must be finite and standard deviations positive and finite.
On host arrays a violation raises ``ValueError`` naming the argument, the entry and its value
before anything is computed; under a caller's ``jit`` the same checks run inside the computation
(``equinox.error_if``) and the call raises when it executes.
"""

import functools
import inspect

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util.tree import as_array
from .._util.types import Array
from .._util.validation import is_concrete_tree

__all__ = [
    "accuracy",
    "auroc",
    "brier",
    "calibration_curve",
    "ece",
    "entropy",
    "gaussian_nll",
    "label_accuracy",
    "log_predictive",
    "nll",
    "rmse",
]

#: Equal-width confidence bins of :func:`ece` (Guo et al., 2017).
ECE_BINS = 15


def _compiled(*static: str, check=None):
    """The score as one ``jax.jit`` program; ``static`` names its static arguments, the others
    are arrays (array-likes such as lists are converted first). ``check(**arrays)`` checks
    values on the host (NumPy arrays) when every array argument holds values."""

    def decorate(fn):
        jitted = jax.jit(fn, static_argnames=static)
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            arrays = {k: as_array(v) for k, v in bound.items() if k not in static}
            if check is not None and is_concrete_tree(arrays):
                check(**{k: np.asarray(v) for k, v in arrays.items()})
            return jitted(**{**bound, **arrays})

        return call

    return decorate


def log_prob_tol(dtype, num_classes: int) -> float:
    """Tolerance on ``|logsumexp_k log p̂_k|`` of one row: ``max(1e-3, 10 K eps)``."""
    eps = float(jnp.finfo(dtype).eps) if jnp.issubdtype(dtype, jnp.floating) else 0.0
    return max(1e-3, 10 * num_classes * eps)


def _first(bad: np.ndarray) -> tuple[int, ...]:
    """Index of the first ``True`` of ``bad``."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def _host_log_probs(log_probs: np.ndarray, name: str = "log_probs") -> None:
    """Host check: every row of ``log_probs (..., K)`` is a log-distribution."""
    if log_probs.ndim < 1 or log_probs.size == 0 or not np.issubdtype(log_probs.dtype, np.floating):
        return  # shapes and dtypes are reported by the compiled score
    lp = log_probs.astype(np.float64)
    bad = np.isnan(lp) | (lp == np.inf)
    if bad.any():
        at = _first(bad)
        raise ValueError(
            f"`{name}` must be log-probabilities; got {float(lp[at])!r} at index {at}."
        )
    tol = log_prob_tol(log_probs.dtype, lp.shape[-1])
    total = np.logaddexp.reduce(lp, axis=-1)
    off = ~(np.abs(total) <= tol)
    if not off.any():
        return
    if np.all((lp >= 0) & (lp <= 1)) and np.all(np.abs(lp.sum(axis=-1) - 1) <= tol):
        raise ValueError(
            f"`{name}` holds probabilities (entries in [0, 1], rows summing to 1) where "
            "log-probabilities are expected: pass np.log(probs) (jax.nn.log_softmax of logits)."
        )
    row = _first(off)
    raise ValueError(
        f"`{name}` must be log-probabilities, each row's exponentials summing to 1 (|logsumexp| "
        f"<= {tol:g}); row {row[0] if len(row) == 1 else row} sums to {np.exp(total[row]):.6g} "
        "(logits? use jax.nn.log_softmax)."
    )


def _host_labels(log_probs: np.ndarray, labels: np.ndarray) -> None:
    """Host check of ``log_probs (P, K)`` and of ``labels (P,)`` in ``[0, K)``."""
    if log_probs.ndim != 2 or labels.shape != log_probs.shape[:1]:
        return  # reported by the compiled score
    _host_log_probs(log_probs)
    if np.issubdtype(labels.dtype, np.integer):
        k = log_probs.shape[1]
        bad = (labels < 0) | (labels >= k)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"`labels` must be classes in [0, {k}) (the columns of `log_probs`); got "
                f"{labels[i].item()} at index {i}."
            )


def _traced(value: Array, checks) -> Array:
    """``value`` with each ``(bad, message)`` of ``checks`` attached by ``equinox.error_if``:
    under a caller's ``jit`` the host cannot see the values, so they are checked when the
    computation runs (and raise then)."""
    for bad, message in checks:
        value = eqx.error_if(value, bad, message + " (checked inside the traced computation)")
    return value


def _guard_log_probs(log_probs: Array, name: str = "log_probs") -> Array:
    """``log_probs (..., K)`` with :func:`_host_log_probs`'s checks attached (:func:`_traced`)."""
    tol = log_prob_tol(log_probs.dtype, log_probs.shape[-1])
    total = jax.nn.logsumexp(log_probs, axis=-1)
    return _traced(log_probs, [
        (jnp.any(jnp.isnan(log_probs) | (log_probs == jnp.inf)),
         f"`{name}` must be log-probabilities; it holds NaN or +inf."),
        (jnp.any(jnp.abs(total) > tol),
         f"`{name}` must be log-probabilities, each row's exponentials summing to 1 "
         f"(|logsumexp| <= {tol:g}); a row does not (probabilities or logits given?)."),
    ])


def _check_labels(log_probs: Array, labels: Array) -> tuple[Array, Array]:
    """Shapes and dtypes at tracing; values attached for the computation (:func:`_traced`)."""
    shape = jnp.shape(log_probs)
    if len(shape) != 2:
        raise ValueError(f"`log_probs` must be (points, classes); got shape {shape}.")
    labels = jnp.asarray(labels)
    if labels.shape != shape[:1]:
        raise ValueError(f"`labels` must have shape ({shape[0]},); got {labels.shape}.")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(f"`labels` must be integer classes; got dtype {labels.dtype}.")
    if shape[0] == 0:
        raise ValueError("`log_probs` holds no points.")
    labels = _traced(labels, [
        (jnp.any((labels < 0) | (labels >= shape[1])),
         f"`labels` must be classes in [0, {shape[1]}) (the columns of `log_probs`).")])
    return _guard_log_probs(jnp.asarray(log_probs)), labels


@_compiled("axis")
def log_predictive(log_probs: Array, axis: int | tuple[int, ...] = 0) -> Array:
    """Log of the mean over sample axes of the probabilities: ``logsumexp − log S``.

    Args:
        log_probs: per-sample log-probabilities, e.g. ``(S, P, K)``.
        axis: the sample axis or axes.

    Returns:
        The log predictive with the sample axes removed, e.g. ``(P, K)``.
    """
    log_probs = jnp.asarray(log_probs)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    count = int(np.prod([log_probs.shape[a] for a in axes]))
    if count == 0:
        raise ValueError(f"`log_probs` has no samples along axis {axis}; shape {log_probs.shape}.")
    return jax.nn.logsumexp(log_probs, axis=axes) - jnp.log(float(count))


def label_accuracy(predicted: Array, labels: Array) -> Array:
    """Fraction of points whose predicted label equals the label.

    The one implementation of classification accuracy: :func:`accuracy` (from
    log-probabilities) and :func:`dgsgld.evaluate.streamed_accuracy` (inside a run) call it.

    Args:
        predicted: ``(..., P)`` predicted labels (e.g. ``argmax`` of class scores).
        labels: ``(P,)`` true labels, of a dtype comparable with ``predicted``.

    Returns:
        ``(...)``.
    """
    shape, labels = jnp.shape(predicted), jnp.asarray(labels)
    if not shape or labels.shape != shape[-1:]:
        raise ValueError(
            f"`labels` must have shape ({shape[-1] if shape else 'P'},) to match `predicted` "
            f"{shape} (..., P); got {labels.shape}."
        )
    if shape[-1] == 0:
        raise ValueError("`predicted` holds no points.")
    return jnp.mean(predicted == jnp.broadcast_to(labels, shape), axis=-1)


@_compiled(check=_host_labels)
def accuracy(log_probs: Array, labels: Array) -> Array:
    """Fraction of points whose arg-max class equals ``labels``; ``log_probs (P, K)``."""
    log_probs, labels = _check_labels(log_probs, labels)
    return label_accuracy(jnp.argmax(log_probs, axis=-1), labels)


@_compiled(check=_host_labels)
def nll(log_probs: Array, labels: Array) -> Array:
    """Mean of ``-log p̂(label)`` over points; ``log_probs (P, K)`` (a log predictive)."""
    log_probs, labels = _check_labels(log_probs, labels)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=-1))


@_compiled(check=_host_labels)
def brier(log_probs: Array, labels: Array) -> Array:
    """Multi-class Brier score ``mean_p sum_k (p̂_k − 1[y = k])²``; ``log_probs (P, K)``."""
    log_probs, labels = _check_labels(log_probs, labels)
    probs = jnp.exp(log_probs)
    onehot = jax.nn.one_hot(labels, probs.shape[-1], dtype=probs.dtype)
    return jnp.mean(jnp.sum((probs - onehot) ** 2, axis=-1))


@_compiled("num_bins", check=_host_labels)
def calibration_curve(log_probs: Array, labels: Array, num_bins: int = ECE_BINS):
    """Reliability diagram data over ``num_bins`` equal-width confidence bins.

    Returns:
        ``(counts, accuracy, confidence)``, each ``(num_bins,)``: points per bin, their
        accuracy and mean confidence (``0`` in empty bins).
    """
    log_probs, labels = _check_labels(log_probs, labels)
    if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"`num_bins` must be a positive int; got {num_bins!r}.")
    probs = jnp.exp(log_probs)
    confidence = jnp.max(probs, axis=-1)
    correct = (jnp.argmax(probs, axis=-1) == labels).astype(probs.dtype)
    # Bin b holds ((b-1)/B, b/B]; confidence 0 (impossible for a distribution) goes to bin 0.
    bins = jnp.clip(jnp.ceil(confidence * num_bins).astype(jnp.int32) - 1, 0, num_bins - 1)
    counts = jnp.zeros(num_bins).at[bins].add(1.0)
    safe = jnp.maximum(counts, 1.0)
    acc = jnp.zeros(num_bins).at[bins].add(correct) / safe
    conf = jnp.zeros(num_bins).at[bins].add(confidence) / safe
    return counts, acc, conf


@_compiled("num_bins", check=_host_labels)
def ece(log_probs: Array, labels: Array, num_bins: int = ECE_BINS) -> Array:
    """Expected calibration error ``sum_b (n_b / P) |acc_b − conf_b|`` (15 bins by default)."""
    counts, acc, conf = calibration_curve(log_probs, labels, num_bins)
    return jnp.sum(counts * jnp.abs(acc - conf)) / jnp.sum(counts)


@_compiled(check=_host_log_probs)
def entropy(log_probs: Array) -> Array:
    """Entropy ``−sum_k p̂_k log p̂_k`` (nats) per point: ``log_probs (..., K) -> (...)``."""
    log_probs = jnp.asarray(log_probs)
    if log_probs.ndim < 1 or log_probs.shape[-1] == 0:
        raise ValueError(f"`log_probs` must be (..., K) with K >= 1; got shape {log_probs.shape}.")
    log_probs = _guard_log_probs(log_probs)
    # 0 log 0 = 0: where p = 0 the product is replaced by 0 rather than 0 * (-inf) = NaN.
    return -jnp.sum(jnp.where(log_probs > -jnp.inf, jnp.exp(log_probs) * log_probs, 0.0), axis=-1)


def _host_auroc(scores_in: np.ndarray, scores_out: np.ndarray) -> None:
    for name, s in (("scores_in", scores_in), ("scores_out", scores_out)):
        bad = np.isnan(s) if np.issubdtype(s.dtype, np.inexact) else np.zeros(s.shape, bool)
        if bad.any():
            raise ValueError(f"`{name}` must not be NaN; got NaN at index {_first(bad)} "
                             f"({int(bad.sum())} NaN scores).")


@_compiled(check=_host_auroc)
def auroc(scores_in: Array, scores_out: Array) -> Array:
    """Area under the ROC curve for telling ``scores_out`` (positives) from ``scores_in``.

    The probability that a random out-of-distribution score exceeds a random in-distribution
    one, ties counting one half (the Mann–Whitney ``U / (n_in n_out)``); computed from ranks by
    sorting, ``O((n_in + n_out) log n_in)``.

    Args:
        scores_in: ``(n_in,)`` scores of in-distribution points (e.g. predictive entropy).
        scores_out: ``(n_out,)`` scores of out-of-distribution points.
    """
    scores_in, scores_out = jnp.asarray(scores_in), jnp.asarray(scores_out)
    for name, s in (("scores_in", scores_in), ("scores_out", scores_out)):
        if s.ndim != 1 or s.size == 0:
            raise ValueError(f"`{name}` must be a non-empty 1-D array; got shape {s.shape}.")
    scores_in, scores_out = (_traced(s, [(jnp.any(jnp.isnan(s)), f"`{name}` must not be NaN.")])
                             for name, s in (("scores_in", scores_in), ("scores_out", scores_out)))
    ordered = jnp.sort(scores_in)
    below = jnp.searchsorted(ordered, scores_out, side="left")
    equal = jnp.searchsorted(ordered, scores_out, side="right") - below
    return jnp.mean(below + 0.5 * equal) / scores_in.size


def _host_regression(means: np.ndarray, targets: np.ndarray, stds=None) -> None:
    """Host check: finite means and targets, positive finite standard deviations."""
    for name, x in (("means", means), ("targets", targets), ("stds", stds)):
        if x is None or not np.issubdtype(x.dtype, np.number):
            continue
        bad = ~np.isfinite(x) | ((x <= 0) if name == "stds" else False)
        if np.any(bad):
            at = _first(np.atleast_1d(bad))
            what = "positive and finite" if name == "stds" else "finite"
            raise ValueError(f"`{name}` must be {what}; got {np.atleast_1d(x)[at].item()!r} at "
                             f"index {at if np.ndim(x) > 1 else at[0]}.")


def _check_regression(means: Array, stds: Array, targets: Array) -> tuple[Array, Array, Array]:
    means, targets = jnp.asarray(means), jnp.asarray(targets)
    if means.ndim != 2:
        raise ValueError(f"`means` must be (samples, points); got shape {means.shape}.")
    if targets.shape != means.shape[1:]:
        raise ValueError(f"`targets` must have shape ({means.shape[1]},); got {targets.shape}.")
    stds = jnp.broadcast_to(jnp.asarray(stds, means.dtype), means.shape)
    means, targets = (_traced(x, [(~jnp.all(jnp.isfinite(x)), f"`{name}` must be finite.")])
                      for name, x in (("means", means), ("targets", targets)))
    stds = _traced(stds, [(~jnp.all(jnp.isfinite(stds) & (stds > 0)),
                           "`stds` must be positive and finite.")])
    return means, stds, targets


@_compiled(check=_host_regression)
def rmse(means: Array, targets: Array) -> Array:
    """Root-mean-square error of the predictive mean ``mean_s μ_s``; ``means (S, P)``."""
    means, _, targets = _check_regression(means, 1.0, targets)
    return jnp.sqrt(jnp.mean((jnp.mean(means, axis=0) - targets) ** 2))


@_compiled(check=_host_regression)
def gaussian_nll(means: Array, stds: Array, targets: Array) -> Array:
    """Mean over points of ``−log (1/S) sum_s N(y; μ_s, σ_s²)``.

    Args:
        means: ``(S, P)`` per-sample predictive means.
        stds: ``(S, P)`` (or broadcastable, e.g. ``(S, 1)``) positive standard deviations.
        targets: ``(P,)``.
    """
    means, stds, targets = _check_regression(means, stds, targets)
    z = (targets[None, :] - means) / stds
    log_density = -0.5 * z**2 - jnp.log(stds) - 0.5 * jnp.log(2 * jnp.pi)
    return -jnp.mean(log_predictive(log_density, axis=0))
