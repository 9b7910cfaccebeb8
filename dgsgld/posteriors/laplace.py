"""The Laplace approximation of a benchmark target: its MAP and the inverse negative Hessian there.

At ``n`` data a regular posterior is Gaussian up to ``O(n^(-1/2))`` (Bernstein-von Mises):
``N(x̂, H⁻¹)`` with ``x̂`` the MAP and ``H = −∇² log p(x̂ | D)``. The reference maker samples in
coordinates whitened by it, and the cost benchmark gives it to the samplers as a constant
preconditioner. Computed in float64 (a local ``jax.enable_x64`` scope) whatever the global
setting: Newton's stopping rule asks for more digits than float32 sums of ``10⁶`` terms keep.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import numpy as np

__all__ = ["Laplace", "laplace"]


class Laplace(NamedTuple):
    """A target's Laplace approximation ``N(mode, cov)``.

    Attributes:
        mode: ``(d,)`` float64, the MAP.
        cov: ``(d, d)`` float64, ``H⁻¹`` at the MAP.
        chol: ``(d, d)`` lower triangular, ``chol cholᵀ = cov``.
        iterations: Newton iterations (each one gradient and one Hessian of the pooled
            log-density, i.e. ``n`` per-datum gradients and ``n`` per-datum Hessians).
        decrement: the last Newton decrement ``sqrt(gᵀ H⁻¹ g)``: the distance to the mode in
            Laplace sds.
        condition: ``H``'s condition number.
        wall_s: seconds (compilation included).
    """

    mode: np.ndarray
    cov: np.ndarray
    chol: np.ndarray
    iterations: int
    decrement: float
    condition: float
    wall_s: float


def laplace(target, *, tol: float = 1e-6, max_iterations: int = 50) -> Laplace:
    """The Laplace approximation of ``target`` (a :class:`dgsgld.posteriors.Target`).

    Damped Newton on ``−log p`` from zero until the Newton decrement is below ``tol``: halving
    steps while the decrement is large (> 1/4), full steps once in the quadratic region.

    Args:
        target: the posterior (its pooled ``log_density``).
        tol: stop when the Newton decrement (Laplace sds to the mode) is below this.
        max_iterations: Newton iterations allowed.

    Returns:
        A :class:`Laplace`; ``RuntimeError`` when a value is not finite, when Newton's method
        does not converge in ``max_iterations``, or when the Hessian at the end is not positive
        definite (no mode).
    """
    if not tol > 0:
        raise ValueError(f"`tol` must be positive; got {tol!r}.")
    if not (isinstance(max_iterations, int) and max_iterations >= 1):
        raise ValueError(f"`max_iterations` must be a positive int; got {max_iterations!r}.")
    start = time.perf_counter()
    with jax.enable_x64(True):
        neg = lambda x: -target.log_density(x)
        value_and_grad = jax.jit(jax.value_and_grad(neg))
        hessian = jax.jit(jax.hessian(neg))
        x = np.zeros(target.dim)
        for it in range(1, max_iterations + 1):
            f, g = (np.asarray(v, np.float64) for v in value_and_grad(x))
            h = np.asarray(hessian(x), np.float64)
            step = np.linalg.solve(h, g)
            decrement = float(np.sqrt(max(g @ step, 0.0)))
            if not (np.isfinite(f) and np.isfinite(decrement)):
                raise RuntimeError(f"Newton's method on {target.name!r} met a non-finite value.")
            if decrement < tol:
                break
            t = 1.0
            while decrement > 0.25 and float(neg(x - t * step)) > f - 0.25 * t * decrement**2:
                t *= 0.5
            x = x - t * step
        else:
            raise RuntimeError(f"Newton's method on {target.name!r} did not converge in "
                               f"{max_iterations} iterations (decrement {decrement:.3g}).")
    h = 0.5 * (h + h.T)
    eig = np.linalg.eigvalsh(h)
    if eig[0] <= 0:
        raise RuntimeError(f"the Hessian of {target.name!r} at the stationary point is not "
                           f"positive definite (smallest eigenvalue {eig[0]:.3g}): no mode.")
    cov = np.linalg.inv(h)
    cov = 0.5 * (cov + cov.T)
    return Laplace(x, cov, np.linalg.cholesky(cov), it, decrement, float(eig[-1] / eig[0]),
                   time.perf_counter() - start)
