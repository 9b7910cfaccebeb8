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


def _extreme_eigenvalues(h):
    eig = np.linalg.eigvalsh(0.5 * (h + h.T))
    return float(eig[0]), float(np.max(np.abs(eig)))


def laplace(target, *, tol: float = 1e-6, max_iterations: int = 50) -> Laplace:
    """The Laplace approximation of ``target`` (a :class:`dgsgld.posteriors.Target`).

    Damped Newton on ``−log p`` from zero until the Newton decrement is below ``tol`` where
    the Hessian is positive definite: halving steps while the decrement is large (> 1/4), full
    steps once in the quadratic region; where the Hessian is not positive definite its spectrum
    is shifted up (a descent direction), so that saddles are left, not found.

    Args:
        target: the posterior (its pooled ``log_density``).
        tol: stop when the Newton decrement (Laplace sds to the mode) is below this.
        max_iterations: Newton iterations allowed.

    Returns:
        A :class:`Laplace`; ``RuntimeError`` when a value is not finite or when Newton's method
        does not reach a mode in ``max_iterations``.
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
            if not (np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(h))):
                raise RuntimeError(f"Newton's method on {target.name!r} met a non-finite value.")
            # Where −log p is not convex, a shifted Hessian (its spectrum raised to at least
            # 1e-3 of its largest modulus): a descent direction, so that the search leaves
            # saddles instead of converging to them.
            lowest, top = _extreme_eigenvalues(h)
            convex = lowest > 0
            shift = 0.0 if convex else 1e-3 * max(top, 1.0) - lowest
            step = np.linalg.solve(h + shift * np.eye(len(x)), g)
            decrement = float(np.sqrt(max(g @ step, 0.0)))
            if convex and decrement < tol:
                break
            t = 1.0
            while (decrement > 0.25 or not convex) and t > 1e-12 \
                    and not float(neg(x - t * step)) <= f - 0.25 * t * decrement**2:
                t *= 0.5
            x = x - t * step
        else:
            found = ("" if convex else f"; the Hessian there is not positive definite (smallest "
                     f"eigenvalue {lowest:.3g}): no mode")
            raise RuntimeError(f"Newton's method on {target.name!r} did not converge in "
                               f"{max_iterations} iterations (decrement {decrement:.3g}{found}).")
    h = 0.5 * (h + h.T)
    eig = np.linalg.eigvalsh(h)  # positive: the loop stops only where it is convex
    cov = np.linalg.inv(h)
    cov = 0.5 * (cov + cov.T)
    return Laplace(x, cov, np.linalg.cholesky(cov), it, decrement, float(eig[-1] / eig[0]),
                   time.perf_counter() - start)
