"""A numpyro model sampled by DIGing-SGLD over a networkx graph, against numpyro's NUTS.

Poisson regression written as an ordinary numpyro model: counts ``y ~ Poisson(exp(α + x β))``
with ``N(0, 1)`` priors and a deterministic site ``baseline = exp(α)``. The data are shuffled
and split evenly across agents on a random geometric graph (`dgsgld.model.data.split_iid`);
`dgsgld.Potential.from_numpyro` finds the plate over the data and gives the per-datum
log-likelihood and the prior on numpyro's unconstrained space, `dgsgld.model.ppl.init_params` the
starting points and `dgsgld.model.ppl.constrain` the sites of the draws. The per-agent W2 distance
to a Gaussian fit of the NUTS draws is streamed during the run; ``--out DIR`` plots it against
iteration with the network drawn at its agents' positions (`dgsgld.evaluate.plots`).

    python examples/numpyro_poisson.py [--small] [--out DIR]
"""

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

import dgsgld
from dgsgld import evaluate, networks
from dgsgld.model import data as data_split
from dgsgld.model import ppl as ppl

DIM = 3
TRUE_ALPHA, TRUE_BETA = 0.5, np.array([0.4, -0.3, 0.2])


def model(x, y=None):
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 1.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[-1]]).to_event(1))
    numpyro.deterministic("baseline", jnp.exp(alpha))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(alpha + x @ beta)), obs=y)


def flat(params):
    """``{"alpha": (..., ), "beta": (..., 3)}`` -> ``(..., 4)``, in the order (alpha, beta)."""
    return jnp.concatenate([params["alpha"][..., None], params["beta"]], axis=-1)


def main(small: bool = False, out: str | None = None) -> dict:
    num_agents, num_data = (8, 160) if small else (20, 400)
    num_chains, num_steps, burn_in, thin = (16, 1500, 500, 10) if small else (64, 6000, 2000, 10)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(num_data, DIM)).astype(np.float32)
    y = rng.poisson(np.exp(TRUE_ALPHA + x @ TRUE_BETA)).astype(np.float32)

    start = time.perf_counter()
    mcmc = MCMC(NUTS(model), num_warmup=500, num_samples=1000 if small else 2000,
                num_chains=2, chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.key(0), x=x, y=y)
    nuts = mcmc.get_samples(group_by_chain=True)  # leaves (2, draws, ...)
    nuts_s = time.perf_counter() - start
    ref = np.asarray(flat(nuts)).reshape(-1, DIM + 1)

    split = data_split.split_iid({"x": x, "y": y}, num_agents, seed=1)  # leaves (N, n_i, ...)
    potential = dgsgld.Potential.from_numpyro(model, split.data, mask=split.mask)
    graph = nx.random_geometric_graph(num_agents, 0.5, seed=3)
    if not nx.is_connected(graph):
        raise RuntimeError("the geometric graph is disconnected; change the seed or radius")
    network = networks.from_graph(graph)
    init = ppl.init_params(potential, jax.random.key(1), num_chains, radius=0.5)
    w2 = evaluate.streamed_per_agent_w2(ref.mean(0), np.cov(ref.T), flatten=flat)  # (N,) per step

    start = time.perf_counter()
    trace = dgsgld.sample(dgsgld.DIGingSGLD(1e-3), potential, network, init,
                          jax.random.key(2), num_steps,
                          output=dgsgld.Output(thin=thin, positions=True, ensemble_fn=w2))
    jax.block_until_ready(trace.positions)
    run_s = time.perf_counter() - start

    kept = burn_in // thin
    average = evaluate.network_average(trace.positions)  # (chains, draws, ...)
    sites = ppl.constrain(potential, average)                # alpha, beta, baseline
    summary = evaluate.agent_summary(sites, burn_in=kept)
    print(f"NUTS: 2 chains x {nuts['alpha'].shape[1]} draws in {nuts_s:.1f} s; DIGing-SGLD: "
          f"{num_chains} chains x {num_steps} iterations, {num_agents} agents "
          f"({split.sizes.min()}-{split.sizes.max()} data each), in {run_s:.1f} s")
    print("site        NUTS mean (sd)     network average mean (sd)   |diff| / NUTS sd")
    worst = 0.0
    for name in ("alpha", "beta", "baseline"):
        ref_draws = np.asarray(nuts[name]).reshape(-1, *np.shape(nuts[name])[2:])
        ref_mean, ref_sd = ref_draws.mean(0), ref_draws.std(0)
        mean, sd = np.asarray(summary["mean"][name]), np.asarray(summary["sd"][name])
        for j in np.ndindex(np.shape(ref_mean)):
            err = abs(mean[j] - ref_mean[j]) / ref_sd[j]
            worst = max(worst, err)
            label = name + (f"[{j[0]}]" if j else "")
            print(f"{label:<10}  {ref_mean[j]:7.3f} ({ref_sd[j]:.3f})    {mean[j]:7.3f} "
                  f"({sd[j]:.3f})              {err:.3f}")
    w2_final = np.asarray(trace.ensemble)[kept:].mean(0)
    print(f"largest |network average mean - NUTS mean| / NUTS sd: {worst:.3f}")
    print(f"agents' W2 to the Gaussian fit of NUTS after burn-in: {w2_final.min():.3f} .. "
          f"{w2_final.max():.3f}")
    if out is not None:
        from dgsgld.evaluate import plots as plots

        Path(out).mkdir(parents=True, exist_ok=True)
        path = Path(out) / "numpyro_poisson.png"
        plots.plot_run(trace, thin=thin, network=network, pos=nx.get_node_attributes(graph, "pos"),
                       ylabel="W2 to the NUTS fit", logy=True, agents=True, path=path)
        print(f"wrote {path}")
    return {"worst": worst, "w2_final": w2_final}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    parser.add_argument("--out", default=None, help="folder for the plot")
    args = parser.parse_args()
    main(args.small, args.out)
