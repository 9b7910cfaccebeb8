"""The step-size proposer against the best constant step of a grid scored by the reference.

For each benchmark target (``experiments.bench``'s full settings: 4 agents, split "skew",
mini-batches of 32 where every agent holds more, 3 seeds x 8 chains, 4 000 steps, thin 10,
the second half kept and 400 draws per seed scored) and DIGing-SGLD on the ring:

* the proposals of :func:`dgsgld.tuning.propose_step_size` (the bench's pilot: 200 steps,
  16 grid points; the default ``sampling_steps``, 2 000, the kept half) with the exact law's
  curvature where the pilot's chains went (the default, what the leaderboard's plain rows use)
  and at the pooled potential's mode (``at_mode=True``);
* a log grid of constant steps over ``[10⁻³, 3] / L`` (``L`` the largest agent curvature at
  the mode, the ``at_mode`` proposal's scale), the two proposals added, all run in one
  compiled call per target with the same starts and keys (common random numbers);

each run scored as the bench scores a row (``experiments.bench._seed_scores``: W2 to the NUTS
draws in reference sds, worst sd ratio, max standardized mean error; means over seeds).

``PYTHONPATH=. python benchmarks/proposer_grid.py [--targets a,b] [--grid 12]`` writes
``benchmarks/proposer_grid.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld.posteriors.references import load_reference
from dgsgld.posteriors.targets import get_target
from dgsgld.tuning import stepsize
from experiments.bench import BenchSettings, _seed_scores, _summary, target_setup

SAMPLER = dgsgld.DIGingSGLD
KEYS = ("w2", "sd_ratio_worst", "mean_error_max")


def _positions(states):
    """Every chain's positions at a kept iteration (the grid run's ensemble)."""
    return states.position


def one_target(name: str, t: int, settings: BenchSettings, grid_points: int, log=print) -> dict:
    target = get_target(name)
    ref = load_reference(name, fingerprint=target.fingerprint)
    settings, potential, batch, _ = target_setup(target, settings)
    n = settings.num_agents
    mixing = dgsgld.networks.ring(n)
    total = settings.seeds * settings.chains
    init_key, pilot_key, run_key = jax.random.split(jax.random.fold_in(jax.random.key(0), t), 3)
    start = target.init(init_key, total)
    init = jnp.broadcast_to(start[:, None], (total, n, target.dim))
    proposals = {}
    for at_mode in (False, True):
        t0 = time.perf_counter()
        report = stepsize.propose_step_size(
            SAMPLER, potential, mixing, init, pilot_key, num_steps=settings.pilot_steps,
            num_step_sizes=settings.pilot_grid, at_mode=at_mode)
        proposals["mode" if at_mode else "default"] = {
            "step": float(report.step_size), "seconds": time.perf_counter() - t0,
            "mode_steps": int(report.mode_steps), "L": float(np.max(report.curvature))}
    lmax = proposals["mode"]["L"]
    grid = np.geomspace(1e-3 / lmax, 3.0 / lmax, grid_points)
    steps = np.unique(np.concatenate([grid, [p["step"] for p in proposals.values()]]))
    t0 = time.perf_counter()
    half = settings.num_steps // 2  # the second half, as the bench keeps it
    run = stepsize.grid_run(SAMPLER, steps.astype(np.float32), potential, mixing, init,
                            run_key, settings.num_steps,
                            output=dgsgld.Output(thin=settings.thin, burn_in=half,
                                                 ensemble_fn=_positions))
    positions = np.swapaxes(np.asarray(run.ensemble), 1, 2)  # (G, chains, kept, N, d)
    seconds = time.perf_counter() - t0
    rows = []
    for g, eta in enumerate(steps):
        draws = positions[g]
        rng = np.random.default_rng(0)
        per_seed = [_seed_scores(target, ref, potential,
                                 draws[s * settings.chains:(s + 1) * settings.chains]
                                 .reshape(-1, target.dim), settings, rng)
                    for s in range(settings.seeds)]
        summary = _summary(per_seed)
        rows.append({"step": float(eta), **{k: summary.get(k, [np.nan])[0] for k in KEYS},
                     "seeds_finite": summary["seeds_finite"],
                     "diverged": bool(np.asarray(run.diverged)[g])})
    finite = [r for r in rows if r["seeds_finite"] == settings.seeds and np.isfinite(r["w2"])]
    best = min(finite, key=lambda r: r["w2"]) if finite else None
    out = {"target": name, "batch": batch, "proposals": proposals, "grid": rows,
           "best": best, "grid_seconds": seconds}
    for which, p in proposals.items():
        row = next(r for r in rows if np.isclose(r["step"], p["step"], rtol=1e-6))
        p.update({k: row[k] for k in KEYS})
    log(f"{name}: default {proposals['default']['step']:.3g} "
        f"(W2 {proposals['default']['w2']:.3f}), "
        f"mode {proposals['mode']['step']:.3g} (W2 {proposals['mode']['w2']:.3f}), best "
        + (f"{best['step']:.3g} (W2 {best['w2']:.3f})" if best else "none finite")
        + f"; grid {seconds:.0f} s")
    return out


def markdown(results: list, settings: BenchSettings) -> str:
    lines = [
        f"DIGing-SGLD on the ring, {settings.num_agents} agents, split '{settings.split}', "
        f"{settings.seeds} seeds x {settings.chains} chains, {settings.num_steps} steps (second "
        f"half, {settings.score_size} draws per seed scored): the proposer's step with the "
        "exact law where the pilot's chains went (the default) and at the mode "
        "(`at_mode=True`), against the grid step of smallest W2 (standardized, to the NUTS "
        "draws); each cell W2 / worst sd ratio / max mean error. "
        "`benchmarks/proposer_grid.py`.", "",
        "| target | batch | proposal (default) | scores | proposal (mode) | scores "
        "| best grid step | scores | best / default | best / mode |",
        "|---|---|---|---|---|---|---|---|---|---|"]

    def scores(r):
        return f"{r['w2']:.2f} / {r['sd_ratio_worst']:.2f} / {r['mean_error_max']:.2f}"

    for r in results:
        s, m, b = r["proposals"]["default"], r["proposals"]["mode"], r["best"]
        cells = [r["target"], str(r["batch"] or "full"), f"{s['step']:.3g}", scores(s),
                 f"{m['step']:.3g}", scores(m)]
        cells += ([f"{b['step']:.3g}", scores(b), f"{b['step'] / s['step']:.3g}",
                   f"{b['step'] / m['step']:.3g}"] if b else ["-"] * 4)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=None, help="comma-separated (default: all but "
                        "logistic_large)")
    parser.add_argument("--grid", type=int, default=12, help="grid points (default 12)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/proposer_grid.json"))
    args = parser.parse_args(argv)
    settings = BenchSettings.full()
    names = (args.targets.split(",") if args.targets else
             [t for t in settings.targets if t != "logistic_large"])
    results = []
    for name in names:
        results.append(one_target(name, settings.targets.index(name), settings, args.grid))
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(results, settings))


if __name__ == "__main__":
    main()
