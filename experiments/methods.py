"""The methods sweep: every decentralized sampler and estimator on the paper's problems.

``methods_sweep`` runs each method of :data:`METHODS` on each panel of :data:`PANELS` (Fig. 2
(a)–(c), 2(b) at ``b = 1``, Fig. 3 (a)–(c) with label-sorted and random splits) for several
seeds, the step size tuned per method, seed and panel on a log grid exactly as the figures do
(:func:`~experiments.tuning.grid_search`: every grid point × every trial in one
compiled call, the best final value chosen). Per method and panel it records

* the final W2 (Fig. 2) or test accuracy (Fig. 3), mean over agents, at the chosen step;
* the tracker noise: the variance over chains of ``y_i − ȳ`` (each agent's tracker minus the
  agents' average), averaged over agents and coordinates, at the last iteration (``None`` for
  methods without a tracker);
* per-datum gradient evaluations per agent per iteration (the algorithm's count; SVRG's is
  ``2b + n_i/m``);
* wall time per iteration of one step size with all trials, from the grid run of the last seed
  (compiled by then when there are two seeds or more).

Choices (stated, not hidden): the control-variate methods run at the panel's ``b``, or at
``b = 1`` on full-batch panels (their purpose: the cost of a mini-batch of one at nearly
full-batch noise); "DIGing-SGLD (full batch)" is the reference they aim at; the others run at
the panel's ``b``. The momentum methods tune ``η`` on the square root of the SGLD grid (``γη = 1``
makes DE-SGHMC DE-SGLD at step ``η²``) with the friction set by ``γη ∈ {0.1, 0.5}``, the
better of the two kept. D-ULA tunes ``α₀`` on the SGLD grid divided by ``N`` (its local step,
drift ``αN ∇f_i`` and noise ``√(2Nα)``, is DE-SGLD's at step ``Nα``) with
``α_k = α₀/(k+1)^0.3`` and ``β_k = 1/(k+1)^0.1``.
"""

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import gradients
from dgsgld.posteriors.problems import linear_regression_problem
from dgsgld.samplers import DESGHMC, DESGLD, DULA, DIGingSGHMC, DIGingSGLD, PolynomialDecay
from dgsgld.tuning import grid_search

from .configs import apply_overrides, figure_config
from .figures import (
    _logistic_problem,
    _sampling_setup,
    _stream,
    _w2,
    derive_seeds,
)

__all__ = ["METHODS", "PANELS", "methods_sweep", "methods_table"]

#: SVRG's refresh period in the sweep (calls between full local gradients).
SVRG_PERIOD = 10

#: Method -> (sampler kind, estimator, batch): ``"panel"`` the panel's ``b``, ``"cv"`` the
#: panel's ``b`` or 1 on full-batch panels, ``"full"`` the full local batch (the reference the
#: control variates aim at).
METHODS: dict[str, tuple[str, str, str]] = {
    "DIGing-SGLD": ("diging", "minibatch", "panel"),
    "DE-SGLD": ("de", "minibatch", "panel"),
    "DIGing-SGLD+SVRG": ("diging", "svrg", "cv"),
    "DIGing-SGLD+SAGA": ("diging", "saga", "cv"),
    "DE-SGHMC": ("de_sghmc", "minibatch", "panel"),
    "DIGing-SGHMC": ("diging_sghmc", "minibatch", "panel"),
    "D-ULA": ("d_ula", "minibatch", "panel"),
    "DIGing-SGLD (full batch)": ("diging", "minibatch", "full"),
}

#: Panel -> (figure, overrides), in the order they run: fig2b at b = 1 and the two fig3a
#: panels first (a long sweep writes its files after every panel).
PANELS: dict[str, tuple[str, dict]] = {
    "fig2b (b=1)": ("fig2b", {"batch_size": 1}),
    "fig3a (random)": ("fig3a", {"partition": "random"}),
    "fig3a (by_label)": ("fig3a", {"partition": "by_label"}),
    "fig2b": ("fig2b", {}),
    "fig2a": ("fig2a", {}),
    "fig2c": ("fig2c", {}),
    "fig3b (random)": ("fig3b", {"partition": "random"}),
    "fig3b (by_label)": ("fig3b", {"partition": "by_label"}),
    "fig3c (random)": ("fig3c", {"partition": "random"}),
    "fig3c (by_label)": ("fig3c", {"partition": "by_label"}),
}

_FRICTION_PRODUCTS = (0.1, 0.5)  # γη of the momentum methods


def _estimator(name: str):
    return {"minibatch": gradients.minibatch, "saga": gradients.saga,
            "svrg": lambda: gradients.svrg(update_every=SVRG_PERIOD)}[name]()


@functools.cache
def _factory(kind: str, estimator: str, friction_product: float | None) -> Callable:
    """``step -> sampler``; one object per setting, so compiled grid runs are reused."""
    est = _estimator(estimator)
    if kind == "diging":
        return lambda step: DIGingSGLD(step, estimator=est)
    if kind == "de":
        return lambda step: DESGLD(step, estimator=est)
    if kind == "d_ula":
        return lambda step: DULA(PolynomialDecay(step, 0.3), PolynomialDecay(1.0, 0.1), est)
    make = DESGHMC if kind == "de_sghmc" else DIGingSGHMC
    return lambda step: make(step, friction_product / step, est)


class _TrackerNoise(eqx.Module):
    """Per iteration over chains: the variance over chains of the trackers' deviations from
    their network average, averaged over agents and coordinates (NaN without a tracker)."""

    def __call__(self, states):
        tracker = getattr(states, "tracker", None)
        if tracker is None:
            return jnp.full((), jnp.nan, states.position.dtype)
        dev = tracker - jnp.mean(tracker, axis=1, keepdims=True)
        return jnp.mean(jnp.var(dev, axis=0))


class _FinalScore(eqx.Module):
    target_mean: jax.Array | None = None
    target_cov: jax.Array | None = None

    def __call__(self, trace):
        ens = trace.ensemble
        if self.target_mean is None:
            return jnp.mean(ens["accuracy"][-1])
        moments = ens["moments"]
        final = _w2(moments.mean[-1], moments.cov[-1], self.target_mean, self.target_cov)
        return jnp.mean(final)


def _problem(config, seed):
    seeds = derive_seeds(seed)
    if config.__class__.__name__ == "LinearRegressionConfig":
        problem = linear_regression_problem(
            seeds["data"], num_samples=config.num_samples, dim=config.dim,
            num_agents=config.num_agents, prior_precision=config.prior_precision,
            noise_std=config.noise_std,
        )
    else:
        problem = _logistic_problem(config, seeds["data"])
    return problem, seeds


def run_panel(panel: str, seed: int, *, trials: int | None = None, methods=None,
              overrides: dict | None = None, logger=None) -> dict:
    """Every method on one panel for one seed; returns ``{method: record}``."""
    figure, panel_overrides = PANELS[panel]
    config = apply_overrides(figure_config(figure), {**panel_overrides, **(overrides or {})})
    if trials is not None:
        config = dataclasses.replace(config, trials=trials)
    problem, seeds = _problem(config, seed)
    schedule, potential, key, init, _ = _sampling_setup(config, problem, seeds)
    linear = problem.posterior_mean is not None
    if linear:
        stream = _stream(tracker=_TrackerNoise())
        score = _FinalScore(problem.posterior_mean, problem.posterior_cov)
    else:
        stream = _stream(problem.test_features, problem.test_targets, tracker=_TrackerNoise())
        score = _FinalScore()
    grid = config.step_grid()
    out = {}
    for name in methods or METHODS:
        kind, est_name, batching = METHODS[name]
        batch = {"panel": config.batch_size, "cv": config.batch_size or 1,
                 "full": None}[batching]
        pot = problem.potential(batch) if batch != config.batch_size else potential
        settings = [None]
        alg_grid = grid
        if kind in ("de_sghmc", "diging_sghmc"):
            settings, alg_grid = _FRICTION_PRODUCTS, np.sqrt(grid).astype(np.float32)
        elif kind == "d_ula":
            alg_grid = (grid / config.num_agents).astype(np.float32)
        best = None
        for setting in settings:
            t0 = time.perf_counter()
            search = grid_search(_factory(kind, est_name, setting), alg_grid, pot,
                                 schedule.matrices, init, key, config.num_steps,
                                 score_fn=score, ensemble_fn=stream,
                                 mode="min" if linear else "max")
            seconds = time.perf_counter() - t0
            value = float(search.scores[search.best_index])
            if best is None or (value < best[0] if linear else value > best[0]):
                best = (value, search, setting, seconds)
        value, search, setting, seconds = best
        ens = jax.tree.map(lambda a: np.asarray(a)[search.best_index], search.ensemble)
        if linear:
            moments = ens["moments"]
            per_agent = np.asarray(_w2(moments.mean[-1], moments.cov[-1],
                                       problem.posterior_mean, problem.posterior_cov))
        else:
            per_agent = ens["accuracy"][-1]
        tracker = float(ens["tracker"][-1])
        out[name] = {
            "final": float(np.mean(per_agent)),
            "step_size": search.best_step_size,
            "friction_times_step": setting,
            "batch_size": batch or pot.local_size,
            "gradient_evaluations": gradients.evaluations_per_step(_estimator(est_name), pot),
            "tracker_noise": tracker if np.isfinite(tracker) else None,
            "consensus": float(ens["consensus"][-1]),
            "ms_per_iteration": 1e3 * seconds / (len(alg_grid) * config.num_steps),
        }
        if logger is not None:
            logger(f"{panel} seed {seed}: {name:<17} {out[name]['final']:.4f} "
                   f"(step {search.best_step_size:.3g}) [{seconds:.1f} s]")
    return {"metric": "W2" if linear else "accuracy", "methods": out}


def methods_sweep(seeds, out_dir=None, *, panels=None, methods=None, trials=None,
                  overrides: dict | None = None, plot: bool = True, logger=None,
                  update: bool = False) -> dict:
    """Run :func:`run_panel` over panels and seeds; write ``methods.json``, ``methods.md`` and
    ``methods.png`` into ``out_dir`` when given. ``overrides`` apply to every panel's config
    (e.g. ``{"num_step_sizes": 9}``).

    ``update=True`` re-runs part of an earlier sweep: the rows of this run's panels and
    methods replace those of ``out_dir/methods.json`` (same seeds, trials and overrides, else
    ``ValueError``), the other rows are kept, and the table and figure are rewritten from the
    merged result. Every row depends only on its method's settings, the panel and the seed."""
    seeds = [int(s) for s in seeds]
    base = None
    if update:
        if out_dir is None or not (Path(out_dir) / "methods.json").is_file():
            raise ValueError("`update=True` needs `out_dir` holding an earlier methods.json.")
        base = json.loads((Path(out_dir) / "methods.json").read_text())
        for field, value in (("seeds", seeds), ("trials", trials),
                             ("overrides", overrides or {})):
            if base[field] != value:
                raise ValueError(f"`update=True`: the earlier sweep's {field} were "
                                 f"{base[field]!r}, this run's are {value!r}.")
    panels = list(panels or PANELS)
    for p in panels:
        if p not in PANELS:
            raise ValueError(f"Unknown panel {p!r}; expected one of {list(PANELS)}.")
    for m in methods or ():
        if m not in METHODS:
            raise ValueError(f"Unknown method {m!r}; expected one of {list(METHODS)}.")
    start = time.perf_counter()
    result = {"seeds": seeds, "trials": trials, "overrides": overrides or {}, "panels": {}}
    for panel in panels:
        runs = [run_panel(panel, s, trials=trials, methods=methods, overrides=overrides,
                          logger=logger) for s in seeds]
        names = list(runs[0]["methods"])
        result["panels"][panel] = {
            "metric": runs[0]["metric"],
            "methods": {
                n: {k: [r["methods"][n][k] for r in runs] for k in runs[0]["methods"][n]}
                for n in names
            },
        }
        result["wall_time_s"] = time.perf_counter() - start
        if out_dir is not None:  # after every panel: a long sweep leaves partial results
            _write(result if base is None else _merge(base, result), Path(out_dir), plot)
    if base is not None:
        result = _merge(base, result)
    if logger is not None:
        logger(methods_table(result))
    return result


def _merge(base: dict, new: dict) -> dict:
    """``base`` with ``new``'s rows in place of its own (new panels and methods appended);
    ``new``'s wall time recorded under ``updates``."""
    out = json.loads(json.dumps(base))
    for panel, entry in new["panels"].items():
        slot = out["panels"].setdefault(panel, {"metric": entry["metric"], "methods": {}})
        slot["methods"].update(entry["methods"])
    out.setdefault("updates", []).append({
        "panels": list(new["panels"]),
        "methods": list(next(iter(new["panels"].values()))["methods"]) if new["panels"] else [],
        "wall_time_s": new.get("wall_time_s"),
    })
    return out


def _write(result: dict, path: Path, plot: bool) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "methods.json").write_text(json.dumps(result, indent=1))
    (path / "methods.md").write_text(methods_table(result))
    if plot:
        plot_methods(result, path / "methods.png")


def _mean_sd(values) -> str:
    v = np.asarray([np.nan if x is None else x for x in values], np.float64)
    if np.all(np.isnan(v)):
        return "–"
    sd = np.nanstd(v, ddof=1) if np.sum(~np.isnan(v)) > 1 else 0.0
    return f"{np.nanmean(v):.4f} ± {sd:.4f}"


def methods_table(result: dict) -> str:
    """Markdown: per panel and method, final value, tracker noise, cost (mean ± sd over seeds)."""
    head = ["panel", "metric", "method", "final (mean ± sd)", "ahead of DE-SGLD",
            "tracker noise", "grad evals / agent / iter", "ms / iter", "step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for panel, entry in result["panels"].items():
        de = np.asarray(entry["methods"].get("DE-SGLD", {}).get("final", []), np.float64)
        for name, rec in entry["methods"].items():
            vals = np.asarray(rec["final"], np.float64)
            if name == "DE-SGLD" or de.size == 0:
                ahead = "–"
            else:
                wins = vals < de if entry["metric"] == "W2" else vals > de
                ahead = f"{int(np.sum(wins))}/{vals.size}"
            lines.append("| " + " | ".join([
                panel, entry["metric"], name, _mean_sd(rec["final"]), ahead,
                _mean_sd(rec["tracker_noise"]).replace(" ± ", " ± ") if any(
                    t is not None for t in rec["tracker_noise"]) else "–",
                f"{np.mean(rec['gradient_evaluations']):.3g}",
                f"{rec['ms_per_iteration'][-1]:.3g}",
                f"{np.median(rec['step_size']):.3g}",
            ]) + " |")
    return "\n".join(lines) + "\n"


def plot_methods(result: dict, path) -> Path:
    """Bar chart per panel: final value per method (mean over seeds, sd as error bars)."""
    from dgsgld.evaluate.plots import pyplot

    plt = pyplot(headless=True)

    panels = list(result["panels"])
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        entry = result["panels"][panel]
        names = list(entry["methods"])
        vals = [np.asarray(entry["methods"][n]["final"], np.float64) for n in names]
        ax.bar(range(len(names)), [v.mean() for v in vals],
               yerr=[v.std(ddof=1) if v.size > 1 else 0 for v in vals], color="C0")
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{panel}: final {entry['metric']}", fontsize=9)
        if entry["metric"] == "accuracy":
            lo = min(v.mean() for v in vals)
            ax.set_ylim(max(0.0, lo - 0.05), 1.0)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
