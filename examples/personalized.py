"""Private parameters: per-agent intercepts that never leave their agent.

Eight agents each hold one group of a hierarchical regression, y ~ N(a_i + b u, 0.5²), with
their own intercept a_i ~ N(μ, 1) and a shared slope b and hyper-mean μ (both N(0, 2²)). The
intercepts are private: each agent samples its own with a plain Langevin step, and only the
shared (b, μ) are mixed over the ring and tracked by DIGing-SGLD. The joint posterior is
Gaussian, so every number printed is checked against its closed form.

    python examples/personalized.py            # 16 chains, 4000 iterations
    python examples/personalized.py --small    # a few seconds
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import networks


def main(small: bool = False) -> dict:
    num_chains, num_steps = (8, 2000) if small else (16, 4000)
    n_agents, n_local, sigma, tau = 8, 20, 0.5, 1.0
    rng = np.random.default_rng(0)
    u = rng.normal(size=(n_agents, n_local))
    a_true = 1.0 + tau * rng.normal(size=n_agents)
    y = a_true[:, None] + 0.7 * u + sigma * rng.normal(size=(n_agents, n_local))

    def log_likelihood(p, datum):                       # p: agent i's (φ, θ_i)
        u, y = datum
        return -0.5 * (y - p["intercept"] - p["slope"] * u) ** 2 / sigma**2

    def log_prior(p):                                   # log p(φ): split over the agents
        return -0.5 * (p["slope"] ** 2 + p["mu"] ** 2) / 2.0**2

    def log_agent_prior(p):                             # log p(θ_i | φ): agent i's own
        return -0.5 * (p["intercept"] - p["mu"]) ** 2 / tau**2

    potential = dgsgld.Potential(log_likelihood, log_prior, (jnp.asarray(u), jnp.asarray(y)),
                                 private=("intercept",), log_agent_prior=log_agent_prior)
    init = {k: jnp.zeros((num_chains, n_agents)) for k in ("intercept", "slope", "mu")}
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.002), potential, networks.ring(n_agents), init,
                          jax.random.key(1), num_steps,
                          output=dgsgld.Output(thin=10, burn_in=num_steps // 2))

    # The exact posterior of z = (slope, mu, a_1, ..., a_N): a Gaussian with precision A.
    dim = 2 + n_agents
    A, b = np.zeros((dim, dim)), np.zeros(dim)
    A[:2, :2] = np.eye(2) / 2.0**2
    for i in range(n_agents):
        v = np.zeros(dim)
        v[1], v[2 + i] = -1.0, 1.0
        A += np.outer(v, v) / tau**2                    # (a_i - mu)² / τ²
        for j in range(n_local):
            w = np.zeros(dim)
            w[0], w[2 + i] = u[i, j], 1.0
            A += np.outer(w, w) / sigma**2
            b += w * y[i, j] / sigma**2
    cov = np.linalg.inv(A)
    mean, sd = cov @ b, np.sqrt(np.diag(cov))
    sampled = {"slope": np.asarray(trace.positions["slope"]).mean(),
               "mu": np.asarray(trace.positions["mu"]).mean()}
    print(f"slope  sampled {sampled['slope']:.3f}  exact {mean[0]:.3f} ± {sd[0]:.3f}")
    print(f"mu     sampled {sampled['mu']:.3f}  exact {mean[1]:.3f} ± {sd[1]:.3f}")
    own = np.asarray(trace.positions["intercept"]).mean(axis=(0, 1))
    err = np.max(np.abs(own - mean[2:]) / sd[2:])
    print(f"intercepts: worst |sampled - exact| mean in posterior sds {err:.3f}")
    channel = dgsgld.communication.Channel()
    short = dgsgld.sample(dgsgld.DIGingSGLD(0.002), potential, networks.ring(n_agents), init,
                          jax.random.key(1), 10, channel=channel)
    per_step = float(channel.bytes_sent(short.state, potential).mean()) / 10
    print(f"bytes per agent and step {per_step:.1f} (the shared slope and mu only)")
    return {"sampled": sampled, "exact": mean, "intercept_error": err}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(**vars(parser.parse_args()))
