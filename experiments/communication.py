"""The communication experiment: each sampler's error against the bytes its agents send.

``python -m experiments reproduce communication --out DIR [--small]``. ``N = 20`` agents on a static
random 4-regular graph (four out-neighbours per agent, Metropolis–Hastings weights), on three
problems (:data:`PROBLEMS`):

- the paper's Bayesian linear regression (§4.1), in its i.i.d. split and (full run only) the
  same data sorted by response (heterogeneous agents); metric: each agent's W2 between the
  Gaussian fit of its ``C`` chains at iteration ``T`` and the exact posterior, averaged over
  agents (:func:`dgsgld.evaluate.per_agent_w2`; its Monte Carlo floor at ``C`` chains is
  roughly the exact rows' value);
- the synthetic Bayesian logistic regression (§4.2.1, ``d + 1 = 6`` parameters) with the
  training set dealt out by label (each agent sees mostly one class); metric: each agent's
  test accuracy at ``T``, averaged over its chains and over agents;
- the digits BNN of :mod:`experiments.digits` (its data protocol, MLP and prior; a
  hidden layer of 64 units, ``d = 4810``, or 16 with ``small``, ``d = 1210``) on the
  Dirichlet(0.5) label-skewed split of its training set, mini-batches of 16 and its own
  chains and steps (:data:`DIGITS`, :data:`DIGITS_SMALL`); metrics: the test NLL and
  accuracy of each agent's posterior predictive (the mean of its chains' predictive
  probabilities at ``T``), averaged over agents.

The linear and logistic problems run full local batches and messages of ``d = 6`` entries;
compression ratios are fractions of ``d``, so the same compressors serve every problem.

DIGing-SGLD against DE-SGLD, each with exact float32 messages; exact messages every
``τ`` ∈ {2, 5, 10} steps (local steps between); every compressor of
:mod:`dgsgld.communication` without and with CHOCO error feedback (CHOCO's step γ
:data:`CONSENSUS` for every compressor unless ``consensus`` sets another, not tuned to
each); event triggers (an agent sends when its message moved more than ``δ`` from the copy its
neighbours hold; ``δ`` one and three times the norm of a step's Langevin noise,
:func:`channels`); stragglers (each agent active at a step with probability ``q``); randomized
gossip (a random matching, or one random link, carries each round); and a deadline of
:data:`DEADLINE` simulated seconds. One step size per problem for every row (not tuned either).

Simulated time: every row runs with the clock :data:`CLOCK` (agent 0 computes 5 s a step, the
others 1 s, jittered by half; 0.1 s latency a round). Without a deadline the clock changes no
draw, only the seconds a row takes: a step waits for the slowest agent. The ``deadline`` row
goes on without the agents not done by :data:`DEADLINE` seconds (stragglers at that step).

Monte Carlo error: the standard error of each metric over the chains, by the delete-a-group
jackknife over :data:`GROUPS` groups of chains (``se² = (G−1)/G Σ_g (m₋g − m̄)²`` with ``m₋g``
the metric without group ``g``: for the BNN, of the predictive formed without them); it is
the error of the rows' comparison given the data set, which is fixed. Bytes: what each
agent sent over the ``T`` steps (:meth:`dgsgld.communication.Channel.bytes_sent`), averaged
over agents and chains (the same for every agent of the regular graph unless triggers or
stragglers make them differ). Rows and the configuration go to ``communication.json``, the
table to ``communication.md``, metric against bytes to ``communication.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import communication as comm
from dgsgld import evaluate
from dgsgld import networks as nets
from dgsgld.evaluate.plots import pyplot
from dgsgld.model.potential import Potential
from dgsgld.posteriors.problems import (
    linear_regression_problem,
    logistic_regression_problem,
    split_potentials,
)
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import DESGLD, DIGingSGLD

from . import digits as digits

__all__ = ["DIGITS", "DIGITS_SMALL", "GROUPS", "PROBLEMS", "channels",
           "communication_experiment", "compressors", "plot_communication", "table"]

#: Groups of chains of the jackknife standard errors.
GROUPS = 8
#: The simulated clock of every row: agent 0 five times slower than the others.
CLOCK = dict(compute=(5.0,) + (1.0,) * 19, jitter=0.5, latency=0.1)
#: The deadline row's deadline, seconds: the slow agent is done in time in about 18 % of steps.
DEADLINE = 3.0
METHODS = {cls.name: cls for cls in (DIGingSGLD, DESGLD)}
#: The problems, in the order they run (``communication_experiment(problems=...)`` picks some).
PROBLEMS = ("linear", "logistic", "digits")
#: The digits BNN's run (the other problems share ``_config``'s): the MLP's hidden ``width``
#: (64: 4810 parameters; 16: 1210), its own chains, steps, step size and mini-batch, on the
#: Dirichlet(``alpha``) label-skewed split of the training set.
DIGITS = {"width": 64, "num_chains": 32, "num_steps": 2000, "step_size": 0.001,
          "batch_size": 16, "alpha": 0.5}
#: ``--small``: a narrower MLP, as compressing messages of 4810 entries is slow on a CPU (with
#: 8 chains and 200 steps a top-k row took 4 times, a random-k row 18 times an exact row's
#: time on 2 cores).
DIGITS_SMALL = DIGITS | {"width": 16, "num_chains": 8, "num_steps": 200}


def compressors(small: bool) -> dict:
    """Label -> compressor for messages of any size ``d``: top-k and random-k keep the
    fraction ``f`` of the entries (``k = ⌈f d⌉``: at ``f = 1/3`` 2 of ``d = 6``, 404 of the
    ``small`` BNN's 1210, 1604 of the BNN's 4810); one ratio each with ``small``, three
    otherwise."""
    fractions = (Fraction(1, 3),) if small else (Fraction(1, 6), Fraction(1, 3), Fraction(1, 2))
    levels = (4,) if small else (1, 4, 16)
    out = {"exact": comm.identity()}
    out |= {f"top_k({f})": comm.top_k(float(f)) for f in fractions}
    out |= {f"random_k({f})": comm.random_k(float(f)) for f in fractions}
    out |= {f"quantize({s})": comm.quantize(s) for s in levels}
    out["sign"] = comm.sign()
    return out


def channels(small: bool, consensus: float, noise: float = 1.0) -> list[tuple[str, comm.Channel]]:
    """``(label, channel)`` of every row: exact messages every step and every ``τ`` steps,
    each compressor without and with error feedback, event triggers and stragglers.

    The triggers' thresholds are ``δ = c · noise`` for ``c`` ∈ {1, 3}, with ``noise`` the norm
    ``√(2ηd)`` of one step's Langevin noise in a message of ``d`` entries: one absolute δ
    never holds a message of the BNN (its noise alone moves it by ``√(2ηd) ≈ 1.6`` a step)
    and always holds one of a small problem."""
    out = [("exact", comm.Channel())]
    out += [(f"exact, every {tau}", comm.Channel(every=tau)) for tau in (2, 5, 10)]
    for label, compressor in compressors(small).items():
        if label != "exact":
            out += [(label, comm.Channel(compressor)),
                    (label, comm.Channel(compressor, error_feedback=True,
                                         consensus=consensus))]
    out += [(f"trigger δ={c}·√(2ηd)", comm.Channel(threshold=c * noise)) for c in (1, 3)]
    out += [(f"stragglers q={q:g}", comm.Channel(activity=q)) for q in (0.9, 0.5)]
    out += [("gossip, matching", comm.Channel(gossip="matching")),
            ("gossip, one link", comm.Channel(gossip="edge")),
            (f"deadline {DEADLINE:g} s", comm.Channel(clock=comm.Clock(**CLOCK,
                                                                       deadline=DEADLINE)))]
    clock = comm.Clock(**CLOCK)
    return [(label, channel if channel.clock is not None
             else eqx.tree_at(lambda c: c.clock, channel, clock, is_leaf=lambda x: x is None))
            for label, channel in out]


#: CHOCO's consensus step γ of every error-feedback row unless ``consensus`` says otherwise.
CONSENSUS = 0.3


def _config(small: bool, seed: int, problems, consensus: float) -> dict:
    return {"num_agents": 20, "degree": 4, "num_chains": 64 if small else 200,
            "num_steps": 4000 if small else 8000, "step_size": 0.001,
            "logistic_step_size": 0.002, "consensus": consensus, "groups": GROUPS,
            "splits": ["iid"] if small else ["iid", "sorted"], "seed": seed,
            "problems": list(problems), "digits": dict(DIGITS_SMALL if small else DIGITS)}


class _Problem(NamedTuple):
    """One problem's rows: ``init(key, num_chains, num_agents)`` gives starting positions
    (leaves ``(C, N, ...)``), ``score(final, groups)`` maps the final positions (leaves
    ``(C, N, ...)``) to ``{metric: (value, jackknife standard error)}`` over ``metrics``
    (the first is plotted)."""

    name: str
    potential: Potential
    init: Callable
    score: Callable
    metrics: tuple[str, ...]
    step_size: float
    num_chains: int
    num_steps: int


def _gaussian_init(dim: int) -> Callable:
    return lambda key, chains, agents: jax.random.normal(key, (chains, agents, dim))


def _problems(cfg: dict):
    """The :class:`_Problem` of every problem the rows run on."""
    n, chains, steps = cfg["num_agents"], cfg["num_chains"], cfg["num_steps"]
    if "linear" in cfg["problems"]:
        linear = linear_regression_problem(cfg["seed"], num_agents=n)
        for split, potential in split_potentials(linear).items():
            if split in cfg["splits"]:
                yield _Problem(f"linear, {split}", potential, _gaussian_init(linear.dim),
                               partial(_score, linear),
                               ("w2",), cfg["step_size"], chains, steps)
    if "logistic" in cfg["problems"]:
        logistic = logistic_regression_problem(cfg["seed"], num_agents=n, partition="by_label")
        yield _Problem("logistic, by label", logistic.potential(), _gaussian_init(logistic.dim),
                       partial(_score, logistic), ("accuracy",),
                       cfg["logistic_step_size"], chains, steps)
    if "digits" in cfg["problems"]:
        yield _digits_problem(cfg)


def _digits_problem(cfg: dict) -> _Problem:
    """The digits BNN of :mod:`experiments.digits` (its data protocol, model and
    prior) on the Dirichlet label-skewed split across ``num_agents`` agents; every agent of
    every chain starts from its own draw of the MLP's initialization."""
    d = cfg["digits"]
    task = digits.digits_task(cfg["seed"], width=d["width"])
    split = digits.make_splits(task, digits.BenchmarkConfig(
        num_agents=cfg["num_agents"], alphas=(d["alpha"],), batch_size=d["batch_size"],
        seed=cfg["seed"]))[f"dirichlet({d['alpha']})"]

    def init(key, chains, agents):
        params = jax.vmap(task.init)(jax.random.split(key, chains * agents))
        return jax.tree.map(lambda a: a.reshape(chains, agents, *a.shape[1:]), params)

    return _Problem(f"digits BNN, dirichlet({d['alpha']})", task.potential(split, d["batch_size"]),
                    init, partial(_predictive_score, task),
                    ("nll", "accuracy"), d["step_size"], d["num_chains"], d["num_steps"])


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


def _score(problem, final: np.ndarray, groups: int) -> dict:
    """``{metric: (value, jackknife standard error)}`` of the final positions ``(C, N, d)``:
    W2 with an exact posterior, else test accuracy."""
    if problem.posterior_mean is not None:
        mean, cov = problem.posterior_mean, problem.posterior_cov
        full = float(np.mean(np.asarray(evaluate.per_agent_w2(final[:, None], mean, cov))))
        parts = np.asarray(evaluate.per_agent_w2(_leave_group_out(final, groups), mean, cov))
        return {"w2": (full, _jackknife(parts.mean(axis=1)))}
    acc = np.asarray(problem.test_accuracy(jnp.asarray(final)), np.float64)     # (C, N)
    full = float(acc.mean())
    return {"accuracy": (full, _jackknife(_leave_group_out(acc, groups).mean(axis=(0, 2))))}


def _predictive_score(task: digits.Task, final, groups: int) -> dict:
    """Test NLL and accuracy of each agent's posterior predictive (the mean of its chains'
    predictive probabilities at ``T``), averaged over agents, with jackknife standard errors
    (each group's predictive formed without that group's chains); ``final`` leaves
    ``(C, N, ...)``."""
    points, labels = jnp.asarray(task.test[0]), jnp.asarray(task.test[1])
    log_probs = np.asarray(jax.vmap(jax.vmap(lambda p: task.outputs(p, points)))(final))

    def agent_mean(samples):            # (S, N, P, K) draws of each agent's predictive
        agents, _ = digits._all_scores(evaluate.log_predictive(samples, axis=0), labels, None)
        return {k: float(np.mean(agents[k])) for k in ("nll", "accuracy")}

    full = agent_mean(log_probs)
    parts = _leave_group_out(log_probs, groups)                  # (C − C/G, G, N, P, K)
    left = [agent_mean(parts[:, g]) for g in range(groups)]
    return {k: (full[k], _jackknife(np.array([m[k] for m in left]))) for k in full}


def communication_experiment(out: str | Path, *, small: bool = False, seed: int = 0,
                             plot: bool = True, logger: Callable | None = print,
                             problems=PROBLEMS, only: Collection[str] | None = None,
                             consensus: float = CONSENSUS) -> list[dict]:
    """Run every row, write ``communication.json`` (after every row: ``config["complete"]``
    is False until the last), ``communication.md`` and (``plot``) ``communication.png`` into
    ``out``, and return the rows (dicts: problem, method,
    channel, error_feedback, bytes_per_agent, bytes_per_agent_step, seconds,
    seconds_per_step, metric ("w2", "accuracy" or, for the digits BNN, "nll"), value and se
    (``None`` where a chain diverged), diverged; the digits BNN's rows also hold accuracy
    and accuracy_se). ``problems``: any of :data:`PROBLEMS`; ``only``: the channel labels to run
    (as in the tables, e.g. ``"exact"``, ``"top_k(1/3)"`` with and without error feedback;
    ``None``: all); ``consensus``: CHOCO's step γ ∈ (0, 1] of the error-feedback rows (each
    such row records it)."""
    labels = list(dict.fromkeys(label for label, _ in channels(small, consensus, 1.0)))
    unknown = set(problems) - set(PROBLEMS)
    if unknown or not problems:
        raise ValueError(f"`problems` must name some of {PROBLEMS}; got {problems!r}.")
    if "digits" in problems:            # before any row runs, not after the others' minutes
        digits._sklearn("datasets")
    if only is not None:
        if isinstance(only, str) or not set(only) <= set(labels):
            raise ValueError(f"`only` must be a collection of channel labels among {labels}; "
                             f"got {only!r}.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = (_config(small, seed, problems, float(consensus))
           | {"only": None if only is None else list(only)})
    mixing = nets.random_regular(cfg["num_agents"], cfg["degree"], seed)
    key = jax.random.key(seed)
    rows, start = [], time.perf_counter()
    for problem in _problems(cfg):
        steps = problem.num_steps
        keep = Output(thin=steps, positions=True)
        init = problem.init(jax.random.fold_in(key, 1), problem.num_chains, cfg["num_agents"])
        dim = sum(int(np.prod(leaf.shape[2:])) for leaf in jax.tree.leaves(init))
        noise = float(np.sqrt(2 * problem.step_size * dim))
        for method, make in METHODS.items():
            for label, channel in channels(small, cfg["consensus"], noise=noise):
                if only is not None and label not in only:
                    continue
                ef = channel.error_feedback
                trace = sample(make(problem.step_size), problem.potential, mixing, init, key,
                               steps, output=keep, channel=channel, on_divergence="flag")
                sent = channel.bytes_sent(trace.state)        # (C, N)
                diverged = bool(np.asarray(trace.diverged).any())
                scores = dict.fromkeys(problem.metrics, (None, None))
                if not diverged:
                    final = jax.tree.map(lambda a: np.asarray(a[:, -1]), trace.positions)
                    scores = problem.score(final, cfg["groups"])
                seconds = float(np.asarray(comm.elapsed_time(trace.state)).mean())
                kind, *others = problem.metrics
                row = {"problem": problem.name, "method": method, "channel": label,
                       "error_feedback": ef, "bytes_per_agent": float(sent.mean()),
                       "bytes_per_agent_step": float(sent.mean()) / steps,
                       "seconds": seconds, "seconds_per_step": seconds / steps, "metric": kind,
                       "value": scores[kind][0], "se": scores[kind][1], "diverged": diverged,
                       "threshold": channel.threshold,
                       "consensus": channel.consensus if ef else None}
                for other in others:
                    row[other], row[f"{other}_se"] = scores[other]
                rows.append(row)
                _save(out, cfg | {"seconds": time.perf_counter() - start, "complete": False},
                      rows)
                if logger is not None:
                    logger(f"{problem.name:18s} {method:11s} {label:16s} EF={ef!s:5s} "
                           f"bytes/agent/step {row['bytes_per_agent_step']:7.1f}  "
                           f"s/step {row['seconds_per_step']:5.2f}  "
                           + "  ".join(f"{m} {_cell(row, m)}" for m in problem.metrics))
    _save(out, cfg | {"seconds": time.perf_counter() - start, "complete": True}, rows)
    (out / "communication.md").write_text(table(rows))
    if plot:
        plot_communication(rows, out / "communication.png")
    return rows


def _save(out: Path, cfg: dict, rows: list[dict]) -> None:
    """``communication.json`` with the rows so far (after every row, so that a long run
    stopped midway keeps them; ``config["complete"]`` tells whether every row ran)."""
    part = out / "communication.json.part"
    part.write_text(json.dumps({"config": cfg, "rows": rows}, indent=1))
    part.replace(out / "communication.json")


#: Top of the figure's NLL axis: twice the uniform predictive's ln 10, so that rows whose NLL
#: blew up do not squeeze the others.
NLL_TOP = 2 * np.log(10)
#: What each metric is, in the tables and on the figure's axes.
_METRIC_NAMES = {"w2": "W2 to the posterior", "accuracy": "test accuracy",
                 "nll": "test NLL of the predictive"}


def _metrics(row: dict) -> list[str]:
    """The metrics of a row, the plotted one first."""
    return [row["metric"]] + [m for m in _METRIC_NAMES if m != row["metric"] and m in row]


def table(rows: list[dict]) -> str:
    """Markdown: per problem, one line per channel and error feedback, the simulated seconds
    per step (of DIGing-SGLD's run; the clock draws the same for both methods), bytes per
    agent and step per method and each method's metrics ± their jackknife standard errors."""
    lines = []
    for problem in dict.fromkeys(r["problem"] for r in rows):
        sub = [r for r in rows if r["problem"] == problem]
        kinds = _metrics(sub[0])
        what = " and ".join(_METRIC_NAMES[m] for m in kinds).replace(" to the posterior", "")
        head = ["channel", "EF", "simulated s/step"]
        for method, short in zip(METHODS, ("DIGing", "DE")):
            head += [f"bytes/agent/step {short}"] + (
                [method] if len(kinds) == 1 else [f"{method} {m.replace('nll', 'NLL')}"
                                                  for m in kinds])
        lines += [f"**{problem}** ({what} at T; ± jackknife standard error over chains)", "",
                  "| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
        index = {(r["method"],) + _row_key(r): r for r in sub}
        for k in dict.fromkeys(_row_key(r) for r in sub):
            first = index.get((next(iter(METHODS)),) + k)
            cells = ["" if first is None else f"{first['seconds_per_step']:.2f}"]
            for m in METHODS:
                r = index.get((m,) + k)
                cells += [""] * (1 + len(kinds)) if r is None else (
                    [f"{r['bytes_per_agent_step']:.1f}"] + [_cell(r, kind) for kind in kinds])
            ef = "no" if not k[1] else "yes" if k[2] == CONSENSUS else f"yes, γ = {k[2]:g}"
            lines.append(f"| {k[0]} | {ef} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _row_key(row: dict) -> tuple:
    """``(channel, error_feedback, γ)`` of a row: its line in the table (γ ``None`` without
    error feedback; rows written before γ was recorded ran with :data:`CONSENSUS`)."""
    ef = row["error_feedback"]
    return row["channel"], ef, row.get("consensus", CONSENSUS) if ef else None


def _cell(row: dict, metric: str) -> str:
    """``value ± se`` of ``metric`` in ``row``, or "diverged"."""
    value, se = ((row["value"], row["se"]) if metric == row["metric"]
                 else (row[metric], row[f"{metric}_se"]))
    if value is None:
        return "diverged"
    if abs(value) >= 1e4:             # a blown-up row: its size, not its digits
        return f"{value:.2g} ± {se:.1g}"
    digits = 4 if metric == "w2" else 3
    return f"{value:.{digits}f} ± {se:.{digits}f}"


def plot_communication(rows: list[dict], path: str | Path) -> Path:
    """Per problem, two panels: the metric (± its standard error) against bytes per agent and
    step (top) and against the simulated seconds of the run (bottom), a colour per method,
    filled markers with error feedback. The NLL axis stops at :data:`NLL_TOP` (rows above
    it are off the plot)."""
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
        ax.set(xscale="log", yscale="linear" if kind == "accuracy" else "log",
               xlabel=xlabel, title=problem, ylabel=_METRIC_NAMES[kind])
        if kind == "nll":
            ax.set_ylim(top=NLL_TOP)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
