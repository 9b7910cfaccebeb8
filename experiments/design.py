"""The network-design experiment: learned mixing weights against Metropolis and fastest mixing.

``python -m experiments reproduce design --out DIR [--small]``, on the set-ups of Figures 2(a)–(c)
and 3(a)–(b) (``N = 20``, period 50, DIGing-SGLD and DE-SGLD, ``x_i⁽⁰⁾ ~ N(0, I)`` i.i.d.,
``T = 100``):

* 2(a), 2(c): the paper's Bayesian linear regression (§4.1, full local batches) over the
  time-varying barbell and lollipop. Score: each agent's exact W2 to the posterior at ``T``
  (:mod:`dgsgld.theory.exact`: no Monte Carlo error), averaged over the agents.
* 2(b): the same data and barbell with mini-batches of ``b = 3`` of the ``n̄ = 5`` local
  samples. The mini-batch gradient's noise depends on the state, so the law has no closed form:
  the score is the W2 of the chains' Gaussian fit at ``T`` (``chains`` chains), and besides
  the weights learned on the full-batch exact law (the mini-batch gradient's mean), weights are
  learned through :func:`dgsgld.sample` on that same score
  (:func:`dgsgld.tuning.learn_weights_by_sampling`, common random numbers).
* 3(a), 3(b): the synthetic logistic regression (§4.2.1) over the barbell and lollipop. The
  weights are learned on, and scored by, the exact W2 of the *Laplace approximation*
  (:func:`laplace_quadratic`: each agent's potential replaced by its second-order expansion
  at the MAP); the paper's own score, the test accuracy at ``T`` with mini-batches of
  ``b = 1``, is sampled (``accuracy_chains`` chains) at the same weights and steps.

Seeds as ``python -m experiments reproduce fig2a --seed S`` (:func:`~.figures.derive_seeds`).

Weights compared on the same graphs, snapshot by snapshot:

* Metropolis, eq. (4.1) (the paper's), and max-degree;
* fastest mixing (Boyd, Diaconis & Xiao 2004, :func:`dgsgld.networks.fastest_mixing_weights`);
* learned by :func:`dgsgld.tuning.learn_weights` (Adam on the exact W2 at ``T``, started at
  Metropolis): one weight per edge shared by all snapshots, one per snapshot and edge, one per
  snapshot and edge with the step size learned too, and one per snapshot and edge learned on
  the mean over several training data draws (the figure's and ``extra_draws`` more, none of
  them held out), started at Metropolis and, once more, started at the better (on the
  training draw) of Metropolis and fastest mixing, each at its re-tuned step, keeping that
  step.

Step sizes: for 2(a) and 2(c) the ones ``python -m experiments reproduce fig2a`` tunes (0.00825
DIGing-SGLD, 0.01 DE-SGLD); elsewhere (and with ``--small``) the best of a grid for Metropolis on
the panel's score at the training draw; for the baselines also each re-tuned on that grid. Weights
are learned on the training draw (``derive_seeds(seed)``) and evaluated on held-out draws
(``derive_seeds(seed + s)``, ``s = 1..heldout``: new data, new chains' starts and noise, the same
graph schedule). Also reported: each schedule's mean spectral gap and, for the exact panels, the
stationary W2 (``T → ∞``) at its step.

Learning runs in float32 (ten times faster on a CPU than float64); every reported exact W2 is
recomputed in float64.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import evaluate
from dgsgld import networks as nets
from dgsgld.posteriors.problems import (
    Problem,
    derive_seeds,
    linear_regression_problem,
    logistic_regression_problem,
)
from dgsgld.samplers import DESGLD, DIGingSGLD
from dgsgld.theory import exact
from dgsgld.tuning import grid_run, learn_weights, learn_weights_by_sampling

from .configs import figure_config

__all__ = ["FIGURES", "SAMPLERS", "SCORES", "design_experiment", "design_table",
           "laplace_quadratic"]

#: Sampler label -> (exact-law kind, the step size ``reproduce fig2a`` and ``fig2c`` tune for it).
SAMPLERS = {"DIGing-SGLD": ("diging", 0.00825), "DE-SGLD": ("de", 0.01)}
_ALGORITHMS = {"diging": DIGingSGLD, "de": DESGLD}
#: The figures whose set-up is run.
FIGURES = ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b")
#: Each figure's W2 score.
SCORES = {"fig2a": "exact", "fig2b": "sampled, b = 3", "fig2c": "exact",
          "fig3a": "exact, Laplace", "fig3b": "exact, Laplace"}

_SETTINGS = {
    False: {"num_agents": 20, "num_samples": 100, "period": 50, "num_steps": 100, "heldout": 8,
            "extra_draws": 3, "iterations": 120, "learning_rate": 0.1, "fmmc_iterations": 1000,
            "grid": {"linear": (1e-3, 0.05, 24), "logistic": (1e-3, 1.0, 24)},
            "logistic_samples": 600, "logistic_train": 380, "chains": 1000,
            "accuracy_chains": 200, "sampling_iterations": 40, "sampling_learning_rate": 0.05,
            "samplers": tuple(SAMPLERS), "figures": FIGURES},
    True: {"num_agents": 8, "num_samples": 40, "period": 10, "num_steps": 100, "heldout": 2,
           "extra_draws": 1, "iterations": 10, "learning_rate": 0.1, "fmmc_iterations": 100,
           "grid": {"linear": (1e-3, 0.1, 8), "logistic": (1e-3, 1.0, 8)},
           "logistic_samples": 120, "logistic_train": 80, "chains": 100,
           "accuracy_chains": 20, "sampling_iterations": 5, "sampling_learning_rate": 0.05,
           "samplers": ("DIGing-SGLD",), "figures": ("fig2a", "fig2b", "fig3a")},
}


@functools.partial(jax.jit, static_argnums=(0, 4))
def _final_w2(kind, hessians, shifts, stack, num_steps, eta):
    """``(N,)`` per-agent exact W2 at ``num_steps`` (one program per kind and size)."""
    q = exact.Quadratic(hessians, shifts)
    d = hessians.shape[-1]
    A, b = jnp.sum(hessians, axis=0), jnp.sum(shifts, axis=0)
    cov = jnp.linalg.inv(A)
    m = exact.exact_moments(_ALGORITHMS[kind](eta), q, stack, jnp.zeros(d, stack.dtype),
                            jnp.eye(d, dtype=stack.dtype), num_steps)
    return exact.exact_w2(exact.ExactMoments(*(a[-1] for a in m)), cov @ b, 0.5 * (cov + cov.T))


def _score(kind, q, stack, num_steps, eta) -> float:
    """Mean-agent exact W2 at ``T`` in float64."""
    with jax.enable_x64(True):
        w2 = _final_w2(kind, jnp.asarray(q.hessians, jnp.float64),
                       jnp.asarray(q.shifts, jnp.float64), jnp.asarray(stack, jnp.float64),
                       int(num_steps), jnp.asarray(eta, jnp.float64))
        return float(np.mean(np.asarray(w2)))


def _retuned(kind, q, stack, num_steps, grid) -> float:
    """The grid step with the smallest mean-agent exact W2 at ``T`` (float32 search)."""
    scores = np.array([float(np.mean(np.asarray(_final_w2(
        kind, jnp.asarray(q.hessians, jnp.float32), jnp.asarray(q.shifts, jnp.float32),
        jnp.asarray(stack, jnp.float32), int(num_steps), jnp.float32(eta))))) for eta in grid])
    scores = np.where(np.isfinite(scores), scores, np.inf)
    return float(grid[int(np.argmin(scores))])


def _stationary(kind, q, stack, eta) -> float:
    """Mean-agent stationary W2 at ``η`` (worst phase of the period)."""
    st = exact.stationary_moments(_ALGORITHMS[kind](eta), q, np.asarray(stack, np.float64),
                                  step_size=eta)
    with jax.enable_x64(True):
        return float(np.asarray(exact.exact_w2(st, *q.target())).mean(axis=1).max())


def _problem(figure: str, data_seed: int, cfg: dict) -> Problem:
    """One data draw of the figure's problem (Figure 2: linear, Figure 3: logistic)."""
    base = figure_config(figure)
    if figure.startswith("fig2"):
        return linear_regression_problem(
            data_seed, num_samples=cfg["num_samples"], dim=base.dim,
            num_agents=cfg["num_agents"], prior_precision=base.prior_precision,
            noise_std=base.noise_std)
    return logistic_regression_problem(
        data_seed, num_samples=cfg["logistic_samples"], dim=base.dim,
        train_fraction=base.train_fraction, train_size=cfg["logistic_train"],
        num_agents=cfg["num_agents"], prior_precision=base.prior_precision,
        partition=base.partition)


def laplace_quadratic(problem: Problem, *, max_iterations: int = 100) -> exact.Quadratic:
    """:func:`dgsgld.theory.laplace_quadratic` of ``problem``'s full-batch potential, Newton
    started at 0: the agents' quadratics at the MAP, exact for the linear problem."""
    return exact.laplace_quadratic(problem.potential(), np.zeros(problem.dim),
                                   max_iterations=max_iterations)


def _last_position(trace):
    return trace.state.position


def _sample_final(kind, potential, stack, step_sizes, init, key, num_steps) -> np.ndarray:
    """``(G, C, N, p)`` positions at ``T`` at each step size (one compiled grid run)."""
    run = grid_run(_ALGORITHMS[kind], np.atleast_1d(np.asarray(step_sizes, np.float32)),
                   potential, jnp.asarray(stack, jnp.float32), init, key, int(num_steps),
                   score_fn=_last_position)
    return np.asarray(run.score, np.float64)


def _sampled_w2(positions, q) -> np.ndarray:
    """``(G,)`` mean-agent W2 of the chains' Gaussian fit at ``T`` (``inf`` if diverged)."""
    mean, cov = q.target()
    out = np.full(positions.shape[0], np.inf)
    for g, pos in enumerate(positions):
        if np.all(np.isfinite(pos)):
            with jax.enable_x64(True):
                out[g] = float(_mean_w2(jnp.asarray(mean), jnp.asarray(cov), jnp.asarray(pos)))
    return out


def _sampled_w2_se(positions, q, *, resamples: int = 200, seed: int = 0) -> float:
    """Bootstrap standard error of the mean-agent W2 of the chains' Gaussian fit at ``T``;
    ``positions (C, N, p)``, ``nan`` if diverged.

    The chains are independent and identically distributed (chain ``c`` draws from
    ``fold_in(key, c)`` and its own start; an agent's chains share the data and the graph,
    which are fixed), and the plug-in W2 is a smooth function of their empirical mean and
    covariance. Resampling the ``C`` chains with replacement (every agent's position of a
    chain kept together, so the agents' correlation stays) therefore reproduces the spread of
    that plug-in over independent runs of ``C`` chains: its Monte Carlo standard error. It
    does not measure the plug-in's bias (the Gaussian fit's W2 is biased upward, by about
    ``√(p²/C)`` of the posterior scale when the fit is close to the target); where the W2 is
    of that order, the bootstrap distribution is skewed and its spread only indicative.
    """
    if not np.all(np.isfinite(positions)):
        return float("nan")
    mean, cov = q.target()
    pos = np.asarray(positions, np.float64)
    idx = np.random.default_rng(seed).integers(0, pos.shape[0], (resamples, pos.shape[0]))
    values = []
    with jax.enable_x64(True):
        for chunk in np.array_split(idx, max(1, resamples // 50)):  # bounded memory
            w2 = evaluate.gaussian_w2_to_target(jnp.asarray(pos[chunk]), jnp.asarray(mean),
                                                jnp.asarray(cov), axis=1)   # (B, N)
            values.append(np.asarray(w2).mean(axis=1))
    return float(np.std(np.concatenate(values), ddof=1))


def _mean_w2(mean, cov, positions):
    """Mean over agents of the W2 of the chains' Gaussian fit; ``positions (C, N, p)``."""
    return jnp.mean(evaluate.gaussian_w2_to_target(positions, mean, cov, axis=0))


def _accuracy(positions, problem) -> np.ndarray:
    """``(G,)`` mean test accuracy over chains and agents at ``T`` (0 if diverged)."""
    acc = np.asarray(problem.test_accuracy(jnp.asarray(positions, jnp.float32)), np.float64)
    finite = np.all(np.isfinite(positions), axis=(1, 2, 3))
    return np.where(finite, acc.mean(axis=(1, 2)), 0.0)


class _Draw(NamedTuple):
    """One data draw: its problem, quadratics, sampling potential, chains' start and key."""

    problem: Problem
    quadratic: exact.Quadratic
    potential: Any
    init: np.ndarray
    key: jax.Array


def _draw(figure: str, seed: int, cfg: dict) -> _Draw:
    """The draw of ``derive_seeds(seed)``: its data, chains' start and noise key."""
    seeds = derive_seeds(seed)
    problem = _problem(figure, seeds["data"], cfg)
    batch = figure_config(figure).batch_size
    chains = cfg["chains"] if figure == "fig2b" else cfg["accuracy_chains"]
    init = np.random.default_rng(seeds["init"]).standard_normal(
        (chains, cfg["num_agents"], problem.dim)).astype(np.float32)
    return _Draw(problem, laplace_quadratic(problem), problem.potential(batch_size=batch), init,
                 jax.random.key(seeds["sampling"]))


def design_experiment(out_dir: str | Path, *, small: bool = False, seed: int = 0,
                      figures: tuple[str, ...] | None = None,
                      logger: Callable[[str], None] | None = print) -> dict:
    """Run the experiment and write ``design.json`` and ``design.md`` into ``out_dir``.

    ``figures`` defaults to all of :data:`FIGURES` (``small``: 2(a), 2(b) and 3(a), one panel of
    each kind, DIGing-SGLD only).

    Returns:
        ``{"settings": ..., "results": {figure: {sampler: {method: {"step_size", "w2",
        "heldout_w2" (held-out seeds,), "w2_se", "heldout_w2_se" (the sampled score's
        bootstrap standard errors over chains, :func:`_sampled_w2_se`), "spectral_gap",
        "stationary_w2", "accuracy", "heldout_accuracy"}}}}, "table": markdown}`` (``None``
        where a panel has no such number).
    """
    cfg = _SETTINGS[bool(small)]
    figures = tuple(cfg["figures"] if figures is None else figures)
    unknown = [f for f in figures if f not in FIGURES]
    if unknown or not figures:
        raise ValueError(f"`figures` must be some of {FIGURES}; got {figures!r}.")
    start = time.perf_counter()
    results = {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for figure in figures:
        # Each sampler's results as soon as they exist (a long run keeps what it finished).
        results[figure] = _figure(figure, cfg, bool(small), seed, start, logger,
                                  out / f"design_{figure}.json")
    table = design_table(results)
    seeds = derive_seeds(seed)
    heldout_seeds = [derive_seeds(seed + s)["data"] for s in range(1, cfg["heldout"] + 1)]
    record = {"settings": {**cfg, "seed": seed, "small": bool(small), "seeds": seeds,
                           "figures": list(figures), "heldout_data_seeds": heldout_seeds},
              "results": results, "table": table, "wall_s": time.perf_counter() - start}
    (out / "design.json").write_text(json.dumps(record, indent=1))
    (out / "design.md").write_text(table)
    if logger:
        logger(table)
    return record


def _figure(figure: str, cfg: dict, small: bool, seed: int, start: float, logger,
            path: Path) -> dict:
    """``{sampler: {method: scores}}`` for one figure's set-up, written to ``path`` after each
    sampler."""
    seeds = derive_seeds(seed)
    build = nets.barbell if figure_config(figure).network == "barbell" else nets.lollipop
    schedule = build(cfg["num_agents"], period=cfg["period"], seed=seeds["network"])
    adjacency = np.asarray(schedule.adjacency)
    train = _draw(figure, seed, cfg)
    heldout = [_draw(figure, seed + s, cfg) for s in range(1, cfg["heldout"] + 1)]
    extra = [_draw(figure, seed + cfg["heldout"] + s, cfg).quadratic
             for s in range(1, cfg["extra_draws"] + 1)]
    sampled = figure == "fig2b"  # scored by sampling: mini-batch noise has no exact law
    family = "linear" if figure.startswith("fig2") else "logistic"
    grid = np.geomspace(*cfg["grid"][family][:2], cfg["grid"][family][2])
    T = cfg["num_steps"]
    d = train.quadratic.dim
    metropolis = np.asarray(schedule.matrices, np.float64)
    fixed = {
        "Metropolis (eq. 4.1)": metropolis,
        "max-degree": nets.max_degree_weights(adjacency),
        "fastest mixing": nets.fastest_mixing_weights(adjacency, cfg["fmmc_iterations"]),
    }

    def retune(kind, stack):
        if not sampled:
            return _retuned(kind, train.quadratic, stack, T, grid)
        scores = _sampled_w2(_sample_final(kind, train.potential, stack, grid, train.init,
                                           train.key, T), train.quadratic)
        return float(grid[int(np.argmin(scores))])

    def train_score(kind, stack, eta):
        if not sampled:
            return _score(kind, train.quadratic, stack, T, eta)
        return float(_sampled_w2(_sample_final(kind, train.potential, stack, eta, train.init,
                                               train.key, T), train.quadratic)[0])

    results: dict = {}
    for label in cfg["samplers"]:
        kind, paper_step = SAMPLERS[label]
        exact_step = figure in ("fig2a", "fig2c") and not small
        eta0 = paper_step if exact_step else retune(kind, metropolis)
        runs = {name: (stack, eta0) for name, stack in fixed.items()}  # method -> (W, η)
        for name in ("Metropolis (eq. 4.1)", "fastest mixing"):
            runs[f"{name}, re-tuned η"] = (fixed[name], retune(kind, fixed[name]))
        draws = len(extra) + 1
        # The better of the two re-tuned baselines on the training draw, as a start: learning
        # on several draws from there keeps its step and only lowers the training objective.
        best = min(("Metropolis (eq. 4.1), re-tuned η", "fastest mixing, re-tuned η"),
                   key=lambda name: train_score(kind, *runs[name]))
        for name, shared, joint, quads, (init, eta) in (
                ("learned, shared by snapshots", True, False, [train.quadratic],
                 (metropolis, eta0)),
                ("learned per snapshot", False, False, [train.quadratic], (metropolis, eta0)),
                ("learned per snapshot and η", False, True, [train.quadratic],
                 (metropolis, eta0)),
                (f"learned per snapshot, {draws} training draws", False, False,
                 [train.quadratic, *extra], (metropolis, eta0)),
                (f"learned per snapshot, {draws} training draws, from {best}", False, False,
                 [train.quadratic, *extra], runs[best])):
            t0 = time.perf_counter()
            learned, report = learn_weights(
                _ALGORITHMS[kind](eta),
                [exact.Quadratic(q.hessians.astype(np.float32), q.shifts.astype(np.float32))
                 for q in quads],
                metropolis.astype(np.float32), np.zeros(d), np.eye(d), T, step_size=eta,
                learn_step_size=joint, shared=shared, init=init.astype(np.float32),
                num_iterations=cfg["iterations"], learning_rate=cfg["learning_rate"])
            nets.validate_schedule(learned.matrices, adjacency)
            runs[name] = (np.asarray(learned.matrices, np.float64), report.step_size_after)
            if logger:
                logger(f"{figure} {label}: {name}: {report.objective_before:.4f} -> "
                       f"{report.objective_after:.4f} ({time.perf_counter() - t0:.0f} s)")
        if sampled:
            t0 = time.perf_counter()
            criterion = functools.partial(
                _mean_w2, *(jnp.asarray(a, jnp.float32) for a in train.quadratic.target()))
            learned, report = learn_weights_by_sampling(
                _ALGORITHMS[kind](eta0), train.potential, metropolis.astype(np.float32),
                jnp.asarray(train.init), train.key, T, criterion,
                num_iterations=cfg["sampling_iterations"],
                learning_rate=cfg["sampling_learning_rate"])
            nets.validate_schedule(learned.matrices, adjacency)
            runs["learned by sampling"] = (np.asarray(learned.matrices, np.float64), eta0)
            if logger:
                logger(f"{figure} {label}: learned by sampling: {report.objective_before:.4f} "
                       f"-> {report.objective_after:.4f} ({time.perf_counter() - t0:.0f} s)")
        entry = results.setdefault(label, {})
        for name, (stack, eta) in runs.items():
            entry[name] = _evaluate(figure, kind, stack, eta, train, heldout, T)
        path.write_text(json.dumps(results, indent=1))
        if logger:
            logger(f"{figure} {label} done ({time.perf_counter() - start:.0f} s)")
    return results


def _evaluate(figure, kind, stack, eta, train: _Draw, heldout: list, T: int) -> dict:
    """One method's scores on the training draw and the held-out draws."""
    r = {"step_size": float(eta), "spectral_gap": float(np.mean(nets.spectral_gap(stack))),
         "w2_se": None, "heldout_w2_se": None, "stationary_w2": None, "accuracy": None,
         "heldout_accuracy": None}
    if figure == "fig2b":
        def w2(draw):
            positions = _sample_final(kind, draw.potential, stack, eta, draw.init, draw.key, T)
            return (float(_sampled_w2(positions, draw.quadratic)[0]),
                    _sampled_w2_se(positions[0], draw.quadratic))
        r["w2"], r["w2_se"] = w2(train)
        r["heldout_w2"], r["heldout_w2_se"] = map(list, zip(*(w2(draw) for draw in heldout)))
        return r
    r["w2"] = _score(kind, train.quadratic, stack, T, eta)
    r["heldout_w2"] = [_score(kind, draw.quadratic, stack, T, eta) for draw in heldout]
    r["stationary_w2"] = _stationary(kind, train.quadratic, stack, eta)
    if figure.startswith("fig3"):
        def accuracy(draw):
            positions = _sample_final(kind, draw.potential, stack, eta, draw.init, draw.key, T)
            return float(_accuracy(positions, draw.problem)[0])
        r["accuracy"] = accuracy(train)
        r["heldout_accuracy"] = [accuracy(draw) for draw in heldout]
    return r


def design_table(results: dict) -> str:
    """Markdown: per figure, sampler and weights, the step, the mean-agent W2 at ``T`` (the
    panel's score, :data:`SCORES`) on the training draw and on the held-out draws (mean ± sd),
    each against Metropolis at the panel's step (the held-out change is the mean of the per-draw
    changes), for a sampled score its Monte Carlo standard error (training draw: ``w2 ± se``;
    held out: ``(MC ± se)`` of the mean over draws), the mean spectral gap, the stationary W2
    (worst phase) and, for Figure 3, the sampled test accuracy at ``T`` (training draw;
    held-out draws, mean ± sd)."""
    head = ("| figure | sampler | weights | η | W2 at T (training draw) | vs Metropolis | "
            "W2 at T (held-out draws) | vs Metropolis | spectral gap | W2 as T → ∞ | "
            "test accuracy (training draw) | test accuracy (held-out draws) |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for figure, samplers in results.items():
        for sampler, methods in samplers.items():
            lines += _rows(figure, sampler, methods)
    return "\n".join(lines) + "\n"


def _rows(figure: str, sampler: str, methods: dict) -> list[str]:
    base = methods["Metropolis (eq. 4.1)"]
    base_held = np.asarray(base["heldout_w2"])
    lines = []
    for name, r in methods.items():
        held = np.asarray(r["heldout_w2"])
        stationary = "–" if r["stationary_w2"] is None else f"{r['stationary_w2']:.4f}"
        acc = "–" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
        held_acc = ("–" if r["heldout_accuracy"] is None else
                    f"{np.mean(r['heldout_accuracy']):.4f} ± {np.std(r['heldout_accuracy']):.4f}")
        # Sampled scores: the training draw's Monte Carlo standard error, and that of the
        # held-out mean (independent draws: the root of the summed variances over their count).
        se, held_se = r.get("w2_se"), r.get("heldout_w2_se")
        train_mc = "" if se is None else f" ± {se:.4f}"
        held_mc = ("" if held_se is None else
                   f" (MC ± {np.sqrt(np.sum(np.square(held_se))) / len(held_se):.4f})")
        lines.append(
            f"| {figure} ({SCORES[figure]}) | {sampler} | {name} | {r['step_size']:.4g} | "
            f"{r['w2']:.4f}{train_mc} | {100 * (r['w2'] / base['w2'] - 1):+.1f} % | "
            f"{held.mean():.4f} ± {held.std():.4f}{held_mc} | "
            f"{100 * np.mean(held / base_held - 1):+.1f} % | {r['spectral_gap']:.4f} | "
            f"{stationary} | {acc} | {held_acc} |")
    return lines
