"""The step-size proposer on the paper's problems, against the paper's tuned step sizes.

For each figure of §4 and each of DIGing-SGLD and DE-SGLD,
:func:`dgsgld.tuning.propose_step_size` runs on the figure's problem, network, initial
positions (the first 64 of its 200 chains) and key, and its proposal is compared with the step
the figure tuned on its grid (``docs/figures/<fig>.json``). Each figure gets the criterion its
tuning used, as a user with their own model would give it:

* Figure 2 was tuned for W2 to the exact posterior at iteration ``config.num_steps`` (100):
  the proposer scores its grid by minus that W2 (:class:`PosteriorW2`: each agent's Gaussian
  fit over the pilot's chains against the posterior, averaged over agents, as the figure
  measures it) after a pilot as long as the figure's runs.
* Figure 3 was tuned for test accuracy at iteration ``config.num_steps`` (100): the proposer
  scores its grid by the per-chain accuracy on the problem's **validation** split
  (:class:`~experiments.Problem`; never the test set) after a pilot as long as the
  figure's runs.

``score=False`` (``--no-score``): the proposer's default criterion instead (the largest step
whose exact stationary law is within the tolerances, a step for sampling), with its default
200-iteration pilot.

``python -m experiments.proposals --out docs/figures`` writes ``stepsize_proposals.json``
and ``stepsize_proposals.md`` (the table quoted in ``docs/results/step-sizes.md``).
"""

import argparse
import json
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import evaluate, tuning
from dgsgld.posteriors.problems import linear_regression_problem, logistic_labels
from dgsgld.samplers import DESGLD, DIGingSGLD

from .configs import figure_config
from .figures import _logistic_problem, _sampling_setup, _W2Criterion, derive_seeds

__all__ = ["PosteriorW2", "ValidationAccuracy", "compare", "paper_case", "table"]

FIGURES = ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b", "fig3c")
SAMPLERS = {cls.name: cls for cls in (DIGingSGLD, DESGLD)}
_DOCS = Path(__file__).resolve().parents[1] / "docs" / "figures"


class PosteriorW2(eqx.Module):
    """``positions (C, N, p) -> scalar``: minus the W2 between each agent's Gaussian fit over
    the chains and the exact posterior, averaged over agents (Figure 2's metric as a
    ``score_fn``: higher is better)."""

    target_mean: jax.Array
    target_cov: jax.Array

    def __call__(self, positions):
        return -_W2Criterion(self.target_mean, self.target_cov)(positions)


class ValidationAccuracy(eqx.Module):
    """``positions (C, N, p) -> (C,)``: each chain's accuracy on a validation split, averaged
    over agents (a ``score_fn`` for the proposer)."""

    features: jax.Array
    targets: jax.Array

    def __call__(self, positions):
        hits = evaluate.label_accuracy(logistic_labels(positions, self.features),
                                       self.targets > 0.5)
        return jnp.mean(hits, axis=-1)


def paper_case(fig: str, alg: str, *, seed: int = 0, num_steps: int | None = None,
               score: bool = True) -> tuning.StepSizeReport:
    """The proposer's report on figure ``fig`` for sampler ``alg`` (see the module doc);
    ``num_steps``: the pilot's length instead of the defaults described there; ``score=False``:
    the default criterion instead of the figure's metric."""
    config = figure_config(fig)
    seeds = derive_seeds(seed)
    if fig.startswith("fig3"):
        problem = _logistic_problem(config, seeds["data"])
        score_fn = ValidationAccuracy(problem.validation_features, problem.validation_targets)
    else:
        problem = linear_regression_problem(
            seeds["data"], num_samples=config.num_samples, dim=config.dim,
            num_agents=config.num_agents, prior_precision=config.prior_precision,
            noise_std=config.noise_std)
        score_fn = PosteriorW2(jnp.asarray(problem.posterior_mean),
                               jnp.asarray(problem.posterior_cov))
    kwargs = {"num_steps": config.num_steps, "score_fn": score_fn} if score else {}
    if num_steps is not None:
        kwargs["num_steps"] = num_steps
    schedule, potential, key, init, _ = _sampling_setup(config, problem, seeds)
    return tuning.propose_step_size(SAMPLERS[alg], potential, schedule, jnp.asarray(init),
                                    key, **kwargs)


def _tuned(fig: str, alg: str, figures_dir: Path) -> dict:
    return json.loads((figures_dir / f"{fig}.json").read_text())["algorithms"][alg]


def _at(tuned: dict, eta: float) -> float:
    """The figure's metric on its tuning grid, interpolated in ``log η`` (clamped at its ends)."""
    grid = tuned["tuning_grid"]
    final = np.array([np.nan if v is None else v for v in grid["final"]])  # None: diverged
    return float(np.interp(np.log(eta), np.log(grid["step_sizes"]), final))


def compare(figures=FIGURES, *, num_steps: int | None = None, score: bool = True,
            figures_dir: Path = _DOCS, logger=print) -> list[dict]:
    """One row per figure and sampler: the proposal, the tuned step, their ratio, the metric
    at each (from the figure's tuning grid) and the pilot's consensus error at the proposal."""
    rows = []
    for fig in figures:
        metric = "acc" if fig.startswith("fig3") else "W2"
        for alg in SAMPLERS:
            t0 = time.perf_counter()
            report = paper_case(fig, alg, num_steps=num_steps, score=score)
            seconds = time.perf_counter() - t0
            tuned = _tuned(fig, alg, figures_dir)
            i = int(np.flatnonzero(report.step_sizes == report.step_size)[0])
            row = {
                "figure": fig, "sampler": alg,
                "criterion": ("exact law" if report.score is None else
                              "validation accuracy" if metric == "acc"
                              else f"W2 at {report.num_steps}"),
                "proposed": report.step_size, "tuned": tuned["step_size"],
                "ratio": report.step_size / tuned["step_size"],
                "metric": metric,
                "metric_at_proposal": _at(tuned, report.step_size),
                "metric_at_tuned": tuned["final_mean"], "metric_sd_at_tuned": tuned["final_std"],
                "consensus_at_proposal": float(report.consensus[i]),
                "inflation_at_proposal": float(report.inflation[i]),
                "accurate_range": list(report.accurate_range),
                "score_range": None if report.score_range is None else list(report.score_range),
                "grid": [float(report.step_sizes[0]), float(report.step_sizes[-1])],
                "pilot_steps": report.num_steps, "pilot_chains": report.num_chains,
                "seconds": seconds,
            }
            rows.append(row)
            if logger is not None:
                logger(f"{fig} {alg}: proposed {row['proposed']:.4g}, tuned {row['tuned']:.4g}, "
                       f"ratio {row['ratio']:.3g} ({seconds:.0f} s)")
    return rows


def _span(r) -> str:
    return "–" if r is None else f"{r[0]:.3g} – {r[1]:.3g}"


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table, and a count of those within a factor 2."""
    out = ["| figure | sampler | criterion | pilot steps | proposed η | tuned η | ratio "
           "| metric at proposal | metric at tuned (± sd over agents) "
           "| pilot consensus error at proposal | steps within 1 se of the best score |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        miss = not 0.5 <= r["ratio"] <= 2
        ratio = f"**{r['ratio']:.2g}**" if miss else f"{r['ratio']:.2g}"
        out.append(
            f"| {r['figure']} | {r['sampler']} | {r['criterion']} | {r['pilot_steps']} | "
            f"{r['proposed']:.3g} | "
            f"{r['tuned']:.3g} | {ratio} | {r['metric']} {r['metric_at_proposal']:.3f} | "
            f"{r['metric']} {r['metric_at_tuned']:.3f} ± {r['metric_sd_at_tuned']:.3f} | "
            f"{r['consensus_at_proposal']:.3g} | {_span(r['score_range'])} |")
    within = sum(0.5 <= r["ratio"] <= 2 for r in rows)
    out.append("")
    out.append(f"{within} of {len(rows)} proposals are within a factor 2 of the tuned step.")
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for stepsize_proposals.json and .md (default: print only)")
    parser.add_argument("--figures", nargs="*", default=list(FIGURES), choices=FIGURES)
    parser.add_argument("--pilot-steps", type=int, default=None,
                        help="pilot length for every figure (default: see the module doc)")
    parser.add_argument("--no-score", action="store_true",
                        help="the proposer's default criterion, not the figure's metric")
    args = parser.parse_args(argv)
    rows = compare(args.figures, num_steps=args.pilot_steps, score=not args.no_score)
    text = table(rows)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stepsize_proposals.json").write_text(json.dumps(rows, indent=1) + "\n")
        (args.out / "stepsize_proposals.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
