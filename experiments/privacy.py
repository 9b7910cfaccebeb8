"""The privacy experiment: each sampler's utility against the ε of every agent's messages.

``python -m experiments reproduce privacy --out DIR [--small]``. Per-datum gradients are
clipped to norm ``C`` (``dgsgld.Potential(..., clip=C)``) and every agent's ``(ε, δ)`` is
accounted by :func:`dgsgld.evaluate.privacy.privacy_epsilon` (replace-one adjacency of one
datum of the agent; the adversary sees every message of the agent and knows everything but
its data; ``δ`` = :data:`DELTA`). Problems (:mod:`dgsgld.posteriors.problems`), each split
i.i.d. over ``N`` agents on a static random regular graph (Metropolis–Hastings weights;
degree 4 for 20 agents, a ring for 5):

- the paper's Bayesian logistic regression (§4.2.1: 380 training data, ``d + 1 = 6``);
  metric: test accuracy at each checkpoint, averaged over chains and agents;
- the paper's Bayesian linear regression (§4.1: 100 data); metrics: each agent's W2 between
  the Gaussian fit of its chains and the exact posterior (averaged over agents), and the
  distance of the chains' mean (over chains and agents) to the posterior mean, the bias that
  clipping brings (the clipped dynamics sample a Huber-regression posterior:
  ``docs/guide/privacy.md``).

Methods, full local batches, at the same step of the network average ``η̄`` (so that their
averages move alike): DE-SGLD at ``η = N η̄``; D-ULA at ``α = η̄`` (its agents step at
``Nα = η``) with consensus weight :data:`CONSENSUS`; centralized DP-SGLD at ``η̄`` on all the
data (a trusted curator: ε per data holder); DIGing-SGLD at ``η`` (its tracker messages carry
gradients without noise: ε = ∞; the ``position ε`` column is that of its positions alone);
DIGing-SGLD with private tracking at ``η`` and tracking noise ``σ = κ √(2/η)`` for ``κ`` in
:data:`KAPPAS` (:func:`private_tracking`: ε finite, ``(1 + 1/κ²)`` times DE-SGLD's ``μ²``).
Sweeps: clipping norms :data:`CLIPS` (``None``: no clipping, ε = ∞), average steps per
problem, the tracking noise ``κ``, and the local data size through ``N`` ∈ {20, 5} (19 and 76
logistic data per agent) at the same ``η̄`` (the network average moves alike; each agent's
own step ``η = N η̄`` is 4 times smaller with 5 agents). Last the digits BNN
(:func:`digits_rows`: mini-batches, test NLL against ε).

Rows at each checkpoint ``T/4, T/2, 3T/4, T`` go to ``privacy.json``; ``privacy.md`` holds,
per problem, the rows at ``T``, the privacy–utility frontier (each method's best utility
among the rows with ε at most 1, 3, 10, ∞ over steps, clips and checkpoints) and the
clipping bias of centralized SGLD on the linear problem. Standard errors: delete-a-group
jackknife over :data:`GROUPS` groups of chains (:mod:`experiments.communication`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import networks as nets
from dgsgld.evaluate.privacy import privacy_epsilon
from dgsgld.model.potential import Potential
from dgsgld.posteriors.problems import linear_regression_problem, logistic_regression_problem
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import DESGLD, DULA, SGLD, DIGingSGLD

from .communication import _jackknife, _leave_group_out

__all__ = ["CLIPS", "CONSENSUS", "DELTA", "GROUPS", "KAPPAS", "METHODS", "digits_rows",
           "privacy_experiment", "private_tracking", "table"]

#: ``δ`` of every ε reported.
DELTA = 1e-5
#: Clipping norms swept (``None``: no clipping).
CLIPS = (0.1, 0.3, 1.0, 3.0, None)
#: D-ULA's consensus weight β.
CONSENSUS = 0.5
#: Groups of chains of the jackknife standard errors.
GROUPS = 8
#: The methods in the order they run. Each maps (average step η̄, N) to a sampler.
METHODS: dict[str, Callable] = {
    "DE-SGLD": lambda step, n: DESGLD(n * step),
    "D-ULA": lambda step, n: DULA(step, consensus=CONSENSUS),
    "SGLD (centralized)": lambda step, n: SGLD(step),
    "DIGing-SGLD": lambda step, n: DIGingSGLD(n * step),
}
#: Tracking noise of DIGing-SGLD with private tracking, relative to its Langevin noise: the
#: copies' ``σ = κ √(2/η)`` at agent step ``η`` (the noise ``η σ`` they bring into a position
#: update is ``κ`` times ``√(2η)``).
KAPPAS = (0.5, 1.0, 2.0)
#: More methods: a name -> sampler factory ``(η̄, N) -> sampler`` registered here joins the
#: runs (its sampler class needs an entry in ``dgsgld.evaluate.privacy.MECHANISMS``).
EXTRA_METHODS: dict[str, Callable] = {}


def private_tracking(kappa: float) -> Callable:
    """``(η̄, N) -> DIGingSGLD(N η̄, tracking_noise=κ √(2/(N η̄)))``: DIGing-SGLD whose tracker
    copies carry Gaussian noise ``κ`` times as large as its Langevin noise in a position
    update; each step's copy and position are one Gaussian mechanism of
    ``1/z² = Δ² η (1 + 1/κ²) / 2`` (``docs/guide/privacy.md``)."""
    def make(step, n):
        eta = n * step
        return DIGingSGLD(eta, tracking_noise=kappa * math.sqrt(2.0 / eta))
    return make


def _private_name(kappa: float) -> str:
    return f"DIGing-SGLD (private, κ = {kappa:g})"


def _methods(cfg: dict, kappas=None, only=None) -> dict[str, Callable]:
    """:data:`METHODS`, then private tracking at each ``κ`` of the run, then
    :data:`EXTRA_METHODS`; only the names in ``only`` (``cfg["methods"]`` by default) where
    it is not ``None``."""
    kappas = cfg["kappas"] if kappas is None else kappas
    only = cfg.get("methods") if only is None else only
    methods = METHODS | {_private_name(k): private_tracking(k) for k in kappas} | EXTRA_METHODS
    return {k: v for k, v in methods.items() if only is None or k in only}


def _config(small: bool, seed: int) -> dict:
    return {
        "agents": [20] if small else [20, 5], "degree": {20: 4, 5: 2},
        "num_chains": 32 if small else 64, "num_steps": 1000 if small else 4000,
        "checkpoints": 4, "clips": [0.3, 1.0, None] if small else list(CLIPS),
        # Average steps η̄ (DE-SGLD's per-agent step is N η̄; the communication experiment's
        # are 1e-4 and 5e-5).
        "average_steps": ({"logistic": [2e-4], "linear": [2e-4]} if small else
                          {"logistic": [5e-5, 2e-4, 8e-4], "linear": [5e-5, 2e-4, 8e-4]}),
        # The clipping bias of the stationary law (linear problem, centralized SGLD started
        # from posterior draws: a measurement, not a private run).
        "bias": {"clips": [0.1, 0.3, 1.0, 3.0, 10.0, None], "average_step": 1e-4,
                 "num_steps": 10_000 if small else 40_000, "num_chains": 64},
        "kappas": [1.0] if small else list(KAPPAS), "methods": None,
        # The digits BNN (experiments.digits): mini-batches, NLL against ε; steps are the
        # agents' own (the centralized curator steps at η / N on batches of N b).
        "digits": {"agents": 10, "batch_size": 16, "num_chains": 2,
                   "num_steps": 200 if small else 1000, "thin": 50,
                   "clips": [1.0] if small else [0.3, 1.0, 3.0, None],
                   "agent_steps": [1e-3] if small else [3e-4, 1e-3, 3e-3],
                   "kappas": [1.0],
                   "methods": (["DE-SGLD", "SGLD (centralized)",
                                "DIGing-SGLD (private, κ = 1)"] if small else None)},
        "delta": DELTA, "consensus": CONSENSUS, "groups": GROUPS,
        "problems": ["logistic", "linear"], "seed": seed,
    }


def _problem(name: str, seed: int, num_agents: int):
    if name == "logistic":
        return logistic_regression_problem(seed, num_agents=num_agents)
    return linear_regression_problem(seed, num_agents=num_agents)


def _scores(problem, final: np.ndarray, groups: int) -> dict:
    """``{metric: (value, se)}`` of positions ``(C, N, d)``: accuracy (logistic) or W2 and
    the mean's distance to the posterior mean (linear), with jackknife standard errors."""
    from dgsgld.evaluate import distances

    if problem.posterior_mean is None:
        acc = np.asarray(problem.test_accuracy(jnp.asarray(final)), np.float64)      # (C, N)
        parts = _leave_group_out(acc, groups).mean(axis=(0, 2))
        return {"accuracy": (float(acc.mean()), _jackknife(parts))}
    mean, cov = problem.posterior_mean, problem.posterior_cov
    w2 = float(np.mean(np.asarray(distances.per_agent_w2(final[:, None], mean, cov))))
    left = _leave_group_out(final, groups)                               # (C', G, N, d)
    w2_parts = np.asarray(distances.per_agent_w2(left, mean, cov)).mean(axis=1)
    target = np.asarray(mean, np.float64)
    bias = float(np.linalg.norm(final.mean(axis=(0, 1)) - target))
    bias_parts = np.linalg.norm(left.mean(axis=(0, 2)) - target, axis=-1)
    return {"w2": (w2, _jackknife(w2_parts)), "mean_bias": (bias, _jackknife(bias_parts))}


def _run(method: str, make, problem, clip, step: float, mixing, cfg: dict, key) -> list[dict]:
    """One sampler at one clip and step: its rows at every checkpoint."""
    n = problem.num_agents
    steps, kept = cfg["num_steps"], cfg["checkpoints"]
    potential = Potential(problem.log_likelihood, problem.log_prior,
                          (problem.features, problem.targets), clip=clip)
    algorithm = make(step, n)
    centralized = isinstance(algorithm, SGLD)
    shape = (cfg["num_chains"],) + (() if centralized else (n,)) + (problem.dim,)
    init = jax.random.normal(jax.random.fold_in(key, 1), shape)
    trace = sample(algorithm, potential, None if centralized else mixing, init, key, steps,
                   output=Output(thin=steps // kept), on_divergence="flag")
    positions = np.asarray(trace.positions, np.float64)             # (C, K + 1, [N,] d)
    if centralized:
        positions = positions[:, :, None]
    diverged = np.asarray(trace.diverged).any()
    checkpoints = [steps // kept * j for j in range(1, kept + 1)]
    report = privacy_epsilon(algorithm, potential, steps, cfg["delta"], network=mixing,
                             checkpoints=checkpoints)
    rows = []
    for j, k in enumerate(checkpoints, start=1):
        scores = {} if diverged else _scores(problem, positions[:, j], cfg["groups"])
        eps = report.curve[j - 1]
        position = None
        if report.position_epsilon is not None and k == steps:
            position = float(report.position_epsilon.max())
        row = {"problem": problem.name.split(" (")[0], "agents": n,
               "local_size": problem.local_size, "method": method, "clip": clip,
               "average_step": step, "agent_step": step if centralized else n * step,
               "iteration": k, "diverged": bool(diverged),
               "epsilon": float(eps.max()), "epsilon_mean": float(eps.mean()),
               "position_epsilon": position, "unbounded": report.unbounded,
               "noise_multiplier": float(report.noise_multiplier.min())}
        for metric, (value, se) in scores.items():
            row[metric], row[f"{metric}_se"] = value, se
        rows.append(row)
    return rows


def clipping_bias(cfg: dict, key) -> list[dict]:
    """The stationary law of clipped Langevin dynamics against the posterior, on the linear
    problem: centralized SGLD (all 100 data, one agent's split does not matter) at a small
    step, started from exact posterior draws so that only the stationary bias remains; the
    second half of the run's kept iterations (every 1/40 of it) pooled over chains.

    Returns rows ``{clip, mean_bias, mean_bias_se, w2, w2_se, spread}``: the distance of the
    mean to the posterior mean, the W2 of the Gaussian fit to the posterior, and
    ``spread = tr Σ̂ / tr Σ`` (clipping widens the law). Standard errors: jackknife over
    :data:`GROUPS` groups of chains (each chain's time average is one draw's worth of data
    for the groups)."""
    from dgsgld.evaluate import distances

    bias = cfg["bias"]
    problem = linear_regression_problem(cfg["seed"])
    mean, cov = np.asarray(problem.posterior_mean, np.float64), np.asarray(
        problem.posterior_cov, np.float64)
    chains, steps, kept = bias["num_chains"], bias["num_steps"], 40
    init = jnp.asarray(np.random.default_rng(cfg["seed"]).multivariate_normal(
        mean, cov, size=chains), jnp.float32)
    rows = []
    for clip in bias["clips"]:
        potential = Potential(problem.log_likelihood, problem.log_prior,
                              (problem.features, problem.targets), clip=clip)
        trace = sample(SGLD(bias["average_step"]), potential, None, init, key, steps,
                       output=Output(thin=steps // kept))
        draws = np.asarray(trace.positions, np.float64)[:, kept // 2 + 1:]   # (C, K, d)
        pooled = draws.reshape(-1, draws.shape[-1])
        left = _leave_group_out(draws, GROUPS)                            # (C', G, K, d)
        parts = left.transpose(1, 0, 2, 3).reshape(GROUPS, -1, draws.shape[-1])
        w2 = lambda x: float(distances.gaussian_w2(                       # noqa: E731
            jnp.mean(x, 0), jnp.cov(x.T), mean, cov))
        rows.append({
            "clip": clip,
            "mean_bias": float(np.linalg.norm(pooled.mean(0) - mean)),
            "mean_bias_se": _jackknife(np.linalg.norm(parts.mean(1) - mean, axis=-1)),
            "w2": w2(pooled), "w2_se": _jackknife(np.array([w2(p) for p in parts])),
            "spread": float(np.trace(np.cov(pooled.T)) / np.trace(cov)),
            "diverged": bool(np.asarray(trace.diverged).any())})
    return rows


def digits_rows(cfg: dict, key, logger: Callable | None = print, *, out: Path | None = None,
                saved: tuple | None = None) -> list[dict]:
    """The digits BNN (:mod:`experiments.digits`: an MLP 64-64-10, 4 810 parameters) split
    i.i.d. over ``N`` agents on a ring, mini-batches of ``b`` without replacement (the
    accountant's subsampled Gaussian, ``q = b/n_i``), every per-datum gradient clipped: the
    test NLL and accuracy of each agent's posterior predictive (its chains' kept iterations
    after the first half, averaged over agents) against each agent's ε. Methods as for the
    other problems, at the agents' own steps ``η`` (D-ULA at ``α = η/N``; the centralized
    curator at ``η/N`` on the pooled data, batches of ``N b``): DE-SGLD, D-ULA, DIGing-SGLD
    (ε = ∞; its positions' ε alone), DIGing-SGLD with private tracking, centralized DP-SGLD.
    ``saved``: ``(rows so far, start time)`` to save after every run into ``out``."""
    from dgsgld.model import data as dd

    from .digits import _ensemble_fn, _post_burn_in, _Scorer, digits_task

    c = cfg["digits"]
    n, b, steps = c["agents"], c["batch_size"], c["num_steps"]
    task = digits_task(cfg["seed"])
    split = dd.split_iid(task.train, n, seed=cfg["seed"] + 10)
    scorer = _Scorer(task)
    mixing = nets.ring(n)
    init_key, run_key = jax.random.split(key)
    chains = jax.vmap(task.init)(jax.random.split(init_key, c["num_chains"]))
    init_net = jax.tree.map(lambda a: jnp.repeat(a[:, None], n, axis=1), chains)
    pooled_data = jax.tree.map(lambda a: jnp.asarray(a)[None], task.train)
    methods = _methods(cfg, c["kappas"], c.get("methods"))
    burn = (steps // c["thin"] + 1) // 2
    local = int(np.asarray(split.mask).sum(1).max())
    rows = []
    for method, make in methods.items():
        for agent_step in c["agent_steps"]:
            for clip in c["clips"]:
                algorithm = make(agent_step / n, n)
                centralized = isinstance(algorithm, SGLD)
                potential = (Potential(task.log_likelihood, task.log_prior, pooled_data,
                                       n * b, clip=clip) if centralized else
                             Potential(task.log_likelihood, task.log_prior, split.data, b,
                                       mask=split.mask, clip=clip))
                trace = sample(algorithm, potential, None if centralized else mixing,
                               chains if centralized else init_net, run_key, steps,
                               output=Output(thin=c["thin"], ensemble_fn=_ensemble_fn(
                                   task, not centralized)), on_divergence="flag")
                diverged = bool(np.asarray(trace.diverged).any())
                outs = _post_burn_in(np.asarray(trace.ensemble), True, burn)
                report = privacy_epsilon(algorithm, potential, steps, cfg["delta"],
                                         network=mixing)
                row = {"problem": "digits BNN", "agents": n, "local_size": local,
                       "method": method, "clip": clip, "average_step": agent_step / n,
                       "agent_step": agent_step, "iteration": steps, "diverged": diverged,
                       "epsilon": float(report.epsilon.max()),
                       "epsilon_mean": float(report.epsilon.mean()),
                       "position_epsilon": None if report.position_epsilon is None
                       else float(report.position_epsilon.max()),
                       "unbounded": report.unbounded,
                       "noise_multiplier": float(report.noise_multiplier.min())}
                if not diverged and np.isfinite(outs).all():
                    scores = scorer.score(outs, "test")["agent_mean"]
                    row["nll"], row["accuracy"] = scores["nll"], scores["accuracy"]
                rows.append(row)
                if saved is not None and out is not None:
                    _save(out, cfg | {"seconds": time.perf_counter() - saved[1],
                                      "complete": False}, saved[0] + rows)
                if logger is not None:
                    logger(f"digits   N={n:2d} {method:18s} η={agent_step:.1e} "
                           f"C={clip!s:4s} ε={_eps(row):>8s}  nll {_cell(row, 'nll')}  "
                           f"accuracy {_cell(row, 'accuracy')}")
    return rows


def privacy_experiment(out: str | Path, *, small: bool = False, seed: int = 0,
                       logger: Callable | None = print, config: dict | None = None
                       ) -> list[dict]:
    """Run every row, write ``privacy.json`` (after every run; ``config["complete"]`` is
    False until the last) and ``privacy.md`` into ``out``, and return the rows.
    ``config``: entries replacing those of the run's configuration (e.g. ``{"methods":
    [...]}``, a subset of the method names; ``{"digits": None}`` skips the BNN)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(small, seed) | (config or {})
    key = jax.random.key(seed)
    rows, start = [], time.perf_counter()
    methods = _methods(cfg)
    for name in cfg["problems"]:
        for n in cfg["agents"]:
            problem = _problem(name, seed, n)
            mixing = nets.random_regular(n, cfg["degree"][n], seed)
            for method, make in methods.items():
                for step in cfg["average_steps"][name]:
                    for clip in cfg["clips"]:
                        new = _run(method, make, problem, clip, step, mixing, cfg, key)
                        rows += new
                        _save(out, cfg | {"seconds": time.perf_counter() - start,
                                          "complete": False}, rows)
                        if logger is not None:
                            last = new[-1]
                            logger(f"{name:8s} N={n:2d} {method:18s} η̄={step:.1e} "
                                   f"C={clip!s:4s} ε={_eps(last):>8s}  "
                                   + "  ".join(f"{m} {_cell(last, m)}"
                                               for m in ("accuracy", "w2", "mean_bias")
                                               if m in last))
    if cfg.get("digits"):
        rows += digits_rows(cfg, jax.random.fold_in(key, 3), logger, out=out,
                            saved=(rows, start))
    bias = clipping_bias(cfg, jax.random.fold_in(key, 2))
    if logger is not None:
        for r in bias:
            logger(f"clipping bias C={r['clip']!s:5s} ‖mean − m̂‖ {_cell(r, 'mean_bias')}  "
                   f"W2 {_cell(r, 'w2')}  tr Σ̂/tr Σ {r['spread']:.2f}")
    _save(out, cfg | {"seconds": time.perf_counter() - start, "complete": True}, rows, bias)
    (out / "privacy.md").write_text(table(rows, cfg, bias))
    return rows


def _save(out: Path, cfg: dict, rows: list[dict], bias: list[dict] | None = None) -> None:
    part = out / "privacy.json.part"
    part.write_text(json.dumps({"config": cfg, "rows": rows, "clipping_bias": bias}, indent=1))
    part.replace(out / "privacy.json")


def _eps(row: dict, key: str = "epsilon") -> str:
    value = row[key]
    if value is None:
        return "—"
    return "∞" if math.isinf(value) else f"{value:.3g}"


def _cell(row: dict, metric: str) -> str:
    if row.get(metric) is None:
        return "diverged" if row["diverged"] else "—"
    digits = 3 if metric in ("accuracy", "nll") else 4
    if f"{metric}_se" not in row:
        return f"{row[metric]:.{digits}f}"
    return f"{row[metric]:.{digits}f} ± {row[f'{metric}_se']:.{digits}f}"


#: Privacy budgets of the frontier table.
BUDGETS = (1.0, 3.0, 10.0, math.inf)


def table(rows: list[dict], cfg: dict | None = None, bias: list[dict] | None = None) -> str:
    """Markdown: per problem and number of agents, the rows at the last checkpoint, ε against
    iterations, then the privacy–utility frontier; last the clipping bias (linear problem)."""
    lines = []
    for problem in dict.fromkeys(r["problem"] for r in rows):
        sub = [r for r in rows if r["problem"] == problem]
        metrics = [m for m in ("nll", "accuracy", "w2", "mean_bias")
                   if any(m in r for r in sub)]
        for n in dict.fromkeys(r["agents"] for r in sub):
            here = [r for r in sub if r["agents"] == n]
            local, last = here[0]["local_size"], max(r["iteration"] for r in here)
            lines += [f"### {problem}, N = {n} agents ({local} data each), T = {last}", "",
                      f"ε per agent (the largest over agents; δ = {DELTA:g})"
                      + ("; ± jackknife standard error over chains." if any(
                          f"{metrics[0]}_se" in r for r in here) else "."), "",
                      "| method | η̄ | C | ε | position ε | "
                      + " | ".join(metrics) + " |",
                      "|---|---:|---:|---:|---:|" + "---:|" * len(metrics)]
            for r in here:
                if r["iteration"] != last:
                    continue
                lines.append(f"| {r['method']} | {r['average_step']:.1e} | "
                             f"{'none' if r['clip'] is None else r['clip']} | {_eps(r)} | "
                             f"{_eps(r, 'position_epsilon')} | "
                             + " | ".join(_cell(r, m) for m in metrics) + " |")
            lines += ["", _curve(here, metrics[0]), "", _frontier(here, metrics[0]), ""]
    if bias:
        lines += [_bias_table(bias), ""]
    return "\n".join(lines)


def _curve(rows: list[dict], metric: str) -> str:
    """ε and ``metric`` against iterations at ``C = 1`` and each method's middle step."""
    iterations = sorted(dict.fromkeys(r["iteration"] for r in rows))
    steps = sorted(dict.fromkeys(r["average_step"] for r in rows))
    step = steps[len(steps) // 2]
    lines = [f"ε (and {metric}) against iterations, C = 1, η̄ = {step:.1e}:", "",
             "| method | " + " | ".join(f"T = {k}" for k in iterations) + " |",
             "|---|" + "---:|" * len(iterations)]
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for k in iterations:
            r = next((r for r in rows if r["method"] == method and r["iteration"] == k
                      and r["clip"] == 1.0 and r["average_step"] == step), None)
            cells.append("—" if r is None else
                         f"{_eps(r)} ({'—' if r.get(metric) is None else f'{r[metric]:.3f}'})")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _frontier(rows: list[dict], metric: str) -> str:
    """Each method's best ``metric`` among its rows (any step, clip, checkpoint) with ε at most
    each budget (DIGing-SGLD: by its position ε, marked)."""
    better = max if metric == "accuracy" else min
    head = "| method | " + " | ".join(f"ε ≤ {b:g}" if math.isfinite(b) else "any ε"
                                      for b in BUDGETS) + " |"
    lines = [(f"Best {metric} within a privacy budget (over steps, clips and checkpoints; "
              "DIGing-SGLD without private tracking: its positions alone, as its trackers are "
              "not private):"), "", head,
             "|---|" + "---:|" * len(BUDGETS)]
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for budget in BUDGETS:
            def eps(r):
                if r["unbounded"] == "tracker":
                    return math.inf if r["position_epsilon"] is None else r["position_epsilon"]
                return r["epsilon"]
            ok = [r for r in rows if r["method"] == method and r.get(metric) is not None
                  and eps(r) <= budget]
            if not ok:
                cells.append("—")
                continue
            best = better(ok, key=lambda r: r[metric])
            cells.append(f"{best[metric]:.3f} (η̄ {best['average_step']:.0e}, C "
                         f"{'none' if best['clip'] is None else best['clip']}, T "
                         f"{best['iteration']})")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bias_table(bias: list[dict]) -> str:
    """The stationary clipping bias of :func:`clipping_bias`."""
    lines = ["### Clipping bias of the stationary law (linear problem, centralized SGLD from "
             "posterior draws)", "",
             "‖mean − posterior mean‖ and W2 of the Gaussian fit to the exact posterior "
             "(± jackknife s.e.; unclipped: ULA's own bias and Monte Carlo error), and "
             "tr Σ̂ / tr Σ:", "",
             "| C | ‖mean − m̂‖ | W2 | tr Σ̂ / tr Σ |", "|---:|---:|---:|---:|"]
    for r in bias:
        lines.append(f"| {'none' if r['clip'] is None else r['clip']} | "
                     f"{_cell(r, 'mean_bias')} | {_cell(r, 'w2')} | {r['spread']:.2f} |")
    return "\n".join(lines)
