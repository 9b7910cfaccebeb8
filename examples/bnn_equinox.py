"""A Bayesian neural network written as an `eqx.nn.MLP`, sampled over 10 agents.

1-D regression, ``y = sin(2x) + 0.2 ε``, with inputs only in ``[-3, -1] ∪ [1, 3]``: no data in
the gap ``(-1, 1)`` nor beyond ``|x| > 3``. Ten agents on a ring each hold 16 points (agent
``i`` holds points from one side only: agents see different parts of the input range). The
posterior predictive spread of ``f(x)`` should be small where there are data and grow in the
gap between them: the script prints the sd of ``f(x)`` over posterior samples (chains, kept
iterations, agents) in the three regions, and with ``--out`` draws the predictive band.

The parameters are the MLP itself, passed directly as ``init``: its array leaves carry leading
``(chain, agent)`` axes (built with ``eqx.filter_vmap`` over keys); its other leaves (the
activation) are static, and the log-likelihood receives a whole ``eqx.nn.MLP``. The first half
of the run is `dgsgld.warmup`: it adapts a diagonal preconditioner (321 weights) and the step,
agreed by the agents over the ring, and the second half samples from the warmed-up state.
Diverged chains, if any, are dropped from the summaries with a warning (``diverged="drop"``).

    python examples/bnn_equinox.py [--small] [--out DIR]
"""

import argparse
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import evaluate, networks

NUM_AGENTS, LOCAL, WIDTH, NOISE = 10, 16, 16, 0.2


def make_model(key):
    return eqx.nn.MLP(1, "scalar", WIDTH, 2, activation=jnp.tanh, key=key)


def f(model, x):
    """The network's output at a scalar input ``x``."""
    return model(x[None])


def log_likelihood(model, datum):
    x, y = datum
    return -0.5 * ((f(model, x) - y) / NOISE) ** 2


def log_prior(model):  # N(0, I) on every weight and bias
    return -0.5 * sum(jnp.sum(w**2) for w in jax.tree.leaves(eqx.filter(model, eqx.is_array)))


def make_data(rng):
    """``(x, y)`` of shape ``(N, LOCAL)``; agents 0-4 hold x in [-3, -1], agents 5-9 [1, 3]."""
    side = np.where(np.arange(NUM_AGENTS) < NUM_AGENTS // 2, -1.0, 1.0)[:, None]
    x = side * rng.uniform(1.0, 3.0, size=(NUM_AGENTS, LOCAL))
    y = np.sin(2 * x) + NOISE * rng.normal(size=x.shape)
    return jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)


def main(small: bool = False, out: str | None = None) -> dict:
    num_chains, num_steps, burn_in, thin = (8, 8000, 4000, 50) if small else (32, 20000, 10000, 100)
    rng = np.random.default_rng(0)
    data = make_data(rng)
    potential = dgsgld.Potential(log_likelihood, log_prior, data)
    network = networks.ring(NUM_AGENTS)
    keys = jax.random.split(jax.random.key(1), num_chains * NUM_AGENTS)
    models = eqx.filter_vmap(make_model)(keys)  # one MLP per (chain, agent), leaves (C N, ...)
    init = jax.tree.map(lambda a: a.reshape(num_chains, NUM_AGENTS, *a.shape[1:])
                        if eqx.is_array(a) else a, models)  # an eqx.nn.MLP, leaves (C, N, ...)
    key_warm, key_run = jax.random.split(jax.random.key(2))

    start = time.perf_counter()
    sampler, state, report = dgsgld.warmup(dgsgld.DIGingSGLD, potential, network, init,
                                           key_warm, burn_in,
                                           sampling_steps=num_steps - burn_in)
    warm_s = time.perf_counter() - start
    print(report.explain())
    eta = report.step_size

    start = time.perf_counter()
    trace = dgsgld.sample(sampler, potential, network, state, key_run, num_steps - burn_in,
                          output=dgsgld.Output(thin=thin), on_divergence="warn")
    jax.block_until_ready(trace.positions)
    run_s = time.perf_counter() - start
    print(f"\nstep size {eta:.4g} in M's coordinates (warm-up of {burn_in} steps in "
          f"{warm_s:.1f} s); {num_chains} chains x {num_steps - burn_in} more iterations on "
          f"{NUM_AGENTS} agents in {run_s:.1f} s; {int(np.sum(trace.diverged))} chains diverged")

    summary = evaluate.agent_summary(trace, diverged="drop")
    worst_rhat = max(float(np.nanmax(v)) for v in jax.tree.leaves(summary["rhat"]))
    print(f"largest R-hat over all weights and agents {worst_rhat:.3f} (a BNN's weights are not "
          "identifiable: permutations and sign flips; judge it by its predictions)")

    ok = ~np.asarray(evaluate.diverged_chains(trace))
    # trace.positions is an eqx.nn.MLP whose array leaves are (C, K, N, ...): one network per
    # chain, kept iteration (after burn-in) and agent. Keep the non-diverged chains, flatten.
    kept = jax.tree.map(lambda a: a[ok].reshape(-1, *a.shape[3:])
                        if eqx.is_array(a) else a, trace.positions)
    grid = np.linspace(-5, 5, 101).astype(np.float32)
    fx = np.asarray(eqx.filter_vmap(lambda m: jax.vmap(lambda x: f(m, x))(jnp.asarray(grid)))(
        kept))
    fx = fx.reshape(-1, grid.size)  # (samples, grid)
    mean, sd = fx.mean(0), fx.std(0)
    ax = np.abs(grid)
    regions = {"data (1 <= |x| <= 3)": (ax >= 1) & (ax <= 3), "gap (|x| < 0.5)": ax < 0.5,
               "outside (|x| >= 4)": ax >= 4}
    result = {"step_size": eta}
    for name, where in regions.items():
        result[name.split()[0]] = float(sd[where].mean())
        print(f"predictive sd of f(x), {name}: {sd[where].mean():.3f}")
    inside = regions["data (1 <= |x| <= 3)"]
    rmse = float(np.sqrt(np.mean((mean[inside] - np.sin(2 * grid[inside])) ** 2)))
    result["rmse"] = rmse
    print(f"posterior-mean RMSE to sin(2x) where there are data: {rmse:.3f} (noise sd {NOISE})")
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        Path(out).mkdir(parents=True, exist_ok=True)
        fig, axis = plt.subplots(figsize=(6, 3.5))
        axis.fill_between(grid, mean - 2 * sd, mean + 2 * sd, alpha=0.3, label="±2 sd of f(x)")
        axis.plot(grid, mean, label="posterior mean")
        axis.plot(grid, np.sin(2 * grid), "k--", lw=1, label="sin(2x)")
        axis.scatter(np.ravel(data[0]), np.ravel(data[1]), s=4, c="k")
        axis.set_xlabel("x")
        axis.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(Path(out) / "bnn_equinox.png", dpi=120)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    parser.add_argument("--out", default=None, help="folder for the figure")
    args = parser.parse_args()
    main(args.small, args.out)
