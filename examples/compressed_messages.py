"""Compressed messages: DIGing-SGLD with top-k messages, with and without error feedback.

Each of N = 16 agents on a ring holds 20 draws of y ~ N(x, I) in d = 10 dimensions; with the
prior N(0, I/λ) the posterior is N(Σ y / (n + λ), I / (n + λ)), so every agent's W2 to it is
exact. A channel sits on every message (positions and trackers); the run reports W2 against
the bytes each agent sent.

    python examples/compressed_messages.py            # 200 chains, 2000 iterations
    python examples/compressed_messages.py --small    # a few seconds
"""

import argparse

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np

import dgsgld
from dgsgld import communication as comm
from dgsgld import evaluate, networks


def log_likelihood(x, y):
    return -0.5 * jnp.sum((y - x) ** 2)


def main(small: bool = False) -> dict:
    num_chains, num_steps = (40, 400) if small else (200, 2000)
    num_agents, n_local, dim, prior_precision = 16, 20, 10, 1.0
    rng = np.random.default_rng(0)
    y = rng.normal(loc=rng.normal(size=dim), size=(num_agents, n_local, dim)).astype(np.float32)
    precision = num_agents * n_local + prior_precision
    post_mean = jnp.asarray(y.sum((0, 1)) / precision, jnp.float32)
    post_cov = jnp.eye(dim, dtype=jnp.float32) / precision

    potential = dgsgld.Potential(
        log_likelihood, lambda x: -0.5 * prior_precision * jnp.sum(x**2), jnp.asarray(y)
    )
    ring = networks.max_degree_weights(nx.to_numpy_array(nx.cycle_graph(num_agents)))  # 1/3 each
    init = 0.1 * jax.random.normal(jax.random.key(1), (num_chains, num_agents, dim))

    channels = {
        "exact": comm.Channel(),
        "top_k(0.2)": comm.Channel(comm.top_k(0.2)),
        "top_k(0.2) + error feedback": comm.Channel(comm.top_k(0.2), error_feedback=True,
                                                    consensus=0.5),
        "exact, every 5 steps": comm.Channel(every=5),
    }
    results = {}
    for name, channel in channels.items():
        trace = dgsgld.sample(dgsgld.DIGingSGLD(1e-3), potential, ring, init,
                              jax.random.key(2), num_steps, channel=channel,
                              on_divergence="flag")
        final = trace.positions[:, -1:]                                   # (C, 1, N, d)
        w2 = float(np.asarray(evaluate.per_agent_w2(final, post_mean, post_cov)).mean())
        kilobytes = float(channel.bytes_sent(trace.state).mean()) / 1e3  # per agent
        results[name] = (w2, kilobytes)
        print(f"{name:<28} W2 {w2:.4f}   sent {kilobytes:9.1f} kB per agent")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(parser.parse_args().small)
