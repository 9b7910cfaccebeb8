"""The directed-network experiment: push-sum samplers against DIGing-SGLD on a symmetrized graph.

``python -m experiments reproduce directed --out DIR [--small]``. The paper's Bayesian linear
regression (§4.1, eq. 4.2; ``N`` a power of two so that the one-peer exponential graph exists) over
directed time-varying networks:

* the directed one-peer exponential graph (``i → i + 2^τ``),
* the directed barbell (two cliques, one random one-way bridge per snapshot, alternating),
* one-way link failures of a random 4-regular graph at several rates.

Methods: Push-DIGing-SGLD and the push-sum SGLD of Kolesov & Kungurtsev [35] on the directed
schedule, and DIGing-SGLD on the symmetrized schedule (each snapshot's links made two way,
Metropolis–Hastings weights): what a user without push-sum would run, and an optimistic
reference, since it uses reverse links the network does not have.

Metric: each agent's W2 to the posterior at iteration ``T`` (100, as in the paper), from the
exact Gaussian law of the full-batch recursion (:mod:`dgsgld.theory.exact`, the quantity the
paper estimates from 200 trials, here without Monte Carlo error). Step sizes tuned as in the
paper: the one minimizing the agents' mean W2 at ``T`` on a log grid, per method, network and
seed. Constant steps for every method (a decaying step only slows [35]'s baseline at ``T``).
Initial positions ``x_i⁽⁰⁾ ~ N(0, I)`` i.i.d. Two data splits: the paper's i.i.d. one and the
same data sorted by response (heterogeneous agents, the setting where tracking matters). Also
reported: the stationary W2 at the tuned step (``T → ∞``, :func:`theory.exact.stationary_moments`).

The paper's synthetic Bayesian logistic regression (§4.2.1, Figure 3's problem: training data
dealt to the agents by label, mini-batches of 1) on the same schedules, run (float32): each
agent's test accuracy at ``T`` averaged over the chains (Monte Carlo), the step size of each
method, network and seed tuned on a log grid (Figure 3's range) with the same rule as the W2
(:func:`_pick`: the best mean over agents among the grid points where no chain diverged).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import networks as nets
from dgsgld.networks import directed as dnets
from dgsgld.posteriors.problems import (
    linear_regression_problem,
    logistic_regression_problem,
    split_potentials,
)
from dgsgld.samplers import DIGingSGLD, PushDIGingSGLD, PushSumSGLD
from dgsgld.theory import exact
from dgsgld.tuning import grid_search

from .figures import _stream

__all__ = ["METHODS", "directed_experiment", "directed_table", "logistic_table", "plot_directed"]

#: Method label -> (exact-law kind, runs on the symmetrized schedule).
METHODS = {
    "Push-DIGing-SGLD": ("push_diging", False),
    "push-sum SGLD [35]": ("push_sum", False),
    "DIGing-SGLD (symmetrized)": ("diging", True),
}

_SETTINGS = {
    False: dict(num_agents=16, num_samples=96, period=50, num_steps=100, grid=(1e-3, 0.2, 20),
                failure_rates=(0.2, 0.4, 0.6)),
    True: dict(num_agents=8, num_samples=40, period=10, num_steps=100, grid=(2e-3, 0.1, 12),
               failure_rates=(0.2, 0.5)),
}

#: The logistic problem: Figure 3's synthetic data (``train_size`` a multiple of ``N``) and
#: step range; ``seeds`` at most the linear problem's.
_LOGISTIC = {
    False: dict(num_samples=600, train_size=384, chains=200, grid=(1e-3, 10.0, 17), seeds=8),
    True: dict(num_samples=300, train_size=160, chains=16, grid=(1e-3, 10.0, 17), seeds=3),
}

#: Method label -> ``step_size -> sampler`` (the same objects across calls: compiled once).
_MAKERS = {
    PushDIGingSGLD.name: PushDIGingSGLD,
    "push-sum SGLD [35]": PushSumSGLD,
    f"{DIGingSGLD.name} (symmetrized)": DIGingSGLD,
}


def _symmetrized(schedule, dtype=jnp.float64) -> nets.Schedule:
    """Each snapshot's links made two way, Metropolis–Hastings weights."""
    adj = np.asarray(schedule.adjacency)
    return nets.from_graphs(adj | np.swapaxes(adj, 1, 2), weights="metropolis_hastings",
                            name=f"symmetrized {schedule.name}", dtype=dtype)


def _networks(n: int, period: int, rates, seed: int, dtype=jnp.float64) -> dict:
    base = np.asarray(nets.random_regular(n, 4, seed=seed).adjacency[0])
    out = {
        "one-peer exponential": dnets.directed_one_peer_exponential(n, dtype=dtype),
        "directed barbell": dnets.directed_barbell(n, period, seed=seed, dtype=dtype),
    }
    for p in rates:
        out[f"one-way failures p={p:g}"] = dnets.one_way_link_failures(
            base, p, period, seed=seed + 1, dtype=dtype)
    return out


def _stacks(schedule, dtype=jnp.float64):
    """Per method, the ``(P, N, N)`` stack it runs on (the symmetrized one built once)."""
    sym = None
    for method, (_, symmetric) in METHODS.items():
        if symmetric and sym is None:
            sym = _symmetrized(schedule, dtype)
        yield method, np.asarray((sym if symmetric else schedule).matrices, dtype)


def _pick(scores: np.ndarray, mode: str = "min") -> int:
    """The grid point of ``scores (G, N)`` (per agent) with the best mean over agents, among
    the points with every score finite."""
    finite = np.isfinite(scores).all(axis=1)
    mean = np.where(finite, scores.mean(axis=1), np.inf if mode == "min" else -np.inf)
    return int(np.argmin(mean) if mode == "min" else np.argmax(mean))


@functools.partial(jax.jit, static_argnums=(0, 4))
def _final_w2(make, hessians, shifts, stack, num_steps, grid):
    """``(G, N)`` per-agent W2 at ``num_steps`` for every step size of ``grid``, ``make`` the
    sampler class (one program per sampler, period and size, reused across seeds)."""
    q = exact.Quadratic(hessians, shifts)
    d = hessians.shape[-1]
    A, b = jnp.sum(hessians, axis=0), jnp.sum(shifts, axis=0)
    cov = jnp.linalg.inv(A)
    target = (cov @ b, 0.5 * (cov + cov.T))

    def one(eta):
        m = exact.exact_moments(make(eta), q, stack, jnp.zeros(d), jnp.eye(d), num_steps)
        return exact.exact_w2(exact.ExactMoments(*(a[-1] for a in m)), *target)

    return jax.vmap(one)(grid)


def _tuned_w2(make, quadratic, stack: np.ndarray, grid: np.ndarray, num_steps: int):
    """``(per-agent W2 (N,), step size)`` at the grid point with the smallest mean W2."""
    w2 = np.asarray(_final_w2(make, jnp.asarray(quadratic.hessians), jnp.asarray(quadratic.shifts),
                              jnp.asarray(stack), int(num_steps), jnp.asarray(grid)))
    best = _pick(w2, "min")
    return w2[best], float(grid[best])


def _one_seed(results: dict, split: str, q, cfg: dict, grid: np.ndarray, seed: int) -> None:
    for name, schedule in _networks(cfg["num_agents"], cfg["period"], cfg["failure_rates"],
                                    seed).items():
        for method, stack in _stacks(schedule):
            make = _MAKERS[method]
            w2, eta = _tuned_w2(make, q, stack, grid, cfg["num_steps"])
            st = exact.stationary_moments(make(eta), q, stack, step_size=eta)
            limit = np.asarray(exact.exact_w2(st, *q.target())).max(axis=0)  # worst phase
            entry = results.setdefault(f"{name}, {split} split", {}).setdefault(
                method, {"w2": [], "step_size": [], "stationary_w2": []})
            entry["w2"].append(w2.tolist())
            entry["step_size"].append(eta)
            entry["stationary_w2"].append(limit.tolist())


def _logistic_seed(results: dict, cfg: dict, lcfg: dict, grid: np.ndarray, seed: int) -> None:
    """Tuned per-agent test accuracy of every method on every network for one seed."""
    n = cfg["num_agents"]
    problem = logistic_regression_problem(seed, num_samples=lcfg["num_samples"],
                                          train_size=lcfg["train_size"], num_agents=n,
                                          partition="by_label")
    potential = problem.potential(batch_size=1)
    key_init, key_run = jax.random.split(jax.random.key(seed))
    init = jax.random.normal(key_init, (lcfg["chains"], n, problem.dim))
    accuracy = _stream(problem.test_features, problem.test_targets)
    for name, schedule in _networks(n, cfg["period"], cfg["failure_rates"], seed,
                                    jnp.float32).items():
        sym = _symmetrized(schedule, jnp.float32)
        for method, (_, symmetric) in METHODS.items():
            # The schedule objects: grid_search checks a bare stack as doubly stochastic.
            mixing = sym if symmetric else schedule
            search = grid_search(_MAKERS[method], grid, potential, mixing, init, key_run,
                                 cfg["num_steps"], score_fn=_no_score, ensemble_fn=accuracy)
            acc = np.asarray(search.ensemble["accuracy"], np.float64)[:, -1]   # (G, N) at T
            acc[search.diverged] = np.nan
            best = _pick(acc, "max")
            entry = results.setdefault(name, {}).setdefault(
                method, {"accuracy": [], "step_size": []})
            entry["accuracy"].append(acc[best].tolist())
            entry["step_size"].append(float(grid[best]))


def _no_score(trace):
    """Grid score unused here (:func:`_pick` scores the streamed per-agent accuracies)."""
    return jnp.zeros(())


def directed_experiment(out_dir: str | Path, *, small: bool = False, num_seeds: int = 8,
                        seed: int = 0, plot: bool = True,
                        logger: Callable[[str], None] | None = print) -> dict:
    """Run the experiment and write ``directed.json``, ``directed.md`` and (``plot``)
    ``directed.png`` (:func:`plot_directed`) into ``out_dir``.

    Returns:
        ``{"settings": ..., "results": {network: {method: {"w2": (seeds, N), "step_size":
        (seeds,)}}}, "logistic": {network: {method: {"accuracy": (seeds, N), "step_size":
        (seeds,)}}}, "table": markdown}``.
    """
    cfg = _SETTINGS[bool(small)]
    grid = np.geomspace(*cfg["grid"][:2], cfg["grid"][2])
    results: dict = {}
    start = time.perf_counter()
    with jax.enable_x64(True):
        for s in range(seed, seed + num_seeds):
            problem = linear_regression_problem(s, num_samples=cfg["num_samples"],
                                                num_agents=cfg["num_agents"])
            for split, potential in split_potentials(problem).items():
                q = exact.quadratic_from_potential(
                    potential, jnp.zeros((cfg["num_agents"], problem.dim), jnp.float64))
                q = exact.Quadratic(np.asarray(q.hessians, np.float64),
                                    np.asarray(q.shifts, np.float64))
                _one_seed(results, split, q, cfg, grid, s)
            if logger:
                logger(f"seed {s} done ({time.perf_counter() - start:.0f} s)")
    lcfg = _LOGISTIC[bool(small)]
    lgrid = np.geomspace(*lcfg["grid"][:2], lcfg["grid"][2])
    logistic: dict = {}
    for s in range(seed, seed + min(num_seeds, lcfg["seeds"])):
        _logistic_seed(logistic, cfg, lcfg, lgrid, s)
        if logger:
            logger(f"logistic seed {s} done ({time.perf_counter() - start:.0f} s)")
    table = (directed_table(results) + "\nSynthetic logistic regression, test accuracy at T:\n\n"
             + logistic_table(logistic))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = {"settings": {**cfg, "num_seeds": num_seeds, "seed": seed, "small": bool(small),
                           "grid": grid.tolist(),
                           "logistic": {**lcfg, "grid": lgrid.tolist()}},
              "results": results, "logistic": logistic, "table": table,
              "wall_s": time.perf_counter() - start}
    (out / "directed.json").write_text(json.dumps(record, indent=1))
    (out / "directed.md").write_text(table)
    if plot:
        plot_directed(record, out / "directed.png")
    if logger:
        logger(table)
    return record


def _summary_rows(results: dict, metric: str, mode: str,
                  extra: Callable[[dict], str] | None = None):
    """Per network and method, the table cells of a per-seed, per-agent ``metric`` ``(seeds,
    N)``: the agents' mean and worst (mean ± sd over seeds), the median tuned step and in how
    many seeds the method has the best mean over agents; ``mode`` ``"min"`` (a loss) or
    ``"max"`` (a gain) says which is best, as in :func:`_pick`. ``extra(entry)`` adds cells."""
    best, worst = (np.argmin, np.max) if mode == "min" else (np.argmax, np.min)
    for name, methods in results.items():
        values = {m: np.asarray(r[metric]) for m, r in methods.items()}
        winners = best(np.stack([v.mean(axis=1) for v in values.values()]), axis=0)
        for k, (method, r) in enumerate(methods.items()):
            mean, low = values[method].mean(axis=1), worst(values[method], axis=1)
            yield (f"| {name} | {method} | {mean.mean():.4f} ± {mean.std():.4f} | "
                   f"{low.mean():.4f} ± {low.std():.4f} | {np.median(r['step_size']):.3g} | "
                   f"{int(np.sum(winners == k))}/{len(mean)} |" + (extra(r) if extra else ""))


def directed_table(results: dict) -> str:
    """Markdown: per network and method, the agents' mean and worst W2 at ``T`` (mean ± sd over
    seeds), the median tuned step, in how many seeds the method has the lowest mean W2, and
    the agents' mean stationary W2 at the tuned step (worst phase of the period; the bias
    left once the initial law is forgotten)."""
    head = ("| network, data split | method | mean-agent W2 at T | worst-agent W2 at T | "
            "η (median) | best in seeds | mean-agent W2 as T → ∞ |")
    rows = _summary_rows(results, "w2", "min",
                         lambda r: f" {np.mean(r['stationary_w2']):.4f} |")
    return "\n".join([head, "|---|---|---|---|---|---|---|", *rows]) + "\n"


def logistic_table(results: dict) -> str:
    """Markdown: per network and method, the agents' mean and worst test accuracy at ``T``
    (mean ± sd over seeds), the median tuned step, in how many seeds the method has the highest
    mean accuracy."""
    head = ("| network | method | mean-agent accuracy | worst-agent accuracy | η (median) | "
            "best in seeds |")
    rows = _summary_rows(results, "accuracy", "max")
    return "\n".join([head, "|---|---|---|---|---|---|", *rows]) + "\n"


def plot_directed(record: dict, path: str | Path) -> Path:
    """One panel per data split (mean-agent W2 at ``T``) and one for the logistic problem
    (mean-agent test accuracy at ``T``): per network, one bar per method, the mean over seeds
    with the seeds' s.d. as error bars."""
    from dgsgld.evaluate.plots import pyplot

    plt = pyplot(headless=True)
    panels: dict = {}
    for key, methods in record["results"].items():
        network, split = key.rsplit(", ", 1)
        panels.setdefault(f"W2 at T, {split}", {})[network] = {
            m: np.asarray(r["w2"]).mean(axis=1) for m, r in methods.items()}
    panels["test accuracy at T, logistic"] = {
        network: {m: np.asarray(r["accuracy"]).mean(axis=1) for m, r in methods.items()}
        for network, methods in record["logistic"].items()}
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    width = 0.8 / len(METHODS)
    for ax, (title, by_network) in zip(axes.flat, panels.items()):
        networks = list(by_network)
        for k, method in enumerate(METHODS):
            vals = [by_network[n][method] for n in networks]
            ax.bar(np.arange(len(networks)) + (k - (len(METHODS) - 1) / 2) * width,
                   [v.mean() for v in vals], width, yerr=[v.std() for v in vals],
                   label=method, color=f"C{k}")
        ax.set_xticks(range(len(networks)), networks, rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        if "accuracy" in title:
            lo = min(v.mean() for n in networks for v in by_network[n].values())
            ax.set_ylim(max(0.0, lo - 0.05), 1.0)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
