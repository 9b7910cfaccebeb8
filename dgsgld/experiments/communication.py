"""The communication experiment: each sampler's error against the bytes its agents send.

``dgsgld reproduce communication --out DIR [--small]``. ``N = 20`` agents on a static random
4-regular graph (four out-neighbours per agent, Metropolis–Hastings weights), full local
batches, on two problems with messages of ``d = 6`` entries:

- the paper's Bayesian linear regression (§4.1), in its i.i.d. split and (full run only) the
  same data sorted by response (heterogeneous agents); metric: each agent's W2 between the
  Gaussian fit of its ``C`` chains at iteration ``T`` and the exact posterior, averaged over
  agents (:func:`dgsgld.metrics.per_agent_w2`; its Monte Carlo floor at ``C`` chains is
  roughly the exact rows' value);
- the synthetic Bayesian logistic regression (§4.2.1, ``d + 1 = 6`` parameters) with the
  training set dealt out by label (each agent sees mostly one class); metric: each agent's
  test accuracy at ``T``, averaged over its chains and over agents.

DIGing-SGLD against DE-SGLD, each with exact float32 messages; exact messages every
``τ`` ∈ {2, 5, 10} steps (local steps between); every compressor of
:mod:`dgsgld.communication` without and with CHOCO error feedback (``consensus`` γ fixed, not
tuned); event triggers (an agent sends when its message moved more than ``δ`` from the copy its
neighbours hold); stragglers (each agent active at a step with probability ``q``); randomized
gossip (a random matching, or one random link, carries each round); and a deadline of
:data:`DEADLINE` simulated seconds. One step size per problem for every row (not tuned either).

Simulated time: every row runs with the clock :data:`CLOCK` (agent 0 computes 5 s a step, the
others 1 s, jittered by half; 0.1 s latency a round). Without a deadline the clock changes no
draw, only the seconds a row takes: a step waits for the slowest agent. The ``deadline`` row
goes on without the agents not done by :data:`DEADLINE` seconds (stragglers at that step).

Monte Carlo error: the standard error of each metric over the chains, by the delete-a-group
jackknife over :data:`GROUPS` groups of chains (``se² = (G−1)/G Σ_g (m₋g − m̄)²`` with ``m₋g``
the metric without group ``g``); it is the error of the rows' comparison given the data set,
which is fixed. Bytes: what each agent sent over the ``T`` steps
(:meth:`dgsgld.communication.Channel.bytes_sent`), averaged over agents and chains (the same
for every agent of the regular graph unless triggers or stragglers make them differ). Rows and
the configuration go to ``communication.json``, the table to ``communication.md``, metric
against bytes to ``communication.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import communication as comm
from .. import metrics
from .. import networks as nets
from ..plots import pyplot
from ..run import Output, sample
from ..samplers import DESGLD, DIGingSGLD
from .problems import linear_regression_problem, logistic_regression_problem, split_potentials

__all__ = ["GROUPS", "channels", "communication_experiment", "compressors", "plot_communication",
           "table"]

#: Groups of chains of the jackknife standard errors.
GROUPS = 8
#: The simulated clock of every row: agent 0 five times slower than the others.
CLOCK = dict(compute=(5.0,) + (1.0,) * 19, jitter=0.5, latency=0.1)
#: The deadline row's deadline, seconds: the slow agent is done in time in about 18 % of steps.
DEADLINE = 3.0
METHODS = {"DIGing-SGLD": DIGingSGLD, "DE-SGLD": DESGLD}


def compressors(small: bool) -> dict:
    """Label -> compressor for messages of ``d = 6`` entries: one ratio each with ``small``,
    three otherwise."""
    ks = (2,) if small else (1, 2, 3)         # of d = 6 entries
    levels = (4,) if small else (1, 4, 16)
    out = {"exact": comm.identity()}
    out |= {f"top_k(k={k})": comm.top_k(k / 6) for k in ks}
    out |= {f"random_k(k={k})": comm.random_k(k / 6) for k in ks}
    out |= {f"quantize({s})": comm.quantize(s) for s in levels}
    out["sign"] = comm.sign()
    return out


def channels(small: bool, consensus: float) -> list[tuple[str, comm.Channel]]:
    """``(label, channel)`` of every row: exact messages every step and every ``τ`` steps,
    each compressor without and with error feedback, event triggers and stragglers."""
    out = [("exact", comm.Channel())]
    out += [(f"exact, every {tau}", comm.Channel(every=tau)) for tau in (2, 5, 10)]
    for label, compressor in compressors(small).items():
        if label != "exact":
            out += [(label, comm.Channel(compressor)),
                    (label, comm.Channel(compressor, error_feedback=True,
                                         consensus=consensus))]
    out += [(f"trigger δ={delta:g}", comm.Channel(threshold=delta)) for delta in (0.1, 0.3)]
    out += [(f"stragglers q={q:g}", comm.Channel(activity=q)) for q in (0.9, 0.5)]
    out += [("gossip, matching", comm.Channel(gossip="matching")),
            ("gossip, one link", comm.Channel(gossip="edge")),
            (f"deadline {DEADLINE:g} s", comm.Channel(clock=comm.Clock(**CLOCK,
                                                                       deadline=DEADLINE)))]
    clock = comm.Clock(**CLOCK)
    return [(label, channel if channel.clock is not None
             else eqx.tree_at(lambda c: c.clock, channel, clock, is_leaf=lambda x: x is None))
            for label, channel in out]


def _config(small: bool, seed: int) -> dict:
    return {"num_agents": 20, "degree": 4, "num_chains": 64 if small else 200,
            "num_steps": 4000 if small else 8000, "step_size": 0.001,
            "logistic_step_size": 0.002, "consensus": 0.3, "groups": GROUPS,
            "splits": ["iid"] if small else ["iid", "sorted"], "seed": seed}


def _problems(cfg: dict):
    """``(label, potential, problem, step size)`` of every problem the rows run on."""
    linear = linear_regression_problem(cfg["seed"], num_agents=cfg["num_agents"])
    for split, potential in split_potentials(linear).items():
        if split in cfg["splits"]:
            yield f"linear, {split}", potential, linear, cfg["step_size"]
    logistic = logistic_regression_problem(cfg["seed"], num_agents=cfg["num_agents"],
                                           partition="by_label")
    yield "logistic, by label", logistic.potential(), logistic, cfg["logistic_step_size"]


def _leave_group_out(x: np.ndarray, groups: int) -> np.ndarray:
    """``(C − C/G, G, ...)``: slot ``g`` holds the chains of ``x`` (``(C, ...)``) without group
    ``g`` (groups of consecutive chains)."""
    c = x.shape[0] - x.shape[0] % groups
    group = np.arange(c) // (c // groups)
    return np.stack([x[:c][group != g] for g in range(groups)], axis=1)


def _jackknife(parts: np.ndarray) -> float:
    """Delete-a-group jackknife standard error from the ``(G,)`` leave-one-group-out values."""
    g = parts.shape[0]
    return float(np.sqrt((g - 1) / g * np.sum((parts - parts.mean()) ** 2)))


def _score(problem, final: np.ndarray, groups: int) -> tuple[str, float, float]:
    """``(metric name, value, jackknife standard error)`` of the final positions ``(C, N, d)``."""
    if problem.posterior_mean is not None:
        mean, cov = problem.posterior_mean, problem.posterior_cov
        full = float(np.mean(np.asarray(metrics.per_agent_w2(final[:, None], mean, cov))))
        parts = np.asarray(metrics.per_agent_w2(_leave_group_out(final, groups), mean, cov))
        return "w2", full, _jackknife(parts.mean(axis=1))
    acc = np.asarray(problem.test_accuracy(jnp.asarray(final)), np.float64)     # (C, N)
    full = float(acc.mean())
    return "accuracy", full, _jackknife(_leave_group_out(acc, groups).mean(axis=(0, 2)))


def communication_experiment(out: str | Path, *, small: bool = False, seed: int = 0,
                             plot: bool = True, logger: Callable | None = print) -> list[dict]:
    """Run every row, write ``communication.json``, ``communication.md`` and (``plot``)
    ``communication.png`` into ``out``, and return the rows (dicts: problem, method,
    channel, error_feedback, bytes_per_agent, bytes_per_agent_step, metric ("w2" or
    "accuracy"), value and se (``None`` where a chain diverged), diverged)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(small, seed)
    mixing = nets.random_regular(cfg["num_agents"], cfg["degree"], seed)
    key = jax.random.key(seed)
    steps = cfg["num_steps"]
    keep = Output(thin=steps, positions=True)
    rows, start = [], time.perf_counter()
    for name, potential, problem, eta in _problems(cfg):
        init = jax.random.normal(jax.random.fold_in(key, 1),
                                 (cfg["num_chains"], cfg["num_agents"], problem.dim))
        for method, make in METHODS.items():
            for label, channel in channels(small, cfg["consensus"]):
                ef = channel.error_feedback
                trace = sample(make(eta), potential, mixing, init, key, steps,
                               output=keep, channel=channel, on_divergence="flag")
                sent = channel.bytes_sent(trace.state)        # (C, N)
                diverged = bool(np.asarray(trace.diverged).any())
                kind, value, se = ("w2" if problem.posterior_mean is not None else "accuracy",
                                   None, None)
                if not diverged:
                    kind, value, se = _score(problem, np.asarray(trace.positions[:, -1]),
                                             cfg["groups"])
                seconds = float(np.asarray(comm.elapsed_time(trace.state)).mean())
                row = {"problem": name, "method": method, "channel": label,
                       "error_feedback": ef, "bytes_per_agent": float(sent.mean()),
                       "bytes_per_agent_step": float(sent.mean()) / steps,
                       "seconds": seconds, "seconds_per_step": seconds / steps, "metric": kind,
                       "value": value, "se": se, "diverged": diverged}
                rows.append(row)
                if logger is not None:
                    logger(f"{name:18s} {method:11s} {label:16s} EF={ef!s:5s} "
                           f"bytes/agent/step {row['bytes_per_agent_step']:7.1f}  "
                           f"s/step {row['seconds_per_step']:5.2f}  {kind} {_cell(row)}")
    cfg["seconds"] = time.perf_counter() - start
    (out / "communication.json").write_text(json.dumps({"config": cfg, "rows": rows},
                                                       indent=1))
    (out / "communication.md").write_text(table(rows))
    if plot:
        plot_communication(rows, out / "communication.png")
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per problem, one line per channel and error feedback, the simulated seconds
    per step (of DIGing-SGLD's run; the clock draws the same for both methods), bytes per
    agent and step per method and each method's metric ± its jackknife standard error."""
    lines = []
    for problem in dict.fromkeys(r["problem"] for r in rows):
        sub = [r for r in rows if r["problem"] == problem]
        metric = "W2" if sub[0]["metric"] == "w2" else "test accuracy"
        lines += [f"**{problem}** ({metric} at T; ± jackknife standard error over chains)", "",
                  ("| channel | EF | simulated s/step | bytes/agent/step DIGing | DIGing-SGLD | "
                   "bytes/agent/step DE | DE-SGLD |"), "|---|---|---:|---:|---:|---:|---:|"]
        index = {(r["method"], r["channel"], r["error_feedback"]): r for r in sub}
        for k in dict.fromkeys((r["channel"], r["error_feedback"]) for r in sub):
            first = index.get((next(iter(METHODS)),) + k)
            cells = ["" if first is None else f"{first['seconds_per_step']:.2f}"]
            for m in METHODS:
                r = index.get((m,) + k)
                cells += ["", ""] if r is None else [f"{r['bytes_per_agent_step']:.1f}",
                                                     _cell(r)]
            lines.append(f"| {k[0]} | {'yes' if k[1] else 'no'} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _cell(row: dict) -> str:
    if row["value"] is None:
        return "diverged"
    digits = 4 if row["metric"] == "w2" else 3
    return f"{row['value']:.{digits}f} ± {row['se']:.{digits}f}"


def plot_communication(rows: list[dict], path: str | Path) -> Path:
    """Per problem, two panels: the metric (± its standard error) against bytes per agent and
    step (top) and against the simulated seconds of the run (bottom), a colour per method,
    filled markers with error feedback."""
    plt = pyplot(headless=True)
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    fig, axes = plt.subplots(2, len(problems), figsize=(5 * len(problems), 8), squeeze=False)
    for (ax, problem), x, xlabel in [((a, p), "bytes_per_agent_step", "bytes per agent and step")
                                     for a, p in zip(axes[0], problems)] + \
                                    [((a, p), "seconds", "simulated seconds of the run")
                                     for a, p in zip(axes[1], problems)]:
        for colour, method in zip(("C0", "C1"), METHODS):
            for ef in (False, True):
                sub = [r for r in rows if r["problem"] == problem and r["method"] == method
                       and r["error_feedback"] == ef and r["value"] is not None]
                if not sub:
                    continue
                ax.errorbar([r[x] for r in sub],
                            [r["value"] for r in sub], [r["se"] for r in sub], fmt="o",
                            color=colour, mfc=colour if ef else "none",
                            label=f"{method}{', EF' if ef else ''}")
        kind = next(r["metric"] for r in rows if r["problem"] == problem)
        ax.set(xscale="log", yscale="log" if kind == "w2" else "linear",
               xlabel=xlabel, title=problem,
               ylabel="W2 to the posterior" if kind == "w2" else "test accuracy")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
