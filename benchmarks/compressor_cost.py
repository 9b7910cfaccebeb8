"""What compressing messages costs a step, at the message sizes of the communication
experiment: ``d`` = 6 (the paper's linear problem), 1210 (the ``--small`` digits BNN) and 4810
(the full-size BNN).

``python -m benchmarks.compressor_cost [--out FILE.md] [--sizes 6 1210 4810]``. One
DIGing-SGLD step (two messages, ``x`` and ``y``) of 32 chains × 20 agents on a random
4-regular graph, on a Gaussian potential with one datum per agent (so the gradient is cheap
and the step is mostly its messages), through :func:`dgsgld.sample` with 10 steps per call.
Every channel of a size is timed in alternation with exact messages (one call of each per
round, :func:`benchmarks.harness.time_rounds`); the table gives the median wall time per step
and the median over rounds of the ratio to exact messages, which is what to compare on a
shared machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks.harness import round_ratio, stream_table, time_rounds
from dgsgld import communication as comm
from dgsgld import networks as nets
from dgsgld.model.potential import Potential
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import DIGingSGLD

AGENTS, CHAINS, STEPS = 20, 32, 10


def _mask(index, dim: int):
    """``(dim,)`` bool, true at ``index``."""
    return jnp.zeros((dim,), bool).at[index].set(True)


class _PermutedK(comm.RandomK):
    """random-k with its entries from a permutation, an earlier draw (the same law)."""

    def _kept(self, key, dim):
        return _mask(jax.random.permutation(key, dim)[:self.k(dim)], dim)


class _SortedTopK(comm.TopK):
    """top-k with its entries from ``lax.top_k``, the earlier selection (the same set)."""

    def _kept(self, v):
        return _mask(jax.lax.top_k(jnp.abs(v), self.k(v.shape[0]))[1], v.shape[0])


class _SortedRandomK(comm.RandomK):
    """random-k with its entries from ``lax.top_k`` of the keys, the earlier selection (the
    same draws)."""

    def _kept(self, key, dim):
        return _mask(jax.lax.top_k(jax.random.uniform(key, (dim,)), self.k(dim))[1], dim)


CHANNELS = {
    "top_k(1/3)": comm.Channel(comm.top_k(1 / 3)),
    "top_k(1/3), selection by lax.top_k": comm.Channel(_SortedTopK(1 / 3)),
    "random_k(1/3)": comm.Channel(comm.random_k(1 / 3)),
    "random_k(1/3), selection by lax.top_k": comm.Channel(_SortedRandomK(1 / 3)),
    "random_k(1/3), indices by permutation": comm.Channel(_PermutedK(1 / 3)),
    "quantize(4)": comm.Channel(comm.quantize(4)),
    "sign": comm.Channel(comm.sign()),
    "top_k(1/3), error feedback": comm.Channel(comm.top_k(1 / 3), error_feedback=True,
                                               consensus=0.3),
    "random_k(1/3), error feedback": comm.Channel(comm.random_k(1 / 3), error_feedback=True,
                                                  consensus=0.3),
}


def _run(dim: int, channel):
    """A callable running ``STEPS`` steps of DIGing-SGLD with ``channel`` at size ``dim``."""
    key = jax.random.key(0)
    data = jax.random.normal(key, (AGENTS, 1, dim))
    potential = Potential(lambda theta, datum: -0.5 * jnp.sum((theta - datum) ** 2),
                          lambda theta: -0.5 * jnp.sum(theta ** 2), data)
    mixing = nets.random_regular(AGENTS, 4, 0)
    init = jax.random.normal(jax.random.fold_in(key, 1), (CHAINS, AGENTS, dim))
    return lambda: sample(DIGingSGLD(0.001), potential, mixing, init, key, STEPS,
                          output=Output(thin=STEPS), channel=channel).state.position


def rows(sizes=(6, 1210, 4810), repeats: int = 5):
    """One Markdown line per size and channel: ms per step, and the ratio to exact messages."""
    for dim in sizes:
        fns = {"exact": _run(dim, comm.Channel())}
        fns |= {label: _run(dim, channel) for label, channel in CHANNELS.items()}
        times = time_rounds(fns, repeats)
        for label, timing in times.items():
            ratio = round_ratio(timing, times["exact"])
            yield (f"| {dim} | {label} | {1e3 * timing.median / STEPS:.2f} | {ratio:.1f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[6, 1210, 4810])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    stream_table(["# What compressing messages costs a step", "",
                  "`python -m benchmarks.compressor_cost --out benchmarks/compressor_cost.md`: "
                  f"one DIGing-SGLD step of {CHAINS} chains × {AGENTS} agents (2 messages of "
                  "`d` entries per agent) on a Gaussian potential, median of "
                  f"{args.repeats} calls of {STEPS} steps, each channel timed in alternation "
                  "with exact messages (× exact: the median of the per-round ratios). "
                  f"{jax.device_count()} {jax.default_backend().upper()} device(s).", "",
                  "| d | channel | ms per step | × exact |", "|---:|---|---:|---:|"],
                 rows(args.sizes, args.repeats), args.out)


if __name__ == "__main__":
    main()
