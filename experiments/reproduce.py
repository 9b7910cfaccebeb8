"""Run figures by name and write their files: ``{fig}.json``, ``{fig}.png``, overview plots,
``summary.json`` and ``summary.md`` (a Markdown table of the final values and step sizes)."""

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from .configs import FIGURES, load_overrides
from .figures import ALGORITHMS, CENTRALIZED, FigureResult, run_figure

__all__ = ["TARGETS", "expand_target", "reproduce", "save_result", "seed_sweep", "summary_table"]

#: Names accepted by :func:`reproduce`.
TARGETS = (*sorted(FIGURES), "fig2", "fig3", "all")


def expand_target(target: str) -> list[str]:
    """``"fig2"`` -> ``["fig2a", "fig2b", "fig2c"]``, ``"all"`` -> all six, a figure -> itself."""
    if target == "all":
        return sorted(FIGURES)
    if target in ("fig2", "fig3"):
        return [f for f in sorted(FIGURES) if f.startswith(target)]
    if target in FIGURES:
        return [target]
    raise ValueError(f"Unknown target {target!r}; expected one of {', '.join(TARGETS)}.")


def save_result(result: FigureResult, out_dir: str | Path, plot: bool = True) -> list[Path]:
    """Write ``{name}.json`` (and ``{name}.png``) into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result.name}.json"
    path.write_text(json.dumps(result.to_dict(), indent=1))
    paths = [path]
    if plot:
        from .plots import plot_figure

        paths.append(plot_figure(result, out / f"{result.name}.png"))
    return paths


def _fmt(result: FigureResult, name: str) -> str:
    res = result.algorithms[name]
    return f"{res.final:.4f} ± {res.std[-1]:.4f}" if name != CENTRALIZED else f"{res.final:.4f}"


def summary_table(results: dict[str, FigureResult]) -> str:
    """A Markdown table: final value (mean ± std over agents) and chosen step per algorithm."""
    names = list(ALGORITHMS)
    head = ["figure", "metric"] + [f"{n} final" for n in names] + [f"{n} η" for n in names]
    head += ["gradient-tuned η (DIGing / DE)", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fig, r in results.items():
        grad = [r.algorithms[n].gradient for n in names[:2]]
        grad_txt = " / ".join(f"{g.step_size:.3g}" for g in grad) if all(grad) else "–"
        row = [fig, r.metric] + [_fmt(r, n) for n in names]
        row += [f"{r.algorithms[n].step_size:.3g}" for n in names]
        row += [grad_txt, f"{r.timings.get('total', float('nan')):.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def reproduce(
    target: str,
    out_dir: str | Path,
    *,
    trials: int | None = None,
    seed: int = 0,
    config: str | Path | None = None,
    plot: bool = True,
    logger: Callable[[str], None] | None = None,
) -> dict[str, FigureResult]:
    """Run the figures of ``target`` and write their files into ``out_dir``.

    Args:
        target: a figure (``"fig2a"`` ... ``"fig3c"``), a family (``"fig2"``, ``"fig3"``) or
            ``"all"``.
        out_dir: output directory (created).
        trials: independent chains per figure (default: each configuration's, 200).
        seed: master seed.
        config: optional TOML file of settings (see :mod:`experiments.configs`).
        plot: also write PNG plots.
        logger: called with progress lines.

    Returns:
        ``{figure: FigureResult}``.
    """
    figures = expand_target(target)
    overrides = load_overrides(config, figures) if config is not None else {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    results = {}
    for fig in figures:
        results[fig] = run_figure(fig, trials, seed, overrides=overrides.get(fig), logger=logger)
        for path in save_result(results[fig], out, plot=plot):
            if logger is not None:
                logger(f"wrote {path}")
    if plot:
        from .plots import plot_overview

        for family in ("fig2", "fig3"):
            members = [results[f] for f in expand_target(family) if f in results]
            if len(members) > 1:
                path = plot_overview(members, out / f"{family}.png")
                if logger is not None:
                    logger(f"wrote {path}")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    table = summary_table(results)
    (out / "summary.md").write_text(
        table + f"\nWall time {wall:.1f} s (process CPU time {cpu:.1f} s) for `{target}` on "
        f"{os.cpu_count()} CPU cores, seed {seed}.\n"
    )
    (out / "summary.json").write_text(
        json.dumps(
            {
                "target": target,
                "seed": seed,
                "trials": trials,
                "config_file": None if config is None else str(config),
                "wall_time_s": wall,
                "cpu_time_s": cpu,
                "cpu_count": os.cpu_count(),
                "jax_version": jax.__version__,
                "platform": platform.platform(),
                "figures": {
                    fig: {
                        name: {
                            "final_mean": r.algorithms[name].final,
                            "final_std": float(r.algorithms[name].std[-1]),
                            "step_size": r.algorithms[name].step_size,
                        }
                        for name in r.algorithms
                    }
                    | {"wall_time_s": r.timings.get("total")}
                    for fig, r in results.items()
                },
            },
            indent=1,
        )
    )
    if logger is not None:
        logger(table)
        logger(f"total wall time {wall:.1f} s, CPU time {cpu:.1f} s")
    return results


def seed_sweep(
    target: str,
    seeds,
    out_dir: str | Path | None = None,
    *,
    trials: int | None = None,
    config: str | Path | None = None,
    logger: Callable[[str], None] | None = None,
) -> dict:
    """Repeat figures over several master seeds (new data, network and chains each time).

    The paper's claims compare algorithms on one data set; a sweep shows how often they hold
    across data sets. After the first seed every run reuses the compiled programs, so a
    seed costs about a second. Gradient tuning is switched off (it does not change the grid
    choice).

    Args:
        target: as in :func:`reproduce`.
        seeds: iterable of master seeds.
        out_dir: if given, writes ``sweep_{target}.json`` and ``sweep_{target}.md`` there.
        trials, config, logger: as in :func:`reproduce`.

    Returns:
        ``{figure: {"seeds", "metric", "final": {algorithm: [...]}, "step_size": {...},
        "diging_ahead": count of seeds where DIGing-SGLD beat DE-SGLD}}``.
    """
    figures = expand_target(target)
    seeds = [int(s) for s in seeds]
    overrides = load_overrides(config, figures) if config is not None else {}
    out = {}
    for fig in figures:
        extra = dict(overrides.get(fig, {}))
        if fig.startswith("fig2"):
            extra["gradient_tuning"] = False
        finals = {name: [] for name in ALGORITHMS}
        steps = {name: [] for name in ALGORITHMS}
        metric = None
        for seed in seeds:
            res = run_figure(fig, trials, seed, overrides=extra)
            metric = res.metric
            for name in ALGORITHMS:
                finals[name].append(res.final(name))
                steps[name].append(res.algorithms[name].step_size)
            if logger is not None:
                logger(
                    f"{fig} seed {seed}: "
                    + ", ".join(f"{name} {finals[name][-1]:.4f}" for name in ALGORITHMS)
                )
        dig, de = (np.asarray(finals[n]) for n in list(ALGORITHMS)[:2])
        ahead = int(np.sum(dig < de) if metric == "W2" else np.sum(dig > de))
        out[fig] = {
            "seeds": seeds,
            "metric": metric,
            "final": finals,
            "step_size": steps,
            "diging_ahead": ahead,
        }
    if out_dir is not None:
        path = Path(out_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / f"sweep_{target}.json").write_text(json.dumps(out, indent=1))
        (path / f"sweep_{target}.md").write_text(sweep_table(out))
    if logger is not None:
        logger(sweep_table(out))
    return out


def sweep_table(sweep: dict) -> str:
    """Markdown table of a :func:`seed_sweep`: mean ± std over seeds, DIGing-SGLD's wins."""
    names = list(ALGORITHMS)
    head = ["figure", "metric", "seeds"] + [f"{n} (mean ± sd over seeds)" for n in names]
    head += ["DIGing − DE (mean ± se)", "DIGing-SGLD ahead"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fig, entry in sweep.items():
        vals = {n: np.asarray(entry["final"][n]) for n in names}
        diff = vals[names[0]] - vals[names[1]]
        k = len(entry["seeds"])
        row = [fig, entry["metric"], str(k)]
        row += [f"{v.mean():.4f} ± {v.std(ddof=1) if k > 1 else 0:.4f}" for v in vals.values()]
        se = diff.std(ddof=1) / np.sqrt(k) if k > 1 else 0.0
        row += [f"{diff.mean():+.4f} ± {se:.4f}", f"{entry['diging_ahead']}/{k}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
