"""Simulation-based calibration at the warm-up's adapted settings.

:func:`adapted_sbc` is :func:`dgsgld.posteriors.sbc.sbc_run` with the step (and
preconditioner, friction or consensus weight) chosen per simulated data set by
:func:`dgsgld.tuning.warmup` instead of given: for ``s = 1, ..., S`` it draws ``θ_s`` from the target's
prior and a data set ``y_s`` from the model (:func:`~dgsgld.posteriors.sbc.simulate`), warms up
``L`` chains on ``y_s`` (their own ``M`` and step, from ``y_s`` alone), samples on from the
warmed-up state, and ranks ``θ_s`` among the ``L`` chains' final positions, per agent and
coordinate (:func:`~dgsgld.posteriors.sbc.sbc_ranks`,
:func:`~dgsgld.posteriors.sbc.rank_pvalues`). The adaptation depends on the data only, so
the ranks are uniform exactly when the adapted sampler's draws follow each data set's
posterior. A sampling run that diverges is run again from the warmed-up state at a quarter
of its step (the warm-up's own rule for a diverging window): that choice too depends on the
data only.

The warm-up is host-side (windows, agreements by flooding), so the data sets run one after
the other; every data set's warm-up and sampling compile once for all of them (the same model,
other responses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..posteriors import sbc as _sbc
from ..posteriors.targets import get_target
from ..runner.loop import Output, sample
from .adaptation import warmup

__all__ = ["adapted_sbc"]


def adapted_sbc(target: str, sampler, mixing, key, *, num_datasets: int = 40,
                num_draws: int = 7, warmup_steps: int = 500, num_steps: int = 500,
                num_agents: int = 4, split: str = "skew", seed: int = 0,
                warmup_options: Mapping | None = None,
                controls: Mapping[str, Callable] | None = None, max_reruns: int = 3) -> dict:
    """Ranks of simulated truths among the draws of ``sampler`` warmed up on each data set.

    Args:
        target: one of :data:`dgsgld.posteriors.sbc.SIMULATED`.
        sampler: a decentralized sampler class of :data:`dgsgld.samplers.ALL` (e.g.
            ``dgsgld.DIGingSGLD``) or an instance, as :func:`dgsgld.tuning.warmup` takes it.
        mixing: the network's schedule (stored matrices).
        key: the runs' key (data set ``s``: ``jax.random.fold_in(key, s)``, split into its
            warm-up's key and its sampling run's key).
        num_datasets: ``S``.
        num_draws: ``L >= 2`` chains per data set (the warm-up compares them); a draw is a
            chain's final position.
        warmup_steps: the warm-up's budget per data set.
        num_steps: the sampling run's steps from the warmed-up state.
        num_agents, split: the data split (see :meth:`dgsgld.posteriors.Target.split`).
        seed: seed of the simulation and of the split.
        warmup_options: further keyword arguments of :func:`dgsgld.tuning.warmup` (e.g.
            ``{"windows": (0.5, 0.5), "tol_sd": 0.05}``); ``sampling_steps`` is ``num_steps``.
        controls: ``{name: adapted sampler -> sampler}``: each also samples from every
            warmed-up state with the same key (e.g. a deliberately wrong sampler, to check
            that the test would reject it). Each function should return samplers of one
            structure every call (a closure built once), so its run compiles once.
        max_reruns: sampling runs per data set run again, each at a quarter of the last
            step, after a divergence (module doc).

    Returns:
        ``{"ranks": (S, N, d) int, "pvalues": (N, d) chi-square p-values per agent and
        coordinate (one bin per rank), "truth": (S, d), "draws": (S, L, N, d), "num_draws": L,
        "step_sizes": (S,) the steps sampled at (the adapted ones, lowered by reruns),
        "reruns": (S,) sampling runs run again per data set, "reports": the S
        :class:`~dgsgld.tuning.WarmupReport`, "controls": {name: {"ranks", "pvalues",
        "draws"}}}``.

    Raises:
        ValueError: bad arguments, naming them; or chains that diverged (in a warm-up or a
            sampling run, ``max_reruns`` times) on some data sets, after all data sets ran
            (the message counts and names them): leaving them out would bias the ranks.
    """
    cls = sampler if isinstance(sampler, type) else type(sampler)
    if not getattr(cls, "decentralized", False):
        raise ValueError("`sampler` must be a decentralized sampler class or instance (its "
                         f"draws are per agent); got {sampler!r}.")
    for name, value, low in (("num_draws", num_draws, 2), ("warmup_steps", warmup_steps, 1),
                             ("num_steps", num_steps, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"`{name}` must be an int >= {low}; got {value!r}.")
    options = dict(warmup_options or {})
    if "sampling_steps" in options:
        raise ValueError("`warmup_options` must not set `sampling_steps` (it is `num_steps`).")
    if isinstance(max_reruns, bool) or not isinstance(max_reruns, int) or max_reruns < 0:
        raise ValueError(f"`max_reruns` must be an int >= 0; got {max_reruns!r}.")
    controls = dict(controls or {})
    if not all(callable(f) for f in controls.values()):
        raise ValueError("`controls` must map names to functions sampler -> sampler.")
    theta, y = _sbc.simulate(target, seed, num_datasets)
    potentials = _sbc.simulated_potentials(target, y, num_agents, split, seed)
    t = get_target(target)
    init_key, run_key = jax.random.split(key)
    start = t.init(init_key, num_draws)
    init = jnp.broadcast_to(start[:, None], (num_draws, num_agents, t.dim))

    def final(alg, potential, state, k):
        """The chains' final positions ``(L, N, d)``, NaN for a chain that diverged."""
        trace = sample(alg, potential, mixing, state, k, num_steps,
                       output=Output(positions=False), on_divergence="flag")
        x = np.asarray(trace.state.position, np.float64)
        diverged = np.asarray(trace.diverged).reshape(len(x), *([1] * (x.ndim - 1)))
        return np.where(diverged, np.nan, x)

    draws, extra, steps, reports, reruns = [], {name: [] for name in controls}, [], [], []
    failed = []  # (data set, what failed): every data set runs, then all are reported
    for s, potential in enumerate(potentials):
        k_warm, k_run = jax.random.split(jax.random.fold_in(run_key, s))
        try:
            adapted, state, report = warmup(sampler, potential, mixing, init, k_warm,
                                            warmup_steps, sampling_steps=num_steps, **options)
        except RuntimeError:  # every rerun of the first window diverged
            failed.append((s, "warm-up"))
            continue
        k, again = k_run, 0
        x = final(adapted, potential, state, k)
        while not np.all(np.isfinite(x)) and again < max_reruns:
            again += 1
            adapted = eqx.tree_at(lambda a: a.step_size, adapted, adapted.step_size / 4.0)
            k = jax.random.fold_in(k_run, again)
            x = final(adapted, potential, state, k)
        step = float(adapted.step_size)
        if not np.all(np.isfinite(x)):
            failed.append((s, f"sampling at the adapted step {report.step_size:.3g}"
                              + (f" and {again} reruns down to {step:.3g}" if again else "")))
        draws.append(x)
        for name, change in controls.items():
            extra[name].append(final(change(adapted), potential, state, k))
        steps.append(step)
        reruns.append(again)
        reports.append(report)
    if failed:
        listed = "; ".join(f"data set {s}: {what}" for s, what in failed[:5])
        raise ValueError(f"chains diverged on {len(failed)} of {num_datasets} simulated data "
                         f"sets ({listed}{'; ...' if len(failed) > 5 else ''}); leaving them "
                         "out would bias the ranks.")
    draws = np.stack(draws)
    ranks = _sbc.sbc_ranks(draws, theta)
    out = {}
    for name, runs in extra.items():
        x = np.stack(runs)
        if not np.all(np.isfinite(x)):
            bad = np.flatnonzero(~np.all(np.isfinite(x), axis=(1, 2, 3))).tolist()
            raise ValueError(f"the control {name!r} diverged on simulated data sets {bad}.")
        r = _sbc.sbc_ranks(x, theta)
        out[name] = {"ranks": r, "pvalues": _sbc.rank_pvalues(r, num_draws), "draws": x}
    return {"ranks": ranks, "pvalues": _sbc.rank_pvalues(ranks, num_draws), "truth": theta,
            "draws": draws, "num_draws": num_draws, "step_sizes": np.asarray(steps),
            "reruns": np.asarray(reruns),
            "reports": reports, "controls": out}
