"""Cost to accuracy: what each method spends to reach a target's reference accuracy band.

For each benchmark target, side by side in one run and on the same machine: NUTS on the pooled
data (numpyro), centralized SGLD and DIGing-SGLD (ring and complete graph), each run
``--repeats`` times on independent seeds; the table gives the medians over repeats of the
per-datum gradient evaluations and the wall seconds each needs until its draws are in the band,
and their ratios to NUTS's medians of the same run.

**The band** is the reference's own accuracy (:func:`benchmarks.nuts_cost.band`): the moment
scores of the stored reference's first 400 draws against the whole reference (its Monte Carlo
error at 400 independent draws), loosened to 0.1 sd and 10 % where tighter::

    max_j |mean_j − m_ref,j| / sd_ref,j   <= max(0.1, floor mean_error_max)
    max_j |log(sd_j / sd_ref,j)|          <= max(log 1.1, |log floor sd_ratio_worst|)

over the compared coordinates ``j``. A run *reaches* the band at the first prefix of its ladder
whose draws are in the band and stay in it at every longer prefix of the same run.

**The cost** of a prefix, in per-datum gradient evaluations (one ``∇ log p(d | x)`` of one
datum, whatever the method): NUTS: ``n`` per leapfrog step, warm-up included; SG-MCMC: the
agents' batches per step (``2 b`` per agent with a control variate, which evaluates the batch at
``x`` and at its anchor), plus ``n`` for the anchor's full gradient, plus the set-up. Wall
seconds: set-up + warm-up + the run prorated to the prefix by its share of the steps
(compilation included); all methods in float64 (x64 on, as the references).

**The samplers' set-up** is :data:`ADAPT`, called once per (target, method, repeat), one of
two (``--adapt``). ``laplace`` (the default) is :func:`laplace_constant`, a central fit: the
Laplace approximation (:func:`dgsgld.posteriors.laplace.laplace`,
Newton: ``n`` gradients and ``n`` per-datum Hessians per iteration, counted in the set-up
columns and charged to every run that uses it), the constant preconditioner ``M`` = its
covariance, the start at its mode, and the step the Gaussian approximation implies for a
variance inflation of ``--inflation`` (0.1: sd + 5 %): in units of ``M`` the pooled draws of DIGing-SGLD at step
``η`` on ``N`` agents have variance ``≈ 1 + η/(2N) + (2η/N) Σ_k 1/(1 − λ_k²) + (η/N) q``,
``λ_k`` the mixing matrix's eigenvalues but the consensus one (the average moves like SGLD at
step ``η/N``; each agent's own noise ``√(2η)`` is damped by gossip at rate ``|λ_k|`` in mode
``k``) and ``q`` the mini-batch gradient noise's share (:func:`gradient_noise`, estimated from
2000 data at 8 Laplace draws; 0 with full batches); SGLD's at step ``h`` has
``≈ 1 + h/2 + h q``.

``warmup`` is :func:`warmup_adapt`, the toolkit's decentralized warm-up
(:func:`dgsgld.warmup` of DIGing-SGLD; on one agent for the centralized row) with no central
fit: from ``Target.init``'s points, :data:`WARMUP_CHAINS` chains of :data:`WARMUP_STEPS`
steps, the agents adapt a dense ``M`` and the step (criterion bounds: stationary sd ratio
``<= 1.02``, mean error ``<= 0.05`` sd), and the run continues chain 0 of the warmed-up state
(with a control variate from that chain's positions, anchored there).
Its rows are named ``"..., warm-up)"``, beside the Laplace rows; the Laplace fit still runs for
the entry's record but is not charged to them (and targets without a mode get warm-up rows);
"SGLD, plain mini-batches" has no warm-up row.
Its whole cost is charged (:func:`warmup_cost`): both chains' sampler steps, the anchors of
the control variate, and the curvature of every adaptation (each point: a gradient and ``d``
Hessian-vector products per datum, **a Hessian-vector product counted as 2 gradient
evaluations**, one forward-over-reverse pass); on the large targets the curvature is measured
at :data:`LARGE_CURVATURE_POINTS` points on :data:`LARGE_CURVATURE_DATA` data (the
``curvature_batch`` of the warm-up: 2000 per agent on 16 agents). Its wall seconds (compilation
included) are the set-up's. The Laplace set-up's per-datum Hessians are not in its gradient
count (they are recorded apart, as ``hessian_evals``); at ``d`` products each they would add
``2 d`` gradients per Hessian.

NUTS is numpyro's as ``benchmarks/nuts_cost.py`` runs it on the small targets (dense mass
matrix adapted, one chain from ``Target.init``); on the large targets
(:data:`dgsgld.posteriors.targets.LARGE_TARGETS`) it samples in the Laplace-whitened
coordinates the reference used (``make_references.py --laplace``), from the mode, charged with
the same set-up as the SG-MCMC samplers.

On the large targets the SG-MCMC samplers draw mini-batches of ``--batch`` per agent with a
control variate anchored at the start (:func:`dgsgld.gradients.svrg` refreshed at the first
call only: SGLD-CV); the centralized one is DIGing-SGLD on one agent (``W = [1]``), which is
SGLD with that estimator. The row "SGLD, plain mini-batches" runs without it at the step its
gradient noise allows (variance inflation ``h n / (2 B)`` for a batch of ``B``), for at most
``--plain-budget`` steps.

    PYTHONPATH=. python benchmarks/cost_to_accuracy.py [NAME ...] [--repeats 3] \\
        [--nuts-warmups 200 500] [--nuts-samples 50 100 200 400 800 1600] [--batch 32] \
        [--plain-budget 200000] [--inflation 0.1] [--only ROW [ROW ...]] \
        [--adapt laplace|warmup] [--out benchmarks/cost_to_accuracy.json]

Writes ``--out`` and its Markdown table beside it after every row, merging into what is there
per target and row (``--only`` runs some rows and keeps the others).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from benchmarks.harness import resumable_results
from benchmarks import nuts_cost
from benchmarks.nuts_cost import band
from dgsgld import gradients, networks
from dgsgld.posteriors import get_target, load_reference
from dgsgld.posteriors.laplace import laplace
from dgsgld.posteriors.scores import moment_errors
from dgsgld.posteriors.targets import LARGE_TARGETS
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import SGLD, DensePreconditioner, DIGingSGLD

#: The targets of a run without names.
DEFAULT_TARGETS = ("gaussian_linear", "logistic_breast_cancer", "eight_schools", "logistic_large")
#: Sample size of the band's floor (the benchmark's ``score_size``).
SCORE_SIZE = 400
#: Variance inflation (in units of the Laplace covariance) the samplers' step rule aims at.
INFLATION = 0.1
#: Data and Laplace draws :func:`gradient_noise` estimates a mini-batch's noise from.
NOISE_SAMPLE, NOISE_POINTS = 2000, 8
#: Agents of the small targets (``bench posteriors``' default); large ones use their own.
SMALL_AGENTS = 4
#: Effective draws a run's length is sized for: its longest prefix runs ``2 x`` this many
#: integrated autocorrelation times ``2/h`` of the network average.
TARGET_ESS = 500
#: Prefixes of a run: its length divided by ``2^(k/2)``, ``k < LADDER``.
LADDER = 12
#: Kept positions per agent and run.
KEPT = 2000


class Adapted(NamedTuple):
    """What the set-up of a sampler gives its run.

    Attributes:
        sampler: the sampler at its constant step.
        start: ``([N,] d)`` starting point.
        step: the step (``η``) for the record.
        grad_evals: per-datum gradient evaluations spent before the first step.
        hessian_evals: per-datum Hessian evaluations spent before the first step.
        wall_s: seconds of the set-up.
        state: the sampler state the run continues (leaves with one chain axis of 1), or
            ``None``: the run starts at ``start``.
        detail: what the set-up spent, itemized, for the record (or ``None``).
    """

    sampler: object
    start: np.ndarray
    step: float
    grad_evals: int
    hessian_evals: int
    wall_s: float
    state: object = None
    detail: dict | None = None


class Method(NamedTuple):
    """A row: ``kind`` ``"sgld"`` (centralized, no control variate) or ``"diging"``;
    ``network`` ``None`` (centralized), ``"ring"`` or ``"complete"``; ``control_variate``
    whether it draws mini-batches with SGLD-CV on the large targets."""

    name: str
    kind: str
    network: str | None
    control_variate: bool = True


METHODS = (Method("SGLD (centralized)", "diging", None),
           Method("DIGing-SGLD (ring)", "diging", "ring"),
           Method("DIGing-SGLD (complete)", "diging", "complete"),
           Method("SGLD, plain mini-batches", "sgld", None, control_variate=False))


def disagreement(mixing) -> float:
    """``(1/N) Σ_k 1/(1 − λ_k²)`` over the mixing matrix's eigenvalues but the consensus one
    (0 for one agent): the agents' mean variance about their average per unit of noise
    variance injected per step (each agent's ``√(2η) S w`` damped by gossip at rate
    ``|λ_k|`` in mode ``k``)."""
    w = np.asarray(mixing.matrix_at(0) if hasattr(mixing, "matrix_at") else mixing, np.float64)
    lam = np.sort(np.abs(np.linalg.eigvalsh(w)))[:-1]
    return float(np.sum(1.0 / (1.0 - lam**2)) / w.shape[0])


def gaussian_step(num_agents: int, spread: float, noise: float) -> float:
    """The step ``η`` with ``η/(2N) + 2η spread + (η/N) noise = INFLATION`` (``spread`` from
    :func:`disagreement`, ``noise`` from :func:`gradient_noise`; see the module doc): for one
    agent and no network (``spread = 0``) SGLD's ``h``."""
    return INFLATION / (1 / (2 * num_agents) + 2 * spread + noise / num_agents)


def gradient_noise(target, fit, batch: int | None, control_variate: bool, *, seed: int = 0):
    """``(q, evaluations)``: a mini-batch estimator's variance inflation per unit step, in
    units of the Laplace covariance, and the per-datum gradients spent estimating it.

    A batch of ``B`` of ``n`` data scaled by ``n/B`` has covariance ``≈ (n²/B) Var_i g_i``;
    SGLD at step ``h`` adds ``h² (n²/B) c`` to the ``2h`` of its injected noise per coordinate
    of the whitened gradient ``Lᵀ g_i`` (``c`` the mean of its variances), so ``q = (n²/B)
    c/2``. ``g_i`` is one datum's gradient at ``NOISE_POINTS`` draws of the Laplace law, minus
    that at the mode with a control variate; ``Var_i`` over ``NOISE_SAMPLE`` random data. 0
    with full batches."""
    n = target.num_data
    if batch is None or batch >= n:
        return 0.0, 0
    rng = np.random.default_rng(seed)
    idx = rng.choice(n, min(NOISE_SAMPLE, n), replace=False)
    data = tuple(jnp.asarray(a[idx]) for a in target.data)
    grads = jax.jit(jax.vmap(jax.grad(target.log_likelihood), (None, 0)))
    at_mode = np.asarray(grads(jnp.asarray(fit.mode), data))
    c = []
    for _ in range(NOISE_POINTS):
        g = np.asarray(grads(jnp.asarray(fit.mode + fit.chol @ rng.standard_normal(target.dim)),
                             data))
        c.append(np.mean(np.var((g - at_mode if control_variate else g) @ fit.chol, axis=0)))
    return n**2 / batch * float(np.mean(c)) / 2, len(idx) * (NOISE_POINTS + 1)


def laplace_constant(target, fit, method: Method, potential, mixing, num_agents: int,
                     batch: int | None, seed: int) -> Adapted:
    """The central set-up: ``M`` = the Laplace covariance, the start at the mode, the step of
    :func:`gaussian_step` with the network's :func:`disagreement` and the estimator's
    :func:`gradient_noise`. ``fit`` is the :class:`dgsgld.posteriors.laplace.Laplace` computed
    once; its cost is charged here. ``batch``: the per-agent mini-batch (``None``: full
    batches); ``seed`` is unused (the set-up is deterministic)."""
    n = target.num_data
    t0 = time.perf_counter()
    pre = DensePreconditioner(jnp.asarray(fit.cov))
    cv = batch is not None and method.control_variate
    noise, spent = gradient_noise(target, fit, None if batch is None else num_agents * batch,
                                  cv)
    if method.kind == "sgld":
        step = gaussian_step(1, 0.0, noise)
        sampler = SGLD(step, preconditioner=pre)
        start = fit.mode
    else:
        step = gaussian_step(num_agents, disagreement(mixing), noise)
        estimator = gradients.svrg(update_every=_first_call_only) if cv else None
        sampler = DIGingSGLD(step, estimator, preconditioner=pre)
        start = np.broadcast_to(fit.mode, (num_agents, target.dim))
    return Adapted(sampler, np.asarray(start), step, fit.iterations * n + spent,
                   fit.iterations * n, fit.wall_s + time.perf_counter() - t0)


def _first_call_only(count):
    return count == 0


#: The warm-up's budget of sampler steps, its chains (at least 2: its last check compares
#: them), and the bounds its step criterion keeps the stationary law within (sd ratio
#: ``<= 1 + tol_sd``, about the variance inflation ``2 tol_sd``; mean error in sd).
WARMUP_STEPS, WARMUP_CHAINS, WARMUP_TOL_SD, WARMUP_TOL_MEAN = 4000, 2, 0.02, 0.05
#: Large targets: curvature at this many points, each on a subsample of this many data in all
#: (split evenly over the agents: 2000 each on 16).
LARGE_CURVATURE_POINTS, LARGE_CURVATURE_DATA = 4, 32_000
#: Per-datum gradient evaluations charged per Hessian-vector product of one datum: one
#: forward-over-reverse pass (a ``jvp`` of the gradient) costs about two gradients.
HVP_COST = 2
#: The warm-up's stiffness cap on a diagonal ``M``: power iteration at this many points, with
#: this many Hessian-vector products each (30 iterations and the Rayleigh quotient).
POWER_POINTS, POWER_HVPS = 8, 31


def warmup_cost(report, *, num_data: int, num_agents: int, chains: int, per_step: float,
                control_variate: bool, dim: int, curvature_points: int,
                curvature_data: int, probes: int) -> dict:
    """The per-datum gradient evaluations of one :func:`dgsgld.warmup`, itemized.

    ``report``: its :class:`dgsgld.tuning.adaptation.WarmupReport`; ``per_step``: the data
    one chain's agents evaluate per sampler step (``2 b`` per agent with a control variate);
    ``curvature_data``: the data of all agents one curvature point is measured on (``n``, or
    ``N`` times ``curvature_batch``).

    * sampler steps: ``report.num_steps`` (reruns included) times ``chains x per_step``;
    * anchors: with a control variate every window (reruns included) starts its chains afresh,
      each anchored by a full gradient: ``n`` per window and chain;
    * curvature: one adaptation at the start and one after every window but the last that did
      not diverge; each measures ``curvature_points`` points on ``curvature_data`` data with a
      gradient and ``d`` (dense) or ``probes`` (diagonal) Hessian-vector products, each
      :data:`HVP_COST` gradients;
    * the stiffness cap's power iteration (diagonal ``M``): :data:`POWER_POINTS` points x
      :data:`POWER_HVPS` products on ``curvature_data`` data per adaptation;
    * the distance to the mode: with curvature on subsamples (``curvature_data < num_data``)
      one gradient on every datum at the agents' centres per adaptation;
    * the Newton approach (``report.approach_steps``): per step and chain a curvature point
      on ``curvature_data`` data and the gradient and potential on every datum, and per
      line-search trial (``report.approach_trials``) and chain the potential on every datum
      (a potential counted as a gradient); one adaptation more at the mode.
    """
    windows = report.windows
    exhausted = report.verdict.startswith("budget too small: divergences used up")
    completed = sum(not w.diverged for w in windows)
    # The last window adapts nothing after it; a run cut short by reruns adapted after its
    # last good window.
    last_adapts = exhausted and bool(windows) and not windows[-1].diverged
    adaptations = 1 + completed - (0 if last_adapts or not windows or windows[-1].diverged
                                   else 1) + (1 if report.approach_steps else 0)
    dense = report.preconditioner == "dense"
    per_point = curvature_data * (1 + HVP_COST * (dim if dense else probes))
    approach = chains * (report.approach_steps * (per_point + 2 * num_data)
                         + report.approach_trials * num_data)
    centres = adaptations * num_data if curvature_data < num_data else 0
    power = 0 if dense else adaptations * min(curvature_points, POWER_POINTS) * POWER_HVPS \
        * HVP_COST * curvature_data
    out = {"sampler_steps": round(report.num_steps * chains * per_step),
           "anchors": len(windows) * chains * num_data if control_variate else 0,
           "adaptations": adaptations,
           "curvature": adaptations * curvature_points * per_point,
           "power_iteration": power, "centres": centres, "approach": approach}
    out["total"] = (out["sampler_steps"] + out["anchors"] + out["curvature"] + power + centres
                    + approach)
    return out


def warmup_adapt(target, fit, method: Method, potential, mixing, num_agents: int,
                 batch: int | None, seed: int) -> Adapted:
    """The decentralized set-up: :func:`dgsgld.warmup` of DIGing-SGLD (on one agent,
    ``W = [1]``, for the centralized row) from :data:`WARMUP_CHAINS` of ``Target.init``'s
    starting points (each chain's agents at one point, as ``bench posteriors``' rows), no
    Laplace fit (``fit`` is unused): :data:`WARMUP_STEPS` steps, a dense ``M`` (``d <= 200``),
    the step criterion's bounds :data:`WARMUP_TOL_SD` and :data:`WARMUP_TOL_MEAN`, on the large
    targets curvature at :data:`LARGE_CURVATURE_POINTS` points on
    :data:`LARGE_CURVATURE_DATA` data and the rows' control variate. The run continues chain 0
    of the warmed-up state (with a control variate it restarts from that chain's positions, so
    that its anchor is taken there and not at the last window's over-dispersed restart), in
    float64. Every chain's warm-up is charged (:func:`warmup_cost`)."""
    from dgsgld.tuning import warmup

    t0 = time.perf_counter()
    large = batch is not None
    cv = large and method.control_variate
    estimator = gradients.svrg(update_every=_first_call_only) if cv else None
    k_init, k_warm = jax.random.split(jax.random.key(seed + 7919))
    x0 = jnp.asarray(target.init(k_init, WARMUP_CHAINS), jnp.float64)
    init = jnp.broadcast_to(x0[:, None], (WARMUP_CHAINS, num_agents, target.dim))
    points = LARGE_CURVATURE_POINTS if large else 32
    cbatch = LARGE_CURVATURE_DATA // num_agents if large else None
    sampler, state, report = warmup(DIGingSGLD, potential, mixing, init, k_warm, WARMUP_STEPS,
                                    estimator=estimator, tol_sd=WARMUP_TOL_SD,
                                    tol_mean=WARMUP_TOL_MEAN, curvature_points=points,
                                    curvature_batch=cbatch)
    n = target.num_data
    per_agent = n / num_agents if batch is None else batch
    data = n if cbatch is None else num_agents * min(cbatch, potential.local_size)
    cost = warmup_cost(report, num_data=n, num_agents=num_agents, chains=WARMUP_CHAINS,
                       per_step=num_agents * per_agent * (2 if cv else 1), control_variate=cv,
                       dim=target.dim, curvature_points=points, curvature_data=data, probes=8)
    state = jax.tree.map(lambda a: a[:1].astype(jnp.float64)
                         if jnp.issubdtype(a.dtype, jnp.floating) else a[:1], state)
    start = np.asarray(state.position[0], np.float64)
    wall = time.perf_counter() - t0
    detail = {"warmup_steps": WARMUP_STEPS, "chains": WARMUP_CHAINS, "tol_sd": WARMUP_TOL_SD,
              "tol_mean": WARMUP_TOL_MEAN, "curvature_points": points,
              "curvature_batch": cbatch, "cost": cost, "wall_s": wall,
              "report": {"step_size": report.step_size, "law": report.law,
                         "stationary_sd_ratio": report.stationary_sd_ratio,
                         "stationary_mean_error": report.stationary_mean_error,
                         "relaxation_steps": report.relaxation_steps,
                         "capped": report.capped, "rhat_max": report.rhat_max,
                         "check_ess": report.check_ess, "retries": report.retries,
                         "bytes_sent": report.bytes_sent, "verdict": report.verdict}}
    return Adapted(sampler, start, float(report.step_size), cost["total"], 0, wall,
                   None if cv else state, detail)


#: The set-ups :func:`main`'s ``--adapt`` chooses from, and the suffix of their rows' names.
SETUPS = {"laplace": (laplace_constant, ""), "warmup": (warmup_adapt, "warm-up")}

#: ``(target, laplace fit, method, potential, mixing, num_agents, batch, seed) -> Adapted``:
#: the samplers' set-up (``--adapt``).
ADAPT = laplace_constant


def row_name(method: Method, suffix: str) -> str:
    """The row's name: ``"DIGing-SGLD (ring)"`` with suffix ``"warm-up"`` is
    ``"DIGing-SGLD (ring, warm-up)"``."""
    if not suffix:
        return method.name
    return method.name[:-1] + f", {suffix})" if method.name.endswith(")") \
        else f"{method.name} ({suffix})"


def run_length(method: Method, adapted: Adapted, num_agents: int, *,
               plain_budget: int) -> tuple[int, int]:
    """``(steps, thin)`` of a run: ``2 TARGET_ESS`` autocorrelation times ``2/h`` of the
    average, ``h`` its step (``η/N`` on a network), about :data:`KEPT` kept positions."""
    h = adapted.step / (num_agents if method.network is not None else 1)
    raw = int(2 * TARGET_ESS * 2 / h)
    if method.kind == "sgld":
        raw = min(raw, plain_budget)
    thin = max(1, raw // KEPT)
    return max(thin, -(-raw // thin) * thin), thin


def prefixes(steps: int, thin: int) -> list[int]:
    """The ladder: ``steps 2^(-k/2)`` rounded to multiples of ``thin``, ascending, distinct."""
    out = {max(thin, round(steps * 2 ** (-k / 2) / thin) * thin) for k in range(LADDER)}
    return sorted(out)


def sgmcmc_run(target, ref, fit, method: Method, potential, mixing, num_agents, batch, seed,
               bounds, *, plain_budget):
    """One repeat of an SG-MCMC row: its ladder of prefixes with costs and scores."""
    adapted = ADAPT(target, fit, method, potential, mixing, num_agents, batch, seed)
    setup_s = adapted.wall_s
    steps, thin = run_length(method, adapted, num_agents, plain_budget=plain_budget)
    t1 = time.perf_counter()
    init = jnp.asarray(adapted.start)[None] if adapted.state is None else adapted.state
    trace = sample(adapted.sampler, potential, mixing, init,
                   jax.random.key(seed), steps, output=Output(thin=thin), on_divergence="flag")
    positions = np.asarray(trace.positions)[0]  # (kept, [N,] d)
    run_s = time.perf_counter() - t1
    if positions.ndim == 2:
        positions = positions[:, None]
    n = target.num_data
    per_agent = n / num_agents if batch is None else batch
    cv = batch is not None and method.control_variate and method.kind == "diging"
    per_step = num_agents * per_agent * (2 if cv else 1)
    anchor = n if cv else 0
    rows = []
    for t in prefixes(steps, thin):
        draws = positions[:t // thin].reshape(-1, target.dim)
        total = int(adapted.grad_evals + anchor + per_step * t)
        rows.append(_row(target, ref, draws, bounds, steps=t, grad_evals=total,
                         hessian_evals=adapted.hessian_evals,
                         wall_s=setup_s + run_s * t / steps))
    out = {"step": adapted.step, "steps": steps, "thin": thin, "setup_s": setup_s,
           "setup_grad_evals": int(adapted.grad_evals), "run_s": run_s,
           "diverged": int(np.sum(np.asarray(trace.diverged))), **_reached(rows)}
    if adapted.detail is not None:
        out["setup"] = adapted.detail
    return out


def _row(target, ref, draws, bounds, **cost):
    if not np.all(np.isfinite(draws)):
        return {**cost, "mean_error_max": float("inf"), "sd_ratio_worst": float("inf"),
                "in_band": False}
    m = moment_errors(np.asarray(target.compared(jnp.asarray(draws)), np.float64), ref)
    mean_bound, log_sd_bound = bounds
    return {**cost, "mean_error_max": m["mean_error_max"], "sd_ratio_worst": m["sd_ratio_worst"],
            "in_band": bool(m["mean_error_max"] <= mean_bound
                            and abs(np.log(m["sd_ratio_worst"])) <= log_sd_bound)}


def _reached(rows):
    for i, r in enumerate(rows):
        r["stays_in_band"] = all(q["in_band"] for q in rows[i:])
    hit = next((r for r in rows if r["stays_in_band"]), None)
    return {"reached": hit, "rows": rows}


def nuts_run(target, ref, fit, warmup, sample_sizes, seed, target_accept, bounds, *,
             whiten: bool):
    """One NUTS chain: ``warmup`` iterations, then ``max(sample_sizes)`` draws, each prefix
    scored; ``whiten`` samples the Laplace-whitened coordinates from the mode (the set-up
    charged), else the original ones from ``Target.init`` with a dense mass matrix adapted."""
    n = target.num_data
    if whiten:
        mode, chol = jnp.asarray(fit.mode), jnp.asarray(fit.chol)
        potential = lambda u: -target.log_density(mode + chol @ u)
        init = jnp.zeros(target.dim)
        setup = (fit.iterations * n, fit.iterations * n, fit.wall_s)
    else:
        potential, init = None, None
        setup = (0, 0, 0.0)
    draws, warm_steps, steps, warm_s, run_s, divergent = nuts_cost.run(
        target, warmup, max(sample_sizes), seed, target_accept, potential=potential, init=init,
        adapt_mass=not whiten)
    if whiten:
        draws = np.asarray(fit.mode) + draws @ np.asarray(fit.chol).T
    rows = []
    for s in sorted(sample_sizes):
        total = int(warm_steps.sum() + steps[:s].sum())
        rows.append(_row(target, ref, draws[:s], bounds, warmup=warmup, samples=s,
                         leapfrog_steps=total, grad_evals=setup[0] + total * n,
                         hessian_evals=setup[1],
                         wall_s=setup[2] + warm_s + run_s * steps[:s].sum() / steps.sum()))
    return {"warmup": warmup, "whitened": whiten, "divergent": divergent,
            "mean_steps_per_draw": float(steps.mean()), **_reached(rows)}


def _median(values):
    """Median with unreached runs (``None``) as +inf; ``None`` when that is infinite."""
    v = np.median([np.inf if x is None else x for x in values])
    return None if not np.isfinite(v) else float(v)


def summarize(runs):
    """``runs``: one dict per repeat with ``reached``; the medians and the count reached."""
    hits = [r["reached"] for r in runs]
    return {"reached": sum(h is not None for h in hits), "repeats": len(runs),
            "grad_evals": _median([h and h["grad_evals"] for h in hits]),
            "wall_s": _median([h and h["wall_s"] for h in hits])}


def target_entry(name, repeats, *, batch, plain_budget, nuts_warmups, nuts_samples, save,
                 previous=None, only=None, adapt="laplace", log=print):
    """Run every row of target ``name`` (those of ``only``, names or ``"NUTS"``, when given;
    the rows of ``previous``, an earlier entry, are kept) with the samplers' set-up ``adapt``
    (a key of :data:`SETUPS`) and return its entry."""
    global ADAPT
    ADAPT, suffix = SETUPS[adapt]
    central = adapt == "laplace"  # the warm-up needs no Laplace fit
    target = get_target(name)
    ref = load_reference(name, fingerprint=target.fingerprint)
    bounds, floor = band(ref, SCORE_SIZE)
    settings = json.loads(ref.settings)
    large = name in LARGE_TARGETS
    try:
        fit = laplace(target)
    except RuntimeError as err:  # no mode: the samplers' set-up has nothing to start from
        fit, why = None, str(err)
        log(f"{name}: no Laplace approximation: {why}")
    else:
        why = None
        log(f"{name}: Laplace in {fit.iterations} Newton iterations, {fit.wall_s:.1f} s, "
            f"condition {fit.condition:.3g}")
    num_agents = target.num_agents or SMALL_AGENTS
    b = batch if large else None
    potential = target.potential(num_agents, "skew", batch_size=b)
    entry = {"num_data": target.num_data, "dim": target.dim, "num_agents": num_agents,
             "batch": b, "floor": floor, "score_size": SCORE_SIZE,
             "band": {"mean_error_max": bounds[0],
                      "sd_ratio": [float(np.exp(-bounds[1])), float(np.exp(bounds[1]))]},
             "laplace": {"error": why} if fit is None else {
                 "iterations": fit.iterations, "wall_s": fit.wall_s,
                 "condition": fit.condition},
             "methods": dict(previous["methods"]) if previous else {}}
    if previous and not central:  # the fit's record stays that of the rows charged with it
        entry["laplace"] = previous.get("laplace", entry["laplace"])
    for method in METHODS if fit is not None or not central else ():
        label = row_name(method, suffix)
        if only is not None and method.name not in only and label not in only:
            continue
        if method.kind == "sgld" and (not large or not central):
            continue  # full batches: the plain row is the centralized one; warmed up: CV only
        mixing = (networks.ring(num_agents) if method.network == "ring" else
                  networks.complete(num_agents) if method.network == "complete" else
                  None if method.kind == "sgld" else np.ones((1, 1)))
        pot = potential if method.network is not None or method.kind == "sgld" else \
            target.potential(1, "iid", batch_size=None if b is None else num_agents * b)
        agents = num_agents if method.network is not None else 1
        runs = []
        for r in range(repeats):
            run = sgmcmc_run(target, ref, fit, method, pot, mixing, agents,
                             None if b is None else (num_agents * b if agents == 1 else b),
                             1000 + r, bounds, plain_budget=plain_budget)
            runs.append(run)
            hit = run["reached"]
            log(f"{name} {label} seed {r} step {run['step']:.3g} x {run['steps']}: "
                + (f"{hit['grad_evals']:.3g} grads, {hit['wall_s']:.1f} s" if hit else
                   f"not reached (last: mean err {run['rows'][-1]['mean_error_max']:.3f}, "
                   f"sd ratio {run['rows'][-1]['sd_ratio_worst']:.3f})"))
            entry["methods"][label] = {"runs": runs, **summarize(runs),
                                       **({"inflation": INFLATION} if central else {})}
            save(name, entry)  # after every repeat
    nuts_name = "NUTS (Laplace-whitened)" if large else "NUTS"
    if only is not None and "NUTS" not in only:
        return entry
    runs = []
    for r in range(repeats):
        best = None
        for w in nuts_warmups:
            run = nuts_run(target, ref, fit, w, nuts_samples, 100 + r,
                           settings.get("target_accept", 0.9), bounds, whiten=large)
            hit = run["reached"]
            if hit is not None and (best is None or best["reached"] is None
                                    or hit["grad_evals"] < best["reached"]["grad_evals"]):
                best = run
            best = best or run
            log(f"{name} {nuts_name} seed {r} W={w}: "
                + (f"{hit['grad_evals']:.3g} grads, {hit['wall_s']:.1f} s" if hit
                   else "not reached"))
        runs.append(best)
        entry["methods"][nuts_name] = {"runs": runs, **summarize(runs)}
        save(name, entry)  # after every repeat
    return entry


def markdown(result):
    lines = [("Per-datum gradient evaluations and wall seconds to the reference's accuracy "
              "band (medians over repeats; ratios against NUTS's medians of the same run; "
              "set-up included; see the module doc of `benchmarks/cost_to_accuracy.py`)."), "",
             ("| target | n | d | band: mean err, sd ratio | method | inflation | step | "
              "reached | grad evals | x NUTS | wall s | x NUTS |"), "|---" * 12 + "|"]
    for name, e in result.items():
        b = e["band"]
        nuts = next((v for k, v in e["methods"].items() if k.startswith("NUTS")),
                    {"grad_evals": None, "wall_s": None})
        order = sorted(e["methods"], key=lambda k: not k.startswith("NUTS"))
        for k in order:
            m = e["methods"][k]
            step = "-" if k.startswith("NUTS") else f"{m['runs'][0]['step']:.3g}"
            inflation = f"{m['inflation']:g}" if "inflation" in m else "-"

            def cell(key, m=m, nuts=nuts):
                if m[key] is None:
                    return "not reached | -"
                ratio = "-" if nuts[key] is None else f"{m[key] / nuts[key]:.3g}"
                return f"{m[key]:.3g} | {ratio}"

            lines.append(f"| {name} | {e['num_data']} | {e['dim']} | {b['mean_error_max']:.3f}, "
                         f"{b['sd_ratio'][0]:.3f}-{b['sd_ratio'][1]:.3f} | {k} | {inflation} | {step} | "
                         f"{m['reached']}/{m['repeats']} | {cell('grad_evals')} | "
                         f"{cell('wall_s')} |")
    warm = [(name, k, m) for name, e in result.items() for k, m in e["methods"].items()
            if any("setup" in r for r in m["runs"])]
    if warm:
        lines += ["", ("The warm-up rows' set-up (`dgsgld.warmup`; medians over repeats; "
                       "\"share\": of the grad evals at which a run reached the band; "
                       "verdict: the warm-up's own budget check, per repeat)."), "",
                  ("| target | method | warm-up steps x chains | set-up grad evals | of which "
                   "curvature | share | set-up s | sd ratio (law) | verdict |"), "|---" * 9 + "|"]
        for name, k, m in warm:
            runs = [r for r in m["runs"] if "setup" in r]
            cost = [r["setup"]["cost"] for r in runs]
            shares = [r["setup"]["cost"]["total"] / r["reached"]["grad_evals"]
                      for r in runs if r["reached"] is not None]
            first = runs[0]["setup"]
            verdicts = ", ".join("ok" if r["setup"]["report"]["verdict"] == "ok" else "small"
                                 for r in runs)
            share = f"{np.median(shares):.2g}" if shares else "-"
            lines.append(
                f"| {name} | {k} | {first['warmup_steps']} x {first['chains']} | "
                f"{np.median([c['total'] for c in cost]):.3g} | "
                f"{np.median([c['curvature'] for c in cost]):.3g} | {share} | "
                f"{np.median([r['setup_s'] for r in runs]):.3g} | "
                f"{first['report']['stationary_sd_ratio']:.3f} | {verdicts} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", default=list(DEFAULT_TARGETS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32,
                        help="per-agent mini-batch on the large targets")
    parser.add_argument("--plain-budget", type=int, default=200_000,
                        help="most steps of the plain mini-batch row")
    parser.add_argument("--nuts-warmups", type=int, nargs="+", default=[200, 500])
    parser.add_argument("--nuts-samples", type=int, nargs="+",
                        default=[50, 100, 200, 400, 800, 1600])
    parser.add_argument("--inflation", type=float, default=INFLATION,
                        help="variance inflation the samplers' step rule aims at")
    parser.add_argument("--only", nargs="+", default=None,
                        help="run these rows only (method names, or NUTS), keeping the others")
    parser.add_argument("--adapt", choices=sorted(SETUPS), default="laplace",
                        help="the samplers' set-up: the central Laplace fit, or the "
                             "decentralized warm-up (rows named '..., warm-up)')")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).with_name("cost_to_accuracy.json"))
    args = parser.parse_args(argv)
    if not 0 < args.inflation < 1:
        parser.error(f"--inflation must be in (0, 1); got {args.inflation}.")
    globals()["INFLATION"] = args.inflation  # read by gaussian_step
    result, save = resumable_results(args.out, markdown)

    for name in args.names:
        target_entry(name, args.repeats, batch=args.batch, plain_budget=args.plain_budget,
                     nuts_warmups=args.nuts_warmups, nuts_samples=args.nuts_samples, save=save,
                     previous=result.get(name), only=args.only, adapt=args.adapt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
