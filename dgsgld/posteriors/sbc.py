"""Simulation-based calibration (Talts et al., 2018) on the targets whose data are cheap to
simulate: the Gaussian anchor, the Poisson regression and the logistic regression.

For ``s = 1, ..., S``: draw ``θ_s`` from the target's prior, simulate a data set ``y_s`` from
the model at the target's own inputs ``Z`` (:func:`simulate`: for ``"gaussian_linear"``
``y_s = Z θ_s + ε``, ``ε ~ N(0, I)``, prior ``N(0, 10 I)``; for ``"poisson_linnerud"``
``y_s ~ Poisson(exp(Z θ_s))``, prior ``N(0, I)``; for ``"logistic_breast_cancer"``
``y_s ~ Bernoulli(σ(Z θ_s))``, prior ``N(0, I)``), and draw ``L`` times from a sampler's
posterior given ``y_s``. The rank of ``θ_s`` among the ``L`` draws, per coordinate, is uniform
on ``{0, ..., L}`` exactly when the draws follow the posterior (and are exchangeable with
``θ_s``): over-dispersed draws pile the ranks in the middle, under-dispersed draws at both
ends, a biased mean at one end.

:func:`sbc_run` runs a decentralized sampler on every simulated data set in one vmapped call;
each data set gets ``L`` independent chains, and its ``L`` draws are their final positions, per
agent (so a network bias shows agent by agent). The data split does not depend on the simulated
responses (the skew split's groups are the target's own: covariate quantiles, or the
observed classes of the logistic target), so every data set is dealt out alike
(:func:`simulated_potentials`; :func:`dgsgld.tuning.adapted_sbc` runs the same calibration at
the settings a warm-up adapts per data set). :func:`exact_draws` gives the Gaussian anchor's closed-form posterior draws, the calibrated
case. :func:`rank_uniformity` is Pearson's chi-square test of
uniform ranks per coordinate (:func:`rank_pvalues`: per agent and coordinate),
:func:`rank_dispersion` the direction of a miscalibration of
spread (the ranks' variance against the uniform's), :func:`rank_histograms` their figure
(:func:`rank_histogram_grid` for several runs).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from ..evaluate.plots import pyplot
from ..model.potential import stack_potentials
from ..runner.loop import Output, sample
from .targets import get_target

__all__ = ["SIMULATED", "curvature_scale", "exact_draws", "rank_dispersion",
           "rank_histogram_grid", "rank_histograms", "rank_pvalues", "rank_uniformity",
           "sbc_ranks", "sbc_run", "simulate", "simulated_potentials"]

#: Targets :func:`simulate` can draw data sets for.
SIMULATED = ("gaussian_linear", "poisson_linnerud", "logistic_breast_cancer")


def _inputs(target):
    return np.asarray(target.data[0], np.float64)


def simulate(target: str, seed: int, num_datasets: int) -> tuple[np.ndarray, np.ndarray]:
    """``(θ (S, d), y (S, n))``: parameters from ``target``'s prior and data sets simulated
    from them at its inputs (one of :data:`SIMULATED`)."""
    if target not in SIMULATED:
        raise ValueError(f"`target` must be one of {SIMULATED}; got {target!r}.")
    if isinstance(num_datasets, bool) or not isinstance(num_datasets, int) or num_datasets < 1:
        raise ValueError(f"`num_datasets` must be a positive int; got {num_datasets!r}.")
    t = get_target(target)
    z = _inputs(t)
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(num_datasets, z.shape[1])) / np.sqrt(t.log_prior.precision)
    eta = theta @ z.T
    if target == "gaussian_linear":
        noise = np.sqrt(t.log_likelihood.noise_var) * rng.normal(size=eta.shape)
        return theta, eta + noise
    if target == "logistic_breast_cancer":
        p = 0.5 * (1.0 + np.tanh(0.5 * eta))  # σ(η) without overflow
        return theta, (rng.uniform(size=eta.shape) < p).astype(np.float64)
    return theta, rng.poisson(np.exp(eta)).astype(np.float64)


def simulated_potentials(target: str, y, num_agents: int = 4, split: str = "skew",
                         seed: int = 0) -> list:
    """One :class:`dgsgld.Potential` per simulated data set: ``target``'s model (one of
    :data:`SIMULATED`) with its responses replaced by ``y[s]`` (``y (S, n)``, e.g. from
    :func:`simulate`), split over ``num_agents`` agents by ``split`` with ``seed`` (see
    :meth:`~.Target.split`; the split does not depend on the responses, so every data set is
    dealt out alike)."""
    if target not in SIMULATED:
        raise ValueError(f"`target` must be one of {SIMULATED}; got {target!r}.")
    t = get_target(target)
    y = np.asarray(y)
    if y.ndim != 2 or y.shape[1] != t.data[0].shape[0]:
        raise ValueError(f"`y` must be (num_datasets, {t.data[0].shape[0]}); got {y.shape}.")
    return [dataclasses.replace(t, data=(t.data[0], ys), _hash=[]).potential(
        num_agents, split, seed=seed) for ys in y]


def curvature_scale(target: str, y) -> np.ndarray:
    """``(S,)`` the scale of the largest curvature of ``-log p(θ | y_s)`` for each simulated
    data set ``y (S, n)``, from the data alone (a step ``h_s = c / curvature_s`` suits every
    data set alike):

    * ``"gaussian_linear"``: the exact ``λ_max(ZᵀZ / σ² + I / τ²)`` (the same for all ``s``);
    * ``"logistic_breast_cancer"``: the bound ``λ_max(ZᵀZ) / 4 + 1`` (``σ' ≤ 1/4``; the same
      for all ``s``);
    * ``"poisson_linnerud"``: ``λ_max(Zᵀ diag(max(y_s, 1)) Z) + 1``, the Hessian with the
      rates ``e^{zᵀθ}`` replaced by the counts (near the mode) or by 1 (at ``θ = 0``, where
      the chains start), whichever is larger.
    """
    if target not in SIMULATED:
        raise ValueError(f"`target` must be one of {SIMULATED}; got {target!r}.")
    t = get_target(target)
    z, y = _inputs(t), np.asarray(y, np.float64)
    precision = float(t.log_prior.precision)
    if y.ndim != 2 or y.shape[1] != z.shape[0]:
        raise ValueError(f"`y` must be (num_datasets, {z.shape[0]}); got {y.shape}.")
    if target == "poisson_linnerud":
        w = np.maximum(y, 1.0)
        return np.array([np.linalg.eigvalsh((z * ws[:, None]).T @ z)[-1] for ws in w]) \
            + precision
    top = np.linalg.eigvalsh(z.T @ z)[-1]
    scale = 1.0 / t.log_likelihood.noise_var if target == "gaussian_linear" else 0.25
    return np.full(y.shape[0], scale * top + precision)


def exact_draws(y, num_draws: int, seed: int = 0) -> np.ndarray:
    """``(S, L, d)`` i.i.d. draws of the Gaussian anchor's exact posterior given each data
    set ``y (S, n)``."""
    t = get_target("gaussian_linear")
    z, prior_var, noise_var = _inputs(t), 1.0 / t.log_prior.precision, t.log_likelihood.noise_var
    cov = np.linalg.inv(z.T @ z / noise_var + np.eye(z.shape[1]) / prior_var)
    mean = np.asarray(y, np.float64) @ z @ cov / noise_var  # (S, d); cov is symmetric
    chol = np.linalg.cholesky(0.5 * (cov + cov.T))
    w = np.random.default_rng(seed).normal(size=(mean.shape[0], num_draws, z.shape[1]))
    return mean[:, None, :] + w @ chol.T


def sbc_ranks(draws, truth) -> np.ndarray:
    """``(..., q)`` ranks in ``{0, ..., L}``: how many of the ``L`` draws ``(S, L, ..., q)``
    of data set ``s`` lie below ``truth (S, q)``, per coordinate (and per agent, for draws
    ``(S, L, N, q)``)."""
    draws, truth = np.asarray(draws), np.asarray(truth)
    if draws.ndim < 3 or truth.ndim != 2 or draws.shape[0] != truth.shape[0] or \
            draws.shape[-1] != truth.shape[-1]:
        raise ValueError(f"`draws` must be (S, L, ..., q) and `truth` (S, q); got "
                         f"{draws.shape} and {truth.shape}.")
    if not (np.all(np.isfinite(draws)) and np.all(np.isfinite(truth))):
        raise ValueError("`draws` and `truth` must be finite (a diverged chain has no rank).")
    t = truth.reshape(truth.shape[0], 1, *([1] * (draws.ndim - 3)), truth.shape[1])
    return np.sum(draws < t, axis=1)


def rank_uniformity(ranks, num_draws: int, num_bins: int | None = None) -> np.ndarray:
    """Chi-square p-values of uniform ranks ``(S, q)``, one per coordinate.

    Args:
        ranks: ``(S, q)`` ranks in ``{0, ..., L}``, one per simulated data set (independent).
        num_draws: ``L``.
        num_bins: bins of equal width in rank (default ``L + 1``: one per rank); must divide
            ``L + 1``, so that every bin has the same probability.
    """
    ranks = np.asarray(ranks)
    num_bins = num_draws + 1 if num_bins is None else num_bins
    if ranks.ndim != 2:
        raise ValueError(f"`ranks` must be (num_datasets, q); got shape {ranks.shape}.")
    bins = _rank_bins(ranks, num_draws, num_bins)
    if ranks.min() < 0 or ranks.max() > num_draws:
        raise ValueError(f"`ranks` must lie in [0, {num_draws}].")
    counts = np.stack([np.bincount(b, minlength=num_bins) for b in bins.T])  # (q, bins)
    return stats.chisquare(counts, axis=1).pvalue


def rank_pvalues(ranks, num_draws: int, num_bins: int | None = None) -> np.ndarray:
    """``(N, q)`` chi-square p-values of uniform ranks ``(S, N, q)``, per agent and coordinate
    (:func:`rank_uniformity` on each agent's ranks; agents are not pooled: their ranks on one
    data set are dependent)."""
    ranks = np.asarray(ranks)
    if ranks.ndim != 3:
        raise ValueError(f"`ranks` must be (num_datasets, N, q); got shape {ranks.shape}.")
    return np.stack([rank_uniformity(ranks[:, i], num_draws, num_bins)
                     for i in range(ranks.shape[1])])


def rank_dispersion(ranks, num_draws: int) -> np.ndarray:
    """The ranks' variance over data sets against that of uniform ranks, per coordinate.

    For ranks ``(S, ...)`` in ``{0, ..., L}``: the sample variance over the ``S`` data sets
    (``ddof=1``) divided by ``((L + 1)² − 1) / 12``, the variance of the uniform law on
    ``{0, ..., L}``; shape ``(...)`` (e.g. ``(N, q)``, per agent and coordinate). Its
    expectation is 1 when the ranks are uniform; draws too wide pile the ranks in the middle
    (below 1), draws too narrow at both ends (above 1). With ``K = L + 1`` its standard error
    under uniform ranks is, to first order in ``1/S``, ``sqrt((0.6 (3K² − 7) / (K² − 1) − 1)
    / S)`` (the discrete uniform's kurtosis): ``0.89 / √S`` for ``L = 15``.
    """
    ranks = np.asarray(ranks)
    if ranks.ndim < 1 or ranks.shape[0] < 2:
        raise ValueError(f"`ranks` must be (num_datasets >= 2, ...); got shape {ranks.shape}.")
    if isinstance(num_draws, bool) or not isinstance(num_draws, (int, np.integer)) or \
            num_draws < 1:
        raise ValueError(f"`num_draws` must be a positive int; got {num_draws!r}.")
    if ranks.min() < 0 or ranks.max() > num_draws:
        raise ValueError(f"`ranks` must lie in [0, {num_draws}].")
    return ranks.var(axis=0, ddof=1) / (((num_draws + 1) ** 2 - 1) / 12)


def _rank_bins(ranks: np.ndarray, num_draws: int, num_bins: int) -> np.ndarray:
    """The bin of each rank in ``{0, ..., L}``, ``num_bins`` bins of equal width in rank
    (``num_bins`` must divide ``L + 1``, so that every bin has the same probability)."""
    if (num_draws + 1) % num_bins:
        raise ValueError(f"`num_bins` must divide num_draws + 1 = {num_draws + 1}; got "
                         f"{num_bins}.")
    return ranks * num_bins // (num_draws + 1)


def sbc_run(target: str, algorithm, mixing, key, *, num_datasets: int = 100,
            num_draws: int = 15, num_steps: int = 1000, num_agents: int = 4,
            split: str = "skew", seed: int = 0, step_sizes=None) -> dict:
    """Ranks of simulated truths among ``algorithm``'s draws on ``target``'s simulated data.

    Args:
        target: one of :data:`SIMULATED`.
        algorithm: a decentralized sampler (e.g. ``dgsgld.DIGingSGLD(0.003)``); with
            ``step_sizes``, a function ``h -> sampler`` (e.g. ``dgsgld.DIGingSGLD``).
        mixing: the network, as in :func:`dgsgld.sample`.
        key: the runs' key (data set ``s`` runs with ``jax.random.fold_in(key, s)``).
        num_datasets: ``S``.
        num_draws: ``L``, independent chains per data set; a draw is a chain's final position.
        num_steps: iterations per chain (from the target's :meth:`~.Target.init` starts).
        num_agents, split: the data split (see :meth:`~.Target.split`).
        seed: seed of the simulation and of the split.
        step_sizes: ``None``, or one step per data set: an ``(S,)`` array, or a function
            ``y (S, n) -> (S,)`` of the simulated data (e.g. ``lambda y: 0.1 /
            curvature_scale(target, y)``); data set ``s`` runs ``algorithm(step_sizes[s])``.

    Returns:
        ``{"ranks": (S, N, d) int, "pvalues": (N, d) per agent and coordinate (agents are
        not pooled: their ranks on one data set are dependent), "truth": (S, d),
        "draws": (S, L, N, d), "num_draws": L, "step_sizes": (S,) or None}``.
    """
    if step_sizes is not None:
        if not callable(algorithm):
            raise ValueError("with `step_sizes`, `algorithm` must be a function h -> sampler; "
                             f"got {type(algorithm).__name__}.")
        probe = algorithm(1.0)
    else:
        probe = algorithm
    if not getattr(probe, "decentralized", False):
        raise ValueError("`algorithm` must be a decentralized sampler (its draws are per "
                         f"agent); got {type(algorithm).__name__}.")
    for name, value in (("num_draws", num_draws), ("num_steps", num_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive int; got {value!r}.")
    theta, y = simulate(target, seed, num_datasets)
    if callable(step_sizes):
        step_sizes = step_sizes(y)
    if step_sizes is not None:
        step_sizes = np.asarray(step_sizes, np.float64)
        if step_sizes.shape != (num_datasets,) or not np.all(np.isfinite(step_sizes)) or \
                np.any(step_sizes <= 0):
            raise ValueError(f"`step_sizes` must be {num_datasets} positive finite steps, one "
                             f"per data set; got shape {step_sizes.shape}.")
    stacked = stack_potentials(simulated_potentials(target, y, num_agents, split, seed))
    target = get_target(target)
    init_key, run_key = jax.random.split(key)
    start = target.init(init_key, num_draws)
    init = jnp.broadcast_to(start[:, None], (num_draws, num_agents, target.dim))

    @eqx.filter_jit
    @eqx.filter_vmap(in_axes=(0, 0, 0))
    def final(potential, k, h):
        alg = algorithm if h is None else algorithm(h)
        trace = sample(alg, potential, mixing, init, k, num_steps,
                       output=Output(positions=False), on_divergence="flag")
        return trace.state.position  # (L, N, d)

    keys = jax.vmap(lambda s: jax.random.fold_in(run_key, s))(jnp.arange(num_datasets))
    steps = None if step_sizes is None else jnp.asarray(step_sizes, jnp.result_type(float))
    draws = np.asarray(final(stacked, keys, steps), np.float64)
    if not np.all(np.isfinite(draws)):
        bad = int(np.sum(~np.all(np.isfinite(draws), axis=(1, 2, 3))))
        raise ValueError(f"chains diverged on {bad} of {num_datasets} simulated data sets; "
                         "lower the step size (leaving those data sets out would bias the "
                         "ranks).")
    ranks = sbc_ranks(draws, theta)
    return {"ranks": ranks, "truth": theta, "num_draws": num_draws, "draws": draws,
            "step_sizes": step_sizes, "pvalues": rank_pvalues(ranks, num_draws)}


def _rank_panel(ax, ranks, num_draws: int, num_bins: int, j: int, title: str) -> None:
    """Coordinate ``j`` of ranks ``(S, N, q)``: each agent's bin counts, the expected count
    and its central 99 % binomial band."""
    bins = _rank_bins(ranks[:, :, j], num_draws, num_bins)
    s, n = bins.shape
    ax.axhspan(*stats.binom.ppf([0.005, 0.995], s, 1 / num_bins), color="0.85")
    ax.axhline(s / num_bins, color="0.5", lw=0.8)
    for i in range(n):
        counts = np.bincount(bins[:, i], minlength=num_bins)
        ax.step(np.arange(num_bins), counts, where="mid", label=f"agent {i}")
    ax.set_title(title, fontsize=8)
    ax.set_xticks(range(num_bins))
    ax.set_xlabel("rank bin", fontsize=8)


def _per_agent(ranks) -> np.ndarray:
    ranks = np.asarray(ranks)
    return ranks[:, None] if ranks.ndim == 2 else ranks


def rank_histograms(ranks, num_draws: int, num_bins: int = 4, names=None):
    """The rank histograms as a figure (matplotlib, Agg backend): one panel per coordinate,
    each agent's bin counts as a line (ranks ``(S, N, q)``; ``(S, q)`` is one agent), the
    expected count ``S / num_bins`` and its central 99 % binomial band in grey."""
    ranks = _per_agent(ranks)
    n, q = ranks.shape[1:]
    plt = pyplot(headless=True)
    fig, axes = plt.subplots(1, q, figsize=(2.0 * q, 2.2), sharey=True, squeeze=False)
    for j, ax in enumerate(axes[0]):
        _rank_panel(ax, ranks, num_draws, num_bins, j,
                    names[j] if names is not None else f"x[{j}]")
    axes[0, 0].set_ylabel("data sets")
    if n > 1:
        axes[0, -1].legend(fontsize=6)
    fig.tight_layout()
    return fig


def rank_histogram_grid(cells, num_bins: int = 4, max_panels: int = 6):
    """Several SBC runs' rank histograms in one figure (matplotlib, Agg backend): one row per
    cell ``(label, ranks (S, N, q) or (S, q), num_draws, names)``, its ``max_panels``
    coordinates with the smallest p-values (:func:`rank_uniformity` over ``num_bins`` bins,
    the smallest over agents) in increasing order, each panel as in :func:`rank_histograms`
    and titled with the coordinate and that p-value."""
    plt = pyplot(headless=True)
    cols = max(1, min(max_panels, max(_per_agent(c[1]).shape[2] for c in cells)))
    fig, axes = plt.subplots(len(cells), cols, figsize=(2.0 * cols, 2.3 * len(cells)),
                             squeeze=False)
    for row, (label, ranks, num_draws, names) in zip(axes, cells):
        ranks = _per_agent(ranks)
        p = np.min([rank_uniformity(ranks[:, i], num_draws, num_bins)
                    for i in range(ranks.shape[1])], axis=0)
        order = np.argsort(p, kind="stable")[:cols]
        for ax, j in zip(row, order):
            name = names[j] if names is not None else f"x[{j}]"
            _rank_panel(ax, ranks, num_draws, num_bins, int(j), f"{name}: p={p[j]:.2g}")
        for ax in row[len(order):]:
            ax.set_visible(False)
        row[0].set_ylabel(f"{label}\ndata sets", fontsize=8)
    fig.tight_layout()
    return fig
