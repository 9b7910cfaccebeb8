"""Your own model end to end: dict-parameter logistic regression over a networkx graph.

Twelve agents on a random geometric graph hold uneven amounts of data (5 to 60 points each,
padded with `dgsgld.pad_agent_data`). The parameters are a dict ``{"w": (3,), "b": ()}``; the
step size comes from `dgsgld.tuning.propose_step_size` (a one-call pilot over a grid); the
summaries are pytree-aware (`dgsgld.evaluate.diagnostics`), and the trace is saved and loaded back
(`dgsgld.runner.traceio`).

Reference: the Laplace approximation of the pooled posterior (the MAP by Newton's method,
covariance the inverse Hessian there), computed in NumPy float64. With 300 points and 4
parameters the logistic posterior is close to Gaussian, so its mean and standard deviations
are a good yardstick; the table prints both for the network average and for every agent.

    python examples/own_model_networkx.py [--small] [--out DIR]
"""

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np

import dgsgld
from dgsgld import evaluate, networks, tuning
from dgsgld.runner import traceio as traceio

NUM_AGENTS, DIM, PRIOR_PRECISION = 12, 3, 1.0
TRUE = {"w": np.array([1.5, -1.0, 0.5]), "b": 0.3}


def log_likelihood(params, datum):
    x, y = datum
    t = x @ params["w"] + params["b"]
    return y * t - jax.nn.softplus(t)


def log_prior(params):  # N(0, I / PRIOR_PRECISION) on every parameter
    return -0.5 * PRIOR_PRECISION * sum(jnp.sum(p**2) for p in jax.tree.leaves(params))


def make_data(rng):
    """Per-agent data sets of uneven sizes, features shifted per agent (heterogeneous)."""
    sizes = rng.integers(5, 61, size=NUM_AGENTS)
    datasets = []
    for i, n in enumerate(sizes):
        x = rng.normal(size=(n, DIM)) + 0.5 * rng.normal(size=DIM)
        p = 1 / (1 + np.exp(-(x @ TRUE["w"] + TRUE["b"])))
        datasets.append((x.astype(np.float32), (rng.uniform(size=n) < p).astype(np.float32)))
    return datasets


def laplace_reference(datasets):
    """MAP and inverse Hessian of the pooled posterior over (w, b), float64."""
    x = np.concatenate([d[0] for d in datasets]).astype(np.float64)
    y = np.concatenate([d[1] for d in datasets]).astype(np.float64)
    z = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    theta = np.zeros(DIM + 1)
    for _ in range(50):  # Newton's method on the negative log-posterior
        p = 1 / (1 + np.exp(-z @ theta))
        grad = z.T @ (p - y) + PRIOR_PRECISION * theta
        hess = (z * (p * (1 - p))[:, None]).T @ z + PRIOR_PRECISION * np.eye(DIM + 1)
        theta -= np.linalg.solve(hess, grad)
    p = 1 / (1 + np.exp(-z @ theta))
    hess = (z * (p * (1 - p))[:, None]).T @ z + PRIOR_PRECISION * np.eye(DIM + 1)
    return theta, np.sqrt(np.diag(np.linalg.inv(hess)))


def flat(tree):
    """``{"w": (..., 3), "b": (...)}`` -> ``(..., 4)`` in the order (w, b)."""
    return np.concatenate([np.asarray(tree["w"]), np.asarray(tree["b"])[..., None]], axis=-1)


def main(small: bool = False, out: str | None = None) -> dict:
    num_chains, num_steps, burn_in = (16, 600, 200) if small else (64, 4000, 1000)
    rng = np.random.default_rng(0)
    datasets = make_data(rng)
    data, mask = dgsgld.pad_agent_data(datasets)
    potential = dgsgld.Potential(log_likelihood, log_prior, data, mask=mask)
    graph = nx.random_geometric_graph(NUM_AGENTS, 0.45, seed=3)
    if not nx.is_connected(graph):
        raise RuntimeError("the geometric graph is disconnected; change the seed or radius")
    network = networks.from_graph(graph)
    init = {
        "w": jnp.asarray(rng.normal(size=(num_chains, NUM_AGENTS, DIM)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(num_chains, NUM_AGENTS)), jnp.float32),
    }
    key_pilot, key_run = jax.random.split(jax.random.key(1))

    start = time.perf_counter()
    report = tuning.propose_step_size(dgsgld.DIGingSGLD, potential, network, init, key_pilot,
                                      num_steps=burn_in, sampling_steps=num_steps - burn_in)
    pilot_s = time.perf_counter() - start
    print(report.explain())
    eta = report.step_size
    tuning.check_step_size(eta, report)  # silent: the proposal is in range
    with warnings.catch_warnings(record=True) as caught:  # a step above the range is flagged
        warnings.simplefilter("always")
        tuning.check_step_size(0.02, report)
    for w in caught:
        print(f"check_step_size(0.02) warns: {w.message}")

    start = time.perf_counter()
    trace = dgsgld.sample(dgsgld.DIGingSGLD(eta), potential, network, init, key_run, num_steps,
                          # keeps iterations burn_in, burn_in + 10, ..., num_steps
                          output=dgsgld.Output(thin=10, burn_in=burn_in))
    jax.block_until_ready(trace.positions)
    run_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:  # save and reload the finished run
        trace = traceio.load_trace(traceio.save_trace(Path(tmp) / "run", trace,
                                                      metadata={"step_size": eta}))

    summary = evaluate.agent_summary(trace)  # dicts of (N, ...) arrays
    average = evaluate.network_average(trace.positions)   # dicts of (C, T, ...) arrays
    avg_summary = evaluate.agent_summary(average)  # leaves (...) per parameter
    ref_mean, ref_sd = laplace_reference(datasets)
    mean, sd = flat(summary["mean"]), flat(summary["sd"])            # (N, 4)
    avg_mean, avg_sd = flat(avg_summary["mean"]), flat(avg_summary["sd"])
    min_ess = min(float(np.min(v)) for v in jax.tree.leaves(summary["ess"]))
    max_rhat = max(float(np.max(v)) for v in jax.tree.leaves(summary["rhat"]))

    names = ["w0", "w1", "w2", "b"]
    print(f"\nstep size {eta:.4g} (pilot {pilot_s:.1f} s); run {num_chains} chains x "
          f"{num_steps} iterations in {run_s:.1f} s; local sizes {mask.sum(1).tolist()}")
    print("parameter  Laplace mean (sd)   network average mean (sd)   agents' mean range   "
          "agents' sd range")
    for j, name in enumerate(names):
        print(f"{name:>9}  {ref_mean[j]:7.3f} ({ref_sd[j]:.3f})   {avg_mean[j]:7.3f} "
              f"({avg_sd[j]:.3f})           [{mean[:, j].min():.3f}, {mean[:, j].max():.3f}]"
              f"     [{sd[:, j].min():.3f}, {sd[:, j].max():.3f}]")
    mean_err = np.max(np.abs(mean - ref_mean) / ref_sd)
    sd_ratio = sd / ref_sd
    print(f"largest |agent mean - Laplace mean| / Laplace sd: {mean_err:.3f}")
    print(f"agents' sd / Laplace sd: {sd_ratio.min():.3f} .. {sd_ratio.max():.3f}")
    print(f"min bulk ESS {min_ess:.1f}, max R-hat {max_rhat:.3f}")
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        traceio.save_trace(Path(out) / "own_model_networkx.npz", trace,
                           metadata={"step_size": eta})
    return {"step_size": eta, "mean_err": mean_err, "sd_ratio": sd_ratio, "min_ess": min_ess,
            "max_rhat": max_rhat}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    parser.add_argument("--out", default=None, help="folder for the saved trace")
    args = parser.parse_args()
    main(args.small, args.out)
