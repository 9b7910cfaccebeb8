"""Monte Carlo error or stationary bias? The leaderboard's adapted rows run ten times longer.

A leaderboard row scores 2 000 sampling steps (3 seeds x 8 chains, 400 draws per seed) against
the band (worst sd ratio in [0.8, 1.25], max mean error at most 0.3 reference sds). A row
outside it is outside either because the adapted sampler's stationary law is off (bias: more
draws do not help) or because 2 000 steps leave too few effective draws (Monte Carlo error:
more draws do). This script separates the two: for each (sampler, target) pair and network
it runs the leaderboard's own warm-ups (``experiments.bench._adapted_run``: the full
settings, the same starts and keys, the warm-up sized for 2 000 sampling steps), continues the adapted sampler
for ``--factor`` times the 2 000 steps, and scores

* **short**: each seed's first 2 000 steps as the leaderboard does (400 draws per seed, means
  over the seeds with finite draws): a fresh row of the same distribution;
* **board**: each seed's first ``--factor`` x 2 000 steps scored as the leaderboard does (400
  draws per seed drawn from them, means over the seeds with finite draws): the row a
  leaderboard whose sampling budget were ``--factor`` times as long would show; likewise each
  seed's first 2, 3 and 5 x 2 000 steps (``PREFIXES``, a second table);
* **long**: every finite chain of every seed over the whole run, pooled (agents pooled as in
  the leaderboard), per coordinate: sd ratio and standardized mean error, with standard
  errors from the spread of the chains' own estimates (``sd / √chains`` of the per-chain sd
  ratios and means; chains that wander slowly make these optimistic). The coordinates
  reported are the largest mean error and the sd ratio farthest from 1.

Chains that diverge (non-finite) are counted and left out of the long scores.

A second table (``--swap``, default eight schools on the ring) runs DIGing-SGLD at DE-SGLD's
adapted settings: each seed's DE-SGLD warm-up (the leaderboard's keys) gives ``(M, η)`` and
the warmed-up positions, from which both samplers run the long run (DIGing-SGLD's tracker
starts afresh there): a sampler's own stability, apart from its warm-up.

A third table gives the largest stable ``ηλ`` of DIGing-SGLD and DE-SGLD on one scalar mode of
curvature ``λ``, split evenly over the 4 agents or held by one of them (the exact law's spectral
radius, bisected): a tracker's disagreement tolerates only about half the step when one agent's
data hold a stiff direction, e.g. a school's effect at a large ``τ``.

``PYTHONPATH=. python benchmarks/adapted_longrun.py [--pairs DIGing-SGLD:a,...] [--factor 10]
[--merge]`` writes ``benchmarks/adapted_longrun.json`` and ``.md`` (with ``--merge``, adding its
rows to those stored there).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import DESGLD, DIGingSGLD, Output, sample
from dgsgld.posteriors import moment_errors
from dgsgld.posteriors.references import load_reference
from dgsgld.posteriors.targets import get_target
from dgsgld.theory import exact
from dgsgld.theory.recursions import Quadratic
from experiments.bench import (
    NETWORKS,
    BenchSettings,
    _adapted_run,
    _seed_scores,
    _summary,
    adapted_key,
    target_setup,
    within_band,
)

#: (sampler, target): DIGing-SGLD (adapted) on the nine small targets, and DE-SGLD on eight
#: schools, where it is within the band. ``logistic_large`` (16 agents, about 3 minutes per
#: network) runs with ``--pairs DIGing-SGLD:logistic_large --swap '' --merge``.
PAIRS = tuple(("DIGing-SGLD", t) for t in (
    "gaussian_linear", "logistic_breast_cancer", "multinomial_wine", "poisson_linnerud",
    "student_t_diabetes", "sparse_mixture", "eight_schools", "bnn_regression",
    "hierarchical_regression")) + (("DE-SGLD", "eight_schools"),)
KEYS = ("sd_ratio_worst", "mean_error_max")
#: The shorter sampling budgets (in units of 2 000 steps) also scored as the leaderboard does,
#: on each seed's first steps of the long run.
PREFIXES = (2, 3, 5)


def _long_scores(target, ref, draws: list) -> dict:
    """Pooled per-coordinate scores of every finite chain ``(kept, N, d)`` of ``draws``."""
    chains = [c for seed in draws if seed is not None for c in seed]
    finite = [c for c in chains if np.all(np.isfinite(c))]
    per = []  # per chain: (mean (q,), sd (q,)) of the compared quantities, agents pooled
    pooled = []
    for c in finite:
        q = np.asarray(target.compared(jnp.asarray(c.reshape(-1, c.shape[-1]))), np.float64)
        pooled.append(q)
        per.append((q.mean(0), q.std(0, ddof=1)))
    n = len(per)
    if n < 2:  # nothing (or one chain) left to score
        return {"chains": len(chains), "diverged_chains": len(chains) - n,
                **dict.fromkeys(("sd_ratio_worst", "sd_ratio_se", "mean_error_max",
                                 "mean_error_se"), float("nan")),
                "sd_coordinate": 0, "mean_coordinate": 0}
    scores = moment_errors(np.concatenate(pooled), ref)
    err, ratio = scores["mean_error"], scores["sd_ratio"]
    se_err = np.std([m for m, _ in per], axis=0, ddof=1) / ref.sd / np.sqrt(n)
    se_ratio = np.std([s for _, s in per], axis=0, ddof=1) / ref.sd / np.sqrt(n)
    j = int(np.argmax(np.abs(np.log(ratio))))
    k = int(np.argmax(err))
    return {"chains": len(chains), "diverged_chains": len(chains) - n,
            "sd_ratio_worst": float(ratio[j]), "sd_ratio_se": float(se_ratio[j]),
            "sd_coordinate": j, "mean_error_max": float(err[k]),
            "mean_error_se": float(se_err[k]), "mean_coordinate": k}


def one_target(sampler: str, name: str, settings: BenchSettings, factor: int,
               log=print) -> list:
    target = get_target(name)
    settings, potential, _, curvature_batch = target_setup(target, settings)
    ref = load_reference(name, fingerprint=target.fingerprint)
    key = adapted_key(settings, name, sampler)  # the leaderboard's rows' key
    short_steps = settings.num_steps - settings.num_steps // 2
    short_kept = short_steps // settings.thin
    rows = []
    for network in NETWORKS:
        t0 = time.perf_counter()
        r = _adapted_run(target, ref, potential, sampler, network, settings, key,
                         curvature_batch=curvature_batch, run_steps=factor * short_steps,
                         keep_draws=True)
        rng = np.random.default_rng(0)
        short = _summary([None if d is None else _seed_scores(
            target, ref, potential, d[:, :short_kept].reshape(-1, target.dim), settings, rng)
            for d in r["draws"]])
        boards = {}  # prefix factor -> the leaderboard's scores of each seed's first f x 2 000
        for f in sorted({f for f in PREFIXES if f < factor} | {factor}):
            rng = np.random.default_rng(1)
            board = _summary([None if d is None else _seed_scores(
                target, ref, potential, d[:, :f * short_kept].reshape(-1, target.dim),
                settings, rng) for d in r["draws"]])
            boards[f] = {k: board.get(k, [np.nan])[0] for k in KEYS}
            boards[f]["within"] = bool(within_band({k: [boards[f][k]] for k in KEYS}))
        row = {"sampler": sampler, "target": name, "network": network,
               "step_size": r["step_size"],
               "law_sd_ratio": float(np.median([w["stationary_sd_ratio"] for w in r["warmup"]
                                                if "stationary_sd_ratio" in w])),
               "short": {k: short.get(k, [np.nan])[0] for k in KEYS},
               "short_seeds": short["seeds_finite"],
               "board": boards[factor],
               "board_prefixes": {str(f): b for f, b in boards.items()},
               "long": _long_scores(target, ref, r["draws"]),
               "long_steps": factor * short_steps, "seconds": time.perf_counter() - t0}
        row["short"]["within"] = bool(within_band({k: [row["short"][k]] for k in KEYS}))
        row["long"]["within"] = bool(within_band({k: [row["long"][k]] for k in KEYS}))
        rows.append(row)
        s, b, g = row["short"], row["board"], row["long"]
        log(f"{sampler:12s} {name:22s} {network:8s} h={row['step_size']:.3g} short sd={s['sd_ratio_worst']:.3f}"
            f" mean={s['mean_error_max']:.3f} | board sd={b['sd_ratio_worst']:.3f}"
            f" mean={b['mean_error_max']:.3f} | long sd={g['sd_ratio_worst']:.3f}"
            f"±{g['sd_ratio_se']:.3f} mean={g['mean_error_max']:.3f}±{g['mean_error_se']:.3f}"
            f" diverged {g['diverged_chains']}/{g['chains']} ({row['seconds']:.0f} s)")
    return rows


def swapped(name: str, network: str, settings: BenchSettings, factor: int, log=print) -> list:
    """DIGing-SGLD and DE-SGLD at each seed's DE-SGLD adapted ``(M, η)`` (module doc)."""
    target = get_target(name)
    settings, potential, _, curvature_batch = target_setup(target, settings)
    ref = load_reference(name, fingerprint=target.fingerprint)
    key = adapted_key(settings, name, "DE-SGLD")
    steps = factor * (settings.num_steps - settings.num_steps // 2)
    r = _adapted_run(target, ref, potential, "DE-SGLD", network, settings, key,
                     curvature_batch=curvature_batch, run_steps=steps, keep_draws=True)
    mixing = NETWORKS[network](settings.num_agents)
    rows = []
    for s, pair in enumerate(r["adapted"]):
        if pair is None:
            continue
        de, state = pair
        tracker = DIGingSGLD(float(de.step_size), preconditioner=de.preconditioner)
        trace = sample(tracker, potential, mixing, state.position,
                       jax.random.fold_in(key, 1000 + s), steps,
                       output=Output(thin=settings.thin), on_divergence="flag")
        for sampler, draws in (("DE-SGLD", r["draws"][s]),
                               ("DIGing-SGLD", np.asarray(trace.positions))):
            row = {"target": name, "network": network, "seed": s, "sampler": sampler,
                   "step_size": float(de.step_size), "steps": steps,
                   **_long_scores(target, ref, [draws])}
            rows.append(row)
            log(f"swap seed {s} {sampler:12s} h={row['step_size']:.3g} "
                f"diverged {row['diverged_chains']}/{row['chains']}")
    return rows


def stability(num_agents: int = 4) -> list:
    """The largest stable ``ηλ`` per network, sampler and split of a scalar mode (module doc)."""
    rows = []
    for network in NETWORKS:
        mixing = NETWORKS[network](num_agents)
        for cls in (DIGingSGLD, DESGLD):
            for split in ("even", "one agent"):
                A = np.full((num_agents, 1, 1), 1.0 / num_agents)
                if split == "one agent":
                    A = np.zeros((num_agents, 1, 1))
                    A[0] = 1.0
                q = Quadratic(A, np.zeros((num_agents, 1)), None, None)
                lo, hi = 1e-3, 10.0
                for _ in range(40):
                    mid = math.sqrt(lo * hi)
                    stable = exact.stationary_moments(cls(mid), q, mixing).spectral_radius < 1
                    lo, hi = (mid, hi) if stable else (lo, mid)
                rows.append({"network": network, "sampler": cls.__name__, "split": split,
                             "eta_lambda": lo})
    return rows


def markdown(rows: list, factor: int, swaps: list = (), stable: list = ()) -> str:
    lines = [
        ("Adapted rows of the leaderboard, on its settings and keys (4 agents, `logistic_large` "
         "16, split 'skew'; 3 seeds x 8 chains; the warm-up's 2 000 steps), then sampled for "
         "2 000 steps (**short**, scored as the leaderboard: 400 draws per seed, means over "
         f"seeds) and for {factor} x 2 000 steps (**board**: the same scores on 400 draws per "
         f"seed drawn from its first {factor} x 2 000 steps; **long**: every finite chain pooled, ± one standard "
         "error from the spread of the chains' own estimates). `*`: within the band (worst sd "
         "ratio in [0.8, 1.25], max mean error <= 0.3 reference sds). law: the sd ratio the "
         "warm-up's exact law predicts at its step (median over seeds). "
         "`benchmarks/adapted_longrun.py`."), "",
        ("| sampler (adapted) | target | network | step | law | short: sd / mean | "
         "board: sd / mean | long: sd (coordinate) | long: mean error (coordinate) | "
         "diverged chains |"),
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        target = get_target(r["target"])
        names = target.quantity_names or target.param_names
        s, b, g = r["short"], r["board"], r["long"]
        label, label_m = names[g["sd_coordinate"]], names[g["mean_coordinate"]]
        lines.append(
            f"| {r['sampler']} | {r['target']} | {r['network']} | {r['step_size']:.3g} | "
            f"{r['law_sd_ratio']:.3f} | {s['sd_ratio_worst']:.3f} / {s['mean_error_max']:.3f}"
            f"{' *' if s['within'] else ''} | {b['sd_ratio_worst']:.3f} / "
            f"{b['mean_error_max']:.3f}{' *' if b['within'] else ''} | "
            f"{g['sd_ratio_worst']:.3f} ± {g['sd_ratio_se']:.3f} ({label}) | "
            f"{g['mean_error_max']:.3f} ± {g['mean_error_se']:.3f} ({label_m})"
            f"{' *' if g['within'] else ''} | {g['diverged_chains']} / {g['chains']} |")
    counts = {}
    for r in rows:
        c = counts.setdefault((r["sampler"], r["network"]), [0, 0, 0, 0])
        c[0] += 1
        for i, k in enumerate(("short", "board", "long"), 1):
            c[i] += r[k]["within"]
    lines += ["", "Within the band, of the targets run: " + "; ".join(
        f"{sampler} ({network}) {c[1]} / {c[2]} / {c[3]} of {c[0]} (short / board / long)"
        for (sampler, network), c in counts.items()) + "."]
    factors = sorted({int(f) for r in rows for f in r.get("board_prefixes", {})})
    if factors:
        lines += ["", ("Scored as the leaderboard on each seed's first f x 2 000 sampling "
                       "steps of the long run: worst sd ratio / max mean error, `*` within "
                       "the band."), "",
                  "| sampler (adapted) | target | network | "
                  + " | ".join(f"{f} x 2 000" for f in factors) + " |",
                  "|---|---|---|" + "---|" * len(factors)]
        for r in rows:
            cells = [r["board_prefixes"].get(str(f)) for f in factors]
            lines.append(f"| {r['sampler']} | {r['target']} | {r['network']} | " + " | ".join(
                "-" if c is None else f"{c['sd_ratio_worst']:.3f} / {c['mean_error_max']:.3f}"
                f"{' *' if c['within'] else ''}" for c in cells) + " |")
    if swaps:
        lines += ["", (f"Both samplers at DE-SGLD's adapted `(M, η)` on {swaps[0]['target']} "
                       f"({swaps[0]['network']}), from DE-SGLD's warmed-up positions, "
                       f"{swaps[0]['steps']} steps per seed (8 chains); scores over the finite "
                       "chains (`--swap`)."), "",
                  ("| seed | step | sampler | diverged chains | worst sd ratio | "
                   "max mean error |"), "|---|---|---|---|---|---|"]
        for r in swaps:
            finite = r["chains"] - r["diverged_chains"] >= 2
            lines.append(
                f"| {r['seed']} | {r['step_size']:.3g} | {r['sampler']} | "
                f"{r['diverged_chains']} / {r['chains']} | "
                + (f"{r['sd_ratio_worst']:.3f} | {r['mean_error_max']:.3f} |" if finite
                   else "- | - |"))
    if stable:
        lines += ["", ("The largest stable step times the curvature of one scalar mode, split "
                       "evenly over 4 agents or held by one (the exact law's spectral radius "
                       "below 1, bisected)."), "",
                  "| network | sampler | even split | one agent |", "|---|---|---|---|"]
        by = {(r["network"], r["sampler"], r["split"]): r["eta_lambda"] for r in stable}
        for network, sampler in dict.fromkeys((r["network"], r["sampler"]) for r in stable):
            lines.append(f"| {network} | {sampler} | {by[network, sampler, 'even']:.2f} | "
                         f"{by[network, sampler, 'one agent']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(f"{s}:{t}" for s, t in PAIRS),
                        help="sampler:target,... (the leaderboard's names)")
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--swap", default="eight_schools:ring",
                        help="target:network of the second table ('' for none)")
    parser.add_argument("--out", default="benchmarks/adapted_longrun.json")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows (and the swap table) of --out that this run does "
                             "not make; the factors must agree")
    args = parser.parse_args(argv)
    settings = BenchSettings.full()
    rows = []
    for pair in args.pairs.split(","):
        sampler, name = pair.split(":")
        rows += one_target(sampler, name, settings, args.factor)
    swaps = swapped(*args.swap.split(":"), settings, args.factor) if args.swap else []
    stable = stability(settings.num_agents)
    out = Path(args.out)
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        if old["factor"] != args.factor:
            raise ValueError(f"--merge: {out} was run at --factor {old['factor']}, "
                             f"not {args.factor}")
        new = {(r["sampler"], r["target"], r["network"]) for r in rows}
        rows = [r for r in old["rows"]
                if (r["sampler"], r["target"], r["network"]) not in new] + rows
        swaps = swaps or old["swap"]
    out.write_text(json.dumps({"factor": args.factor, "rows": rows, "swap": swaps,
                               "stability": stable}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(rows, args.factor, swaps, stable))


if __name__ == "__main__":
    main()
