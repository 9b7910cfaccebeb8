"""Kernel Stein discrepancy with the inverse multiquadric kernel: the one Stein kernel of dgsgld.

The KSD (Gorham and Mackey, 2017) measures how far draws are from a target ``π`` from the
target's score ``s = ∇ log π`` at the draws only: no reference draws, no normalizing constant.
With the inverse multiquadric kernel ``k(x, y) = (c² + ‖x − y‖²)^β`` (default ``c = 1,
β = −1/2``), ``r = x − y`` and ``u = c² + ‖r‖²``, the Stein kernel is

    k_π(x, y) = s(x)·s(y) u^β + 2β u^{β−1} (s(y) − s(x))·r
                − 2β d u^{β−1} − 4β(β−1) u^{β−2} ‖r‖²,

and ``KSD² = mean_{i,j} k_π(x_i, x_j)`` (the V-statistic; ``unbiased=True`` drops ``i = j``,
an unbiased estimate of the population ``KSD²`` that may be negative). For draws from ``π``
itself the V-statistic has expectation ``E k_π(x, x) / m``; for ``N(0, I_d)`` and the default
kernel that is exactly ``2d / m``.

The kernel is written once, here: :func:`ksd` scores stored draws with it, and
:func:`dgsgld.evaluate.streamed_ksd` sums it over chains inside a run.
:func:`stein_scores` gives ``s`` from a :class:`dgsgld.Potential` as minus the sum of the
agents' own full gradients, so that no agent needs another's data.
"""

from __future__ import annotations

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array
from ._checks import host_draws

__all__ = ["ksd", "stein_scores"]


def _check_kernel(c, beta) -> tuple[float, float]:
    """The IMQ kernel's ``c > 0`` and ``β ∈ (−1, 0)`` as floats, or a ``ValueError``."""
    if isinstance(c, bool) or not isinstance(c, (int, float, np.integer, np.floating)) \
            or not c > 0:
        raise ValueError(f"`c` must be a positive number; got {c!r}.")
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)) \
            or not -1 < beta < 0:
        raise ValueError(f"`beta` must lie in (-1, 0); got {beta!r}.")
    return float(c), float(beta)


def _kernel_matrix(x: Array, s: Array, c, beta) -> Array:
    """``k_π(x_a, x_b)`` of the IMQ Stein kernel (module doc) for draws ``x (..., m, d)`` with
    scores ``s (..., m, d)``: ``(..., m, m)``, batched over the leading axes."""
    d = x.shape[-1]
    r = x[..., :, None, :] - x[..., None, :, :]                       # r_ab = x_a − x_b
    r2 = jnp.sum(r * r, axis=-1)
    u = c**2 + r2
    ss = jnp.einsum("...ak,...bk->...ab", s, s)
    # (s(y) − s(x))·r with x = x_a (row), y = x_b (column).
    sr = jnp.einsum("...bk,...abk->...ab", s, r) - jnp.einsum("...ak,...abk->...ab", s, r)
    return (ss * u**beta + 2 * beta * u ** (beta - 1) * sr - 2 * beta * d * u ** (beta - 1)
            - 4 * beta * (beta - 1) * u ** (beta - 2) * r2)


@partial(jax.jit, static_argnames=("unbiased",))
def _ksd2(x, s, c, beta, unbiased):
    k = _kernel_matrix(x, s, c, beta)
    m = x.shape[0]
    if unbiased:
        return (jnp.sum(k) - jnp.trace(k)) / (m * (m - 1))
    return jnp.mean(k)


def ksd(draws: Array, scores: Array, *, c: float = 1.0, beta: float = -0.5,
        unbiased: bool = False) -> float:
    """Kernel Stein discrepancy (IMQ kernel) of ``draws (m, d)`` with scores ``(m, d)``.

    Args:
        draws: ``(m, d)``, ``m >= 2``.
        scores: ``(m, d)``: ``∇ log π`` at each draw (e.g. :func:`stein_scores`).
        c, beta: the kernel's ``c > 0`` and ``β ∈ (−1, 0)``.
        unbiased: drop the diagonal ``i = j`` (the U-statistic).

    Returns:
        ``sqrt(KSD²)`` for the V-statistic (default), or the unbiased ``KSD²`` itself (may be
        negative) when ``unbiased``. See the module doc.
    """
    x = host_draws(draws, "draws")
    s = host_draws(scores, "scores", x.shape[1])
    if s.shape != x.shape:
        raise ValueError(f"`scores` must have the shape of `draws` {x.shape}; got {s.shape}.")
    c, beta = _check_kernel(c, beta)
    value = float(_ksd2(jnp.asarray(x), jnp.asarray(s), c, beta, bool(unbiased)))
    return value if unbiased else float(np.sqrt(max(value, 0.0)))


def stein_scores(potential, draws: Array) -> Array:
    """``∇ log π`` at ``draws (m, d)``: minus the sum over agents of ``∇ f_i`` (full batch).

    Args:
        potential: a :class:`dgsgld.Potential` of ``N`` agents.
        draws: ``(m, d)``.

    Returns:
        ``(m, d)``.
    """
    return _stein_scores(potential, jnp.asarray(draws))


@eqx.filter_jit
def _stein_scores(potential, x):
    n = potential.num_agents
    one = lambda p: -jnp.sum(potential.full_grad(jnp.broadcast_to(p, (n, *p.shape))), 0)
    return jax.vmap(one)(x)
