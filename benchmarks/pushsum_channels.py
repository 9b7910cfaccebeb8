"""Push-sum samplers through communication channels on directed networks: W2 against bytes.

``python -m benchmarks.pushsum_channels [--out FILE.md]``. The paper's linear regression
(``N = 16``, 96 data, ``d = 6``, the split sorted by response: heterogeneous agents) on the directed
barbell (``P = 50``) and the complete digraph, ``η = 0.001``, 128 chains from ``N(0, I)``,
2000 iterations, one seed; Push-DIGing-SGLD and push-sum SGLD (constant step) with exact
messages and the channel modes that change the used matrices (one-way links up with
probability ``p``, stragglers, communication every τ steps) or the masses (top-k with and
without error feedback; the weights always go exact). Columns: bytes per agent and step, the
agents' mean W2 between the Gaussian fit of the chains at the last iteration and the exact
posterior (Monte Carlo floor with 128 chains about 0.04; one seed, so differences below about
0.01 are not resolved; ``inf`` where a chain left the finite numbers), the smallest push-sum
weight ``v`` over chains and agents at the end, and how many chains reached ``|x| > 100``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import networkx as nx
import numpy as np

from benchmarks.harness import stream_table
from dgsgld import communication as comm
from dgsgld import evaluate
from dgsgld import networks as nets
from dgsgld.posteriors.problems import linear_regression_problem, split_potentials
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import PushDIGingSGLD, PushSumSGLD

CHANNELS = {
    "exact": comm.Channel(),
    "one-way links up w.p. 0.8": comm.Channel(probability=0.8, per_link=True),
    "one-way links up w.p. 0.5": comm.Channel(probability=0.5, per_link=True),
    "stragglers q = 0.5": comm.Channel(activity=0.5),
    "every 5 steps": comm.Channel(every=5),
    "top-k 0.25": comm.Channel(comm.top_k(0.25)),
    "top-k 0.25, error feedback": comm.Channel(comm.top_k(0.25), error_feedback=True,
                                               consensus=0.5),
}


def networks(num_agents: int):
    return {"directed barbell": nets.directed_barbell(num_agents, period=50, seed=0),
            "complete digraph": nets.from_digraph(nx.complete_graph(num_agents, nx.DiGraph))}


def rows(seed: int = 0, num_agents: int = 16, num_chains: int = 128, num_steps: int = 2000):
    """``(network, channel, [(bytes/agent/step, W2, min v, blown-up chains)] per sampler)``."""
    problem = linear_regression_problem(seed, num_agents=num_agents, num_samples=96)
    key = jax.random.key(seed)
    init = jax.random.normal(jax.random.fold_in(key, 1), (num_chains, num_agents, problem.dim))
    potential = split_potentials(problem)["sorted"]
    for net_name, mixing in networks(num_agents).items():
        for label, channel in CHANNELS.items():
            cells = []
            for make in (PushDIGingSGLD, PushSumSGLD):
                trace = sample(make(0.001), potential, mixing, init, key, num_steps,
                               output=Output(thin=num_steps, positions=True), channel=channel,
                               on_divergence="flag")
                last = np.asarray(trace.positions[:, -1:], np.float64)
                finite = np.isfinite(last).all()
                w2 = float(np.asarray(evaluate.per_agent_w2(
                    last, problem.posterior_mean, problem.posterior_cov)).mean()) \
                    if finite else float("inf")
                blown = int((~(np.abs(last) <= 100)).any(axis=(1, 2, 3)).sum())
                cells.append((float(channel.bytes_sent(trace.state).mean()) / num_steps, w2,
                              float(np.asarray(trace.state.weight).min()), blown))
            yield net_name, label, cells


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    stream_table(["| network | channel | B/agent/step Push-DIGing / push-sum | W2 "
                  "Push-DIGing-SGLD | W2 push-sum SGLD | min v | chains with \\|x\\| > 100 |",
                  "|---|---|---:|---:|---:|---:|---:|"],
                 (f"| {net} | {label} | {b1:.1f} / {b2:.1f} | {w1:.4f} | {w2:.4f} | "
                  f"{min(v1, v2):.3f} | {n1} / {n2} |"
                  for net, label, ((b1, w1, v1, n1), (b2, w2, v2, n2)) in rows()), args.out)

if __name__ == "__main__":
    main()
