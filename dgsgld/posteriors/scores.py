"""Scores of a sample against a reference posterior.

* :func:`moment_errors`: per coordinate, the standardized mean error
  ``|mean(x) − m_ref| / sd_ref`` and the sd ratio ``sd(x) / sd_ref``, with their maximum (the
  sd ratio farthest from 1 on the log scale) and median.
* :func:`wasserstein2`: the exact 2-Wasserstein distance between two empirical measures of
  equal size, by an optimal assignment (``scipy.optimize.linear_sum_assignment`` on squared
  Euclidean costs; ``O(m^3)``), on random subsamples of ``m`` points of each (default 500).
  Coordinates can be standardized by the reference's sds first, so that scores of different
  targets are comparable.
* :func:`predictive_scores`: for classifiers, the total variation between the sampled and the
  reference posterior predictive ``p(y | z_j, D)`` at each input, averaged over inputs, and
  how often their most probable classes agree.
* :func:`ksd`: the kernel Stein discrepancy with the inverse multiquadric kernel
  ``k(x, y) = (c² + ‖x − y‖²)^β`` (Gorham and Mackey, 2017; default ``c = 1, β = −1/2``),
  from the target's score ``s = ∇ log π`` at the draws only: no reference draws. With
  ``r = x − y`` and ``u = c² + ‖r‖²`` the Stein kernel is

      k_π(x, y) = s(x)·s(y) u^β + 2β u^{β−1} (s(y) − s(x))·r
                  − 2β d u^{β−1} − 4β(β−1) u^{β−2} ‖r‖²,

  and ``KSD² = mean_{i,j} k_π(x_i, x_j)`` (the V-statistic; ``unbiased=True`` drops ``i = j``,
  an unbiased estimate of the population ``KSD²`` that may be negative). For draws from ``π``
  itself the V-statistic has expectation ``E k_π(x, x) / m``; for ``N(0, I_d)`` and the default
  kernel that is exactly ``2d / m``. :func:`stein_scores` gives ``s`` from a
  :class:`dgsgld.Potential` as the sum of the agents' own gradients, so that no agent needs
  another's data.
"""

from __future__ import annotations

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment

from .._util.types import Array
from .references import Reference

__all__ = ["ksd", "moment_errors", "predictive_scores", "stein_scores", "wasserstein2"]


def _draws(x, name: str, dim: int | None = None) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"`{name}` must be (num_draws >= 2, dim); got shape {x.shape}.")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"`{name}` has {x.shape[1]} coordinates; expected {dim}.")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"`{name}` holds non-finite values.")
    return x


def moment_errors(draws: Array, reference: Reference) -> dict:
    """Standardized mean errors and sd ratios of ``draws (m, q)`` against ``reference``.

    Returns:
        ``{"mean_error": (q,), "sd_ratio": (q,), "mean_error_max", "mean_error_median",
        "sd_ratio_worst", "sd_ratio_median"}``: ``mean_error = |mean − m_ref| / sd_ref``,
        ``sd_ratio = sd / sd_ref``; ``sd_ratio_worst`` is the ratio with the largest
        ``|log ratio|``.
    """
    x = _draws(draws, "draws", len(reference.mean))
    err = np.abs(x.mean(0) - reference.mean) / reference.sd
    ratio = x.std(0, ddof=1) / reference.sd
    return {"mean_error": err, "sd_ratio": ratio, "mean_error_max": float(err.max()),
            "mean_error_median": float(np.median(err)),
            "sd_ratio_worst": float(ratio[np.argmax(np.abs(np.log(ratio)))]),
            "sd_ratio_median": float(np.median(ratio))}


def wasserstein2(x: Array, y: Array, *, size: int = 500, scale: Array | None = None,
                 seed: int = 0) -> float:
    """Exact ``W2`` between the empirical measures of ``size``-point subsamples of ``x (m, q)``
    and ``y (n, q)`` (all points when ``size`` is at least both sizes and they are equal).

    Args:
        x, y: draws; rows are points.
        size: points of each subsample (without replacement; at most ``min(m, n)``).
        scale: optional ``(q,)`` positive scales dividing every coordinate first (e.g. the
            reference sds).
        seed: NumPy seed of the subsamples.
    """
    x, y = _draws(x, "x"), _draws(y, "y", np.shape(x)[1])
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


@partial(jax.jit, static_argnames=("unbiased",))
def _ksd2(x, s, c, beta, unbiased):
    d = x.shape[1]
    r = x[:, None, :] - x[None, :, :]
    r2 = jnp.sum(r**2, axis=-1)
    u = c**2 + r2
    ss = s @ s.T
    # (s(y) − s(x))·r with x = row i, y = column j.
    sr = jnp.einsum("jk,ijk->ij", s, r) - jnp.einsum("ik,ijk->ij", s, r)
    k = (ss * u**beta + 2 * beta * u ** (beta - 1) * sr - 2 * beta * d * u ** (beta - 1)
         - 4 * beta * (beta - 1) * u ** (beta - 2) * r2)
    m = x.shape[0]
    if unbiased:
        return (jnp.sum(k) - jnp.trace(k)) / (m * (m - 1))
    return jnp.mean(k)


def ksd(draws: Array, scores: Array, *, c: float = 1.0, beta: float = -0.5,
        unbiased: bool = False) -> float:
    """Kernel Stein discrepancy (IMQ kernel) of ``draws (m, d)`` with scores ``(m, d)``.

    Returns:
        ``sqrt(KSD²)`` for the V-statistic (default), or the unbiased ``KSD²`` itself (may be
        negative) when ``unbiased``. See the module doc.
    """
    x = _draws(draws, "draws")
    s = _draws(scores, "scores", x.shape[1])
    if s.shape != x.shape:
        raise ValueError(f"`scores` must have the shape of `draws` {x.shape}; got {s.shape}.")
    if not c > 0:
        raise ValueError(f"`c` must be positive; got {c!r}.")
    if not -1 < beta < 0:
        raise ValueError(f"`beta` must lie in (-1, 0); got {beta!r}.")
    value = float(_ksd2(jnp.asarray(x), jnp.asarray(s), c, beta, bool(unbiased)))
    return value if unbiased else float(np.sqrt(max(value, 0.0)))


def stein_scores(potential, draws: Array) -> Array:
    """``∇ log π`` at ``draws (m, d)``: minus the sum over agents of ``∇ f_i`` (full batch)."""
    return _stein_scores(potential, jnp.asarray(draws))


@eqx.filter_jit
def _stein_scores(potential, x):
    n = potential.num_agents
    one = lambda p: -jnp.sum(potential.full_grad(jnp.broadcast_to(p, (n, *p.shape))), 0)
    return jax.vmap(one)(x)


def predictive_scores(probs: Array, reference_probs: Array) -> dict:
    """Compare posterior predictives ``(n, K)`` (class probabilities at ``n`` inputs).

    Returns:
        ``{"predictive_tv": mean_j ½ Σ_k |p_jk − r_jk|, "predictive_agreement": mean_j
        1[argmax_k p_jk = argmax_k r_jk]}``.
    """
    p = _draws(probs, "probs")
    r = _draws(reference_probs, "reference_probs", p.shape[1])
    if p.shape != r.shape:
        raise ValueError(f"`reference_probs` must have the shape of `probs` {p.shape}; got "
                         f"{r.shape}.")
    return {"predictive_tv": float(np.mean(0.5 * np.abs(p - r).sum(1))),
            "predictive_agreement": float(np.mean(p.argmax(1) == r.argmax(1)))}
