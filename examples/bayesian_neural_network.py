"""A custom model: a small Bayesian neural network (an `equinox` MLP) sampled by DIGing-SGLD.

Eight agents each hold 50 points of a two-moons classification set generated here; they
communicate over a time-varying one-peer exponential graph (each snapshot is disconnected,
three consecutive ones connect everyone). The parameters are the MLP's own pytree: the
log-likelihood rebuilds the model with `eqx.combine` and dgsgld treats every weight array as
a leaf with leading (chain, agent) axes.

We report the posterior predictive (probabilities averaged over chains, agents and the last
iterations): its test accuracy, each agent's own accuracy, and its uncertainty — the mean
predictive entropy on test points versus far-away points, where the network has seen no data.

    python examples/bayesian_neural_network.py [--small]
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import networks

NUM_AGENTS, LOCAL, WIDTH = 8, 50, 16


def two_moons(n: int, rng: np.random.Generator, noise: float = 0.15):
    """``n`` points of two interleaving half circles, labels in {0, 1}."""
    t = rng.uniform(0, np.pi, size=n)
    label = rng.integers(0, 2, size=n)
    x = np.where(label == 0, np.cos(t), 1 - np.cos(t))
    y = np.where(label == 0, np.sin(t), 0.5 - np.sin(t))
    pts = np.stack([x, y], axis=1) + noise * rng.normal(size=(n, 2))
    return ((pts - [0.5, 0.25]) / 0.8).astype(np.float32), label.astype(np.float32)


def make_model(key):
    return eqx.nn.MLP(2, "scalar", WIDTH, 2, activation=jnp.tanh, key=key)


# The static part of the model (activation, structure); the arrays are the parameters.
_, STATIC = eqx.partition(make_model(jax.random.key(0)), eqx.is_inexact_array)


def logit(params, x):
    return eqx.combine(params, STATIC)(x)


def log_likelihood(params, datum):
    x, y = datum
    t = logit(params, x)
    return y * t - jax.nn.softplus(t)


def log_prior(params):  # N(0, I) on every weight and bias
    return -0.5 * sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(params))


def main(small: bool = False) -> dict:
    num_chains, num_steps, keep = (8, 400, 100) if small else (32, 2000, 1000)
    thin = 20 if small else 50
    rng = np.random.default_rng(0)
    x, y = two_moons(NUM_AGENTS * LOCAL, rng)
    data = (jnp.asarray(x.reshape(NUM_AGENTS, LOCAL, 2)), jnp.asarray(y.reshape(NUM_AGENTS, LOCAL)))
    test_x, test_y = two_moons(1000, rng)
    angle = np.linspace(0, 2 * np.pi, 200, endpoint=False)
    far = (6 * np.stack([np.cos(angle), np.sin(angle)], axis=1)).astype(np.float32)

    potential = dgsgld.Potential(log_likelihood, log_prior, data, batch_size=10)
    schedule = networks.one_peer_exponential(NUM_AGENTS)
    # Initial parameters: an independent network per chain and agent, leaves (C, N, ...).
    keys = jax.random.split(jax.random.key(1), num_chains * NUM_AGENTS)
    params = eqx.filter(eqx.filter_vmap(make_model)(keys), eqx.is_inexact_array)
    init = jax.tree.map(lambda a: a.reshape(num_chains, NUM_AGENTS, *a.shape[1:]), params)

    trace = dgsgld.sample(
        dgsgld.DIGingSGLD(2e-3), potential, schedule, init, jax.random.key(2), num_steps,
        output=dgsgld.Output(thin=thin),
    )
    kept = jax.tree.map(lambda a: a[:, -(keep // thin) :], trace.positions)  # (C, K, N, ...)

    def predictive(points):  # probabilities (C, K, N, P)
        f = jax.vmap(jax.vmap(jax.vmap(lambda p: jax.vmap(lambda q: logit(p, q))(points))))
        return jax.nn.sigmoid(f(kept))

    p_test = predictive(jnp.asarray(test_x))
    mean_p = np.asarray(p_test.mean(axis=(0, 1, 2)))
    accuracy = float(((mean_p > 0.5) == (test_y > 0.5)).mean())
    per_agent = np.asarray(((p_test.mean(axis=(0, 1)) > 0.5) == (test_y > 0.5)).mean(axis=-1))

    def entropy(p):
        p = np.clip(p, 1e-6, 1 - 1e-6)
        return float(np.mean(-p * np.log(p) - (1 - p) * np.log(1 - p)))

    p_far = predictive(jnp.asarray(far))
    far_p = np.asarray(p_far.mean(axis=(0, 1, 2)))
    # Disagreement between posterior samples (std of the probability over chains, kept
    # iterations and agents): the epistemic part of the uncertainty.
    spread = lambda p: float(np.mean(np.asarray(p).reshape(-1, p.shape[-1]).std(axis=0)))
    result = {
        "accuracy": accuracy,
        "per_agent": per_agent,
        "entropy_test": entropy(mean_p),
        "entropy_far": entropy(far_p),
        "spread_test": spread(p_test),
        "spread_far": spread(p_far),
    }
    print(
        f"posterior predictive test accuracy {accuracy:.3f}; per agent "
        f"{per_agent.mean():.3f} (min {per_agent.min():.3f})"
    )
    print(
        f"mean predictive entropy: test points {result['entropy_test']:.3f} nats, far-away "
        f"points {result['entropy_far']:.3f} nats (max log 2 = 0.693)"
    )
    print(
        f"std of the probability across posterior samples: test points "
        f"{result['spread_test']:.3f}, far-away points {result['spread_far']:.3f}"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(parser.parse_args().small)
