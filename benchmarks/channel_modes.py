"""When agents talk: W2 against bytes for random rounds, random links, event triggers and
stragglers, in the setting of ``dgsgld reproduce communication --small``.

``python -m benchmarks.channel_modes [--out FILE.md]``. The paper's linear regression
(``N = 20``, ``d = 6``, the split sorted by response: heterogeneous agents), a random
4-regular graph, ``η = 0.001``, 64 chains from ``N(0, I)``, 4000 iterations, one seed;
DIGing-SGLD and DE-SGLD with exact messages and each mode of
:class:`dgsgld.communication.Channel` that decides when messages are sent. Metric: the agents'
mean W2 between the Gaussian fit of the chains at the last iteration and the exact posterior
(its Monte Carlo floor with 64 chains is about 0.049, and no standard error over seeds is
computed: differences below about 0.01 are not resolved).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np

from benchmarks.harness import stream_table
from dgsgld import communication as comm
from dgsgld import evaluate
from dgsgld import networks as nets
from dgsgld.posteriors.problems import linear_regression_problem, split_potentials
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import DESGLD, DIGingSGLD

CHANNELS = {
    "exact": comm.Channel(),
    "links up w.p. 0.5": comm.Channel(probability=0.5, per_link=True),
    "rounds w.p. 0.5": comm.Channel(probability=0.5),
    "event δ = 0.1": comm.Channel(threshold=0.1),
    "event δ = 0.3": comm.Channel(threshold=0.3),
    "event δ = 1": comm.Channel(threshold=1.0),
    "event δx = 0.3, y every round": comm.Channel(threshold={"position": 0.3}),
    "event δx = 0.3, δy = 3": comm.Channel(threshold={"position": 0.3, "tracker": 3.0}),
    "stragglers q = 0.8": comm.Channel(activity=0.8),
    "stragglers q = 0.5": comm.Channel(activity=0.5),
    "gossip, one random link": comm.Channel(gossip="edge"),
    "gossip, random matching": comm.Channel(gossip="matching"),
}


def _setting(seed: int, num_agents: int, num_chains: int):
    """``(problem, 4-regular graph, key, starts, sorted-split potential)``."""
    problem = linear_regression_problem(seed, num_agents=num_agents)
    key = jax.random.key(seed)
    init = jax.random.normal(jax.random.fold_in(key, 1), (num_chains, num_agents, problem.dim))
    return (problem, nets.random_regular(num_agents, 4, seed), key, init,
            split_potentials(problem)["sorted"])


def rows(seed: int = 0, num_agents: int = 20, num_chains: int = 64, num_steps: int = 4000,
         only: str | None = None):
    """``(label, [(bytes per agent and step, W2) for DIGing-SGLD, DE-SGLD])`` per channel
    (those whose label contains ``only``, if given)."""
    problem, mixing, key, init, potential = _setting(seed, num_agents, num_chains)
    out = []
    for label, channel in CHANNELS.items():
        if only is not None and only not in label:
            continue
        cells = []
        for make in (DIGingSGLD, DESGLD):
            trace = sample(make(0.001), potential, mixing, init, key, num_steps,
                           output=Output(thin=num_steps, positions=True), channel=channel,
                           on_divergence="flag")
            w2 = np.asarray(evaluate.per_agent_w2(trace.positions[:, -1:],
                                                  problem.posterior_mean, problem.posterior_cov))
            cells.append((float(channel.bytes_sent(trace.state).mean()) / num_steps,
                          float(w2.mean())))
        out.append((label, cells))
    return out


def _clocks(num_agents: int) -> dict:
    """Agent 0 five times slower than the others, compute times jittered by half."""
    compute = (5.0,) + (1.0,) * (num_agents - 1)
    clock = lambda deadline: comm.Clock(compute=compute, jitter=0.5, latency=0.1,  # noqa: E731
                                        deadline=deadline)
    return {"wait for every agent": comm.Channel(clock=clock(None)),
            "deadline 3 s": comm.Channel(clock=clock(3.0)),
            "deadline 1.5 s": comm.Channel(clock=clock(1.5))}


def clock_rows(seed: int = 0, num_agents: int = 20, num_chains: int = 64,
               num_steps: int = 4000, budget: float = 2000.0, every: int = 100):
    """``(label, [(simulated s per step, W2 after ``budget`` simulated seconds, W2 at the
    end) for DIGing-SGLD, DE-SGLD])`` per clock of :func:`_clocks`; W2 is read every
    ``every`` iterations, at the first whose mean elapsed time over chains reaches
    ``budget`` (the last if none does)."""
    problem, mixing, key, init, potential = _setting(seed, num_agents, num_chains)
    out = []
    for label, channel in _clocks(num_agents).items():
        cells = []
        for make in (DIGingSGLD, DESGLD):
            trace = sample(make(0.001), potential, mixing, init, key, num_steps,
                           output=Output(thin=every, trace_fn=comm.elapsed_time,
                                         positions=True),
                           channel=channel, on_divergence="flag")
            w2 = np.asarray(evaluate.per_agent_w2(trace.positions, problem.posterior_mean,
                                                  problem.posterior_cov)).mean(1)
            elapsed = np.asarray(trace.values).mean(0)
            at = min(int(np.searchsorted(elapsed, budget)), len(elapsed) - 1)
            cells.append((float(elapsed[-1]) / num_steps, float(w2[at]), float(w2[-1])))
        out.append((label, cells))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", default=None, help="run the channels whose label has this")
    parser.add_argument("--clock", action="store_true",
                        help="the simulated-clock table instead (agent 0 five times slower)")
    args = parser.parse_args(argv)
    if args.clock:
        stream_table(["| clock | simulated s/step DIGing / DE | W2 at 2000 s DIGing / DE | "
                      "W2 at 4000 steps DIGing / DE |", "|---|---:|---:|---:|"],
                     (f"| {label} | {s1:.2f} / {s2:.2f} | {a1:.4f} / {a2:.4f} | "
                      f"{e1:.4f} / {e2:.4f} |"
                      for label, ((s1, a1, e1), (s2, a2, e2)) in clock_rows()), args.out)
        return
    stream_table(["| channel | bytes/agent/step DIGing / DE | W2 DIGing-SGLD | W2 DE-SGLD |",
                  "|---|---:|---:|---:|"],
                 (f"| {label} | {b_dig:.1f} / {b_de:.1f} | {w_dig:.4f} | {w_de:.4f} |"
                  for label, ((b_dig, w_dig), (b_de, w_de)) in rows(only=args.only)), args.out)


if __name__ == "__main__":
    main()
