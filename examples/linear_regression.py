"""Bayesian linear regression over a time-varying network, written from the public API.

Each of N = 20 agents holds 5 of n = 100 samples of y = zᵀx + noise (the paper's §4.1). The
posterior is Gaussian with a closed form, so we can measure how close every agent's samples
get: the W2 distance between the Gaussian fit of the chains and N(m̂, Σ̂).

    python examples/linear_regression.py            # 200 chains, 100 iterations
    python examples/linear_regression.py --small    # a few seconds
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import evaluate, networks


def log_likelihood(x, datum):
    """One datum (z, y) with unit noise variance."""
    z, y = datum
    return -0.5 * (z @ x - y) ** 2


def main(small: bool = False) -> dict:
    num_chains, num_steps = (40, 60) if small else (200, 100)
    num_agents, n_local, dim, prior_precision = 20, 5, 5, 0.1
    rng = np.random.default_rng(0)

    # Synthetic data (features with an intercept) and the exact posterior N(m̂, Σ̂).
    truth = rng.normal(size=dim + 1) / np.sqrt(prior_precision)
    z = np.concatenate(
        [rng.normal(size=(num_agents * n_local, dim)), np.ones((num_agents * n_local, 1))], axis=1
    )
    y = z @ truth + rng.normal(size=z.shape[0])
    post_cov = np.linalg.inv(z.T @ z + prior_precision * np.eye(dim + 1))
    post_mean = post_cov @ z.T @ y

    # Agent i holds rows 5i..5i+4: data leaves are (N, n_local, ...).
    data = (
        jnp.asarray(z.reshape(num_agents, n_local, dim + 1), jnp.float32),
        jnp.asarray(y.reshape(num_agents, n_local), jnp.float32),
    )
    potential = dgsgld.Potential(
        log_likelihood, lambda x: -0.5 * prior_precision * jnp.sum(x**2), data
    )
    schedule = networks.barbell(num_agents, period=50, seed=1)  # the paper's barbell
    init = jax.random.normal(jax.random.key(1), (num_chains, num_agents, dim + 1))

    results = {}
    for name, algorithm in [
        ("DIGing-SGLD", dgsgld.DIGingSGLD(0.008)),
        ("DE-SGLD", dgsgld.DESGLD(0.008)),
    ]:
        start = time.perf_counter()
        trace = dgsgld.sample(algorithm, potential, schedule, init, jax.random.key(2), num_steps)
        w2 = evaluate.per_agent_w2(
            trace.positions, jnp.asarray(post_mean, jnp.float32), jnp.asarray(post_cov, jnp.float32)
        )  # (T + 1, N)
        final = np.asarray(w2[-1])
        results[name] = final
        print(
            f"{name:<12} final W2 per agent: mean {final.mean():.3f}, min {final.min():.3f}, "
            f"max {final.max():.3f}   ({time.perf_counter() - start:.1f} s)"
        )
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(parser.parse_args().small)
