"""The quick decentralized run behind ``python -m dgsgld run``: Bayesian linear regression
(Figure 2's problem) at fixed step sizes, no tuning, final per-agent W2 of every algorithm.

Four programs: one sampling loop per algorithm (each a plain :func:`dgsgld.sample` call) and
one for every W2 (all agents of all algorithms and the exact-draw floor's replicates side by
side). The command line keeps them in JAX's persistent compilation cache (:mod:`dgsgld._cache`).
"""

import time
from dataclasses import dataclass

import jax
import numpy as np

from .. import run
from .configs import LinearRegressionConfig
from .figures import (
    ALGORITHMS,
    CENTRALIZED,
    _agent_axis,
    _exact_draws,
    _initial_positions,
    _moments,
    _w2,
    derive_seeds,
    make_network,
)
from .problems import linear_regression_problem

__all__ = ["QuickRun", "quick_run"]

#: Default decentralized step size: near the tuned optimum of Figure 2(a) for both
#: DIGing-SGLD and DE-SGLD (DIGing-SGLD diverges above about 0.02 on the barbell).
DEFAULT_STEP_SIZE = 0.008


@dataclass(frozen=True)
class QuickRun:
    """Result of :func:`quick_run`.

    Attributes:
        config: the :class:`LinearRegressionConfig` that ran.
        step_sizes: algorithm -> step size used.
        final_w2: algorithm -> ``(N,)`` per-agent W2 at the last iteration (``(1,)`` for
            centralized SGLD).
        floor: expected W2 of ``trials`` exact posterior draws (the best any sampler can show).
        wall_time: seconds, compilation included.
    """

    config: LinearRegressionConfig
    step_sizes: dict
    final_w2: dict
    floor: float
    wall_time: float

    def table(self) -> str:
        """A compact text table: W2 mean/min/max over agents per algorithm."""
        lines = [f"{'algorithm':<20} {'step':>9} {'W2 mean':>9} {'min':>9} {'max':>9}"]
        for name, w2 in self.final_w2.items():
            lines.append(
                f"{name:<20} {self.step_sizes[name]:>9.3g} {w2.mean():>9.4f} {w2.min():>9.4f} "
                f"{w2.max():>9.4f}"
            )
        lines.append(f"{'exact draws':<20} {'':>9} {self.floor:>9.4f}")
        return "\n".join(lines)


def quick_run(
    *,
    network: str = "barbell",
    batch_size: int | None = None,
    trials: int = 200,
    num_steps: int = 100,
    step_size: float = DEFAULT_STEP_SIZE,
    sgld_step_size: float | None = None,
    seed: int = 0,
) -> QuickRun:
    """Sample Figure 2's posterior with DIGing-SGLD, DE-SGLD and centralized SGLD at fixed steps.

    Args:
        network: ``"barbell"`` or ``"lollipop"`` (``N = 20``, period 50).
        batch_size: local mini-batch, ``None`` for the full batch of 5.
        trials: independent chains.
        num_steps: iterations.
        step_size: decentralized step size ``η``.
        sgld_step_size: centralized step (default ``η / N``, the same scale).
        seed: master seed.

    Returns:
        A :class:`QuickRun`.
    """
    start = time.perf_counter()
    config = LinearRegressionConfig(
        network=network, batch_size=batch_size, trials=trials, num_steps=num_steps
    )
    if not step_size > 0:
        raise ValueError(f"`step_size` must be positive; got {step_size!r}.")
    if sgld_step_size is None:
        sgld_step_size = step_size / config.num_agents
    elif not sgld_step_size > 0:
        raise ValueError(f"`sgld_step_size` must be positive; got {sgld_step_size!r}.")
    seeds = derive_seeds(seed)
    problem = linear_regression_problem(seeds["data"])
    schedule = make_network(config, seeds["network"])
    potential = problem.potential(batch_size)
    init_dec, init_cen = _initial_positions(seeds["init"], config, problem.dim)
    key = jax.random.key(seeds["sampling"])
    steps, finals = {}, []
    for name, make in ALGORITHMS.items():
        central = name == CENTRALIZED
        steps[name] = float(sgld_step_size if central else step_size)
        trace = run.sample(make(steps[name]), potential, None if central else schedule,
                           init_cen if central else init_dec, key, num_steps,
                           output=run.Output(positions=False), on_divergence="warn")
        finals.append(np.asarray(_agent_axis(trace.state.position)))
    draws = _exact_draws(problem, trials, seeds["reference"])
    # One program for every W2: agents of all algorithms, then the floor's replicates.
    w2 = np.asarray(_final_w2(np.concatenate(finals + [draws], axis=1), problem.posterior_mean,
                              problem.posterior_cov), np.float64)
    bounds = np.cumsum([0] + [f.shape[1] for f in finals])
    final_w2 = {name: w2[lo:hi] for name, lo, hi in zip(steps, bounds[:-1], bounds[1:])}
    floor = float(np.mean(w2[bounds[-1]:]))
    return QuickRun(config, steps, final_w2, floor, time.perf_counter() - start)


@jax.jit
def _final_w2(positions, target_mean, target_cov):
    """``(M,)`` W2 of the Gaussian fits over chains of ``(C, M, p)`` positions to the target."""
    return _w2(*_moments(positions), target_mean, target_cov)
