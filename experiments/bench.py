"""The posterior benchmark behind ``python -m experiments bench posteriors``: samplers against
the stored references.

For every target with a stored reference, every network and every sampler: the data are split
across ``num_agents`` agents (``split``, see :mod:`dgsgld.posteriors.targets`), the step size
is the toolkit's own proposal (:func:`dgsgld.tuning.propose_step_size`, no score function,
for a kept run of ``num_steps / 2`` steps), and ``seeds x chains`` chains run in one call; seed ``s`` is the group of chains
``s * chains, ..., (s + 1) * chains - 1``. Each seed's draws are the second half of its
chains' kept iterations, every agent's positions pooled (so disagreeing agents count against
a sampler). Scores per seed (:mod:`dgsgld.posteriors.scores`, :mod:`dgsgld.evaluate`):
standardized mean error (max, median), sd ratio (the one farthest from 1, and the median),
exact W2 on subsamples of standardized coordinates (:func:`dgsgld.evaluate.empirical_w2`), and
the IMQ kernel Stein discrepancy from the model's gradients (:func:`dgsgld.evaluate.ksd`);
the leaderboard gives their mean and standard error over seeds. The ``reference`` row scores
the reference's own draws (W2: one half against the other; KSD: a subsample of the same
size): the floor at that sample size.

Every sampler is a function of one step ``h`` on the SGLD scale, which the proposer tunes:
DIGing-SGHMC and DE-SGHMC run at ``η = √h`` with friction ``γ = 0.5/η`` (``γη = 1`` would make
them DIGing-SGLD and DE-SGLD at step ``h``); D-ULA at ``α_k = (h/N)/(k+1)^0.3`` with consensus
weight ``β_k = 1/(k+1)^0.1`` (its local step ``Nα`` is DE-SGLD's ``h``), as in
:mod:`experiments.methods`. DIGing-SGLD+SVRG refreshes each agent's anchor every
:data:`SVRG_PERIOD` steps; it and DIGing-SGLD+SAGA draw mini-batches of the target's size, or of
one datum where the other samplers use full local batches (their point: full-batch accuracy
from one datum).

Adapted rows (``<sampler> (adapted)``, :data:`ADAPTED`): the sampler class of
:data:`dgsgld.samplers.ALL` with no step of the proposer's: :func:`dgsgld.warmup` spends the
first half of the same ``num_steps`` (preconditioner ``"auto"``: dense up to 200 parameters,
diagonal above; its checks sized for the second half), separately for every seed's chains, and
the adapted sampler continues from the warmed-up state for the second half, all of which is
scored: the same step budget and the same kept half as the plain rows (whose proposer's pilot
comes on top). Their step column is the adapted step (the median over seeds; a preconditioned
step, not comparable with the plain rows'), and their bytes add the warm-up's agreement
(flooding, :class:`dgsgld.tuning.WarmupReport`'s ``bytes_sent``) and its windows' messages (the
sampling run's bytes per step times the warm-up's steps: an exact channel sends the same
messages every step) to the sampling run's. Where an agent holds more data than
``curvature_batch`` (``logistic_large``: 62 500 per agent, mini-batches of 32), the adapted
rows draw their mini-batches through an SVRG control variate refreshed every
:data:`ADAPTED_SVRG_PERIOD` steps (:func:`adapted_estimator`; the ``batch`` column names it):
there the plain mini-batches' gradient noise is thousands of times the curvature and leaves a
step whose sampling run holds about one effective draw, while the control variate's error,
which the warm-up measures, is a fraction of it.

Bytes sent are the toolkit's own count: every decentralized run goes through an exact
:class:`dgsgld.communication.Channel` (the same numbers as no channel), and
:meth:`~dgsgld.communication.Channel.bytes_sent` of the run's final state counts the messages
each agent sent (:func:`dgsgld.communication.messages_sent`) times their size (float32
vectors of ``d`` entries), summed over agents and the chains of one seed (the mean over
seeds); 0 for the centralized sampler.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import communication, evaluate, gradients, networks
from dgsgld import tuning as stepsize
from dgsgld.evaluate.plots import pyplot
from dgsgld.posteriors import moment_errors, predictive_scores, sbc
from dgsgld.posteriors.references import available, load_reference
from dgsgld.posteriors.targets import TARGETS, get_target
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import ALL as ALL_SAMPLERS
from dgsgld.samplers import (
    DESGHMC,
    DESGLD,
    DULA,
    EXTRASGLD,
    SGLD,
    DIGingSGHMC,
    DIGingSGLD,
    PolynomialDecay,
)
from dgsgld.tuning import adapted_sbc

__all__ = ["ADAPTED", "ADAPTED_SVRG_PERIOD", "SAMPLERS", "BenchSettings", "Method",
           "adapted_estimator", "adapted_key", "band_table", "bench_posteriors",
           "leaderboard_figure", "merge", "run_chains", "sbc_cells", "sbc_figure",
           "target_setup", "within_band"]

#: SVRG's anchor refresh period (steps) in the benchmark.
SVRG_PERIOD = 10
#: The anchor refresh period (steps) of the adapted rows' SVRG where agents hold many data
#: (:func:`adapted_estimator`): a full local pass per agent every 100 steps, about 20 times
#: the mini-batches' own gradients on ``logistic_large``.
ADAPTED_SVRG_PERIOD = 100
#: Bytes of per-datum state (SAGA's tables) the proposer's pilot grid may hold at once.
PILOT_BYTES = 4 * 2**30
#: ``γη`` of DIGing-SGHMC and DE-SGHMC in the benchmark.
FRICTION_PRODUCT = 0.5


class Method(NamedTuple):
    """A benchmark row's sampler: ``make(h)`` at the proposer's step ``h``;
    ``control_variate`` whether it draws mini-batches even where the others use full local
    batches; ``takes_num_agents`` whether ``make`` takes ``num_agents=`` too;
    ``per_datum_state`` whether its state holds a gradient per datum and chain (SAGA's table:
    the proposer's pilot grid then runs in chunks that keep it under :data:`PILOT_BYTES`)."""

    make: Callable
    control_variate: bool = False
    takes_num_agents: bool = False
    per_datum_state: bool = False

    def builder(self, num_agents: int) -> Callable:
        """``h -> sampler`` for a network of ``num_agents``."""
        if self.takes_num_agents:
            return functools.partial(self.make, num_agents=num_agents)
        return self.make

    @property
    def centralized(self) -> bool:
        """Whether the sampler has no network (and sends nothing)."""
        return not self.builder(1)(1.0).decentralized


def _diging_sghmc(h):
    eta = jnp.sqrt(h)
    return DIGingSGHMC(eta, FRICTION_PRODUCT / eta)


def _de_sghmc(h):
    eta = jnp.sqrt(h)
    return DESGHMC(eta, FRICTION_PRODUCT / eta)


def _d_ula(h, num_agents):
    return DULA(PolynomialDecay(h / num_agents, 0.3), PolynomialDecay(1.0, 0.1))


def _diging_svrg(h):
    return DIGingSGLD(h, estimator=gradients.svrg(update_every=SVRG_PERIOD))


def _diging_saga(h):
    return DIGingSGLD(h, estimator=gradients.saga())


#: name -> :class:`Method`.
SAMPLERS = {
    "DIGing-SGLD": Method(DIGingSGLD),
    "DE-SGLD": Method(DESGLD),
    "EXTRA-SGLD": Method(EXTRASGLD),
    "DIGing-SGHMC": Method(_diging_sghmc),
    "DE-SGHMC": Method(_de_sghmc),
    "D-ULA": Method(_d_ula, takes_num_agents=True),
    "DIGing-SGLD+SVRG": Method(_diging_svrg, control_variate=True),
    "DIGing-SGLD+SAGA": Method(_diging_saga, control_variate=True, per_datum_state=True),
    "SGLD (centralized)": Method(SGLD),
}
NETWORKS = {"ring": networks.ring, "complete": networks.complete}
#: The adapted rows' samplers: every decentralized class of dgsgld.samplers.ALL, by name.
ADAPTED = {cls.name: cls for cls in ALL_SAMPLERS if cls.decentralized}
#: The label of an adapted row.
ADAPTED_SUFFIX = " (adapted)"


@dataclass(frozen=True)
class BenchSettings:
    """What one benchmark run does (``small()`` and ``full()`` are the command's sizes).

    The ``sbc_*`` fields size the calibration runs (:func:`sbc_cells`): ``sbc_datasets``
    simulated data sets of each of ``sbc_targets``, ``sbc_draws`` chains of ``sbc_steps``
    steps per data set for each of ``sbc_samplers``, at the step ``h_s = sbc_step /
    curvature_s`` of data set ``s`` (:func:`dgsgld.posteriors.sbc.curvature_scale`), ranks
    in ``sbc_bins`` bins for the figure (the p-values use one bin per rank); no SBC when
    ``sbc_targets`` is empty. ``sbc_adapted`` (names of :data:`ADAPTED`) get adapted SBC cells
    on those of ``sbc_targets`` also in ``sbc_adapted_targets``: per data set
    :func:`dgsgld.warmup` of ``sbc_warmup_steps`` steps, then ``sbc_steps`` steps at its
    settings (:func:`dgsgld.tuning.adapted_sbc`; a warm-up per data set, so these cells cost
    far more than the plain ones: ``small()`` keeps one sampler on the Gaussian anchor).
    ``adapted``: the
    samplers (names of :data:`ADAPTED`) that also get an adapted row (module docstring) on every
    network; ``small()`` three, ``full()`` all. ``curvature_batch``: an adapted row's warm-up
    measures curvature on this many of each agent's data where the agent holds more (its
    ``curvature_batch``; only ``logistic_large``'s agents do)."""

    targets: tuple
    samplers: tuple
    networks: tuple
    num_agents: int = 4
    split: str = "skew"
    seeds: int = 3
    chains: int = 8
    num_steps: int = 4000
    thin: int = 10
    pilot_steps: int = 200
    pilot_grid: int = 16
    score_size: int = 400
    max_batch: int = 32
    sbc_targets: tuple = sbc.SIMULATED
    sbc_samplers: tuple = ("DIGing-SGLD", "DE-SGLD")
    sbc_datasets: int = 200
    sbc_draws: int = 15
    sbc_steps: int = 1000
    sbc_step: float = 0.1
    sbc_bins: int = 4
    sbc_adapted: tuple = ("DIGing-SGLD", "DE-SGLD")
    sbc_warmup_steps: int = 1000
    sbc_adapted_targets: tuple = sbc.SIMULATED
    adapted: tuple = ()
    curvature_batch: int = 2000

    @classmethod
    def small(cls) -> BenchSettings:
        return cls(targets=("gaussian_linear", "eight_schools", "logistic_breast_cancer"),
                   samplers=("DIGing-SGLD", "SGLD (centralized)", "DIGing-SGHMC", "D-ULA",
                             "DIGing-SGLD+SVRG"), networks=("ring",),
                   seeds=2, chains=4, num_steps=1000, thin=5, pilot_steps=100, pilot_grid=8,
                   score_size=200, sbc_datasets=40, sbc_draws=7, sbc_steps=500,
                   sbc_adapted=("DIGing-SGLD",), sbc_warmup_steps=300,
                   sbc_adapted_targets=("gaussian_linear",),
                   adapted=("DIGing-SGLD", "DIGing-SGHMC", "D-ULA"))

    @classmethod
    def full(cls) -> BenchSettings:
        return cls(targets=tuple(t for t in TARGETS if t in available()), samplers=tuple(SAMPLERS),
                   networks=tuple(NETWORKS), adapted=tuple(ADAPTED))


def run_chains(algorithm, potential, mixing, init, key, settings: BenchSettings):
    """One benchmark run of ``algorithm`` from ``init`` (leaves ``(seeds * chains, [N,] d)``):
    ``(trace, bytes_sent)``, the bytes the agents sent over the run summed over agents and
    the chains of one seed (the mean over seeds), counted by an exact
    :class:`dgsgld.communication.Channel` (0 for a centralized sampler)."""
    channel = communication.Channel() if algorithm.decentralized else None
    trace = sample(algorithm, potential, mixing, init, key, settings.num_steps,
                   output=Output(thin=settings.thin), on_divergence="flag", channel=channel)
    if channel is None:
        return trace, 0
    per_chain = np.sum(channel.bytes_sent(trace.state), axis=-1)  # (seeds * chains,)
    per_seed = per_chain.reshape(settings.seeds, settings.chains).sum(axis=1)
    return trace, round(float(per_seed.mean()))


def _seed_scores(target, ref, potential, draws, settings, rng) -> dict | None:
    """The scores of one seed's ``(draws, d)`` on ``settings.score_size`` of them drawn
    without replacement by ``rng``; ``None`` (and no draw of ``rng``) if any is non-finite."""
    if not np.all(np.isfinite(draws)):
        return None
    pick = rng.choice(draws.shape[0], min(settings.score_size, draws.shape[0]), replace=False)
    return _scores(target, ref, potential, draws[pick])


def _one_run(target, ref, potential, sampler_name, network_name, settings, key):
    method = SAMPLERS[sampler_name]
    n = settings.num_agents
    make = method.builder(n)
    centralized = method.centralized
    mixing = None if centralized else NETWORKS[network_name](n)
    total = settings.seeds * settings.chains
    init_key, pilot_key, run_key = jax.random.split(key, 3)
    start = target.init(init_key, total)
    init = start if centralized else jnp.broadcast_to(start[:, None], (total, n, target.dim))
    t0 = time.perf_counter()
    grid_batch = None
    if method.per_datum_state:  # float32 gradients of every datum, agent and chain
        table = 4 * total * int(np.prod(jax.tree.leaves(potential.data)[0].shape[:2])) \
            * target.dim
        if table * settings.pilot_grid > PILOT_BYTES:
            grid_batch = max(1, PILOT_BYTES // table)
    report = stepsize.propose_step_size(make, potential, mixing, init, pilot_key,
                                        num_steps=settings.pilot_steps,
                                        num_step_sizes=settings.pilot_grid,
                                        sampling_steps=settings.num_steps // 2,
                                        grid_batch=grid_batch)
    h = float(report.step_size)
    trace, sent = run_chains(make(h), potential, mixing, init, run_key, settings)
    positions = np.asarray(trace.positions)  # (chains, kept, [N,] d)
    wall = time.perf_counter() - t0
    if centralized:
        positions = positions[:, :, None]
    kept = positions.shape[1]
    rng = np.random.default_rng(0)
    per_seed = []
    for s in range(settings.seeds):
        group = positions[s * settings.chains:(s + 1) * settings.chains, kept // 2:]
        per_seed.append(_seed_scores(target, ref, potential, group.reshape(-1, target.dim),
                                     settings, rng))
    return {"step_size": h, "wall_s": wall, "bytes_sent": sent,
            "diverged": int(np.sum(np.asarray(trace.diverged))), "seeds": per_seed}


def target_setup(target, settings: BenchSettings, seed: int = 0):
    """A target's rows' set-up: ``(settings, potential, batch, curvature_batch)``. A target that
    asks for its own number of agents is split over that many; an agent draws mini-batches of
    ``max_batch`` where every agent holds more (else full batches, ``batch`` ``None``), and
    an adapted row's warm-up measures curvature on ``curvature_batch`` of an agent's data where
    one holds more (else ``None``)."""
    if target.num_agents is not None:
        settings = dataclasses.replace(settings, num_agents=target.num_agents)
    split = target.split(settings.num_agents, settings.split, seed=seed)
    batch = None if int(split.sizes.min()) <= settings.max_batch else settings.max_batch
    curvature_batch = (settings.curvature_batch
                       if int(split.sizes.max()) > settings.curvature_batch else None)
    potential = target.potential(settings.num_agents, settings.split, batch_size=batch,
                                 seed=seed)
    return settings, potential, batch, curvature_batch


def adapted_key(settings: BenchSettings, target_name: str, sampler_name: str, seed: int = 0):
    """The key of the ``<sampler_name> (adapted)`` rows of ``target_name`` (both networks): a
    row's key depends on its place in ``settings`` alone."""
    t = settings.targets.index(target_name)
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), t),
                              100 + settings.adapted.index(sampler_name))


def adapted_estimator(curvature_batch):
    """The gradient estimator of a target's adapted rows: SVRG refreshed every
    :data:`ADAPTED_SVRG_PERIOD` steps where an agent holds more data than the warm-up's
    ``curvature_batch`` (``curvature_batch`` not ``None``, :func:`target_setup`), else ``None``
    (the sampler's own: full or mini-batches)."""
    return None if curvature_batch is None else gradients.svrg(update_every=ADAPTED_SVRG_PERIOD)


def _estimator_label(estimator) -> str | None:
    return None if estimator is None else f"SVRG/{estimator.update_every}"


def _adapted_run(target, ref, potential, sampler_name, network_name, settings, key, *,
                 curvature_batch=None, warmup_options=None, run_steps=None,
                 keep_draws=False):
    """An adapted row (module docstring): per seed, :func:`dgsgld.warmup` in the first half of
    ``num_steps`` (its ``curvature_batch`` and further ``warmup_options``; the leaderboard's
    rows take its defaults), then the adapted sampler for the second half, every kept draw
    scored. ``run_steps``: sample that many steps after the same warm-up instead (its
    criterion still sized for the second half); ``keep_draws``: the result's ``"draws"`` holds
    every seed's kept positions ``(chains, kept, N, d)`` and ``"adapted"`` its adapted sampler
    and warmed-up state (``None`` where its warm-up failed). The sampler draws its gradients
    through :func:`adapted_estimator` of ``curvature_batch``."""
    from dgsgld.tuning import warmup

    cls = ADAPTED[sampler_name]
    estimator = adapted_estimator(curvature_batch)
    options = {} if estimator is None else {"estimator": estimator}
    n = settings.num_agents
    mixing = NETWORKS[network_name](n)
    total = settings.seeds * settings.chains
    init_key, _, run_key = jax.random.split(key, 3)
    start = target.init(init_key, total)   # the plain rows' starting points
    init = jnp.broadcast_to(start[:, None], (total, n, target.dim))
    warm_steps = settings.num_steps // 2
    steps = settings.num_steps - warm_steps
    rng = np.random.default_rng(0)
    per_seed, reports, sent, diverged, draws, adapted = [], [], [], 0, [], []
    t0 = time.perf_counter()
    for s in range(settings.seeds):
        group = init[s * settings.chains:(s + 1) * settings.chains]
        k_warm, k_run = jax.random.split(jax.random.fold_in(run_key, s))
        # An exact channel counts the messages (the warm-up keeps the template's channel).
        template = cls(1.0, channel=communication.Channel(), **options)
        try:
            sampler, state, report = warmup(template, potential, mixing, group, k_warm,
                                            warm_steps, sampling_steps=steps,
                                            curvature_batch=curvature_batch,
                                            **(warmup_options or {}))
        except (RuntimeError, ValueError) as err:  # every retry diverged, no stable step
            per_seed.append(None)
            draws.append(None)
            adapted.append(None)
            reports.append({"error": str(err)})
            continue
        before = float(np.sum(sampler.channel.bytes_sent(state)))
        run = steps if run_steps is None else run_steps
        trace = sample(sampler, potential, mixing, state, k_run, run,
                       output=Output(thin=settings.thin), on_divergence="flag")
        run_bytes = float(np.sum(sampler.channel.bytes_sent(trace.state))) - before
        sent.append(run_bytes * settings.num_steps / run + report.bytes_sent)
        if keep_draws:
            draws.append(np.asarray(trace.positions))
            adapted.append((sampler, state))
        diverged += int(np.sum(np.asarray(trace.diverged)))
        reports.append({"step_size": report.step_size, "parameter": report.parameter,
                        "preconditioner": report.preconditioner, "law": report.law,
                        "stationary_sd_ratio": report.stationary_sd_ratio,
                        "stationary_mean_error": report.stationary_mean_error,
                        "rhat_max": report.rhat_max, "check_ess": report.check_ess,
                        "predicted_ess": report.predicted_ess, "retries": report.retries,
                        "approach_steps": report.approach_steps,
                        "approach_reason": report.approach_reason,
                        "gradient_noise": report.gradient_noise,
                        "bytes_sent": report.bytes_sent, "verdict": report.verdict})
        per_seed.append(_seed_scores(target, ref, potential,
                                     np.asarray(trace.positions).reshape(-1, target.dim),
                                     settings, rng))
    etas = [r["step_size"] for r in reports if "step_size" in r]
    return {"step_size": float(np.median(etas)) if etas else float("nan"),
            "estimator": _estimator_label(estimator), "wall_s": time.perf_counter() - t0,
            "bytes_sent": round(float(np.mean(sent))) if sent else 0,
            "diverged": diverged, "seeds": per_seed, "warmup": reports,
            **({"draws": draws, "adapted": adapted} if keep_draws else {})}


def _scores(target, ref, potential, params):
    compared = np.asarray(target.compared(jnp.asarray(params)), np.float64)
    m = moment_errors(compared, ref)
    scores = np.asarray(evaluate.stein_scores(potential, jnp.asarray(params)), np.float64)
    out = {"mean_error_max": m["mean_error_max"], "mean_error_median": m["mean_error_median"],
           "sd_ratio_worst": m["sd_ratio_worst"], "sd_ratio_median": m["sd_ratio_median"],
           "w2": evaluate.empirical_w2(compared, ref.draws, size=len(compared), scale=ref.sd),
           "ksd": evaluate.ksd(params, scores)}
    if target.predictive is not None:
        out.update(predictive_scores(target.mean_predictive(params),
                                     target.mean_predictive(ref.draws)))
    return out


def _floor(target, ref, potential, size):
    """Scores of the reference's own draws at the benchmark's sample size."""
    half = len(ref.draws) // 2
    m = moment_errors(ref.draws[:size], ref)
    out = {"mean_error_max": m["mean_error_max"], "mean_error_median": m["mean_error_median"],
           "sd_ratio_worst": m["sd_ratio_worst"], "sd_ratio_median": m["sd_ratio_median"],
           "w2": evaluate.empirical_w2(ref.draws[:half], ref.draws[half:], size=size, scale=ref.sd)}
    if target.quantities is None:  # KSD needs parameters, not compared quantities
        x = ref.draws[:size].astype(np.float64)
        out["ksd"] = evaluate.ksd(x, np.asarray(evaluate.stein_scores(
            potential, jnp.asarray(x, jnp.float32))))
    if target.predictive is not None:
        out.update(predictive_scores(target.mean_predictive(ref.draws[:size]),
                                     target.mean_predictive(ref.draws[size:])))
    return out


_KEYS = ("mean_error_max", "mean_error_median", "sd_ratio_worst", "sd_ratio_median", "w2",
         "ksd", "predictive_tv", "predictive_agreement")


def _summary(per_seed):
    ok = [s for s in per_seed if s is not None]
    out = {}
    for k in _KEYS:
        v = np.array([s[k] for s in ok if k in s])
        if v.size:
            out[k] = [float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1
                      else float("nan")]
    out["seeds_finite"] = len(ok)
    return out


def sbc_cells(settings: BenchSettings, key, *, seed: int = 0, log=print,
              only: tuple | None = None) -> list:
    """Simulation-based calibration (:mod:`dgsgld.posteriors.sbc`) of ``settings.sbc_samplers``
    on the first network of ``settings.networks``, of ``settings.sbc_adapted`` at the warm-up's
    settings on ``settings.sbc_adapted_targets`` (cells ``<sampler> (adapted)``,
    :func:`dgsgld.tuning.adapted_sbc`), and of the
    exact posterior draws on the Gaussian anchor: one dict per (target, sampler) with the
    chi-square p-values ``(N, d)`` (``(1, d)`` for the exact draws), their minimum, the number
    ``rejected`` below ``0.01 / (N d)`` (Bonferroni at level 0.01 per cell), the ranks, the
    steps' range (an adapted cell's: the adapted, preconditioned steps, with
    ``warmup_steps`` and ``budget_ok``, the warm-ups whose verdict was "ok") and the wall time;
    a run with diverged chains has ``error`` instead of p-values. ``only``: these targets'
    cells alone (each with the keys it has in the whole run)."""
    cells = []
    n, network = settings.num_agents, settings.networks[0]
    mixing = NETWORKS[network](n)
    for t, name in enumerate(settings.sbc_targets):
        if only is not None and name not in only:
            continue
        names = get_target(name).names
        size = {"target": name, "num_datasets": settings.sbc_datasets,
                "num_draws": settings.sbc_draws, "names": list(names)}
        if name == "gaussian_linear":
            t0 = time.perf_counter()
            theta, y = sbc.simulate(name, seed, settings.sbc_datasets)
            ranks = sbc.sbc_ranks(sbc.exact_draws(y, settings.sbc_draws, seed=seed + 1),
                                  theta)[:, None]
            cells.append(_sbc_cell(size | {"sampler": "exact", "network": "-",
                                           "num_steps": None, "step": None}, ranks,
                                   settings.sbc_draws, time.perf_counter() - t0))
        for s_index, sampler_name in enumerate(settings.sbc_samplers):
            method = SAMPLERS[sampler_name]
            row = size | {"sampler": sampler_name, "network": network,
                          "num_steps": settings.sbc_steps,
                          "step": f"{settings.sbc_step:g} / curvature"}
            run_key = jax.random.fold_in(jax.random.fold_in(key, 1000 + t), s_index)
            t0 = time.perf_counter()
            try:
                r = sbc.sbc_run(name, method.builder(n), mixing, run_key,
                                num_datasets=settings.sbc_datasets,
                                num_draws=settings.sbc_draws, num_steps=settings.sbc_steps,
                                num_agents=n, split=settings.split, seed=seed,
                                step_sizes=functools.partial(_sbc_steps, name,
                                                             settings.sbc_step))
            except ValueError as err:  # diverged chains: no ranks
                cells.append(row | {"error": str(err), "wall_s": time.perf_counter() - t0})
                log(f"SBC {name:24s} {sampler_name:20s} {err}")
                continue
            steps = r["step_sizes"]
            cell = _sbc_cell(row | {"h_min": float(steps.min()), "h_max": float(steps.max())},
                             r["ranks"], settings.sbc_draws, time.perf_counter() - t0)
            cells.append(cell)
            log(f"SBC {name:24s} {sampler_name:20s} min p={cell['min_p']:.2g} rejected "
                f"{cell['rejected']} of {cell['tests']} ({cell['wall_s']:.1f} s)")
        adapted = settings.sbc_adapted if name in settings.sbc_adapted_targets else ()
        for s_index, sampler_name in enumerate(adapted):
            label = sampler_name + ADAPTED_SUFFIX
            row = size | {"sampler": label, "network": network, "num_steps": settings.sbc_steps,
                          "warmup_steps": settings.sbc_warmup_steps, "step": "adapted"}
            run_key = jax.random.fold_in(jax.random.fold_in(key, 1000 + t), 100 + s_index)
            t0 = time.perf_counter()
            try:
                r = adapted_sbc(name, ADAPTED[sampler_name], mixing, run_key,
                                num_datasets=settings.sbc_datasets,
                                num_draws=settings.sbc_draws,
                                warmup_steps=settings.sbc_warmup_steps,
                                num_steps=settings.sbc_steps, num_agents=n,
                                split=settings.split, seed=seed)
            except ValueError as err:  # a warm-up or a sampling run diverged: no ranks
                cells.append(row | {"error": str(err), "wall_s": time.perf_counter() - t0})
                log(f"SBC {name:24s} {label:20s} {err}")
                continue
            steps = r["step_sizes"]
            cell = _sbc_cell(row | {"h_min": float(steps.min()), "h_max": float(steps.max()),
                                    "budget_ok": sum(w.budget_ok for w in r["reports"]),
                                    "reruns": int(np.sum(r["reruns"]))},
                             r["ranks"], settings.sbc_draws, time.perf_counter() - t0)
            cells.append(cell)
            log(f"SBC {name:24s} {label:20s} min p={cell['min_p']:.2g} rejected "
                f"{cell['rejected']} of {cell['tests']} ({cell['wall_s']:.1f} s)")
    return cells


def _sbc_steps(name, scale, y):
    return scale / sbc.curvature_scale(name, y)


def _sbc_cell(row: dict, ranks, num_draws: int, wall: float) -> dict:
    """``row`` with the p-values of ranks ``(S, N, q)`` (one bin per rank)."""
    p = sbc.rank_pvalues(ranks, num_draws)
    return row | {"pvalues": p.tolist(), "min_p": float(p.min()), "tests": int(p.size),
                  "rejected": int(np.sum(p < 0.01 / p.size)), "wall_s": wall,
                  "ranks": np.asarray(ranks).tolist()}


def sbc_figure(cells: list, num_bins: int = 4):
    """The SBC cells' rank histograms (:func:`dgsgld.posteriors.sbc.rank_histogram_grid`: one
    row per cell with ranks, its coordinates of smallest p-value)."""
    rows = [(f"{c['target']}\n{c['sampler']}", np.asarray(c["ranks"]), c["num_draws"],
             c["names"]) for c in cells if "ranks" in c]
    return sbc.rank_histogram_grid(rows, num_bins=num_bins)


def bench_posteriors(out: Path, settings: BenchSettings, *, seed: int = 0, log=print,
                     only: tuple | None = None, calibration: bool = True,
                     leaderboard: bool = True, resume: bool = False) -> dict:
    """Run the benchmark and write ``out/leaderboard.{json,md}`` (after every run) and
    ``out/leaderboard.png`` (:func:`leaderboard_figure`, when matplotlib is installed); then
    the calibration runs (:func:`sbc_cells`), their p-values added to the JSON (``"sbc"``,
    without the ranks) and the Markdown, the ranks to ``out/sbc_ranks.json`` and their
    histograms to ``out/sbc_ranks.png`` (:func:`sbc_figure`). Returns the JSON object.

    ``only`` (target names), ``calibration=False`` and ``leaderboard=False`` run a part of the
    benchmark: the rows of the targets of ``only`` in ``settings.targets`` (none with
    ``leaderboard=False``) and the calibration cells of those in ``settings.sbc_targets`` (none
    with ``calibration=False``). A target's keys come from its
    place in those lists and the seed alone, so parts run apart (processes, machines, days)
    and joined by :func:`merge` give the rows and cells of one run. A part's JSON records what
    it ran (``"part"``), marked ``"complete"`` by its last write.

    ``resume=True`` continues a run that stopped: the rows already in ``out/leaderboard.json``
    are kept and the others run (a row's key depends on its place alone, so the result is the
    uninterrupted run's). The stored file must hold the same settings, part and seed, else
    ``ValueError`` names what differs."""
    names = set(settings.targets) | set(settings.sbc_targets)
    if only is not None and (isinstance(only, str) or not set(only) <= names):
        raise ValueError("`only` must be a collection of names of `settings.targets` or "
                         f"`settings.sbc_targets`; got {only!r}.")
    chosen = [(t, name) for t, name in enumerate(settings.targets)
              if leaderboard and (only is None or name in only)]
    sbc_run = [name for name in settings.sbc_targets if calibration
               and (only is None or name in only)]
    # Every target's data first: one bundled with scikit-learn fails here, not after the
    # targets before it have run.
    targets = [get_target(name) for _, name in chosen]
    part = None if only is None and calibration and leaderboard else {
        "targets": [name for _, name in chosen], "sbc_targets": sbc_run, "seed": seed}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = jax.random.key(seed)
    rows = []
    done, before = _resumed(out, settings, part, seed) if resume else ({}, 0.0)
    t_all = time.perf_counter() - before

    def save(mark, sbc_rows=None):  # the run so far, after every row
        # Stored rows not reached yet stay in the file (after the others), so that a resumed
        # run that stops again keeps them for the next resume.
        reached = {(r["target"], r["network"], r["sampler"]) for r in rows}
        ahead = [r for k, r in done.items() if k not in reached]
        return _write(out, settings, rows + ahead, time.perf_counter() - t_all, sbc_rows,
                      part=mark, seed=seed)

    for (t, name), target in zip(chosen, targets):
        run_settings, potential, batch, curvature_batch = target_setup(target, settings, seed)
        ref = load_reference(name, fingerprint=target.fingerprint)
        cv_batch = batch or 1  # a control variate's mini-batch (see the module doc)
        cv_potential = potential if cv_batch == batch else target.potential(
            run_settings.num_agents, run_settings.split, batch_size=cv_batch, seed=seed)
        if (name, "-", "reference") in done:
            rows.append(done[name, "-", "reference"])
        else:
            floor = _floor(target, ref, potential, run_settings.score_size)
            rows.append({"target": name, "network": "-", "sampler": "reference",
                         "step_size": None, "wall_s": None, "bytes_sent": None, "diverged": 0,
                         "batch_size": batch, **{k: [v, float("nan")] for k, v in floor.items()},
                         "seeds_finite": 1})
        for network in run_settings.networks:
            for s, sampler_name in enumerate(run_settings.samplers):
                method = SAMPLERS[sampler_name]
                if method.centralized and network != run_settings.networks[0]:
                    continue  # the centralized sampler has no network
                stored = done.get((name, "-" if method.centralized else network, sampler_name))
                if stored is not None:
                    rows.append(stored)
                    continue
                run_key = jax.random.fold_in(jax.random.fold_in(key, t), s)
                pot, b = (cv_potential, cv_batch) if method.control_variate else (potential,
                                                                                   batch)
                r = _one_run(target, ref, pot, sampler_name, network, run_settings, run_key)
                row = {"target": name, "network": "-" if method.centralized
                       else network, "sampler": sampler_name, "step_size": r["step_size"],
                       "wall_s": r["wall_s"], "bytes_sent": r["bytes_sent"],
                       "diverged": r["diverged"], "batch_size": b,
                       **_summary(r["seeds"])}
                rows.append(row)
                save(part)
                log(f"{name:24s} {row['network']:8s} {sampler_name:20s} h={r['step_size']:.3g} "
                    f"W2={row.get('w2', [np.nan])[0]:.3f} KSD={row.get('ksd', [np.nan])[0]:.3f} "
                    f"({r['wall_s']:.1f} s)")
            for sampler_name in settings.adapted:
                stored = done.get((name, network, sampler_name + ADAPTED_SUFFIX))
                if stored is not None:
                    rows.append(stored)
                    continue
                run_key = adapted_key(settings, name, sampler_name, seed)
                r = _adapted_run(target, ref, potential, sampler_name, network, run_settings,
                                 run_key, curvature_batch=curvature_batch)
                row = {"target": name, "network": network,
                       "sampler": sampler_name + ADAPTED_SUFFIX, "step_size": r["step_size"],
                       "wall_s": r["wall_s"], "bytes_sent": r["bytes_sent"],
                       "diverged": r["diverged"], "batch_size": batch,
                       **({"estimator": r["estimator"]} if r["estimator"] else {}),
                       **_summary(r["seeds"]), "warmup": r["warmup"]}
                rows.append(row)
                save(part)
                verdicts = sum(w.get("verdict") == "ok" for w in r["warmup"])
                log(f"{name:24s} {network:8s} {row['sampler']:20s} h={r['step_size']:.3g} "
                    f"sd={row.get('sd_ratio_worst', [np.nan])[0]:.3f} "
                    f"mean={row.get('mean_error_max', [np.nan])[0]:.3f} "
                    f"verdict ok {verdicts}/{len(r['warmup'])} ({r['wall_s']:.1f} s)")
    # A part is marked complete by its last write only: merge refuses one that stopped.
    ended = None if part is None else part | {"complete": True}
    result = save(part if sbc_run else ended)
    _save_figure(leaderboard_figure, result, out / "leaderboard.png", log)
    if sbc_run:
        cells = sbc_cells(settings, key, seed=seed, log=log, only=only)
        (out / "sbc_ranks.json").write_text(json.dumps(
            [{k: c[k] for k in ("target", "sampler", "ranks") if k in c} for c in cells]) + "\n")
        result = save(ended, [{k: v for k, v in c.items() if k != "ranks"} for c in cells])
        _save_figure(functools.partial(sbc_figure, num_bins=settings.sbc_bins), cells,
                     out / "sbc_ranks.png", log)
    return result


def _resumed(out: Path, settings: BenchSettings, part: dict | None, seed: int):
    """``({(target, network, sampler): row}, wall seconds)`` of the run stored in ``out`` (none
    yet: empty), after checking that it is this run: settings, part and seed."""
    path = out / "leaderboard.json"
    if not path.exists():
        return {}, 0.0
    stored = json.loads(path.read_text())
    mine = json.loads(json.dumps({k: getattr(settings, k)
                                  for k in settings.__dataclass_fields__}))
    if stored["settings"] != mine:
        changed = sorted(k for k in mine if stored["settings"].get(k) != mine[k])
        raise ValueError(f"`resume`: {path} ran other settings ({', '.join(changed)}).")
    mark = stored.get("part")
    mark = mark if mark is None else {k: v for k, v in mark.items() if k != "complete"}
    if mark != (None if part is None else json.loads(json.dumps(part))):
        raise ValueError(f"`resume`: {path} is another part of the run ({stored.get('part')} "
                         f"for {part}).")
    if part is None and stored.get("seed") != seed:
        raise ValueError(f"`resume`: {path} ran seed {stored.get('seed')}, not {seed}.")
    return {(r["target"], r["network"], r["sampler"]): r for r in stored["rows"]}, \
        float(stored["wall_s"])


def merge(out: Path, parts, *, partial: bool = False) -> dict:
    """Join the parts of one benchmark run (directories written by :func:`bench_posteriors`
    with ``only`` or ``calibration=False``, the same settings and seed, every target's rows
    and every calibration target's cells in exactly one part) into ``out``: the files of the
    whole run, rows and cells in the order of the settings, its wall time the parts' sum.
    ``partial=True`` joins parts that leave targets out (each still at most once): the JSON
    then names them (``"missing"``) and so does the Markdown's first line. Raises
    ``ValueError`` naming what does not fit."""
    loaded = []
    for d in parts:
        result = json.loads((Path(d) / "leaderboard.json").read_text())
        if "part" not in result:
            raise ValueError(f"`parts`: {d} holds a whole run, not a part.")
        if not result["part"].get("complete"):
            raise ValueError(f"`parts`: {d} stopped before its last row or cell; run it again "
                             "with --resume.")
        loaded.append((Path(d), result))
    settings = loaded[0][1]["settings"]
    for d, r in loaded:
        if r["settings"] != settings:
            raise ValueError(f"`parts`: {d} ran other settings than {loaded[0][0]}.")
    seeds = {r["part"]["seed"] for _, r in loaded}
    if len(seeds) != 1:
        raise ValueError(f"`parts` ran different seeds: {sorted(seeds)}.")
    missing = {}
    for what, field in (("targets", "targets"), ("calibration targets", "sbc_targets")):
        ran = [name for _, r in loaded for name in r["part"][field]]
        missing[field] = [name for name in settings[field] if name not in ran]
        if len(set(ran)) != len(ran) or not set(ran) <= set(settings[field]) or (
                missing[field] and not partial):
            raise ValueError(f"`parts` must run every one of the settings' {what} once; they "
                             f"ran {ran} for {settings[field]}.")
    rows, cells, ranks = [], [], []
    for name in settings["targets"]:
        rows += [row for _, r in loaded if name in r["part"]["targets"]
                 for row in r["rows"] if row["target"] == name]
    for name in settings["sbc_targets"]:
        if name in missing["sbc_targets"]:
            continue
        d, r = next((d, r) for d, r in loaded if name in r["part"]["sbc_targets"])
        cells += [c for c in r["sbc"] if c["target"] == name]
        ranks += [c for c in json.loads((d / "sbc_ranks.json").read_text())
                  if c["target"] == name]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # fsum: the exactly rounded sum, the same on every Python (3.12's sum() compensates).
    result = {"settings": settings, "wall_s": math.fsum(r["wall_s"] for _, r in loaded),
              "rows": rows}
    if any(missing.values()):
        result["missing"] = missing
    if settings["sbc_targets"]:
        result["sbc"] = cells
        (out / "sbc_ranks.json").write_text(json.dumps(ranks) + "\n")
    _save_result(out, result)
    _save_figure(leaderboard_figure, result, out / "leaderboard.png", print)
    if settings["sbc_targets"]:
        by_cell = {(c["target"], c["sampler"]): c["ranks"] for c in ranks if "ranks" in c}
        figure_cells = [c | {"ranks": by_cell[c["target"], c["sampler"]]}
                        for c in cells if (c["target"], c["sampler"]) in by_cell]
        _save_figure(functools.partial(sbc_figure, num_bins=settings["sbc_bins"]),
                     figure_cells, out / "sbc_ranks.png", print)
    return result


def _save_figure(make, arg, path: Path, log) -> None:
    try:
        figure = make(arg)
    except ImportError as err:  # matplotlib is optional (the plots extra)
        log(f"no {path.name}: {err}")
        return
    figure.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(figure)


#: The figure's scores: (key, axis label, the value of a perfect sample).
FIGURE_SCORES = (("mean_error_max", "max standardized mean error", 0.0),
                 ("sd_ratio_worst", "worst sd ratio", 1.0))


def leaderboard_figure(result: dict):
    """The leaderboard as a figure: one panel per score of :data:`FIGURE_SCORES`, the targets
    along the x axis, one marker per sampler and network with its standard error over seeds
    as an error bar, and the reference's own score (the floor) as a black bar. A sampler's
    plain and adapted rows share a colour (circles plain, diamonds adapted; hollow on the
    second network). Runs without a finite seed have no marker. Returns the ``matplotlib``
    figure (Agg backend)."""
    plt = pyplot(headless=True)
    from matplotlib.ticker import LogLocator, NullFormatter

    rows = result["rows"]
    targets = list(dict.fromkeys(r["target"] for r in rows))
    methods = list(dict.fromkeys((r["sampler"], r["network"]) for r in rows
                                 if r["sampler"] != "reference"))
    fig, axes = plt.subplots(len(FIGURE_SCORES), 1, squeeze=False,
                             figsize=(max(6.0, 1.3 * len(targets)), 3.2 * len(FIGURE_SCORES)))
    width = 0.8 / max(len(methods), 1)
    bases = list(dict.fromkeys(m[0].removesuffix(ADAPTED_SUFFIX) for m in methods))
    nets = list(dict.fromkeys(m[1] for m in methods if m[1] != "-"))
    colours = plt.get_cmap("tab20" if len(bases) > 10 else "tab10")

    def style(sampler, network):
        base = sampler.removesuffix(ADAPTED_SUFFIX)
        colour = colours(bases.index(base) % colours.N)
        hollow = network in nets[1:]
        return {"fmt": "D" if sampler.endswith(ADAPTED_SUFFIX) else "o", "color": colour,
                "mfc": "none" if hollow else colour}

    for ax, (key, label, perfect) in zip(axes[:, 0], FIGURE_SCORES):
        for j, (sampler, network) in enumerate(methods):
            cells = {r["target"]: r[key] for r in rows if (r["sampler"], r["network"]) ==
                     (sampler, network) and key in r}
            xs = [i - 0.4 + (j + 0.5) * width for i, t in enumerate(targets) if t in cells]
            ms = [cells[t][0] for t in targets if t in cells]
            ses = [np.nan_to_num(cells[t][1]) for t in targets if t in cells]
            name = sampler if network == "-" else f"{sampler} ({network})"
            ax.errorbar(xs, ms, yerr=ses, ms=4, capsize=2, label=name,
                        **style(sampler, network))
        floor = {r["target"]: r[key][0] for r in rows if r["sampler"] == "reference" and key in r}
        ax.hlines([floor[t] for t in targets if t in floor],
                  [i - 0.45 for i, t in enumerate(targets) if t in floor],
                  [i + 0.45 for i, t in enumerate(targets) if t in floor], colors="k",
                  label="reference (floor)")
        ax.axhline(perfect, color="0.6", lw=0.8, ls=":")
        if key == "sd_ratio_worst":
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter("{x:g}")
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(label)
        ax.set_xticks(range(len(targets)), targets, rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    axes[-1, 0].legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    return fig


def _write(out: Path, settings: BenchSettings, rows: list, wall: float,
           sbc_rows: list | None = None, part: dict | None = None, seed: int = 0) -> dict:
    result = {"settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
              "wall_s": wall, "rows": rows}
    if part is not None:
        result["part"] = part
    else:  # a part records its seed; so does a whole run, for resume
        result["seed"] = seed
    if sbc_rows is not None:
        result["sbc"] = sbc_rows
    return _save_result(out, result)


def _save_result(out: Path, result: dict) -> dict:
    """``out/leaderboard.json`` and its table ``out/leaderboard.md``; returns ``result``."""
    (out / "leaderboard.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "leaderboard.md").write_text(markdown(result))
    return result


def _fmt(cell):
    if cell is None:
        return "-"
    m, se = cell
    return f"{m:.3f}" if not np.isfinite(se) else f"{m:.3f} ± {se:.3f}"


#: The band a row must reach on a target: worst sd ratio within ``SD_BAND`` and max
#: standardized mean error at most ``MEAN_BAND`` (means over seeds).
SD_BAND = (0.8, 1.25)
MEAN_BAND = 0.3


def within_band(row: dict) -> bool:
    """Whether a leaderboard row's worst sd ratio is within :data:`SD_BAND` and its max
    standardized mean error at most :data:`MEAN_BAND` (no scores: not within)."""
    sd, mean = row.get("sd_ratio_worst"), row.get("mean_error_max")
    return (sd is not None and mean is not None and SD_BAND[0] <= sd[0] <= SD_BAND[1]
            and mean[0] <= MEAN_BAND)


def band_table(result: dict) -> list[str]:
    """Markdown lines: for every sampler and network, the targets whose row is
    :func:`within_band`, and those that are not."""
    targets = list(dict.fromkeys(r["target"] for r in result["rows"]))
    cells: dict = {}
    for r in result["rows"]:
        if r["sampler"] != "reference":
            cells.setdefault((r["sampler"], r["network"]), {})[r["target"]] = within_band(r)
    lines = [(f"Within the band (worst sd ratio in [{SD_BAND[0]:g}, {SD_BAND[1]:g}], max mean "
              f"error <= {MEAN_BAND:g}), of {len(targets)} targets:"), "",
             "| sampler | network | within | not within |", "|---|---|---|---|"]
    samplers = list(dict.fromkeys(k[0] for k in cells))
    networks_ = list(dict.fromkeys(k[1] for k in cells))
    for (sampler, network), got in sorted(cells.items(), key=lambda kv: (
            samplers.index(kv[0][0]), networks_.index(kv[0][1]))):
        outside = [t for t in targets if not got.get(t, False)]
        lines.append(f"| {sampler} | {network} | {sum(got.values())} | "
                     f"{', '.join(outside) or '-'} |")
    return lines


def markdown(result: dict) -> str:
    """The leaderboard as a Markdown table (mean ± standard error over seeds), then which
    targets each row reaches the band on (:func:`band_table`)."""
    s = result["settings"]
    lines = [(f"Posterior benchmark: {s['num_agents']} agents, split {s['split']!r}, "
              f"{s['seeds']} seeds x {s['chains']} chains, {s['num_steps']} steps (thin "
              f"{s['thin']}, second half kept), scores on {s['score_size']} draws; "
              f"total {result['wall_s']:.0f} s."
              + ("" if "missing" not in result else " Parts of a run: not run "
                 + "; ".join(f"{field} {', '.join(names)}" for field, names
                             in result["missing"].items() if names) + ".")), "",
             ("| target | network | sampler | step | batch | mean err max | mean err median | "
              "worst sd ratio | median sd ratio | W2 (std.) | KSD | pred. TV | pred. agree | "
              "wall s | MB sent |"), "|---" * 15 + "|"]
    for r in result["rows"]:
        step = "-" if r["step_size"] is None else f"{r['step_size']:.3g}"
        wall = "-" if r["wall_s"] is None else f"{r['wall_s']:.1f}"
        mb = "-" if r["bytes_sent"] is None else f"{r['bytes_sent'] / 1e6:.2f}"
        div = f" ({r['diverged']} diverged)" if r["diverged"] else ""
        batch = "full" if r["batch_size"] is None else r["batch_size"]
        if r.get("estimator"):
            batch = f"{batch}, {r['estimator']}"
        lines.append(f"| {r['target']} | {r['network']} | {r['sampler']}{div} | {step} | "
                     f"{batch} | "
                     + " | ".join(_fmt(r.get(k)) for k in _KEYS) + f" | {wall} | {mb} |")
    if any(r["sampler"].endswith(ADAPTED_SUFFIX) for r in result["rows"]):
        lines += [""] + band_table(result)
    if result.get("sbc"):
        lines += ["", ("Simulation-based calibration: per data set a step `h = "
                       f"{s['sbc_step']:g} / curvature` (`sbc.curvature_scale`), chi-square "
                       "p-values of uniform ranks (one bin per rank) per agent and coordinate; "
                       "rejected: below 0.01 / tests.")
                  + (" Adapted cells: per data set a warm-up (`dgsgld.warmup`) of the first "
                     "number of steps, then the second at its settings "
                     "(`dgsgld.tuning.adapted_sbc`); h: the adapted (preconditioned) steps."
                     if any("warmup_steps" in c for c in result["sbc"]) else ""), "",
                  ("| target | network | sampler | data sets x draws | steps | h | smallest p | "
                   "rejected | wall s |"), "|---|---|---|---|---|---|---|---|---|"]
        for c in result["sbc"]:
            h = "-" if "h_min" not in c else (f"{c['h_min']:.3g}" if c["h_min"] == c["h_max"]
                                               else f"{c['h_min']:.3g}-{c['h_max']:.3g}")
            steps = "-" if c["num_steps"] is None else c["num_steps"]
            if "warmup_steps" in c:
                steps = f"{c['warmup_steps']} + {steps}"
            found = (f"{c['min_p']:.2g} | {c['rejected']} of {c['tests']}" if "error" not in c
                     else "diverged | -")
            lines.append(f"| {c['target']} | {c['network']} | {c['sampler']} | "
                         f"{c['num_datasets']} x {c['num_draws']} | {steps} | {h} | {found} | "
                         f"{c['wall_s']:.1f} |")
    return "\n".join(lines) + "\n"
