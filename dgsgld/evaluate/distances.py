"""Distances and errors computed from traces.

The 2-Wasserstein distance between Gaussians (§4.1), :func:`gaussian_w2` (and from draws,
:func:`gaussian_w2_to_target` and :func:`per_agent_w2`, which fit a Gaussian to them):

    W2² = ‖m₁ − m₂‖² + tr Σ₁ + tr Σ₂ − 2 tr (Σ₁^{1/2} Σ₂ Σ₁^{1/2})^{1/2}.

Square roots of symmetric positive semidefinite matrices use ``eigh`` with eigenvalues clipped
at zero, so rank-deficient empirical covariances (fewer chains than dimensions) are fine, and
the result is symmetric in its arguments up to rounding.

The covariance term is computed as the sum of squares ``min_U ‖Σ₁^{1/2} − U Σ₂^{1/2}‖_F²``
(``U`` orthogonal: the polar factor of ``Σ₂^{1/2} Σ₁^{1/2}``), equal to the trace form but free
of its cancellation, which in float32 leaves an error of order ``sqrt(eps tr Σ)`` (0.5 for two
identical covariances of scale 10⁴). Accuracy, checked against a float64 SciPy reference over
scales 10⁻⁴..10⁴ and ``d`` up to 50 for covariances of condition number up to about 50:
``|Ŵ − W| <= 2e-3 W + 2e-5 sqrt(tr Σ₁ + tr Σ₂)`` in float32 (the second term bounds the
result for two identical Gaussians); the error grows with the condition number of the product.

Each JAX function checks its inputs on the host (when they hold values) and then computes in
one compiled program (``jax.jit``): on a stored trace, op-by-op dispatch would compile every
operation as a program of its own on first use (``docs/results/performance.md``). Under a user's
``jit`` they trace like any other function.

Between two sets of draws with no Gaussian fit, :func:`empirical_w2` is the exact W2 of their
empirical measures, by an optimal assignment in float64 on the host (NumPy and SciPy).
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment

from .._util import validation as _validation
from .._util.tree import as_array
from .._util.types import Array
from ._checks import host_draws

__all__ = [
    "sqrtm_psd",
    "gaussian_w2",
    "empirical_moments",
    "per_agent_w2",
    "consensus_error",
    "ensemble_consensus_error",
    "gaussian_w2_to_target",
    "empirical_w2",
]


def sqrtm_psd(matrix: Array) -> Array:
    """Symmetric square root of a PSD matrix ``(..., d, d)``; negative eigenvalues clipped."""
    shape = jnp.shape(matrix)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"`matrix` must be (..., d, d); got shape {shape}.")
    _validation.check_finite_tree(matrix, name="matrix")
    return _sqrtm(as_array(matrix))


@jax.jit
def _sqrtm(matrix):
    sym = 0.5 * (matrix + jnp.swapaxes(matrix, -1, -2))
    vals, vecs = jnp.linalg.eigh(sym)
    root = jnp.sqrt(jnp.clip(vals, 0.0))
    return (vecs * root[..., None, :]) @ jnp.swapaxes(vecs, -1, -2)


def gaussian_w2(mean1: Array, cov1: Array, mean2: Array, cov2: Array) -> Array:
    """W2 between ``N(mean1, cov1)`` and ``N(mean2, cov2)``; batched over leading axes.

    Args:
        mean1, mean2: ``(..., d)``.
        cov1, cov2: ``(..., d, d)``, symmetric PSD.

    Returns:
        ``(...)`` distances.
    """
    _validation.check_gaussian(mean1, cov1, mean_name="mean1", cov_name="cov1")
    _validation.check_gaussian(mean2, cov2, mean_name="mean2", cov_name="cov2")
    if jnp.shape(mean1)[-1] != jnp.shape(mean2)[-1]:
        raise ValueError(
            f"`mean1` and `mean2` must have the same dimension d; got shapes "
            f"{jnp.shape(mean1)} and {jnp.shape(mean2)}."
        )
    return _w2(*map(as_array, (mean1, cov1, mean2, cov2)))


@jax.jit
def _w2(mean1, cov1, mean2, cov2):
    # The covariance term tr Σ₁ + tr Σ₂ − 2 tr (Σ₁^{1/2} Σ₂ Σ₁^{1/2})^{1/2} equals
    # min_U ‖Σ₁^{1/2} − U Σ₂^{1/2}‖_F² over orthogonal U, attained at the polar factor
    # U = Q Pᵀ of Σ₂^{1/2} Σ₁^{1/2} = P S Qᵀ. As a sum of squares it has no cancellation: the
    # trace form loses every digit of two close covariances of large scale (float32 rounding of
    # traces of size tr Σ leaves an error of order sqrt(eps tr Σ) in W2).
    # Both roots from ONE batched eigh. Two independent eigh calls in one program run at once
    # on XLA:CPU's intra-op thread pool, and jaxlib's batched eigh waits inside that pool for
    # its own sub-batches: with as many calls as pool threads (two on a 2-core machine) every
    # thread waits and the program never finishes (docs/known-issues.md).
    cov1, cov2 = jnp.broadcast_arrays(cov1, cov2)
    root1, root2 = _sqrtm(jnp.stack([cov1, cov2]))
    p, _, qt = jnp.linalg.svd(root2 @ root1, full_matrices=False)
    polar = jnp.swapaxes(qt, -1, -2) @ jnp.swapaxes(p, -1, -2)
    diff = root1 - polar @ root2
    sq = jnp.sum((mean1 - mean2) ** 2, axis=-1) + jnp.sum(diff**2, axis=(-2, -1))
    return jnp.sqrt(sq)


def empirical_moments(samples: Array, axis: int = 0, ddof: int = 1) -> tuple[Array, Array]:
    """Mean ``(..., d)`` and covariance ``(..., d, d)`` over ``axis`` of ``samples (..., d)``."""
    return _moments(as_array(samples), _sample_axis(samples, axis, ddof), ddof)


def _sample_axis(samples, axis: int, ddof: int) -> int:
    """``axis`` as a non-negative index, after checking ``samples`` and that axis."""
    shape = jnp.shape(samples)
    if len(shape) < 2:
        raise ValueError(f"`samples` must be (..., d) with a sample axis; got shape {shape}.")
    if not -len(shape) <= axis < len(shape) or axis % len(shape) == len(shape) - 1:
        raise ValueError(
            f"`axis` must index a sample axis of `samples` (shape {shape}), not the last "
            f"(coordinate) axis; got {axis}."
        )
    if shape[axis] <= ddof:
        raise ValueError(
            f"`samples` needs more than ddof={ddof} samples along axis {axis}; got shape {shape}."
        )
    _validation.check_samples(samples, name="samples", min_ndim=2, layout="(..., d)")
    return axis % len(shape)


@partial(jax.jit, static_argnums=(1, 2))
def _moments(samples, axis: int, ddof: int):
    x = jnp.moveaxis(samples, axis, 0)
    mean = jnp.mean(x, axis=0)
    centred = x - mean[None]
    cov = jnp.einsum("c...i,c...j->...ij", centred, centred) / (x.shape[0] - ddof)
    return mean, cov


def gaussian_w2_to_target(samples: Array, mean: Array, cov: Array, axis: int = 0) -> Array:
    """W2 between the Gaussian fit of ``samples`` over ``axis`` and ``N(mean, cov)``."""
    _validation.check_gaussian(mean, cov)
    if jnp.shape(mean)[-1] != jnp.shape(samples)[-1]:
        raise ValueError(
            f"`mean` has dimension {jnp.shape(mean)[-1]} but `samples` (shape "
            f"{jnp.shape(samples)}) have {jnp.shape(samples)[-1]} coordinates."
        )
    axis = _sample_axis(samples, axis, 1)
    return _w2_to_target(*map(as_array, (samples, mean, cov)), axis)


@partial(jax.jit, static_argnums=(3,))
def _w2_to_target(samples, mean, cov, axis: int):
    m, s = _moments(samples, axis, 1)
    return _w2(m, s, jnp.broadcast_to(mean, m.shape), jnp.broadcast_to(cov, s.shape))


def per_agent_w2(positions: Array, mean: Array, cov: Array) -> Array:
    """Per-agent, per-iteration W2 between the chains' Gaussian fit and ``N(mean, cov)``.

    Args:
        positions: ``(num_chains, num_iterations, N, d)``, as in ``trace.positions``.
        mean: ``(d,)`` target mean; cov: ``(d, d)`` target covariance.

    Returns:
        ``(num_iterations, N)``.
    """
    if positions.ndim != 4:
        raise ValueError(
            f"`positions` must be (num_chains, num_iterations, N, d); got shape {positions.shape}."
        )
    _validation.check_samples(positions, name="positions", min_ndim=4, layout="(C, T, N, d)")
    return gaussian_w2_to_target(positions, mean, cov, axis=0)


def consensus_error(positions: Array) -> Array:
    """Root-mean-square distance of agents to their network average.

    Args:
        positions: ``(..., N, d)``.

    Returns:
        ``(...)``: ``sqrt(mean_i ‖x_i − x̄‖²)``.
    """
    _validation.check_samples(positions, name="positions", min_ndim=2, layout="(..., N, d)")
    return _consensus_error(as_array(positions))


def ensemble_consensus_error(positions: Array) -> Array:
    """The consensus error of an ensemble of chains: the root mean over chains of the squared
    :func:`consensus_error`, ``sqrt(mean_c mean_i ‖x_ci − x̄_c‖²)``.

    The Monte Carlo estimate of ``‖x̃‖_{L₂} / √N``, the quantity the paper's consensus bounds
    concern (``‖X‖_{L₂} = (E‖X‖²)^{1/2}``, ``x̃`` the stacked deviations from the average). It
    is the one aggregate over chains that dgsgld reports (streamed metrics, the figures); the
    mean over chains of :func:`consensus_error` is smaller (Jensen's inequality).

    Args:
        positions: ``(C, ..., N, d)``, chains first.

    Returns:
        ``(...)``.
    """
    _validation.check_samples(positions, name="positions", min_ndim=3, layout="(C, ..., N, d)")
    return _ensemble_consensus_error(as_array(positions))


def _squared_consensus(positions):
    """``(..., N, d) -> (...)``: ``mean_i ‖x_i − x̄‖²``."""
    centred = positions - jnp.mean(positions, axis=-2, keepdims=True)
    return jnp.mean(jnp.sum(centred**2, axis=-1), axis=-1)


@jax.jit
def _consensus_error(positions):
    return jnp.sqrt(_squared_consensus(positions))


@jax.jit
def _ensemble_consensus_error(positions):
    return jnp.sqrt(jnp.mean(_squared_consensus(positions), axis=0))


def empirical_w2(x: Array, y: Array, *, size: int = 500, scale: Array | None = None,
                 seed: int = 0) -> float:
    """Exact ``W2`` between the empirical measures of ``size``-point subsamples of ``x (m, q)``
    and ``y (n, q)`` (all points when ``size`` is at least both sizes and they are equal).

    An optimal assignment (``scipy.optimize.linear_sum_assignment`` on squared Euclidean costs,
    ``O(size³)``) in float64 on the host; no Gaussian fit, unlike :func:`gaussian_w2_to_target`.

    Args:
        x, y: draws; rows are points.
        size: points of each subsample (without replacement; at most ``min(m, n)``).
        scale: optional ``(q,)`` positive scales dividing every coordinate first (e.g. a
            reference's sds, so that scores of different targets are comparable).
        seed: NumPy seed of the subsamples.
    """
    x, y = host_draws(x, "x"), host_draws(y, "y", np.shape(x)[1])
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"`size` must be a positive int; got {size!r}.")
    size = min(size, x.shape[0], y.shape[0])
    if scale is not None:
        scale = np.asarray(scale, np.float64)
        if scale.shape != (x.shape[1],) or not np.all(scale > 0):
            raise ValueError(f"`scale` must be ({x.shape[1]},) positive; got {scale}.")
        x, y = x / scale, y / scale
    rng = np.random.default_rng(seed)
    if size < x.shape[0]:
        x = x[rng.choice(x.shape[0], size, replace=False)]
    if size < y.shape[0]:
        y = y[rng.choice(y.shape[0], size, replace=False)]
    cost = np.sum((x[:, None, :] - y[None, :, :]) ** 2, axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))
