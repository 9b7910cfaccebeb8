"""The warm-up's step criterion at two tolerances, scored against the NUTS references.

``dgsgld.warmup`` chooses the step whose exact stationary law on the preconditioned Gaussian
approximation keeps the worst sd ratio within ``1 + tol_sd`` (default 0.1). The law does not
see a posterior's departure from its Gaussian approximation, nor the Monte Carlo error of the
draws that follow, and the leaderboard's band (worst sd ratio in [0.8, 1.25], max mean error
at most 0.3 reference sds) must hold both. This script runs the leaderboard's adapted rows of
DIGing-SGLD (``experiments.bench._adapted_run``: the full settings, the same starts and keys,
half the 4 000 steps warm-up and half sampling) at each tolerance, on the ring and the
complete graph, and scores them as the leaderboard does (means over 3 seeds).

``PYTHONPATH=. python benchmarks/criterion_tolerance.py [--targets a,b] [--tol 0.1,0.05]``
writes ``benchmarks/criterion_tolerance.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from dgsgld.posteriors.references import load_reference
from dgsgld.posteriors.targets import get_target
from experiments.bench import (
    NETWORKS,
    BenchSettings,
    _adapted_run,
    _summary,
    adapted_key,
    target_setup,
    within_band,
)

SAMPLER = "DIGing-SGLD"
KEYS = ("w2", "sd_ratio_worst", "mean_error_max")


def one_target(name: str, settings: BenchSettings, tolerances, log=print) -> list:
    target = get_target(name)
    settings, potential, _, curvature_batch = target_setup(target, settings)
    ref = load_reference(name, fingerprint=target.fingerprint)
    key = adapted_key(settings, name, SAMPLER)  # the leaderboard's rows' key
    rows = []
    for network in NETWORKS:
        for tol in tolerances:
            t0 = time.perf_counter()
            r = _adapted_run(target, ref, potential, SAMPLER, network, settings, key,
                             curvature_batch=curvature_batch, warmup_options={"tol_sd": tol})
            summary = _summary(r["seeds"])
            row = {"target": name, "network": network, "tol_sd": tol,
                   "step_size": r["step_size"], **{k: summary.get(k, [np.nan])[0] for k in KEYS},
                   "seeds_finite": summary["seeds_finite"], "diverged": r["diverged"],
                   "verdict_ok": sum(w.get("verdict") == "ok" for w in r["warmup"]),
                   "seconds": time.perf_counter() - t0}
            row["within"] = bool(within_band({k: [row[k]] for k in KEYS}))
            rows.append(row)
            log(f"{name:24s} {network:8s} tol_sd {tol:<5g} h={row['step_size']:.3g} "
                f"sd={row['sd_ratio_worst']:.3f} mean={row['mean_error_max']:.3f} "
                f"W2={row['w2']:.3f} {'IN' if row['within'] else ''} ({row['seconds']:.0f} s)")
    return rows


def markdown(rows: list, tolerances) -> str:
    lines = [
        (f"{SAMPLER} (adapted) on the leaderboard's settings and keys (4 agents, split 'skew'; "
         "3 seeds x 8 chains; 2 000 warm-up and 2 000 sampling steps) at each tolerance "
         "`tol_sd` of the warm-up's step criterion; each cell: step / worst sd ratio / max mean "
         "error (reference sds) / W2, `*` within the band (sd ratio in [0.8, 1.25], mean error "
         "<= 0.3). `benchmarks/criterion_tolerance.py`."), "",
        "| target | network | " + " | ".join(f"tol_sd {t:g}" for t in tolerances) + " |",
        "|---|---|" + "---|" * len(tolerances)]
    by = {(r["target"], r["network"], r["tol_sd"]): r for r in rows}
    for target in dict.fromkeys(r["target"] for r in rows):
        for network in NETWORKS:
            cells = []
            for tol in tolerances:
                r = by[target, network, tol]
                cells.append(f"{r['step_size']:.3g} / {r['sd_ratio_worst']:.2f} / "
                             f"{r['mean_error_max']:.2f} / {r['w2']:.2f}"
                             + (" *" if r["within"] else ""))
            lines.append(f"| {target} | {network} | " + " | ".join(cells) + " |")
    counts = [sum(r["within"] for r in rows if r["tol_sd"] == tol and r["network"] == net)
              for tol in tolerances for net in NETWORKS]
    lines += ["", "Within the band, of " + str(len({r['target'] for r in rows})) + " targets: "
              + "; ".join(f"tol_sd {tol:g} on the {net}: {counts[i * len(NETWORKS) + j]}"
                          for i, tol in enumerate(tolerances)
                          for j, net in enumerate(NETWORKS)) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=None, help="comma-separated (default: all but "
                        "logistic_large)")
    parser.add_argument("--tol", default="0.1,0.05", help="tolerances (default 0.1,0.05)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/criterion_tolerance.json"))
    args = parser.parse_args(argv)
    settings = BenchSettings.full()
    tolerances = [float(v) for v in args.tol.split(",")]
    names = (args.targets.split(",") if args.targets else
             [t for t in settings.targets if t != "logistic_large"])
    rows = []
    for name in names:
        rows += one_target(name, settings, tolerances)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(rows, tolerances))


if __name__ == "__main__":
    main()
