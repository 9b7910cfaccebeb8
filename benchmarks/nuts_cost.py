"""NUTS's cost to reach a benchmark target's reference accuracy (needs numpyro and arviz).

For each target: numpyro's NUTS as ``benchmarks/references/make_references.py`` runs it
(dense mass matrix adapted in warm-up, float64, the target acceptance its reference used), one
chain from the target's own start (``Target.init``, where the benchmark's samplers start), on
a seed other than the reference's. For each warm-up length ``W`` of ``--warmups`` one run of
``W`` warm-up iterations and ``max(--samples)`` kept draws; the first ``S`` kept draws of that
run, for each ``S`` of ``--samples``, are exactly a run of ``S`` draws (numpyro splits the
chain's key once per iteration), so that one run serves every ``S``.

**The band.** The compared coordinates' moment scores against the stored reference
(:func:`dgsgld.posteriors.scores.moment_errors`) must be as good as the reference's own draws
score at the benchmark's sample size (the moment scores of ``bench._floor``: the first
``score_size`` = 400 reference draws), or as good as 0.1 sd and 10 %, whichever is looser::

    mean_error_max  <= max(0.1, floor mean_error_max)
    |log sd_ratio_worst| <= max(log 1.1, |log floor sd_ratio_worst|)

``mean_error_max`` is the largest ``|mean − m_ref| / sd_ref`` over the coordinates and
``sd_ratio_worst`` the ratio ``sd / sd_ref`` farthest from 1.

**The cost** of ``(W, S)``: leapfrog steps of the ``W`` warm-up iterations and the first ``S``
draws (numpyro's ``num_steps``); each is one gradient of the pooled log-density, counted as
``n`` per-datum gradient evaluations (``grad_evals = n × steps``; the few gradients of the
initial step-size search are not counted). Wall seconds: the warm-up's (compilation included)
plus the sampling run's, prorated to the first ``S`` draws by their share of its steps.

A single chain's scores fluctuate around the band's edge, so ``(W, S)`` *reaches* the band when
the first ``S`` draws are in it and so are the first ``S'`` for every larger ``S'`` of the
ladder in the same run; the cheapest such ``(W, S)`` in gradient evaluations is the target's
``reached`` entry (``null`` when none does).

    PYTHONPATH=. python benchmarks/nuts_cost.py NAME [NAME...] [--warmups 200 500 1000] \\
        [--samples 100 200 400 800 1600] [--seed 100] [--out benchmarks/nuts_cost.json] \\
        [--progress]

Writes ``--out`` and its Markdown table beside it after every run, merging into what is
there: per target, and for the same seed per warm-up length (so that warm-up lengths can be
run one at a time).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
from numpyro.infer import MCMC, NUTS

from benchmarks.harness import resumable_results
from dgsgld.posteriors import get_target, load_reference
from dgsgld.posteriors.scores import moment_errors
from experiments.bench import BenchSettings

MEAN_BAND, SD_BAND = 0.1, 1.1


def band(ref, size):
    """The band's two bounds: ``(mean_error_max bound, |log sd ratio| bound)`` and the floor."""
    floor = moment_errors(ref.draws[:size], ref)
    bounds = (max(MEAN_BAND, floor["mean_error_max"]),
              max(np.log(SD_BAND), abs(np.log(floor["sd_ratio_worst"]))))
    return bounds, {"mean_error_max": floor["mean_error_max"],
                    "sd_ratio_worst": floor["sd_ratio_worst"]}


def run(target, warmup, samples, seed, target_accept, progress=False, *, potential=None,
        init=None, adapt_mass=True):
    """One chain: ``(draws (samples, d), warm-up steps (warmup,), kept steps (samples,),
    warm-up s, sampling s, divergences after warm-up)``. Defaults: the target's own density
    from ``Target.init`` with a dense mass matrix adapted; ``potential`` and ``init`` replace
    them (e.g. whitened coordinates), ``adapt_mass=False`` keeps the identity mass."""
    potential = potential or (lambda x: -target.log_density(x))
    mcmc = MCMC(NUTS(potential_fn=potential, dense_mass=adapt_mass,
                     adapt_mass_matrix=adapt_mass, target_accept_prob=target_accept),
                num_warmup=warmup, num_samples=samples, num_chains=1, progress_bar=progress)
    init_key, warm_key, run_key = jax.random.split(jax.random.key(seed), 3)
    init = target.init(init_key, 1)[0] if init is None else init
    t0 = time.perf_counter()
    mcmc.warmup(warm_key, init_params=init, extra_fields=("num_steps",), collect_warmup=True)
    warm_steps = np.asarray(mcmc.get_extra_fields()["num_steps"])
    t1 = time.perf_counter()
    mcmc.run(run_key, extra_fields=("num_steps", "diverging"))
    t2 = time.perf_counter()
    extra = mcmc.get_extra_fields()
    return (np.asarray(mcmc.get_samples()), warm_steps, np.asarray(extra["num_steps"]),
            t1 - t0, t2 - t1, int(np.sum(extra["diverging"])))


def cost(name, warmups, sample_sizes, seed, *, previous=None, save=None, log=print,
         progress=False):
    """The target's entry: rows of every ``(W, S)``, the band, the floor and ``reached``.

    ``previous``: an earlier entry of the same seed, whose rows of other warm-up lengths are
    kept; ``save(entry)`` is called after each warm-up length's run.
    """
    target = get_target(name)
    ref = load_reference(name, fingerprint=target.fingerprint)
    settings = json.loads(ref.settings)
    target_accept = settings.get("target_accept", 0.9)
    size = BenchSettings.full().score_size
    (mean_bound, log_sd_bound), floor = band(ref, size)
    n = target.num_data
    rows = []
    if previous is not None and previous.get("seed") == seed:
        rows = [r for r in previous["rows"] if r["warmup"] not in warmups]
    entry = None
    for warmup in warmups:
        draws, warm_steps, steps, warm_s, run_s, divergent = run(
            target, warmup, max(sample_sizes), seed, target_accept, progress)
        x = np.asarray(target.compared(draws))
        for s in sample_sizes:
            m = moment_errors(x[:s], ref)
            total = int(warm_steps.sum() + steps[:s].sum())
            row = {"warmup": warmup, "samples": s, "leapfrog_steps": total,
                   "grad_evals": total * n,
                   "wall_s": round(warm_s + run_s * steps[:s].sum() / steps.sum(), 2),
                   "warmup_s": round(warm_s, 2), "mean_steps_per_draw": float(steps[:s].mean()),
                   "divergent": int(divergent) if s == len(steps) else None,
                   "mean_error_max": m["mean_error_max"], "sd_ratio_worst": m["sd_ratio_worst"],
                   "in_band": bool(m["mean_error_max"] <= mean_bound
                                   and abs(np.log(m["sd_ratio_worst"])) <= log_sd_bound)}
            rows.append(row)
            log(f"{name} W={warmup} S={s}: steps {total}, {row['wall_s']:.1f} s, mean err "
                f"{row['mean_error_max']:.3f}, sd ratio {row['sd_ratio_worst']:.3f}"
                f"{' in band' if row['in_band'] else ''}")
        rows.sort(key=lambda r: (r["warmup"], r["samples"]))
        for r in rows:
            r["stays_in_band"] = all(q["in_band"] for q in rows if q["warmup"] == r["warmup"]
                                     and q["samples"] >= r["samples"])
        hits = [r for r in rows if r["stays_in_band"]]
        entry = {"num_data": n, "dim": target.dim, "seed": seed, "chains": 1,
                 "target_accept": target_accept, "score_size": size, "floor": floor,
                 "band": {"mean_error_max": mean_bound,
                          "sd_ratio": [float(np.exp(-log_sd_bound)), float(np.exp(log_sd_bound))]},
                 "reached": min(hits, key=lambda r: r["grad_evals"]) if hits else None,
                 "rows": rows}
        if save is not None:
            save(entry)
    return entry


def markdown(result):
    lines = [("NUTS (numpyro, dense mass, 1 chain from `Target.init`) until its draws are "
              "within the band and stay there for the longer prefixes of the run: max "
              "standardized mean error <= max(0.1, floor) and worst sd ratio within max(10 %, "
              "floor) of 1, the floor being the reference's own first 400 draws. Cost: leapfrog "
              "steps of warm-up + kept draws; gradient evaluations = n x steps; wall s: warm-up "
              "(compilation included) + sampling prorated by steps."),
             "", ("| target | n | d | band: mean err, sd ratio | warm-up | draws | leapfrog "
                  "steps | per-datum grad evals | wall s | mean err | worst sd ratio |"),
             "|---" * 11 + "|"]
    for name, r in result.items():
        b = r["band"]
        head = (f"| {name} | {r['num_data']} | {r['dim']} | {b['mean_error_max']:.3f}, "
                f"{b['sd_ratio'][0]:.3f}-{b['sd_ratio'][1]:.3f} | ")
        hit = r["reached"]
        if hit is None:
            w = max(x["warmup"] for x in r["rows"])
            s = max(x["samples"] for x in r["rows"])
            lines.append(head + f"not reached by {w} | {s} | - | - | - | - | - |")
            continue
        lines.append(head + f"{hit['warmup']} | {hit['samples']} | {hit['leapfrog_steps']} | "
                     f"{hit['grad_evals']:.3g} | {hit['wall_s']:.1f} | "
                     f"{hit['mean_error_max']:.3f} | {hit['sd_ratio_worst']:.3f} |")
    lines += ["", "Every run (W warm-up iterations, the first S kept draws; * in the band):", "",
              "| target | W | S | leapfrog steps | wall s | mean err | worst sd ratio |",
              "|---" * 7 + "|"]
    for name, r in result.items():
        for x in r["rows"]:
            star = " *" if x["in_band"] else ""
            lines.append(f"| {name} | {x['warmup']} | {x['samples']} | {x['leapfrog_steps']} | "
                         f"{x['wall_s']:.1f} | {x['mean_error_max']:.3f}{star} | "
                         f"{x['sd_ratio_worst']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="+")
    parser.add_argument("--warmups", type=int, nargs="+", default=[200, 500, 1000])
    parser.add_argument("--samples", type=int, nargs="+", default=[100, 200, 400, 800, 1600])
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("nuts_cost.json"))
    parser.add_argument("--progress", action="store_true", help="numpyro's progress bar")
    args = parser.parse_args(argv)
    result, save = resumable_results(args.out, markdown)

    for name in args.names:
        cost(name, sorted(args.warmups), sorted(args.samples), args.seed,
             previous=result.get(name), save=lambda e, name=name: save(name, e),
             progress=args.progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
