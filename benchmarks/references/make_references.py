"""Compute the shipped NUTS references of dgsgld.posteriors (needs numpyro and arviz).

For each target: numpyro's NUTS (dense mass matrix, float64) on the target's pooled
log-density, several chains from dispersed starting points, then the checks the benchmark
relies on: rank-normalized split R-hat < 1.01 and bulk ESS >= 2000 for every compared
coordinate (dgsgld.evaluate.diagnostics), and no divergent transition. A target that fails is written
nowhere. Passing targets get ``dgsgld/posteriors/references/<name>.npz``: thinned draws of
the compared coordinates, their means, sds and quantiles with Monte Carlo standard errors
(ArviZ's ``mcse``), the diagnostics, the NUTS settings and the data fingerprint.

The Gaussian anchor's reference is its closed form (exact moments, quantiles and i.i.d.
draws); NUTS is run on it too, and its means must match the exact ones within 4 MCSE.

With ``--laplace`` NUTS runs in whitened coordinates ``u``, ``x = x̂ + L u``, where ``x̂`` is the
MAP and ``L L^T`` the inverse of the negative Hessian there
(:func:`dgsgld.posteriors.laplace.laplace`): an exact affine reparametrization (constant
Jacobian) that makes a large-data posterior, of sds ~ n^(-1/2), look like N(0, I), so that
warm-up starts at the right scale. The mass matrix is then the identity in ``u`` (the Laplace
covariance in ``x``), not adapted: a dense estimate from a few hundred warm-up draws in ``d``
dimensions is noisier than the Laplace approximation of a posterior that is Gaussian up to
O(n^(-1/2)). Chains start at ``u ~ N(0, 2^2 I)``, twice the Laplace sds around the MAP,
instead of around zero. The log records the mean leapfrog steps per kept draw
(``num_steps``) and the MAP search.

    PYTHONPATH=. python benchmarks/references/make_references.py [names...] \
        [--chains 4] [--warmup 1000] [--samples 1500] [--target-accept 0.9] [--laplace] \
        [--progress]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import arviz as az
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS
from scipy import stats

from dgsgld import evaluate
from dgsgld.posteriors import references
from dgsgld.posteriors.laplace import laplace
from dgsgld.posteriors.targets import TARGETS, exact_gaussian_posterior, get_target

RHAT_MAX, ESS_MIN = 1.01, 2000.0


def nuts(target, chains, warmup, samples, seed, target_accept, *, whiten=None, progress=False):
    """NUTS draws ``(chain, draw, d)`` of ``target``, the number of divergent transitions, the
    wall time and the mean leapfrog steps per kept draw; ``whiten = (x̂, L)`` samples
    ``u`` with ``x = x̂ + L u`` (see the module doc)."""
    if whiten is None:
        potential = lambda x: -target.log_density(x)
        init = 2.0 * target.init_scale * jax.random.normal(jax.random.key(seed + 1),
                                                          (chains, target.dim))
    else:
        shift, chol = (jnp.asarray(a) for a in whiten)
        potential = lambda u: -target.log_density(shift + chol @ u)
        init = 2.0 * jax.random.normal(jax.random.key(seed + 1), (chains, target.dim))
    mcmc = MCMC(NUTS(potential_fn=potential, dense_mass=whiten is None,
                     adapt_mass_matrix=whiten is None, target_accept_prob=target_accept),
                num_warmup=warmup, num_samples=samples, num_chains=chains,
                chain_method="vectorized", progress_bar=progress)
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed), init_params=init, extra_fields=("diverging", "num_steps"))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))  # (chain, draw, d)
    if whiten is not None:
        draws = np.asarray(whiten[0]) + draws @ np.asarray(whiten[1]).T
    extra = mcmc.get_extra_fields()
    divergent = int(np.sum(extra["diverging"]))
    steps = float(np.mean(extra["num_steps"]))
    return draws, divergent, time.perf_counter() - start, steps


def mcse(draws, **kw):
    return np.asarray(az.mcse(az.convert_to_dataset(draws), **kw)["x"])


def summarize(x):
    """Summaries of compared draws ``x (chain, draw, q)``."""
    flat = x.reshape(-1, x.shape[-1])
    return {
        "mean": flat.mean(0), "sd": flat.std(0, ddof=1),
        "quantiles": np.quantile(flat, references.QUANTILES, axis=0),
        "mcse_mean": mcse(x, method="mean"), "mcse_sd": mcse(x, method="sd"),
        "mcse_quantiles": np.stack([mcse(x, method="quantile", prob=p)
                                    for p in references.QUANTILES]),
        "rhat": np.asarray(evaluate.rhat(x)), "ess_bulk": np.asarray(evaluate.ess(x)),
    }


def thin(x, num):
    flat = x.reshape(-1, x.shape[-1])
    return flat[np.linspace(0, flat.shape[0] - 1, num).round().astype(int)]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", default=list(TARGETS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-accept", type=float, default=0.9)
    parser.add_argument("--laplace", action="store_true",
                        help="sample in coordinates whitened at the MAP (see the module doc)")
    parser.add_argument("--progress", action="store_true", help="numpyro's progress bar")
    args = parser.parse_args(argv)
    log = {}
    for name in args.names:
        target = get_target(name)
        whiten, extra = None, {}
        if args.laplace:
            fit = laplace(target)
            whiten = (fit.mode, fit.chol)
            extra = {"parametrization": "laplace", "map_s": round(fit.wall_s, 1),
                     "map_iterations": fit.iterations, "map_newton_decrement": fit.decrement,
                     "hessian_condition": fit.condition}
            print(name, json.dumps(extra), flush=True)
        draws, divergent, wall, steps = nuts(target, args.chains, args.warmup, args.samples,
                                             args.seed, args.target_accept, whiten=whiten,
                                             progress=args.progress)
        x = np.asarray(target.compared(jnp.asarray(draws)))
        s = summarize(x)
        ok = bool((s["rhat"] < RHAT_MAX).all() and (s["ess_bulk"] >= ESS_MIN).all()
                  and divergent == 0)
        entry = {"passed": ok, "divergent": divergent, "wall_s": round(wall, 1),
                 "max_rhat": float(s["rhat"].max()), "min_ess_bulk": float(s["ess_bulk"].min()),
                 "chains": args.chains, "warmup": args.warmup, "samples": args.samples,
                 "target_accept": args.target_accept, "num_data": target.num_data,
                 "mean_steps_per_draw": round(steps, 2), **extra}
        method = "nuts"
        if name == "gaussian_linear":
            mean, cov = exact_gaussian_posterior(target)
            z = (s["mean"] - mean) / s["mcse_mean"]
            entry["nuts_vs_exact_max_abs_z"] = float(np.abs(z).max())
            ok = ok and entry["nuts_vs_exact_max_abs_z"] < 4.0
            sd = np.sqrt(np.diag(cov))
            exact_draws = np.random.default_rng(args.seed).multivariate_normal(
                mean, cov, size=references.NUM_DRAWS)
            s.update(mean=mean, sd=sd, quantiles=mean + sd * stats.norm.ppf(
                np.asarray(references.QUANTILES))[:, None])
            for k in ("mcse_mean", "mcse_sd", "mcse_quantiles"):
                s[k] = np.zeros_like(s[k])
            kept, method = exact_draws, "exact"
        else:
            kept = thin(x, references.NUM_DRAWS)
        entry["passed"] = ok
        log[name] = entry
        print(name, json.dumps(entry), flush=True)
        if not ok:
            continue
        path = references.path(name)
        np.savez_compressed(
            path, draws=kept.astype(np.float32), names=np.asarray(target.names),
            fingerprint=np.asarray(target.fingerprint), method=np.asarray(method),
            settings=np.asarray(json.dumps(entry)),
            **{k: np.asarray(v, np.float64) for k, v in s.items()})
        print(f"  wrote {path} ({path.stat().st_size} bytes)", flush=True)
    out = Path(__file__).with_name("log.json")
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update(log)
    out.write_text(json.dumps(old, indent=1) + "\n")
    return 0 if all(e["passed"] for e in log.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
