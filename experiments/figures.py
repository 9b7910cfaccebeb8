"""The experiments of §4: Figures 2 and 3, step-size tuning included, as library functions.

Each run builds the problem, the time-varying network and the initial chains from one integer
``seed``; tunes every algorithm's step size on a log-spaced grid (all grid points × all trials
in one compiled call per algorithm, the best final value chosen); and returns per-iteration,
per-agent curves at the chosen step sizes:

* Figure 2 (:func:`fig2`): per agent and iteration, the W2 distance between the Gaussian fit of
  the trials (mean and ``ddof = 1`` covariance over chains) and the exact posterior. The W2
  moments are streamed during the grid run, so the curves of every grid point come from the
  same compiled call. DIGing-SGLD and DE-SGLD are also tuned by gradient descent on ``log η``.
* Figure 3 (:func:`fig3`): per agent and iteration, the test accuracy of the agent's sample,
  averaged over trials. On the synthetic data the accuracy curves of every grid point are
  streamed in the grid run; on breast cancer (512 test points × 31 features, where that would
  cost more than the sampling) the grid run scores the final samples only and one more run per
  algorithm at the chosen step streams the curves.

DIGing-SGLD and DE-SGLD share the data, the network schedule, the initial positions and the
PRNG key (hence the same Langevin noise): their difference is the algorithm, not the luck of
the draw. Centralized SGLD on the pooled data is the reference; its natural step size is
``η / N`` of the decentralized ones, so its grid starts at ``step_min / N`` and, with the same
spacing, extends up to ``step_max`` (see :meth:`LinearRegressionConfig.step_grid`).
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import evaluate, networks
from dgsgld.posteriors.problems import (
    Problem,
    breast_cancer_problem,
    derive_seeds,
    linear_regression_problem,
    logistic_labels,
    logistic_regression_problem,
)
from dgsgld.runner import loop as run
from dgsgld.samplers import DESGLD, SGLD, DIGingSGLD
from dgsgld.tuning import GradientTuning, grid_search, tune_step_size_gradient

from .configs import (
    FIGURE_TITLES,
    LinearRegressionConfig,
    LogisticRegressionConfig,
    apply_overrides,
    figure_config,
)

__all__ = [
    "ALGORITHMS",
    "AlgorithmResult",
    "FigureResult",
    "derive_seeds",
    "fig2",
    "fig3",
    "make_network",
    "run_figure",
    "run_linear_regression",
    "run_logistic_regression",
]

#: The centralized reference's label: SGLD on the pooled data.
CENTRALIZED = f"{SGLD.name} (centralized)"
#: Display name -> sampler factory, in plotting order. The last one is the centralized reference.
ALGORITHMS: dict[str, Callable] = {DIGingSGLD.name: DIGingSGLD, DESGLD.name: DESGLD,
                                   CENTRALIZED: SGLD}


@dataclass(frozen=True)
class AlgorithmResult:
    """One algorithm's curves at its chosen step size, and its tuning.

    Attributes:
        step_size: the chosen step size (best final value on the grid).
        mean, std: ``(T + 1,)`` mean and standard deviation over agents of the per-agent metric
            (W2 or accuracy) at iterations ``0..T``; ``std`` is zero for centralized SGLD.
        per_agent: ``(T + 1, N)`` the per-agent metric (``N = 1`` for centralized SGLD).
        consensus: ``(T + 1,)`` consensus error over the trials
            (:func:`dgsgld.evaluate.ensemble_consensus_error`; zero for centralized SGLD).
        grid, grid_scores, grid_diverged: ``(G,)`` step sizes, final value at each (mean over
            agents at the last iteration; ``inf`` / ``0`` where the run diverged) and divergence.
        gradient: gradient-based tuning of the step size, or ``None``.
    """

    step_size: float
    mean: np.ndarray
    std: np.ndarray
    per_agent: np.ndarray
    consensus: np.ndarray
    grid: np.ndarray
    grid_scores: np.ndarray
    grid_diverged: np.ndarray
    gradient: GradientTuning | None = None

    @property
    def final(self) -> float:
        """Mean over agents of the metric at the last iteration."""
        return float(self.mean[-1])


@dataclass(frozen=True)
class FigureResult:
    """Everything one figure produced.

    Attributes:
        name: ``"fig2a"``, ...
        title: the caption used on plots.
        metric: ``"W2"`` (lower is better) or ``"accuracy"`` (higher is better).
        config: the configuration dataclass that ran.
        seed: the master seed; ``seeds`` the derived data/network/sampling seeds.
        iterations: ``(T + 1,)`` iteration numbers ``0..T``.
        algorithms: display name -> :class:`AlgorithmResult` (DIGing-SGLD, DE-SGLD, centralized
            SGLD).
        references: named horizontal reference levels (e.g. the W2 of ``trials`` exact
            posterior draws, the test accuracy of the true parameter).
        timings: seconds spent per phase and in total.
    """

    name: str
    title: str
    metric: str
    config: Any
    seed: int
    seeds: dict
    iterations: np.ndarray
    algorithms: dict
    references: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    def final(self, algorithm: str) -> float:
        return self.algorithms[algorithm].final

    def to_dict(self) -> dict:
        """A JSON-ready dictionary (non-finite numbers become ``None``)."""
        algs = {}
        for name, res in self.algorithms.items():
            entry = {
                "step_size": res.step_size,
                "final_mean": res.final,
                "final_std": float(res.std[-1]),
                "mean": res.mean,
                "std": res.std,
                "consensus_error": res.consensus,
                "per_agent": res.per_agent,
                "tuning_grid": {
                    "step_sizes": res.grid,
                    "final": res.grid_scores,
                    "diverged": res.grid_diverged,
                },
            }
            if res.gradient is not None:
                entry["gradient_tuning"] = {
                    "step_size": res.gradient.step_size,
                    "step_sizes": res.gradient.step_sizes,
                    "losses": res.gradient.losses,
                }
            algs[name] = entry
        out = {
            "figure": self.name,
            "title": self.title,
            "metric": self.metric,
            "config": asdict(self.config),
            "config_class": type(self.config).__name__,
            "seed": self.seed,
            "seeds": self.seeds,
            "iterations": self.iterations,
            "algorithms": algs,
            "references": self.references,
            "timings_s": self.timings,
        }
        return _jsonable(out)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray | jax.Array):
        return _jsonable(np.asarray(x).tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x


# ---------------------------------------------------------------- set-up


def make_network(config, seed: int) -> networks.Schedule:
    """The configured time-varying barbell or lollipop schedule."""
    build = networks.barbell if config.network == "barbell" else networks.lollipop
    return build(config.num_agents, period=config.period, seed=seed)


def _initial_positions(seed: int, config, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(C, N, p)`` decentralized and ``(C, p)`` centralized starts, ``N(0, init_std² I)``
    i.i.d. over trials and agents (drawn with NumPy: nothing to compile)."""
    rng = np.random.default_rng(seed)
    dec = config.init_std * rng.standard_normal((config.trials, config.num_agents, dim))
    cen = config.init_std * rng.standard_normal((config.trials, dim))
    return dec.astype(np.float32), cen.astype(np.float32)


def _agent_axis(position):
    """Centralized positions ``(C, p)`` as one agent, ``(C, 1, p)``."""
    return position[:, None, :] if position.ndim == 2 else position


def _moments(positions):
    """Mean ``(N, p)`` and ``ddof = 1`` covariance ``(N, p, p)`` over chains of ``(C, N, p)``."""
    return evaluate.empirical_moments(positions, axis=0, ddof=1)


def _w2(mean, cov, target_mean, target_cov):
    """Per-agent W2 between ``N(mean, cov)`` (leading axes ``...``) and the target."""
    return evaluate.gaussian_w2(
        mean,
        cov,
        jnp.broadcast_to(target_mean, mean.shape),
        jnp.broadcast_to(target_cov, cov.shape),
    )


def _stream(features=None, targets=None, **extra) -> evaluate.Metric:
    """Streamed per iteration over chains, centralized positions as one agent: each agent's
    moments (Fig. 2: ``"moments"``) or test accuracy on ``features``, ``targets`` (Fig. 3:
    ``"accuracy"``), the consensus error (``"consensus"``), and the ``extra`` metrics."""
    if features is None:
        main = {"moments": evaluate.streamed_moments(flatten=_agent_axis)}
    else:
        main = {"accuracy": evaluate.streamed_accuracy(
            logistic_labels, jnp.asarray(features), jnp.asarray(targets) > 0.5,
            flatten=_agent_axis)}
    consensus = evaluate.streamed_consensus_error(flatten=_agent_axis)
    return evaluate.combine(**main, consensus=consensus, **extra)


class _FinalW2(eqx.Module):
    """Grid score: mean over agents of the W2 at the last streamed iteration."""

    target_mean: jax.Array
    target_cov: jax.Array

    def __call__(self, trace):
        moments = trace.ensemble["moments"]
        return jnp.mean(_w2(moments.mean[-1], moments.cov[-1], self.target_mean,
                            self.target_cov))


class _W2Criterion(eqx.Module):
    """Differentiable criterion of the final samples: mean over agents of their W2."""

    target_mean: jax.Array
    target_cov: jax.Array

    def __call__(self, position):
        mean, cov = _moments(_agent_axis(position))
        return jnp.mean(_w2(mean, cov, self.target_mean, self.target_cov))


class _FinalAccuracy(eqx.Module):
    """Grid score: test accuracy of the final samples, averaged over trials and agents."""

    features: jax.Array
    targets: jax.Array

    def __call__(self, trace):
        hits = evaluate.label_accuracy(logistic_labels(trace.state.position, self.features),
                                       self.targets > 0.5)
        return jnp.mean(hits)


class _LastAccuracy(eqx.Module):
    """Grid score from streamed accuracies: mean over agents at the last iteration."""

    def __call__(self, trace):
        return jnp.mean(trace.ensemble["accuracy"][-1])


#: Largest ``grid size x test-set entries`` for which the grid run streams per-iteration
#: accuracies of every grid point (about 1 % of the sampler's own cost at that size).
_STREAM_BUDGET = 2**16


#: ``_w2`` as one compiled call, for the curves computed on the host after a run.
_w2_curves = jax.jit(_w2)


def _exact_draws(problem: Problem, trials: int, seed: int, replicates: int = 64) -> np.ndarray:
    """``(trials, replicates, p)`` float32 exact posterior draws (drawn with NumPy)."""
    rng = np.random.default_rng(seed)
    mean = np.asarray(problem.posterior_mean, np.float64)
    cov = np.asarray(problem.posterior_cov, np.float64)
    return rng.multivariate_normal(mean, cov, size=(trials, replicates)).astype(np.float32)


def _exact_draw_floor(problem: Problem, trials: int, seed: int, replicates: int = 64) -> float:
    """Expected W2 between the Gaussian fit of ``trials`` exact posterior draws and the
    posterior: the level a perfect sampler reaches with this many trials."""
    m, s = _moments(jnp.asarray(_exact_draws(problem, trials, seed, replicates)))
    return float(np.mean(_w2_curves(m, s, problem.posterior_mean, problem.posterior_cov)))


def _log(logger, msg):
    if logger is not None:
        logger(msg)


# ---------------------------------------------------------------- the figures' runs


def _sampling_setup(config, problem: Problem, seeds: dict):
    """``(schedule, potential, run key, decentralized init, centralized init)`` of a figure."""
    schedule = make_network(config, seeds["network"])
    potential = problem.potential(config.batch_size)
    key_run = jax.random.key(seeds["sampling"])
    init_dec, init_cen = _initial_positions(seeds["init"], config, problem.dim)
    return schedule, potential, key_run, init_dec, init_cen


def _algorithm_runs(config, schedule, init_dec, init_cen):
    """Per algorithm of the figures: ``(name, make, centralized, step grid, init, mixing)``."""
    for alg_name, make in ALGORITHMS.items():
        central = alg_name == CENTRALIZED
        yield (alg_name, make, central, config.step_grid(centralized=central),
               init_cen if central else init_dec, None if central else schedule.matrices)


def _run_figure(config, seed: int, problem_fn: Callable, tune_fn: Callable,
                references_fn: Callable, *, metric: str, name: str, title: str | None,
                logger: Callable[[str], None] | None) -> FigureResult:
    """What Figures 2 and 3 share: seeds, problem and sampling set-up, one tuned run per
    algorithm (timed and logged), then the references.

    ``problem_fn(config, data_seed) -> Problem``; ``tune_fn(problem, potential, key, make,
    centralized, grid, init, mixing) -> (AlgorithmResult, log suffix)``;
    ``references_fn(problem, seeds) -> {label: value}``.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    seeds = derive_seeds(seed)
    problem = problem_fn(config, seeds["data"])
    schedule, potential, key_run, init_dec, init_cen = _sampling_setup(config, problem, seeds)
    timings, results = {}, {}
    for alg_name, make, central, alg_grid, init, mixing in _algorithm_runs(
        config, schedule, init_dec, init_cen
    ):
        t0 = time.perf_counter()
        result, suffix = tune_fn(problem, potential, key_run, make, central, alg_grid, init, mixing)
        results[alg_name] = result
        timings[alg_name] = time.perf_counter() - t0
        _log(logger, f"{name}: {alg_name:<19} {metric}={result.final:.4f} at step "
                     f"{result.step_size:.4g}{suffix} [{timings[alg_name]:.1f} s]")
    references = references_fn(problem, seeds)
    timings["total"] = time.perf_counter() - start
    timings["total_cpu"] = time.process_time() - cpu_start
    return FigureResult(name, title or name, metric, config, int(seed), seeds,
                        np.arange(config.num_steps + 1), results, references, timings)


def _search(make, grid, potential, mixing, init, key, config, score_fn, mode, ensemble_fn=None):
    """The figures' grid search: every step size of ``grid`` × every trial in one call."""
    return grid_search(make, grid, potential, mixing, init, key, config.num_steps,
                       score_fn=score_fn, ensemble_fn=ensemble_fn, mode=mode)


def _curves_result(search, curves, consensus, gradient=None) -> AlgorithmResult:
    """An :class:`AlgorithmResult` of per-iteration, per-agent ``curves`` at the chosen step."""
    return AlgorithmResult(search.best_step_size, curves.mean(axis=1), curves.std(axis=1),
                           curves, consensus, search.step_sizes, search.scores,
                           search.diverged, gradient)


# ---------------------------------------------------------------- Figure 2


def run_linear_regression(
    config: LinearRegressionConfig,
    seed: int = 0,
    *,
    name: str = "fig2",
    title: str | None = None,
    logger: Callable[[str], None] | None = None,
) -> FigureResult:
    """Figure 2 for any :class:`LinearRegressionConfig`; see :func:`fig2`."""
    config.check_gradient_tuning()

    def problem_fn(config, data_seed):
        return linear_regression_problem(
            data_seed,
            num_samples=config.num_samples,
            dim=config.dim,
            num_agents=config.num_agents,
            prior_precision=config.prior_precision,
            noise_std=config.noise_std,
        )

    def tune_fn(problem, potential, key, make, central, grid, init, mixing):
        target = (problem.posterior_mean, problem.posterior_cov)
        search = _search(make, grid, potential, mixing, init, key, config,
                         _FinalW2(*target), "min", ensemble_fn=_stream())
        moments, consensus = search.ensemble["moments"], search.ensemble["consensus"]
        mean, cov, consensus = (np.asarray(a)[search.best_index]
                                for a in (moments.mean, moments.cov, consensus))
        per_agent = np.asarray(_w2_curves(mean, cov, *target), np.float64)
        gradient = None
        if config.gradient_tuning and not central:
            gradient = tune_step_size_gradient(
                make,
                potential,
                mixing,
                init,
                key,
                config.num_steps,
                _W2Criterion(*target),
                float(config.step_grid()[0]),
                num_iterations=config.gradient_iterations,
                learning_rate=config.learning_rate,
            )
        suffix = "" if gradient is None else f" (gradient tuning: {gradient.step_size:.4g})"
        return _curves_result(search, per_agent, np.asarray(consensus, np.float64),
                              gradient), suffix

    def references_fn(problem, seeds):
        floor = _exact_draw_floor(problem, config.trials, seeds["reference"])
        return {f"W2 of {config.trials} exact posterior draws": floor}

    return _run_figure(config, seed, problem_fn, tune_fn, references_fn, metric="W2",
                       name=name, title=title, logger=logger)


def _preset(family: str, variant: str, trials: int | None, overrides: dict | None, config,
            config_type: type):
    """``(name, configuration)`` of a figure call: the preset (or ``config``, which must be a
    ``config_type``) with ``overrides`` and ``trials`` applied."""
    if variant not in ("a", "b", "c"):
        raise ValueError(f"`variant` of Figure {family} must be 'a', 'b' or 'c'; got {variant!r}.")
    name = f"fig{family}{variant}"
    if config is None:
        config = figure_config(name)
    if overrides:
        config = apply_overrides(config, overrides, where=f"overrides for {name}")
    if trials is not None:
        config = apply_overrides(config, {"trials": trials}, where="`trials`")
    if not isinstance(config, config_type):
        raise ValueError(f"`config` must be a {config_type.__name__}; got {type(config).__name__}.")
    return name, config


def fig2(
    variant: str = "a",
    trials: int | None = None,
    seed: int = 0,
    *,
    config=None,
    overrides: dict | None = None,
    logger: Callable[[str], None] | None = None,
) -> FigureResult:
    """Figure 2: Bayesian linear regression, W2 to the exact posterior, per agent.

    Args:
        variant: ``"a"`` barbell full batch, ``"b"`` barbell mini-batch ``b = 3``, ``"c"``
            lollipop full batch.
        trials: independent chains (default: the configuration's, 200).
        seed: master seed (data, network and chains derive from it).
        config: a :class:`LinearRegressionConfig` to use instead of the preset.
        overrides: ``{field: value}`` applied to the configuration.
        logger: called with one progress line per algorithm.

    Returns:
        A :class:`FigureResult` with metric ``"W2"``.

    Example:
        >>> res = fig2("a", trials=50)                                    # doctest: +SKIP
        >>> res.final("DIGing-SGLD"), res.algorithms["DIGing-SGLD"].step_size  # doctest: +SKIP
    """
    name, config = _preset("2", variant, trials, overrides, config, LinearRegressionConfig)
    return run_linear_regression(config, seed, name=name, title=FIGURE_TITLES[name], logger=logger)


# ---------------------------------------------------------------- Figure 3


def _logistic_problem(config: LogisticRegressionConfig, seed: int) -> Problem:
    if config.dataset == "breast_cancer":
        return breast_cancer_problem(
            seed,
            train_fraction=config.train_fraction,
            train_size=config.train_size,
            num_agents=config.num_agents,
            prior_precision=config.prior_precision,
            partition=config.partition,
        )
    return logistic_regression_problem(
        seed,
        num_samples=config.num_samples,
        dim=config.dim,
        train_fraction=config.train_fraction,
        train_size=config.train_size,
        num_agents=config.num_agents,
        prior_precision=config.prior_precision,
        partition=config.partition,
    )


def run_logistic_regression(
    config: LogisticRegressionConfig,
    seed: int = 0,
    *,
    name: str = "fig3",
    title: str | None = None,
    logger: Callable[[str], None] | None = None,
) -> FigureResult:
    """Figure 3 for any :class:`LogisticRegressionConfig`; see :func:`fig3`."""
    # Stream the accuracy curves of every grid point in the grid run when that is cheap
    # (synthetic data); otherwise score the final samples only and stream the curves in a
    # second run at the chosen step (breast cancer: 512 test points x 31 features).

    def tune_fn(problem, potential, key, make, central, grid, init, mixing):
        test = (problem.test_features, problem.test_targets)
        if config.step_grid().size * test[0].size <= _STREAM_BUDGET:
            search = _search(make, grid, potential, mixing, init, key, config,
                             _LastAccuracy(), "max", ensemble_fn=_stream(*test))
            acc, consensus = (np.asarray(search.ensemble[k], np.float64)[search.best_index]
                              for k in ("accuracy", "consensus"))
        else:
            search = _search(make, grid, potential, mixing, init, key, config,
                             _FinalAccuracy(*test), "max")
            trace = run.sample(
                make(search.best_step_size),
                potential,
                mixing,
                init,
                key,
                config.num_steps,
                output=run.Output(ensemble_fn=_stream(*test)),
                on_divergence="flag",
            )
            acc, consensus = (np.asarray(trace.ensemble[k], np.float64)
                              for k in ("accuracy", "consensus"))
        return _curves_result(search, acc, consensus), ""

    def references_fn(problem, seeds):
        if problem.true_params is None:
            return {}
        return {"accuracy of the true parameter": float(problem.test_accuracy(problem.true_params))}

    return _run_figure(config, seed, _logistic_problem, tune_fn, references_fn,
                       metric="accuracy", name=name, title=title, logger=logger)


def fig3(
    variant: str = "a",
    trials: int | None = None,
    seed: int = 0,
    *,
    config=None,
    overrides: dict | None = None,
    logger: Callable[[str], None] | None = None,
) -> FigureResult:
    """Figure 3: Bayesian logistic regression, per-agent test accuracy.

    Args:
        variant: ``"a"`` synthetic on the barbell, ``"b"`` synthetic on the lollipop, ``"c"``
            breast cancer on the barbell with ``N = 30``.
        trials, seed, config, overrides, logger: as in :func:`fig2` (``config`` a
            :class:`LogisticRegressionConfig`).

    Returns:
        A :class:`FigureResult` with metric ``"accuracy"``.
    """
    name, config = _preset("3", variant, trials, overrides, config, LogisticRegressionConfig)
    return run_logistic_regression(config, seed, name=name, title=FIGURE_TITLES[name],
                                   logger=logger)


def run_figure(
    name: str,
    trials: int | None = None,
    seed: int = 0,
    *,
    overrides: dict | None = None,
    logger: Callable[[str], None] | None = None,
) -> FigureResult:
    """Run a figure by name (``"fig2a"``, ..., ``"fig3c"``)."""
    figure_config(name)  # validates the name
    runner = fig2 if name.startswith("fig2") else fig3
    return runner(name[-1], trials, seed, overrides=overrides, logger=logger)
