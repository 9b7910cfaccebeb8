"""Step-size tuning: a whole grid in one compiled call, or gradient descent on ``log η``.

The samplers are ``eqx.Module``-s whose constant step size is an array leaf, so

* :func:`grid_search` builds the sampler inside a function of ``η`` and ``jax.vmap``-s
  :func:`dgsgld.sample` over the grid: every step size × every chain runs in one compiled call,
  with the same keys and initial positions at every grid point (common random numbers, so the
  curve of final error against ``η`` is smooth and differences between grid points are not
  masked by Monte Carlo noise);
* :func:`tune_step_size_gradient` differentiates the final samples with respect to ``log η``
  (with a fixed key the chains are a smooth function of ``η``: the noise enters as
  ``√(2η) w``) and minimizes a differentiable criterion with an optax optimizer.
"""

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import run
from .._types import Array, PRNGKey, PyTree

if TYPE_CHECKING:
    import optax  # imported where gradient tuning runs: grid searches and quick runs skip it

__all__ = ["GradientTuning", "GridSearch", "grid_search", "log_grid", "tune_step_size_gradient"]


class GridSearch(NamedTuple):
    """Result of :func:`grid_search`.

    Attributes:
        step_sizes: ``(G,)`` the grid.
        scores: ``(G,)`` final score per step size; diverged grid points get ``+inf`` when
            minimizing and ``0`` when maximizing (the worst possible error / accuracy).
        diverged: ``(G,)`` True where some chain's positions became non-finite.
        best_index: index of the best finite score.
        best_step_size: ``step_sizes[best_index]``.
        ensemble: ``ensemble_fn`` outputs, leaves ``(G, num_steps + 1, ...)``, or ``None``.
    """

    step_sizes: np.ndarray
    scores: np.ndarray
    diverged: np.ndarray
    best_index: int
    best_step_size: float
    ensemble: PyTree | None


class GradientTuning(NamedTuple):
    """Result of :func:`tune_step_size_gradient`.

    Attributes:
        step_size: the iterate with the lowest criterion seen.
        step_sizes: ``(K,)`` the step size at each optimizer iteration.
        losses: ``(K,)`` the criterion there (``nan`` where the run diverged; the optimizer
            then halved ``η`` instead of taking a gradient step).
    """

    step_size: float
    step_sizes: np.ndarray
    losses: np.ndarray


def log_grid(low: float, high: float, num: int) -> np.ndarray:
    """``num`` log-spaced step sizes from ``low`` to ``high`` inclusive (float32)."""
    if not (0 < low <= high) or not all(map(math.isfinite, (low, high))):
        raise ValueError(f"Step-size grid needs 0 < low <= high; got low={low!r}, high={high!r}.")
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"`num` step sizes must be a positive integer; got {num!r}.")
    return np.geomspace(low, high, int(num)).astype(np.float32)


@eqx.filter_jit
def _grid_run(
    make_algorithm, step_sizes, potential, mixing, init, key, num_steps, ensemble_fn, score_fn
):
    def one(step_size):
        trace = run.sample(
            make_algorithm(step_size),
            potential,
            mixing,
            init,
            key,
            num_steps,
            output=run.Output(positions=False, ensemble_fn=ensemble_fn),
            on_divergence="flag",
        )
        return score_fn(trace), trace.ensemble, jnp.any(trace.diverged)

    return jax.vmap(one)(step_sizes)


def grid_search(
    make_algorithm: Callable[[Array], Any],
    step_sizes: Array,
    potential,
    mixing,
    init: PyTree,
    key: PRNGKey,
    num_steps: int,
    *,
    score_fn: Callable[[run.Trace], Array],
    ensemble_fn: Callable | None = None,
    mode: str = "min",
) -> GridSearch:
    """Run every step size of a grid, every chain, in one compiled call and pick the best.

    Args:
        make_algorithm: ``step_size -> sampler``, e.g. ``dgsgld.diging_sgld``. Pass the same
            function object across calls to reuse the compiled run.
        step_sizes: ``(G,)`` positive step sizes (see :func:`log_grid`).
        potential, mixing, init, key, num_steps: as in :func:`dgsgld.sample`; every grid point
            uses the same ``init`` and ``key``.
        score_fn: ``trace -> scalar`` for one grid point's :class:`dgsgld.Trace` (positions
            are not stored: use ``trace.state`` for the final samples, ``trace.ensemble`` for
            streamed statistics).
        ensemble_fn: optional cross-chain statistic streamed at every iteration (see
            :func:`dgsgld.sample`); returned in ``ensemble`` with a leading grid axis.
        mode: ``"min"`` (an error) or ``"max"`` (an accuracy).

    Returns:
        A :class:`GridSearch`.
    """
    if mode not in ("min", "max"):
        raise ValueError(f"`mode` must be 'min' or 'max'; got {mode!r}.")
    grid = np.asarray(step_sizes, dtype=np.float32)
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise ValueError(
            f"`step_sizes` must be a non-empty 1-D array of positive values; got {grid!r}."
        )
    # Checked here on the host: the program then carries no check, and JAX caches it on disk.
    mixing = run.checked_if_concrete(mixing)
    scores, ensemble, diverged = _grid_run(
        make_algorithm,
        jnp.asarray(grid),
        potential,
        mixing,
        init,
        key,
        num_steps,
        ensemble_fn,
        score_fn,
    )
    scores = np.asarray(scores, dtype=np.float64)
    diverged = np.asarray(diverged) | ~np.isfinite(scores)
    worst = np.inf if mode == "min" else 0.0
    scores = np.where(diverged, worst, scores)
    if np.all(diverged):
        raise ValueError(
            f"Every step size in the grid [{grid.min():g}, {grid.max():g}] diverged; "
            "use smaller step sizes."
        )
    best = int(np.argmin(scores) if mode == "min" else np.argmax(scores))
    return GridSearch(grid, scores, diverged, best, float(grid[best]), ensemble)


@functools.cache
def _adam():
    """One optimizer object, so that the compiled tuning step is reused across calls; the
    learning rate lives in its state (inject_hyperparams) rather than in the traced function."""
    import optax

    return optax.inject_hyperparams(optax.adam)(learning_rate=0.1)


@eqx.filter_jit
def _gradient_step(
    log_step,
    opt_state,
    make_algorithm,
    criterion,
    optimizer,
    potential,
    mixing,
    init,
    key,
    num_steps,
):
    import optax

    def loss(log_eta):
        trace = run.sample(
            make_algorithm(jnp.exp(log_eta)),
            potential,
            mixing,
            init,
            key,
            num_steps,
            output=run.Output(positions=False),
            on_divergence="flag",
        )
        return criterion(trace.state.position)

    value, grad = jax.value_and_grad(loss)(log_step)
    updates, new_state = optimizer.update(grad, opt_state, log_step)
    return value, grad, optax.apply_updates(log_step, updates), new_state


def tune_step_size_gradient(
    make_algorithm: Callable[[Array], Any],
    potential,
    mixing,
    init: PyTree,
    key: PRNGKey,
    num_steps: int,
    criterion: Callable[[PyTree], Array],
    initial_step_size: float,
    *,
    num_iterations: int = 25,
    learning_rate: float = 0.1,
    optimizer: "optax.GradientTransformation | None" = None,
) -> GradientTuning:
    """Minimize a differentiable criterion of the final samples over ``log η`` with optax.

    The chains run with a fixed ``key`` and ``init``, so the criterion is a deterministic,
    smooth function of ``η`` (the sampler's noise is ``√(2η) w`` with ``w`` fixed), and
    ``jax.grad`` flows through :func:`dgsgld.sample`. If a run diverges (non-finite criterion
    or gradient), ``η`` is halved instead of stepping.

    Args:
        make_algorithm: ``step_size -> sampler``, e.g. ``dgsgld.diging_sgld``.
        potential, mixing, init, key, num_steps: as in :func:`dgsgld.sample`.
        criterion: ``final positions (num_chains, N, *param_shape) -> scalar`` to minimize,
            e.g. the mean over agents of the W2 distance of the chains' Gaussian fit to the
            target.
        initial_step_size: starting ``η``.
        num_iterations: optimizer iterations.
        learning_rate: Adam's peak learning rate on ``log η``, decayed along a cosine to a
            tenth of it by the last iteration (ignored with ``optimizer``).
        optimizer: an optax optimizer to use instead of Adam.

    Returns:
        A :class:`GradientTuning`.
    """
    if not (initial_step_size > 0 and math.isfinite(initial_step_size)):
        raise ValueError(
            f"`initial_step_size` must be positive and finite; got {initial_step_size!r}."
        )
    if (
        isinstance(num_iterations, bool)
        or not isinstance(num_iterations, int)
        or num_iterations < 1
    ):
        raise ValueError(f"`num_iterations` must be a positive integer; got {num_iterations!r}.")
    import optax

    log_step = jnp.log(jnp.asarray(initial_step_size, jnp.float32))
    adam = _adam()
    if optimizer is None:
        optimizer = adam
        opt_state = optimizer.init(log_step)
        opt_state.hyperparams["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
    else:
        opt_state = optimizer.init(log_step)
    # Cosine decay to a tenth, set on the host each iteration so the compiled step is reused.
    schedule = optax.cosine_decay_schedule(learning_rate, max(num_iterations - 1, 1), alpha=0.1)
    steps, losses = [], []
    mixing = run.checked_if_concrete(mixing)  # as in grid_search
    for k in range(num_iterations):
        if optimizer is adam:
            opt_state.hyperparams["learning_rate"] = jnp.asarray(schedule(k), jnp.float32)
        value, grad, new_log, new_state = _gradient_step(
            log_step,
            opt_state,
            make_algorithm,
            criterion,
            optimizer,
            potential,
            mixing,
            init,
            key,
            num_steps,
        )
        steps.append(float(jnp.exp(log_step)))
        if np.isfinite(float(value)) and np.isfinite(float(grad)):
            losses.append(float(value))
            log_step, opt_state = new_log, new_state
        else:
            losses.append(np.nan)
            log_step = log_step - jnp.log(2.0)
    losses_arr = np.asarray(losses)
    if np.all(np.isnan(losses_arr)):
        raise ValueError(
            f"Every run diverged while tuning from step size {initial_step_size:g}; "
            "start from a smaller one."
        )
    best = int(np.nanargmin(losses_arr))
    return GradientTuning(steps[best], np.asarray(steps), losses_arr)
