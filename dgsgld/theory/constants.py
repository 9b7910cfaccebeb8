"""The inputs of the bounds, estimated from a ``Potential`` and a schedule.

* ``μ, L`` (Assumption 3.3): extreme eigenvalues of the agents' Hessians. Exact for quadratic
  potentials (the Hessian is the same everywhere); otherwise an *estimate*: the extremes over the
  points you pass, which bound nothing outside them.
* ``σ²`` (Assumption 3.1): a Monte Carlo *estimate* of ``max_i E‖∇̃f_i(x_i) − ∇f_i(x_i)‖²`` at the
  points you pass. Mini-batch noise of a regression grows with ``‖x‖``, so no global bound
  exists; evaluate it where the iterates live (e.g. at posterior draws).
* ``V_i``: every agent's gradient-error covariance at a point (:func:`estimate_gradient_covariance`,
  what ``Quadratic.gradient_noise`` takes for the exact laws of mini-batch runs).
* ``δ, B`` (Assumption 3.2 (iii)): from :func:`dgsgld.networks.delta`.
* the initial moments: from the initial law and the first ``B`` iterations, exactly
  (:func:`exact_bound_inputs`, quadratics) or by Monte Carlo (:func:`bound_inputs`).
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .. import networks
from .._util.types import ArrayLike, PRNGKey
from ..samplers import DIGingSGLD
from .bounds import BoundInputs
from .exact import Quadratic, agent_hessians, exact_moments, laplace_quadratic

__all__ = [
    "Curvature",
    "GradientNoise",
    "bound_inputs",
    "choose_window",
    "estimate_gradient_covariance",
    "estimate_mu_L",
    "estimate_sigma2",
    "exact_bound_inputs",
]


class Curvature(NamedTuple):
    """``μ = min λ_min(∇²f_i)``, ``L = max λ_max(∇²f_i)`` over agents and points.

    Attributes:
        mu, L: the extremes (float).
        exact: ``True`` when every Hessian was identical at every point checked (a quadratic),
            so ``mu`` and ``L`` are the exact constants of Assumption 3.3.
    """

    mu: float
    L: float
    exact: bool


class GradientNoise(NamedTuple):
    """Monte Carlo estimate of the gradient-noise variance of Assumption 3.1.

    Attributes:
        sigma2: ``max`` over agents and points of the estimated ``E‖ξ_i‖²``.
        per_agent: ``(M, N)`` estimates per point and agent.
        stderr: ``(M, N)`` their Monte Carlo standard errors.
    """

    sigma2: float
    per_agent: np.ndarray
    stderr: np.ndarray


def estimate_mu_L(potential, positions: ArrayLike, *, rtol: float = 1e-5) -> Curvature:
    """``μ`` and ``L`` of Assumption 3.3 from Hessian eigenvalues at the given points.

    Args:
        potential: a ``dgsgld.Potential`` with flat ``(d,)`` parameters.
        positions: ``(N, d)`` or ``(M, N, d)`` points (e.g. initial positions and samples).
        rtol: Hessians equal within this relative tolerance at all points (and at one extra
            shifted point) count as one quadratic: then ``exact=True``.

    Returns:
        :class:`Curvature`. Exact for quadratics; otherwise an estimate valid only at the points.
    """
    x = jnp.asarray(positions)
    x = x[None] if x.ndim == 2 else x
    points = jnp.concatenate([x, x[:1] + 1.0])  # one shifted probe for the quadratic check
    hess = jax.vmap(lambda p: agent_hessians(potential, p))(points)
    hess = np.asarray(0.5 * (hess + jnp.swapaxes(hess, -1, -2)), dtype=np.float64)
    eig = np.linalg.eigvalsh(hess)
    scale = np.max(np.abs(hess)) + 1e-300
    exact = bool(np.max(np.abs(hess - hess[:1])) <= rtol * scale)
    return Curvature(float(eig[..., 0].min()), float(eig[..., -1].max()), exact)


def estimate_sigma2(
    potential, positions: ArrayLike, key: PRNGKey, *, num_draws: int = 256
) -> GradientNoise:
    """Monte Carlo estimate of ``σ² ≥ E‖∇̃f_i(x_i) − ∇f_i(x_i)‖²`` at the given points.

    Draws ``num_draws`` stochastic gradients per point (``potential.grad``) and compares each
    with ``potential.full_grad``. Full-batch potentials return exactly 0 without sampling.

    Args:
        potential: a ``dgsgld.Potential``.
        positions: ``(N, d)`` or ``(M, N, d)``.
        key: PRNG key.
        num_draws: draws per point.

    Returns:
        :class:`GradientNoise` (an estimate at these points, not a certified bound).
    """
    x = jnp.asarray(positions)
    x = x[None] if x.ndim == 2 else x
    M, N = x.shape[0], x.shape[1]
    if potential.batch_size is None and potential.gradient_fn is None:
        zeros = np.zeros((M, N))
        return GradientNoise(0.0, zeros, zeros)

    def at_point(p, k):
        exact = potential.full_grad(p)
        keys = jax.random.split(k, num_draws)
        sq = jax.vmap(lambda kk: jnp.sum((potential.grad(p, kk) - exact) ** 2, axis=-1))(keys)
        return jnp.mean(sq, axis=0), jnp.std(sq, axis=0) / np.sqrt(num_draws)

    mean, err = jax.vmap(at_point)(x, jax.random.split(key, M))
    mean, err = np.asarray(mean, np.float64), np.asarray(err, np.float64)
    return GradientNoise(float(mean.max()), mean, err)


def estimate_gradient_covariance(potential, positions, key: PRNGKey, *, num_draws: int = 256,
                                 diagonal: bool = False, anchor=None,
                                 directions=None) -> np.ndarray:
    """Monte Carlo estimate of every agent's gradient-error covariance
    ``V_i = Cov(∇̃f_i(x_i))`` at one point: the sample covariance (divisor ``num_draws − 1``) of
    ``num_draws`` draws of ``potential.grad(positions, key)``. The draws' own mean stands for
    ``∇f_i``, so no full-batch gradient is needed and any unbiased estimator of the potential
    (mini-batches with or without replacement, a ``gradient_fn``) is measured as it runs.

    With ``anchor`` (points like ``positions``): the error of SVRG's control variate around
    that anchor, the covariance of ``grad_on(positions, B) − grad_on(anchor, B)`` over the
    mini-batches ``B`` (the same batch at both points; its full-batch part is exact). Zero
    where ``anchor`` is ``positions``; needs ``log_likelihood``.

    Args:
        potential: a ``dgsgld.Potential``.
        positions: the agents' points, a pytree with array leaves ``(N, *param_shape)``.
        key: PRNG key.
        num_draws: draws (at least 2). The relative standard error of an entry is about
            ``√(2 / num_draws)``.
        diagonal: return the variances only (for large models).
        anchor: the control variate's anchor points, like ``positions``; ``None``: the
            potential's own mini-batch gradients.
        directions: ``(d, k)`` directions over the flattened parameters: the covariances of
            the error's components along them, ``Dᵀ V_i D`` (for large models, where ``V_i``
            itself would not fit); ``None``: every parameter.

    Returns:
        ``(N, d, d)`` covariances (``(N, d)`` variances with ``diagonal``; ``(N, k, k)`` or
        ``(N, k)`` along ``directions``) over each agent's flattened parameters (leaf order of
        ``jax.flatten_util.ravel_pytree``), float64. All zeros for a full-batch potential
        without ``gradient_fn`` (no draw is made).

    Raises:
        ValueError: naming ``num_draws``, when it is not an integer of at least 2; naming
            ``anchor``, for a potential without ``log_likelihood`` or an ``anchor`` whose
            structure or shapes differ from ``positions``'.
    """
    if isinstance(num_draws, bool) or not isinstance(num_draws, (int, np.integer)) \
            or num_draws < 2:
        raise ValueError(f"`num_draws` must be an integer >= 2; got {num_draws!r}.")
    arrays_x = eqx.filter(positions, eqx.is_array)
    leaves = jax.tree.leaves(arrays_x)
    N, d = leaves[0].shape[0], int(sum(np.prod(leaf.shape[1:]) for leaf in leaves))
    if anchor is not None:
        arrays = eqx.filter(anchor, eqx.is_array)
        if jax.tree.structure(arrays) != jax.tree.structure(arrays_x) or any(
                np.shape(a) != np.shape(p) for a, p in zip(jax.tree.leaves(arrays), leaves)):
            raise ValueError("`anchor` must have the structure and shapes of `positions` (one "
                             "anchor per agent); got array leaves "
                             f"{[np.shape(a) for a in jax.tree.leaves(arrays)]} against "
                             f"{[np.shape(p) for p in leaves]}.")
    if directions is not None:
        directions = np.asarray(directions, np.float64)
        if directions.ndim != 2 or directions.shape[0] != d:
            raise ValueError(f"`directions` must be a ({d}, k) array over the {d} flattened "
                             f"parameters; got shape {directions.shape}.")
    k = d if directions is None else directions.shape[1]
    if potential.batch_size is None and potential.gradient_fn is None:
        return np.zeros((N, k) if diagonal else (N, k, k))
    keys = jax.random.split(key, int(num_draws))
    if anchor is None:
        draws = _gradient_draws(potential, positions, keys)
    elif potential.log_likelihood is None:
        raise ValueError("`anchor` (a control variate's error) needs a `Potential` with "
                         "`log_likelihood`; this potential has a `gradient_fn` oracle.")
    else:
        draws = _difference_draws(potential, positions, anchor, keys)
    draws = np.asarray(draws, np.float64)
    centred = draws - draws.mean(0)
    if directions is not None:
        centred = centred @ directions
    if diagonal:
        return np.einsum("kia,kia->ia", centred, centred) / (num_draws - 1)
    return np.einsum("kia,kib->iab", centred, centred) / (num_draws - 1)


@eqx.filter_jit
def _gradient_draws(potential, positions, keys):
    """``(K, N, d)`` flattened ``potential.grad(positions, k)`` for each of ``keys``."""
    flat = jax.vmap(lambda tree: ravel_pytree(tree)[0])
    return jax.vmap(lambda k: flat(potential.grad(positions, k)))(keys)


@eqx.filter_jit
def _difference_draws(potential, positions, anchor, keys):
    """``(K, N, d)`` flattened ``grad_on(positions, B) − grad_on(anchor, B)``, ``B`` the
    mini-batches of each of ``keys``."""
    flat = jax.vmap(lambda tree: ravel_pytree(tree)[0])

    def one(k):
        idx = potential.batch_indices(k)
        return flat(potential.grad_on(positions, idx)) - flat(potential.grad_on(anchor, idx))
    return jax.vmap(one)(keys)


def choose_window(mixing, max_window: int | None = None) -> tuple[int, float]:
    """``(B, δ)`` maximizing ``(1 − δ_B)²/B²``, to which Lemma 3.6's (corrected) ``η̄`` is
    proportional.

    Args:
        mixing: a schedule or ``(P, N, N)`` stack.
        max_window: largest ``B`` tried; default the period ``P``.

    Returns:
        ``(B, δ)`` with ``δ = dgsgld.networks.delta(mixing, B).sup < 1``.

    Raises:
        ValueError: if no ``B ≤ max_window`` has ``δ < 1``.
    """
    stack = np.asarray(getattr(mixing, "matrices", mixing))
    period = 1 if stack.ndim == 2 else stack.shape[0]
    best = None
    for B in range(1, (max_window or period) + 1):
        d = networks.delta(mixing, B).sup
        if d < 1.0 - 1e-12:
            score = (1.0 - d) ** 2 / B**2
            if best is None or score > best[0]:
                best = (score, B, d)
    if best is None:
        raise ValueError(f"No window B <= {max_window or period} gives δ < 1 for this schedule.")
    return best[1], float(best[2])


def exact_bound_inputs(
    quadratic: Quadratic,
    mixing,
    init_mean: ArrayLike,
    init_cov: ArrayLike,
    step_size: ArrayLike,
    *,
    B: int | None = None,
) -> BoundInputs:
    """:class:`BoundInputs` for DIGing-SGLD on a quadratic with full batches, all exact.

    ``μ, L`` are the extreme eigenvalues of the ``A_i``; ``σ² = 0``; ``δ`` from the schedule;
    the initial moments and the consensus errors of ``x`` and ``y`` over the first ``B``
    iterations come from :func:`~dgsgld.theory.exact_moments`, one run per step size.

    Args:
        quadratic: the agents' quadratic potentials.
        mixing: a schedule or ``(P, N, N)`` stack.
        init_mean, init_cov: Gaussian law of ``x⁽⁰⁾`` as in :func:`exact_moments`.
        step_size: scalar or ``(M,)``; the consensus errors get a leading ``(M,)`` axis.
        B: window length; default :func:`choose_window`.

    Returns:
        :class:`BoundInputs` with NumPy float64 fields.
    """
    if B is None:
        B, delta = choose_window(mixing)
    else:
        delta = networks.delta(mixing, B).sup
    eig = np.linalg.eigvalsh(np.asarray(quadratic.hessians, np.float64))
    mu, L = float(eig[:, 0].min()), float(eig[:, -1].max())
    etas = np.asarray(step_size, np.float64)

    def run(eta):
        return exact_moments(DIGingSGLD(eta), quadratic, mixing, init_mean, init_cov, B - 1)

    mom = jax.vmap(run)(jnp.asarray(etas.ravel()))
    x_cons = np.sqrt(np.clip(np.asarray(mom.consensus_sq, np.float64), 0.0, None))
    y_cons = np.sqrt(np.clip(np.asarray(mom.aux_consensus_sq, np.float64), 0.0, None))
    x_cons, y_cons = x_cons.reshape(etas.shape + (B,)), y_cons.reshape(etas.shape + (B,))
    x_star = quadratic.minimizer()
    m0 = np.asarray(mom.average_mean[0, 0], np.float64)
    c0 = np.asarray(mom.average_cov[0, 0], np.float64)
    init_mean_error = float(np.sqrt(np.trace(c0) + np.sum((m0 - x_star) ** 2)))
    init_norm = float(np.sqrt(np.asarray(mom.sq_norm[0, 0], np.float64)))
    return BoundInputs(
        mu=mu,
        L=L,
        num_agents=quadratic.num_agents,
        dim=quadratic.dim,
        sigma2=0.0,
        delta=float(delta),
        B=int(B),
        init_mean_error=init_mean_error,
        init_norm=init_norm,
        x_consensus=x_cons,
        y_consensus=y_cons,
    )


def bound_inputs(
    potential,
    mixing,
    init: ArrayLike,
    step_size: float,
    key: PRNGKey,
    *,
    B: int | None = None,
    x_star: ArrayLike | None = None,
    sigma2: float | None = None,
    curvature_points: ArrayLike | None = None,
) -> BoundInputs:
    """:class:`BoundInputs` for DIGing-SGLD from a ``Potential`` and a schedule, by Monte Carlo.

    ``μ, L`` from :func:`estimate_mu_L` at the initial positions (and ``curvature_points``);
    ``σ²`` from :func:`estimate_sigma2` there unless given; ``δ`` from the schedule; the initial
    moments and the consensus errors of ``x`` and ``y`` over the first ``B`` iterations are
    averages over the chains of one ``dgsgld.sample`` run of ``dgsgld.DIGingSGLD(step_size)``.

    Args:
        potential: a ``dgsgld.Potential`` with flat ``(d,)`` parameters.
        mixing: a schedule or ``(P, N, N)`` stack.
        init: ``(C, N, d)`` initial positions of ``C`` chains (draws of the initial law).
        step_size: ``η``.
        key: PRNG key.
        B: window length; default :func:`choose_window`.
        x_star: minimizer of ``f``; default: Newton's method from the mean initial position
            (:func:`dgsgld.theory.laplace_quadratic`; one step for a quadratic).
        sigma2: overrides the ``σ²`` estimate.
        curvature_points: extra ``(M, N, d)`` points for the ``μ, L`` estimate.

    Returns:
        :class:`BoundInputs` (Monte Carlo estimates of the moments; float64 NumPy fields).
    """
    from .. import samplers
    from ..runner import loop as run  # the engine; imported late to keep `theory` import light

    init = jnp.asarray(init)
    if init.ndim != 3:
        raise ValueError(f"`init` must be (num_chains, N, d); got shape {init.shape}.")
    C, N, d = init.shape
    if B is None:
        B, delta = choose_window(mixing)
    else:
        delta = networks.delta(mixing, B).sup
    points = init[: min(C, 8)]
    if curvature_points is not None:
        points = jnp.concatenate([points, jnp.asarray(curvature_points, init.dtype)])
    curv = estimate_mu_L(potential, points)
    noise_key, run_key = jax.random.split(key)
    if sigma2 is None:
        sigma2 = estimate_sigma2(potential, points, noise_key).sigma2
    if x_star is None:
        start = np.mean(np.asarray(init, np.float64), axis=(0, 1))
        x_star = laplace_quadratic(potential, start).minimizer()
    x_star = np.asarray(x_star, np.float64)

    def consensus(state):
        def sq(v):
            return jnp.sum((v - jnp.mean(v, axis=0, keepdims=True)) ** 2)

        return sq(state.position), sq(state.tracker)

    trace = run.sample(
        samplers.DIGingSGLD(step_size),
        potential,
        mixing,
        init,
        run_key,
        num_steps=max(B - 1, 1),
        output=run.Output(trace_fn=consensus),
    )
    x_sq, y_sq = (np.asarray(v, np.float64)[:, :B] for v in trace.values)
    x0 = np.asarray(init, np.float64)
    return BoundInputs(
        mu=curv.mu,
        L=curv.L,
        num_agents=N,
        dim=d,
        sigma2=float(sigma2),
        delta=float(delta),
        B=int(B),
        init_mean_error=float(np.sqrt(np.mean(np.sum((x0.mean(axis=1) - x_star) ** 2, -1)))),
        init_norm=float(np.sqrt(np.mean(np.sum(x0**2, axis=(1, 2))))),
        x_consensus=np.sqrt(x_sq.mean(axis=0)),
        y_consensus=np.sqrt(y_sq.mean(axis=0)),
    )
