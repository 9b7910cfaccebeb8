"""Step-size tuning: grid runs, grid search, gradient tuning and a proposer.

The samplers are ``eqx.Module``-s whose constant step size is an array leaf, so

* :func:`grid_run` builds the sampler inside a function of ``η`` and ``jax.vmap``-s
  :func:`dgsgld.sample` over a grid: every step size × every chain runs in one compiled call,
  with the same keys and initial positions at every grid point (common random numbers, so the
  curve of final error against ``η`` is smooth and differences between grid points are not
  masked by Monte Carlo noise); :func:`grid_search` scores it and picks the best step;
* :func:`tune_step_size_gradient` differentiates the final samples with respect to ``log η``
  (with a fixed key the chains are a smooth function of ``η``: the noise enters as
  ``√(2η) w``) and minimizes a differentiable criterion with an optax optimizer;
* :func:`propose_step_size` chooses a step for a model and a network from one pilot grid run.

**The proposer**, :func:`propose_step_size`, looks at the model and the network, then lets a
short run decide:

1. **Curvature.** The largest Hessian eigenvalue ``L_i`` of every agent's potential ``f_i`` at
   the initial positions (power iteration on Hessian–vector products, ``jax.jvp`` of the
   gradient; nothing ``(d, d)`` is formed). ``L = max_i L_i`` sets the scale of the grid:
   ``η ∈ [10⁻³/L, 3/L]``, log-spaced (gradient descent on ``f_i`` alone is unstable above
   ``2/L_i``).
2. **Network.** The mean spectral gap ``1 − σ₂(W⁽ᵏ⁾)`` of the schedule, reported (a small gap
   makes agents disagree more at a given ``η``, which the pilot sees directly).
3. **Pilot.** A :func:`grid_run`: every grid step size, every chain of ``init`` (up to
   ``max_chains``), for ``num_steps`` iterations, in one compiled call. It records, per step
   size, at the start, middle and end: divergence, every agent's spread (the geometric mean
   over coordinates of the standard deviation across chains) and the consensus error.

A step size is **stable** when no chain diverged and neither the spread nor the consensus error more
than doubled over the second half of the pilot. Its **exact stationary law** on the Gaussian
approximation of the agents' potentials (:mod:`dgsgld.tuning.criterion`, the warm-up's
criterion, with ``M = I``) is solved at every grid step: the worst sd ratio and standardized mean
error of the draws pooled over agents, and the per-step contraction. The approximation is taken
where the pilot's chains ended at its largest stable step inside the grid (their Hessians and
gradients averaged, as the warm-up averages them over its draws), or at ``curvature_at``: a
start far out may curve far more than the posterior. A stable step is **accurate** when its law
is within ``1 ± tol_sd`` and ``tol_mean`` and it lies below the largest stable grid step (the
pilot ran ``num_steps`` iterations; a longer run may diverge at the edge it found). With
mini-batches the law includes every agent's gradient-error covariance: plain mini-batches' at
the points' centre, as the warm-up measures it; a control variate's (SVRG, SAGA) around anchors
as far as the Langevin noise moves an agent in the anchor's mean age ``a`` at the step ``η``
(at most ``2ηa`` in mean square per coordinate, less as the network mixes each step's noise:
measured around anchors ``1/√λ`` away in every coordinate, ``λ`` the largest curvature, and
scaled to the step; the error grows with the anchor's squared distance).

The **proposal** is the largest accurate step. A smaller one has less stationary bias but a
longer way from the starts, which no stationary error counts; and neither a pilot's spread nor
the bias alone can judge mixing, since at the smallest steps the chains stay where they
started. The tolerances are hard bounds: the law sees a Gaussian, and a step that widens one
direction by a quarter can move another's mean by many sds (a Student-t regression's scale,
widened by its coefficients' spread). For the run the draws will come from (``sampling_steps``)
the report predicts every step's error (:func:`dgsgld.tuning.criterion.mse_objective`: the
stationary bias squared plus the Monte Carlo variance ``1.5 τ / draws`` that the law's
relaxation time ``τ`` leaves), and where the proposal's is mostly Monte Carlo error,
``explain()`` says that its slowest direction will not mix in the run: without a
preconditioner the stiffest direction sets the step, and
:func:`~dgsgld.tuning.adaptation.warmup` adapts one. The pilot's spread and its inflation over
the smallest spread are still reported, as a diagnostic.

For large ``N d`` the law is that of one scalar mode at the pooled Hessian's largest
eigenvalue (every agent holding ``1/N`` of it), which bounds the stiffest direction's bias but
not the agents' disagreement in mean. :func:`~dgsgld.tuning.adaptation.warmup` adapts a
preconditioner as well, which a badly conditioned posterior needs: without one the stiffest
direction sets the step and the flattest ones barely move.

**A criterion of your own.** The spread criterion asks for samples faithful to the posterior.
When what matters is a prediction after a run of a given length (the paper tunes its
logistic-regression steps by accuracy after 100 iterations), pass ``score_fn``: a function of
the pilot's final positions, higher is better, e.g. the accuracy or log predictive density on
a validation split (never the test set), and set ``num_steps`` to the length of the run you
will make. The proposal is then the stable step with the best mean score; while that is the
top of the grid, the grid is continued upwards (at most twice, ``num_step_sizes`` points each,
one more compiled call of the same shapes). ``explain()`` shows the score beside the spread
and the consensus error, and its first sentence says which criterion chose the step: when the
best score lies outside the accurate range, what the proposal gives up (above it the agents'
samples are biased: a step that suits the score, not the posterior) and the best-scoring
accurate step.

:func:`check_step_size` warns when a chosen step lies outside the range a report found.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import evaluate
from .._util import params as _params
from .._util.types import Array, PRNGKey, PyTree
from ..networks import spectral as network_spectral
from ..networks.checked import checked_if_concrete
from ..runner import loop as run
from ..theory.constants import estimate_gradient_covariance
from . import criterion
from .adaptation import (
    DENSE_MAX_DIM,
    EXACT_MAX_SIZE,
    LAG_PAIRS,
    NOISE_DRAWS,
    NOISY,
    _agent_grads,
    _anchor_age,
    _anchored_noise,
    _approach,
    _dense_curvature,
    _flat,
    _noise_ratio,
    _noise_reach,
    _normal_anchors,
    _plain_minibatch,
    _pooled_top,
)
from .criterion import Errors, mse_objective

if TYPE_CHECKING:
    import optax  # imported where gradient tuning runs: grid searches and quick runs skip it

__all__ = [
    "GradientTuning",
    "GridRun",
    "GridSearch",
    "StepSizeReport",
    "check_step_size",
    "grid_run",
    "grid_search",
    "local_curvature",
    "log_grid",
    "propose_step_size",
    "tune_step_size_gradient",
]


# ----------------------------------------------------------------------------- grid runs


class GridRun(NamedTuple):
    """What :func:`grid_run` returns; every leaf has a leading grid axis ``(G,)`` (``(S, G)``
    with ``stacked=True``).

    Attributes:
        ensemble: ``output.ensemble_fn``'s values, leaves ``(G, kept iterations, ...)``, or
            ``None``.
        score: ``score_fn(trace)`` per grid point, or ``None`` without a ``score_fn``.
        diverged: ``(G,)`` True where some chain's positions became non-finite.
    """

    ensemble: PyTree | None
    score: PyTree | None
    diverged: Array


@eqx.filter_jit
def _grid_run(make_algorithm, step_sizes, potential, mixing, init, key, num_steps, output,
              score_fn, stacked, grid_batch=None):
    def one(potential, step_size):
        trace = run.sample(make_algorithm(step_size), potential, mixing, init, key, num_steps,
                           output=output, on_divergence="flag")
        score = None if score_fn is None else score_fn(trace)
        return trace.ensemble, score, jnp.any(trace.diverged)

    def over_grid(potential):
        if grid_batch is None:
            return jax.vmap(lambda step_size: one(potential, step_size))(step_sizes)
        return jax.lax.map(lambda step_size: one(potential, step_size), step_sizes,
                           batch_size=grid_batch)

    return jax.vmap(over_grid)(potential) if stacked else over_grid(potential)


def grid_run(
    make_algorithm: Callable[[Array], Any],
    step_sizes: Array,
    potential,
    mixing,
    init: PyTree,
    key: PRNGKey,
    num_steps: int,
    *,
    output: run.Output = run.Output(positions=False),
    score_fn: Callable[[run.Trace], PyTree] | None = None,
    stacked: bool = False,
    grid_batch: int | None = None,
) -> GridRun:
    """Run a sampler at every step size of a grid, every chain, in one compiled call.

    Every grid point uses the same ``init`` and ``key`` (common random numbers); a diverging
    grid point is flagged (``on_divergence="flag"``), not raised.

    Args:
        make_algorithm: ``step_size -> sampler``, e.g. ``dgsgld.DIGingSGLD``. Pass the same
            function object across calls (and the same ``output`` and ``score_fn``) to reuse
            the compiled run.
        step_sizes: ``(G,)`` step sizes (run in float32; see :func:`log_grid`).
        potential, mixing, init, key, num_steps: as in :func:`dgsgld.sample`; a concrete
            ``mixing`` is checked here, on the host, so the program carries no check.
        output: what each run keeps (:class:`dgsgld.Output`); its ``ensemble_fn`` values come
            back in ``ensemble``.
        score_fn: optional ``trace -> pytree`` of one grid point's :class:`dgsgld.Trace`,
            reduced inside the program (e.g. a final error from ``trace.state``).
        stacked: ``potential`` is a stack of ``S`` potentials (leaves with a leading ``(S,)``
            axis, e.g. several splits of a data set): an outer ``jax.vmap`` over them, every
            leaf of the result ``(S, G, ...)``.
        grid_batch: run the grid ``grid_batch`` step sizes at a time (``jax.lax.map``) instead
            of all at once: memory for a sampler whose state is large (SAGA's table holds a
            gradient per datum and chain) at the cost of parallelism. ``None``: all at once.

    Returns:
        A :class:`GridRun` of JAX arrays.
    """
    if grid_batch is not None and (isinstance(grid_batch, bool) or not isinstance(
            grid_batch, (int, np.integer)) or grid_batch < 1):
        raise ValueError(f"`grid_batch` must be a positive integer or None; got "
                         f"{grid_batch!r}.")
    mixing = checked_if_concrete(mixing)
    return GridRun(*_grid_run(make_algorithm, jnp.asarray(step_sizes, jnp.float32), potential,
                              mixing, init, key, num_steps, output, score_fn, bool(stacked),
                              None if grid_batch is None else int(grid_batch)))


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


def log_grid(low: float, high: float, num: int) -> np.ndarray:
    """``num`` log-spaced step sizes from ``low`` to ``high`` inclusive (float32)."""
    if not (0 < low <= high) or not all(map(math.isfinite, (low, high))):
        raise ValueError(f"Step-size grid needs 0 < low <= high; got low={low!r}, high={high!r}.")
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"`num` step sizes must be a positive integer; got {num!r}.")
    return np.geomspace(low, high, int(num)).astype(np.float32)


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
        make_algorithm: ``step_size -> sampler``, e.g. ``dgsgld.DIGingSGLD``. Pass the same
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
    ensemble, scores, diverged = grid_run(
        make_algorithm, grid, potential, mixing, init, key, num_steps,
        output=run.Output(positions=False, ensemble_fn=ensemble_fn), score_fn=score_fn)
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


# ----------------------------------------------------------------------------- gradient tuning


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


@functools.cache
def _adam():
    """One optimizer object, so that the compiled tuning step is reused across calls; the
    learning rate lives in its state (inject_hyperparams) rather than in the traced function."""
    import optax

    return optax.inject_hyperparams(optax.adam)(learning_rate=0.1)


@eqx.filter_jit
def _gradient_step(log_step, opt_state, make_algorithm, criterion, optimizer, potential, mixing,
                   init, key, num_steps):
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
    optimizer: optax.GradientTransformation | None = None,
) -> GradientTuning:
    """Minimize a differentiable criterion of the final samples over ``log η`` with optax.

    The chains run with a fixed ``key`` and ``init``, so the criterion is a deterministic,
    smooth function of ``η`` (the sampler's noise is ``√(2η) w`` with ``w`` fixed), and
    ``jax.grad`` flows through :func:`dgsgld.sample`. If a run diverges (non-finite criterion
    or gradient), ``η`` is halved instead of stepping.

    Args:
        make_algorithm: ``step_size -> sampler``, e.g. ``dgsgld.DIGingSGLD``.
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
    mixing = checked_if_concrete(mixing)  # as in grid_search
    for k in range(num_iterations):
        if optimizer is adam:
            opt_state.hyperparams["learning_rate"] = jnp.asarray(schedule(k), jnp.float32)
        value, grad, new_log, new_state = _gradient_step(
            log_step, opt_state, make_algorithm, criterion, optimizer, potential, mixing, init,
            key, num_steps)
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


# ----------------------------------------------------------------------------- the proposer


class StepSizeReport(NamedTuple):
    """What :func:`propose_step_size` found.

    Attributes:
        step_size: the proposed constant step size.
        stable_range: ``(low, high)`` grid step sizes with no divergence and no growth.
        accurate_range: ``(low, high)`` stable step sizes below the largest stable one whose
            exact stationary law on the Gaussian approximation
            (:mod:`dgsgld.tuning.criterion`) is within ``tol_sd`` and ``tol_mean``; without a
            ``score_fn``, ``step_size`` is ``high``.
        step_sizes: ``(G,)`` the pilot grid.
        spread: ``(G,)`` geometric mean over agents and coordinates of the standard deviation
            across chains at the end of the pilot.
        inflation: ``(G,)`` the largest, over agents, ratio of an agent's spread to its smallest
            over the stable grid points (``inf`` where unstable).
        consensus: ``(G,)`` consensus error of the chains at the end
            (:func:`dgsgld.evaluate.ensemble_consensus_error`; 0 without a network).
        stable: ``(G,)`` boolean.
        curvature: ``(N,)`` largest Hessian eigenvalue magnitude of each ``f_i``.
        spectral_gap: mean spectral gap of the mixing matrices (``nan`` without a network).
        spread_tolerance: the tolerance used.
        num_steps: pilot iterations; num_chains: pilot chains.
        score: ``(G,)`` mean of ``score_fn`` at the end of the pilot, or ``None`` without one;
            ``step_size`` is then the stable step with the best score.
        score_se: ``(G,)`` standard errors of ``score`` over chains (a per-chain
            ``score_fn``), else ``None``.
        score_range: ``(low, high)`` stable steps whose score is within one standard error of
            the best (how flat the score is around the proposal), else ``None``.
        stationary_sd_ratio: ``(G,)`` the exact stationary worst sd ratio of the draws pooled
            over agents (``inf``: unstable), on the agents' quadratics at ``curvature_at``.
        stationary_mean_error: ``(G,)`` its worst standardized mean error.
        law: ``"exact"`` (the dense law) or ``"modal"`` (a scalar mode at the pooled
            curvature, for large ``N d``).
        tol_sd, tol_mean: the accurate range's tolerances.
        mode_steps: Newton steps that moved the curvature point to the pooled potential's
            mode (``at_mode``); 0 when it stayed at ``curvature_at``.
        spectral_radius: ``(G,)`` the exact law's per-step contraction (``>= 1``: unstable).
        predicted_error: ``(G,)`` the predicted root-mean-square error, in posterior sds, of
            the worst direction's sd and mean after ``sampling_steps``
            (:func:`dgsgld.tuning.criterion.mse_objective`), or ``None`` without
            ``sampling_steps``.
        sampling_steps: the run's length ``predicted_error`` is for, or ``None``.
        law_step: the pilot step whose chains' final positions carried the exact law's
            curvature, or ``None`` (it was measured at ``curvature_at`` or the mode).
        gradient_noise: ``κ``, the mini-batch gradient error's variance over the curvature
            in the law at the proposed step (the worst direction; the stiffest mode's with the
            modal law; a control variate's at its anchors' distance there), 0 with exact
            gradients.
    """

    step_size: float
    stable_range: tuple[float, float]
    accurate_range: tuple[float, float]
    step_sizes: np.ndarray
    spread: np.ndarray
    inflation: np.ndarray
    consensus: np.ndarray
    stable: np.ndarray
    curvature: np.ndarray
    spectral_gap: float
    spread_tolerance: float
    num_steps: int
    num_chains: int
    score: np.ndarray | None = None
    score_se: np.ndarray | None = None
    score_range: tuple[float, float] | None = None
    stationary_sd_ratio: np.ndarray | None = None
    stationary_mean_error: np.ndarray | None = None
    law: str = "exact"
    tol_sd: float = 0.1
    tol_mean: float = 0.1
    mode_steps: int = 0
    spectral_radius: np.ndarray | None = None
    predicted_error: np.ndarray | None = None
    sampling_steps: int | None = None
    law_step: float | None = None
    gradient_noise: float = 0.0

    @property
    def accurate(self) -> np.ndarray:
        """``(G,)`` boolean: stable, and within the tolerances by the exact stationary law
        (by the spread inflation for a report without stationary errors)."""
        if self.stationary_sd_ratio is None:
            return self.stable & (self.inflation <= self.spread_tolerance)
        sd = np.abs(np.log(self.stationary_sd_ratio))
        return _inside(self.stable) & (sd <= np.log1p(self.tol_sd)) & (
            self.stationary_mean_error <= self.tol_mean)

    def explain(self) -> str:
        """How the step size was chosen, in words and a table.

        The first sentence says which criterion chose the proposal; when a ``score_fn`` chose
        a step outside the accurate range, it says what that costs and which accurate step
        scores best.
        """
        lmax = float(np.max(self.curvature))
        scored = self.score is not None
        tol = self.spread_tolerance
        exact = self.stationary_sd_ratio is not None
        accurate = self.accurate
        grid = (f"grid {self.step_sizes[0]:.3g} .. {self.step_sizes[-1]:.3g} = "
                f"[1e-3, {self.step_sizes[-1] * lmax:.3g}] / L")
        if accurate.any():
            accurate_line = f"{_range(self.accurate_range)}."
        elif exact:
            k = int(np.flatnonzero(self.step_sizes == self.step_size)[0])
            accurate_line = (f"none; the least biased stable step is {self.step_sizes[k]:.4g}, "
                             f"sd ratio {self.stationary_sd_ratio[k]:.3g}, mean error "
                             f"{self.stationary_mean_error[k]:.3g}.")
        else:
            k = int(np.argmin(self.inflation))
            accurate_line = (f"none; the closest is {self.step_sizes[k]:.4g}, where the worst "
                             f"agent's spread is {self.inflation[k]:.3g}x its smallest.")
        lines = [
            (f"Proposed step size {self.step_size:.4g} (η·L = {self.step_size * lmax:.3g}): "
             f"{self._choice(accurate)}."),
            "Curvature"
            + (f" at the pooled potential's mode ({self.mode_steps} Newton steps from the "
               "start)" if self.mode_steps else "")
            + f": largest Hessian eigenvalue per agent L_i in "
            f"[{np.min(self.curvature):.4g}, {lmax:.4g}]; {grid}"
            + (" (continued upwards while the best score was at its top)."
               if scored and self.step_sizes[-1] * lmax > 3.01 else "."),
            *([f"The exact law's quadratics: averaged over the pilot's chains' final positions "
               f"at its step {self.law_step:.4g}."] if self.law_step is not None else []),
            f"Network: mean spectral gap {self.spectral_gap:.4g}.",
            (f"Pilot: {self.num_chains} chains x {self.num_steps} iterations per step size, "
            "one compiled call per grid."),
            f"Stable (no divergence, no growth): {_range(self.stable_range)}.",
            (f"Accurate (exact stationary law of the draws pooled over agents, {self.law}, on "
             f"the Gaussian approximation: sd ratio within 1 ± {self.tol_sd:g}, mean error <= "
             f"{self.tol_mean:g} sd): {accurate_line}" if exact else
             f"Accurate (every agent's spread <= {tol:g} x its smallest): {accurate_line}"),
        ]
        if exact and self.gradient_noise > 0:
            lines.append(
                f"Gradient error (mini-batches), in the law: {self.gradient_noise:.3g} times "
                "the curvature at the proposed step"
                + (" (at least NOISY = 10: it widens the law at every stable step; a control "
                   "variate, e.g. estimator=gradients.svrg(m), or larger batches lower it)."
                   if not accurate.any() and self.gradient_noise >= NOISY else "."))
        if exact and self.law == "modal":
            lines.append(
                "The modal law is one scalar mode at the stiffest curvature (the dense law is "
                "too large here): it bounds that direction's bias but does not see how slowly "
                "the flattest directions mix; for those, dgsgld.warmup adapts a diagonal "
                "preconditioner.")
        if scored and self.score_range is not None:
            lines.append(f"Score: within one standard error of the best: "
                         f"{_range(self.score_range)}.")
        if self.accurate_range[0] <= self.step_sizes[0] and not exact:
            lines.append(
                "Note: the accurate range reaches the grid's smallest step (some agent's spread "
                "never shrank with η): the pilot may not reach the posterior; the spread "
                "criterion is then conservative (a longer pilot, num_steps, tells)."
            )
        head = "   step size    spread  inflation  consensus  stable"
        error = self.predicted_error is not None
        lines.append(head + ("   sd ratio  mean err" if exact else "")
                     + ("  pred err" if error else "") + ("       score" if scored else ""))
        for i, (eta, s, r, c, ok) in enumerate(zip(self.step_sizes, self.spread, self.inflation,
                                                   self.consensus, self.stable)):
            mark = " <-" if eta == self.step_size else ""
            row = (f"  {eta:10.4g}  {s:8.4g}  {r:9.3g}  {c:9.4g}  "
                   f"{'yes' if ok else 'no':>6}")
            if exact:
                row += (f"  {self.stationary_sd_ratio[i]:9.4g}  "
                        f"{self.stationary_mean_error[i]:8.3g}")
            if error:
                row += f"  {self.predicted_error[i]:8.3g}"
            if scored:
                row += f"  {self.score[i]:10.4g}"
                if self.score_se is not None:
                    row += f" ± {self.score_se[i]:.2g}"
            lines.append(row + mark)
        return "\n".join(lines)

    def _unmixed(self, i: int) -> str:
        """Where the predicted error at grid step ``i`` is mostly Monte Carlo error: that the
        slowest direction will not mix in ``sampling_steps``."""
        if self.predicted_error is None or not np.isfinite(self.predicted_error[i]):
            return ""
        rho = float(self.spectral_radius[i])
        bias = math.hypot(self.stationary_sd_ratio[i] - 1, self.stationary_mean_error[i])
        if not (self.predicted_error[i] > 2 * bias and self.predicted_error[i] > 0.1):
            return ""
        larger = np.flatnonzero(self.accurate & (self.step_sizes > self.step_size))
        if larger.size:  # a score chose a step below the largest accurate one
            k = int(larger[-1])
            instead = (f"the largest accurate step {self.step_sizes[k]:.4g} predicts "
                       f"{self.predicted_error[k]:.3g} sd")
        else:
            instead = ("no larger step is accurate: a preconditioner adapted to the posterior, "
                       "dgsgld.warmup, or a longer run")
        return (f"; its slowest direction decorrelates in about {(1 + rho) / (1 - rho):.0f} "
                f"steps, and {self.sampling_steps} sampling steps leave a predicted error of "
                f"{self.predicted_error[i]:.3g} sd, mostly Monte Carlo error ({instead})")

    def _choice(self, accurate: np.ndarray) -> str:
        """Which criterion chose ``step_size`` and, against the other, what it gives up."""
        i = int(np.flatnonzero(self.step_sizes == self.step_size)[0])
        if self.score is None:
            if accurate.any():
                return "the largest step of the accurate range" + self._unmixed(i)
            if self.stationary_sd_ratio is not None:
                return "no step is accurate; the least biased stable one"
            return "no step is accurate; the one whose worst agent's spread is least inflated"
        best = f"the stable step with the best mean score_fn ({self.score[i]:.4g})"
        if accurate[i]:
            return best + ", inside the accurate range" + self._unmixed(i)
        if not accurate.any():
            return best + "; no step is accurate"
        j = int(np.argmax(np.where(accurate, self.score, -np.inf)))
        if self.step_size > self.step_sizes[j] and self.stationary_sd_ratio is not None:
            cost = (f"the exact stationary sd ratio is {self.stationary_sd_ratio[i]:.3g} and "
                    f"the mean error {self.stationary_mean_error[i]:.3g} sd (tolerances "
                    f"{self.tol_sd:g}, {self.tol_mean:g}) and the consensus error "
                    f"{self.consensus[i]:.3g} ({self.consensus[j]:.3g} there): the agents' "
                    "samples are biased, less faithful to the posterior")
        elif self.step_size > self.step_sizes[j]:
            cost = (f"the worst agent's spread is {self.inflation[i]:.3g}x its smallest "
                    f"(tolerance {self.spread_tolerance:g}) and the consensus error "
                    f"{self.consensus[i]:.3g} ({self.consensus[j]:.3g} there): the agents' "
                    "samples are biased, less faithful to the posterior")
        else:
            cost = (f"the chains had not reached their spread in {self.num_steps} iterations "
                    "(slow mixing: the samples need a longer burn-in)")
        return (f"chosen by score_fn over the spread criterion: mean score "
                f"{self.score[i]:.4g} against {self.score[j]:.4g} at {self.step_sizes[j]:.4g}, "
                f"the best-scoring step of the accurate range "
                f"{_range(self.accurate_range)}; what it gives up: at the proposal {cost} "
                f"(pass {self.step_sizes[j]:.4g} for accurate samples)")


def _inside(stable: np.ndarray) -> np.ndarray:
    """The stable grid steps below the largest stable one (all of them when only one is): the
    pilot saw ``num_steps`` iterations, a longer run may diverge at its edge."""
    inside = np.asarray(stable, bool).copy()
    idx = np.flatnonzero(inside)
    if idx.size > 1:
        inside[idx[-1]] = False
    return inside


def _range(r: tuple[float, float]) -> str:
    return f"[{r[0]:.4g}, {r[1]:.4g}]"


def _gradient(potential, key: PRNGKey, pooled: bool = False) -> Callable[[PyTree], PyTree]:
    """Exact per-agent gradients, or the oracle's with a fixed key. ``pooled``: the gradient
    of ``f = sum_i f_i`` at one point (leaves ``(1, ...)``), the centralized sampler's."""
    if not pooled:
        if potential.log_likelihood is not None:
            return potential.full_grad
        return lambda positions: potential.grad(positions, key)

    def grad(positions):
        x = jax.tree.map(lambda leaf: leaf[0], positions)
        if potential.log_likelihood is not None:
            every = jax.tree.map(
                lambda leaf: jnp.broadcast_to(leaf, (potential.num_agents, *leaf.shape)), x)
            g = jax.tree.map(lambda leaf: jnp.sum(leaf, axis=0), potential.full_grad(every))
        else:
            g = potential.pooled_grad(x, key)
        return jax.tree.map(lambda leaf: leaf[None], g)

    return grad


@eqx.filter_jit
def _power_iteration(potential, position: PyTree, key: PRNGKey, iterations: int,
                     pooled: bool = False) -> Array:
    """``(N,)`` largest ``|eigenvalue|`` of each agent's Hessian at ``position`` (leaves
    ``(N, ...)``); ``v_i ← H_i v_i / ‖H_i v_i‖`` independently per agent. ``pooled``: ``(1,)``,
    of ``f = sum_i f_i``'s Hessian at ``position`` (leaves ``(1, ...)``)."""
    grad = _gradient(potential, key, pooled)
    leaves, treedef = jax.tree.flatten(position)
    keys = jax.random.split(key, len(leaves))
    v = jax.tree.unflatten(treedef, [jax.random.normal(k, jnp.shape(x), x.dtype)
                                     for k, x in zip(keys, leaves)])

    def norms(tree):  # (N,) per-agent Euclidean norms
        return jnp.sqrt(sum(jnp.sum(leaf.reshape(leaf.shape[0], -1) ** 2, axis=1)
                            for leaf in jax.tree.leaves(tree)))

    def normalize(tree):
        n = jnp.maximum(norms(tree), jnp.finfo(jnp.result_type(float)).tiny)
        return jax.tree.map(lambda leaf: leaf / n.reshape((-1,) + (1,) * (leaf.ndim - 1))
                            .astype(leaf.dtype), tree)

    def body(_, carry):
        vec, _ = carry
        hv = jax.jvp(grad, (position,), (vec,))[1]
        return normalize(hv), norms(hv)

    _, value = jax.lax.fori_loop(0, iterations, body, (normalize(v), norms(v)))
    return value


def local_curvature(potential, position: PyTree, key: PRNGKey, *, iterations: int = 50,
                    pooled: bool = False):
    """Largest Hessian eigenvalue magnitude ``L_i`` of every agent's potential ``f_i`` (or,
    ``pooled``, ``L`` of ``f = sum_i f_i``: the curvature centralized SGLD sees).

    Args:
        potential: a :class:`dgsgld.Potential`.
        position: leaves ``(N, *param_shape)``: agent ``i``'s Hessian is taken at its row;
            ``pooled``: leaves ``(1, *param_shape)``, the one point.
        key: PRNG key (the starting vectors; and the mini-batch of a ``gradient_fn`` oracle).
        iterations: power iterations (the estimate approaches ``L_i`` from below).
        pooled: the Hessian of the sum of the agents' potentials at one point.

    Returns:
        ``(N,)`` NumPy float64 array (``(1,)`` when ``pooled``).
    """
    position, static = _params.split_static(position)
    if static is not None:  # e.g. an eqx.nn.MLP's activation: Hessians of the array leaves
        potential = _params.potential_on_arrays(potential, static)
    value = np.asarray(_power_iteration(potential, position, key, int(iterations), bool(pooled)),
                       np.float64)
    if not np.all(np.isfinite(value)):
        raise ValueError(
            "The Hessian–vector products of the potential are not finite at `position`; "
            "start from a point where the model's gradient is finite."
        )
    return value


class _PilotFlat(eqx.Module):
    """All chains' positions (leaves ``(C, N, ...)``, or ``(C, ...)`` without agents) as one
    array ``(C, N, p)`` (``N = 1`` without agents); an equinox module's non-array leaves
    skipped."""

    decentralized: bool = eqx.field(static=True)

    def __call__(self, position) -> Array:
        leaves = jax.tree.leaves(eqx.filter(position, eqx.is_array))
        if not self.decentralized:
            leaves = [x[:, None] for x in leaves]
        return jnp.concatenate([x.reshape(x.shape[0], x.shape[1], -1) for x in leaves], -1)


class _LogSpread(eqx.Module):
    """Per kept iteration: each agent's log geometric-mean spread across chains ``(N,)``
    (``(1,)`` without agents)."""

    flat: _PilotFlat

    def __call__(self, states) -> Array:
        flat = self.flat(states.position)
        tiny = jnp.finfo(flat.dtype).tiny
        return jnp.mean(jnp.log(jnp.maximum(jnp.std(flat, axis=0, ddof=1), tiny)), -1)


def _pilot_stats(decentralized: bool) -> evaluate.Metric:
    """The pilot's streamed statistics: :class:`_LogSpread` and the chains'
    :func:`dgsgld.evaluate.streamed_consensus_error` (zero without agents)."""
    flat = _PilotFlat(decentralized)
    return evaluate.combine(log_spread=_LogSpread(flat),
                            consensus=evaluate.streamed_consensus_error(flatten=flat))


class _AtFinalPositions(eqx.Module):
    """A pilot's ``score_fn`` of the final positions, as :func:`grid_run`'s ``score_fn`` of the
    trace (a module: equal for equal ``fn``, so the compiled pilot is reused)."""

    fn: Callable[[PyTree], Array]

    def __call__(self, trace):
        return self.fn(trace.state.position)


class _Grid(NamedTuple):
    """The pilot's raw results on a grid of ``G`` step sizes (NumPy, float64)."""

    step_sizes: np.ndarray  # (G,)
    agent_spread: np.ndarray  # (G, 3, N): start, middle, end
    consensus: np.ndarray  # (G, 3)
    diverged: np.ndarray  # (G,)
    score: np.ndarray  # (G, S): S = 1 (scalar score) or the chains' scores

    def join(self, other: _Grid) -> _Grid:
        return _Grid(*(np.concatenate([a, b]) for a, b in zip(self, other)))


def _run_grid(grid, run_pilot) -> _Grid:
    stats, score, diverged = run_pilot(grid)
    log_spread, consensus = stats["log_spread"], stats["consensus"]
    score = np.zeros(len(grid)) if score is None else np.asarray(score, np.float64)
    return _Grid(np.asarray(grid, np.float64), np.exp(np.asarray(log_spread, np.float64)),
                 np.asarray(consensus, np.float64), np.asarray(diverged),
                 score.reshape(len(grid), -1))


def propose_step_size(
    make_algorithm: Callable[[Array], Any],
    potential,
    mixing,
    init: PyTree,
    key: PRNGKey,
    *,
    num_steps: int = 200,
    num_step_sizes: int = 25,
    spread_tolerance: float = 1.5,
    max_chains: int = 64,
    curvature_at: PyTree | None = None,
    score_fn: Callable[[PyTree], Array] | None = None,
    tol_sd: float = 0.1,
    tol_mean: float = 0.1,
    grid_batch: int | None = None,
    at_mode: bool = False,
    sampling_steps: int | None = 2000,
) -> StepSizeReport:
    """Propose a constant step size for a model and a network (see the module doc).

    Args:
        make_algorithm: ``step_size -> sampler``, e.g. ``dgsgld.DIGingSGLD``.
        potential, mixing, init, key: as in :func:`dgsgld.sample`; ``init`` needs at least 4
            chains (the pilot compares them), leaves ``(num_chains, N, *param_shape)``.
        num_steps: pilot iterations per step size (even; the budget the chains get to reach
            the posterior: use roughly the burn-in you can afford, or, with ``score_fn``, the
            length of the run you will make).
        num_step_sizes: grid points between ``10⁻³/L`` and ``3/L``.
        spread_tolerance: the pilot's spread inflation that :meth:`StepSizeReport.explain`
            marks (> 1); a diagnostic, the choice rests on the exact stationary errors.
        max_chains: the pilot uses the first ``min(num_chains, max_chains)`` chains of ``init``.
        curvature_at: positions ``(N, *param_shape)`` where each agent's curvature is
            measured, or for a centralized sampler ``(1, *param_shape)``: one point where
            the pooled potential's curvature is measured. Default: the grid's scale at the
            first chain of ``init``, and the exact law's quadratics averaged over where the
            pilot's chains ended at its largest stable step inside the grid (up to
            :data:`LAW_POINTS` chains): where the chains go, not where they start, which may
            curve far more than the posterior does.
        score_fn: optional criterion of the pilot's final positions, higher is better:
            ``positions -> scalar`` or ``(num_chains,)`` (one score per chain; the report then
            gives standard errors), with ``positions`` like the pilot's ``init`` (an equinox
            model with its static leaves). E.g. the mean accuracy or log predictive density on
            a validation split (never the test set). The proposal is then the stable step
            with the best mean score instead of the largest accurate one, and the grid is
            extended upwards while its best score is at its (stable) top.
        tol_sd, tol_mean: the accurate range's bounds on the exact stationary worst sd ratio
            (``<= 1 + tol_sd``, either way) and standardized mean error, on the Gaussian
            approximation (``curvature_at``).
        grid_batch: run the pilot's grid this many step sizes at a time (:func:`grid_run`;
            memory for a sampler with a large state, e.g. SAGA on large local data sets).
        at_mode: measure the curvature (the grid's scale and the exact law's quadratics) at
            the pooled potential's mode, reached from the mean of ``curvature_at`` by Newton
            steps (the approach of :func:`~dgsgld.tuning.adaptation.warmup`).
            Needs ``log_likelihood`` and no private leaves (else the curvature stays at
            ``curvature_at``).
        sampling_steps: the steps of the run whose draws you will keep (``num_chains`` of
            ``init`` chains): the report predicts every step's error for them, and
            ``explain()`` says when the proposal's slowest direction will not mix in that
            run. ``None``: no prediction.

    Returns:
        A :class:`StepSizeReport`; ``report.explain()`` says how it decided.

    Raises:
        ValueError: for bad arguments, or when no step size of the grid is stable.
    """
    if not isinstance(at_mode, bool):
        raise ValueError(f"`at_mode` must be True or False; got {at_mode!r}.")
    if sampling_steps is not None and (isinstance(sampling_steps, bool) or not isinstance(
            sampling_steps, (int, np.integer)) or sampling_steps < 1):
        raise ValueError(f"`sampling_steps` must be a positive integer or None; got "
                         f"{sampling_steps!r}.")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 2 or \
            num_steps % 2:
        raise ValueError(f"`num_steps` must be an even integer >= 2; got {num_steps!r}.")
    if isinstance(num_step_sizes, bool) or not isinstance(num_step_sizes, int) or \
            num_step_sizes < 2:
        raise ValueError(f"`num_step_sizes` must be an integer >= 2; got {num_step_sizes!r}.")
    if not (isinstance(spread_tolerance, (int, float)) and spread_tolerance > 1):
        raise ValueError(f"`spread_tolerance` must be a number > 1; got {spread_tolerance!r}.")
    if score_fn is not None and not callable(score_fn):
        raise ValueError(f"`score_fn` must be callable or None; got {type(score_fn).__name__}.")
    for name, value in (("tol_sd", tol_sd), ("tol_mean", tol_mean)):
        if not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"`{name}` must be a positive number; got {value!r}.")
    leaves = jax.tree.leaves(eqx.filter(init, eqx.is_array))
    if not leaves or np.ndim(leaves[0]) < 1 or np.shape(leaves[0])[0] < 4:
        shape = np.shape(leaves[0]) if leaves else None
        raise ValueError(
            "`init` needs at least 4 chains for the pilot to measure their spread (leaves "
            f"(num_chains, N, *param_shape)); got a first leaf of shape {shape}."
        )
    chains = min(int(np.shape(leaves[0])[0]), int(max_chains))
    pilot_init = jax.tree.map(lambda x: x[:chains] if eqx.is_array(x) else x, init)
    if score_fn is not None:  # checked on shapes now, not after the pilot
        out = jax.eval_shape(score_fn, pilot_init)
        if getattr(out, "shape", None) not in ((), (chains,)):
            raise ValueError(
                "`score_fn` must return a scalar or one score per chain, shape "
                f"({chains},) for the pilot's {chains} chains; got "
                f"{getattr(out, 'shape', type(out).__name__)}.")
    decentralized = bool(make_algorithm(1.0).decentralized)
    curvature_key, pilot_key = jax.random.split(key)
    at = curvature_at
    if at is None:
        at = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, init)
        if not decentralized:  # one point, of the pooled potential
            at = jax.tree.map(lambda x: x[None] if eqx.is_array(x) else x, at)
    mode_steps = 0
    if at_mode:
        at, mode_steps = _to_mode(potential, at, jax.random.fold_in(curvature_key, 1))
    rows = np.shape(jax.tree.leaves(eqx.filter(at, eqx.is_array))[0])[0]
    curvature = local_curvature(potential, at, curvature_key,
                                pooled=not decentralized and rows == 1)
    lmax = float(curvature.max())
    if not lmax > 0:
        raise ValueError("The potential has zero curvature at the initial positions; pass "
                         "`curvature_at` at a point where the model is curved.")
    grid = np.geomspace(1e-3 / lmax, 3.0 / lmax, num_step_sizes).astype(np.float32)
    gap = math.nan
    # Reported only, for dense stacks (sparse and on-the-fly schedules have no stored stack).
    dense = getattr(mixing, "matrices", None) if hasattr(mixing, "matrix_at") else mixing
    if dense is not None:
        gap = float(np.mean(network_spectral.spectral_gap(dense)))

    checked = checked_if_concrete(mixing)  # once, not at every grid extension
    output = run.Output(thin=num_steps // 2, ensemble_fn=_pilot_stats(decentralized))
    final_score = None if score_fn is None else _AtFinalPositions(score_fn)

    def run_pilot(step_sizes):  # the same shapes every time: one compilation
        return grid_run(make_algorithm, step_sizes, potential, checked, pilot_init, pilot_key,
                        num_steps, output=output, score_fn=final_score, grid_batch=grid_batch)

    pilot = _run_grid(grid, run_pilot)
    ratio = float(grid[-1] / grid[-2])
    for _ in range(_MAX_EXTENSIONS if score_fn is not None else 0):
        stable, score = _judge(pilot)
        best = int(np.argmax(np.where(stable, score, -np.inf)))
        if not (stable.any() and best == len(pilot.step_sizes) - 1):
            break
        # The best score at the stable top of the grid: continue the grid upwards.
        more = (pilot.step_sizes[-1] * ratio ** np.arange(1, num_step_sizes + 1))
        pilot = pilot.join(_run_grid(more.astype(np.float32), run_pilot))
    law_step = None
    points = jax.tree.map(lambda x: x[None] if eqx.is_array(x) else x, at)
    inside = np.flatnonzero(_inside(_judge(pilot)[0]))
    if curvature_at is None and not at_mode and inside.size:
        # The law where the pilot's chains went at its largest stable step inside the grid
        # (the same keys: the grid's own run of that step).
        law_step = float(pilot.step_sizes[inside[-1]])
        end = run.sample(make_algorithm(jnp.float32(law_step)), potential, checked,
                         pilot_init, pilot_key, num_steps, output=run.Output(thin=num_steps),
                         on_divergence="flag").state.position
        end = jax.tree.map(lambda x: x[:LAW_POINTS] if eqx.is_array(x) else x, end)
        points = end if decentralized else jax.tree.map(
            lambda x: x[:, None] if eqx.is_array(x) else x, end)
    errors, law, noise_at = _stationary_errors(make_algorithm, potential, mixing, points,
                                               curvature_key, pilot.step_sizes, decentralized)
    num_draws = None if sampling_steps is None else int(np.shape(leaves[0])[0]) * int(
        sampling_steps)
    report = _report(pilot, curvature, gap, spread_tolerance, num_steps, chains,
                     score_fn is not None, errors, law, float(tol_sd), float(tol_mean),
                     num_draws)
    return report._replace(mode_steps=mode_steps, law_step=law_step,
                           sampling_steps=sampling_steps,
                           gradient_noise=float(noise_at(report.step_size)))


def _to_mode(potential, at, key):
    """``(point, steps)``: ``at`` (rows ``(R, *param_shape)``) moved to the pooled potential's
    mode by the warm-up's Newton steps from the mean of its rows, every row there; ``at`` and
    0 where they do not apply (no ``log_likelihood``, private leaves)."""
    if potential.log_likelihood is None or getattr(potential, "private", None) is not None:
        return at, 0
    at1 = jax.tree.map(lambda x: x[None] if eqx.is_array(x) else x, at)
    flat = _flat(at1, True)
    x = flat.flatten(at1)[0]                                             # (rows, d)
    d = x.shape[-1]
    # To the mode itself (Newton decrement 1e-4 d: quadratic convergence makes the last steps
    # cheap), not only within a standard deviation of it as the warm-up's starts.
    moved, _, steps, _ = _approach(_agent_grads(potential, at1, 2), x.mean(0, keepdims=True),
                                   None, dense=d <= DENSE_MAX_DIM, key=key, probes=8,
                                   curvature="hutchinson", start=0, stop=1e-4)
    if not np.all(np.isfinite(moved)):
        return at, 0
    point = flat.tree(np.broadcast_to(moved[:, None], (1, x.shape[0], d)))
    return jax.tree.map(lambda v: v[0] if eqx.is_array(v) else v, point), int(steps)


def _law_of(algorithm):
    """``algorithm`` as the exact laws take it: schedules (a decaying step or consensus
    weight) frozen at their first value, the largest, and no channel or preconditioner."""
    for field in ("step_size", "consensus"):
        value = getattr(algorithm, field, None)
        if callable(value):
            algorithm = eqx.tree_at(lambda a, f=field: getattr(a, f), algorithm,
                                    jnp.asarray(value(jnp.zeros((), jnp.int32)), jnp.float32))
    for field in ("channel", "preconditioner"):
        if getattr(algorithm, field, None) is not None:
            algorithm = eqx.tree_at(lambda a, f=field: getattr(a, f), algorithm, None,
                                    is_leaf=lambda x: x is None)
    return algorithm


def _stationary_errors(make_algorithm, potential, mixing, points, key, step_sizes,
                       decentralized: bool):
    """``(errors (G, 3), law)``: the exact stationary worst log sd ratio, standardized mean
    error and spectral radius (:mod:`dgsgld.tuning.criterion`) of ``make_algorithm(η)`` at
    every grid step, on the agents' quadratic approximations averaged over ``points``
    (leaves ``(P, R, *param_shape)``, ``R`` agents or one point of the pooled potential:
    Hessians and gradients there, as the warm-up averages them over its draws; the dense exact
    law for small ``N d``, with the agents' gradient-error covariances of mini-batches, plain
    or through a control variate (module doc); else a scalar mode at the pooled Hessian's
    largest eigenvalue at the first point, with the ratio ``κ`` of the pooled gradient
    error's variance along its eigenvector to the eigenvalue, measured where the potential has
    a ``log_likelihood``); ``inf`` where the law is unstable."""

    n = potential.num_agents
    flat = _flat(points, True)
    x = flat.flatten(points)                                             # (P, R, d)
    P, rows, d = x.shape
    if rows != n:  # points of the pooled potential: every agent's Hessian there
        x = np.broadcast_to(x[:, :1], (P, n, d))
    grads = _agent_grads(potential, points, 2)
    estimator = getattr(make_algorithm(1.0), "estimator", None)
    plain = _plain_minibatch(estimator, potential)
    age = _anchor_age(estimator, potential)
    anchored = age is not None

    def gradient_error(stiffest, directions=None):
        """The agents' gradient-error covariances ``(n, d, d)`` (``(n, k, k)`` along
        ``directions (d, k)``; ``None``: exact gradients): plain mini-batches' at the points'
        centre, as the warm-up measures them; a control variate's (SVRG, SAGA) around anchors
        ``1/√λ`` away in every coordinate (``λ = stiffest``), scaled to each step by
        :func:`anchor_share`."""
        if plain:
            return estimate_gradient_covariance(
                potential, grads._trees(jnp.asarray(x.mean(0), jnp.float32)),
                jax.random.fold_in(key, 2), num_draws=NOISE_DRAWS, directions=directions)
        if anchored:
            pts = x[:LAG_PAIRS]
            anchors = _normal_anchors(pts, jax.random.fold_in(key, 3),
                                  [(np.arange(d), None, np.full(d, stiffest))], dense=False)
            return _anchored_noise(grads, pts, anchors, key, NOISE_DRAWS, True, directions)
        return None

    reach = _noise_reach(mixing if decentralized else None, age) if anchored else 0.0

    def anchor_share(eta, stiffest):
        """A control variate's error at step ``η`` over the one measured by
        :func:`gradient_error` (1 for plain mini-batches): in the anchor's mean age the
        Langevin noise moves an agent by ``2η · reach`` in mean square per coordinate
        (:func:`_noise_reach`), ``2η · reach · λ`` times the anchors' ``1/λ``, and the error
        grows with the anchor's squared distance (exactly so for a quadratic likelihood)."""
        return 2.0 * eta * reach * stiffest if anchored else 1.0

    if d <= DENSE_MAX_DIM and n * d <= EXACT_MAX_SIZE and potential.log_likelihood is not None:
        H, g = _dense_curvature(grads, jnp.asarray(x, jnp.float32))
        H, g = np.asarray(H, np.float64).mean(0), np.asarray(g, np.float64).mean(0)
        H = 0.5 * (H + np.swapaxes(H, -1, -2))
        pooled = H.sum(0)
        lam, Q = np.linalg.eigh(pooled)
        floor = np.maximum(np.abs(lam), max(1e-8, 1e-4 * np.abs(lam).max()))
        H = H + (((Q * floor) @ Q.T - pooled) / n)[None]
        b = np.einsum("iab,ib->ia", H, x.mean(0)) - g
        # Translation invariant: centred at the minimizer, so that a start far from the mode
        # leaves no large offset for the nearly singular (I − Φ) of a small step to amplify.
        b = b - np.einsum("iab,b->ia", H, np.linalg.solve(H.sum(0), b.sum(0)))
        # Mini-batch gradients: their error enters the law, as in the warm-up (a step's bias
        # grows with it, unseen by the exact law without it).
        stiffest = float(floor.max())
        V = gradient_error(stiffest)
        law = "exact"
        kappa = 0.0 if V is None else _noise_ratio(V.sum(0), H.sum(0), dense=True)

        def one(eta):
            share = anchor_share(eta, stiffest)
            quadratic = criterion.Quadratic(H, b, None, None if V is None else share * V)
            return criterion.stationary_errors(_law_of(make_algorithm(eta)), quadratic,
                                               mixing if decentralized else None)
    else:
        first = jax.tree.map(lambda leaf: leaf[0] if eqx.is_array(leaf) else leaf, points)
        point = jax.tree.map(lambda leaf: leaf[:1], first) if rows != n or not decentralized \
            else first
        top = float(local_curvature(potential, point, key, pooled=True)[0]) \
            if rows == 1 else float(np.sum(local_curvature(potential, first, key)))
        kappa, stiffest = 0.0, top
        if (plain or anchored) and potential.log_likelihood is not None:
            # The mode carries the noise ratio of its own direction: the pooled gradient
            # error's variance along the pooled Hessian's top eigenvector at the first point
            # over its eigenvalue λ (a mode's variance widens by about ηκλ/2 with its own
            # ratio κ; the worst ratio over all directions, often a flat one's, would hold the
            # stiff mode's step far down).
            value, vector = _pooled_top(grads, jnp.asarray(x[:1], jnp.float32),
                                        jnp.ones(d, jnp.float32), jax.random.fold_in(key, 4), 50)
            # The anchors are 1/√λ away at this λ, and their error scales from there.
            stiffest = max(float(value[0]), 1e-30)
            along = gradient_error(stiffest, np.asarray(vector, np.float64)[0][:, None])
            kappa = float(along.sum()) / stiffest
        law = "modal"

        def one(eta):
            return criterion.modal_errors(_law_of(make_algorithm(eta)), [top], n,
                                          mixing if decentralized else None, noise_at(eta))

    def noise_at(eta):  # κ at step η: the measured ratio, scaled for a control variate
        return kappa * anchor_share(eta, stiffest)

    out = np.array([tuple(one(float(eta))) for eta in step_sizes])
    return out, law, noise_at


#: The pilot's chains whose final positions carry the exact law's curvature (Hessians averaged
#: over them; a full local pass each).
LAW_POINTS = 8

#: How many times the grid may be continued upwards (each time by ``num_step_sizes`` points at
#: its spacing, a factor ``3000`` at the defaults) while a ``score_fn``'s best is at its top.
_MAX_EXTENSIONS = 2


def _judge(pilot: _Grid) -> tuple[np.ndarray, np.ndarray]:
    """``(stable (G,), mean score (G,))``: no divergence, nothing non-finite, no growth."""
    spread = np.exp(np.mean(np.log(pilot.agent_spread), axis=-1))  # (G, 3) over agents
    consensus = pilot.consensus
    score = np.mean(pilot.score, axis=1)
    finite = (np.isfinite(pilot.agent_spread).all((1, 2)) & np.isfinite(consensus).all(1)
              & np.isfinite(score))
    with np.errstate(invalid="ignore"):
        growing = (spread[:, 2] > 2 * spread[:, 1]) | (consensus[:, 2] > 2 * consensus[:, 1]
                                                        + 1e-12)
    return finite & ~pilot.diverged & ~growing, score


def _report(pilot: _Grid, curvature, gap, spread_tolerance, num_steps, chains,
            scored: bool, errors, law, tol_sd, tol_mean, num_draws=None) -> StepSizeReport:
    grid = pilot.step_sizes
    stable, score = _judge(pilot)
    if not stable.any():
        raise ValueError(
            f"No step size in the pilot grid [{grid[0]:.3g}, {grid[-1]:.3g}] ran stably; check "
            "the model's gradient (scale of the log-likelihood, prior) and `init`."
        )
    agent_spread = pilot.agent_spread
    finite = np.isfinite(agent_spread).all((1, 2))
    spread = np.exp(np.mean(np.log(agent_spread[:, 2]), axis=-1))
    # Every agent's spread against its own smallest over the stable grid points (reported).
    end = np.where(stable[:, None], agent_spread[:, 2], np.inf)  # (G, N)
    inflation = np.max(end / end.min(axis=0), axis=1)             # (G,) worst agent
    # Accurate: stable in the pilot and within the tolerances by the exact stationary law.
    within = (errors[:, 0] <= np.log1p(tol_sd)) & (errors[:, 1] <= tol_mean)
    accurate = _inside(stable) & within
    pick = np.flatnonzero(accurate)
    if not pick.size:  # every stable step too biased: the least biased one
        badness = np.where(stable, np.maximum(errors[:, 0] / np.log1p(tol_sd),
                                              errors[:, 1] / tol_mean), np.inf)
        pick = np.array([np.argmin(badness)])
    stable_idx = np.flatnonzero(stable)
    step = float(grid[pick[-1]])
    predicted = None
    if num_draws is not None:
        predicted = np.sqrt([mse_objective(Errors(*map(float, e)), num_draws)
                             for e in errors])
    score_se = score_range = None
    if scored:
        best = int(np.argmax(np.where(stable, score, -np.inf)))
        step = float(grid[best])
        if pilot.score.shape[1] > 1:
            with np.errstate(invalid="ignore"):  # non-finite scores of diverged steps
                score_se = np.std(pilot.score, axis=1, ddof=1) / np.sqrt(pilot.score.shape[1])
            near = np.flatnonzero(stable & (score >= score[best] - score_se[best]))
            score_range = (float(grid[near[0]]), float(grid[near[-1]]))
    return StepSizeReport(
        step_size=step,
        stable_range=(float(grid[stable_idx[0]]), float(grid[stable_idx[-1]])),
        accurate_range=(float(grid[pick[0]]), float(grid[pick[-1]])),
        step_sizes=grid,
        spread=np.where(finite, spread, np.nan),
        inflation=inflation,
        consensus=pilot.consensus[:, 2],
        stable=stable,
        curvature=curvature,
        spectral_gap=gap,
        spread_tolerance=float(spread_tolerance),
        num_steps=int(num_steps),
        num_chains=chains,
        score=score if scored else None,
        score_se=score_se,
        score_range=score_range,
        stationary_sd_ratio=np.exp(errors[:, 0]),
        stationary_mean_error=errors[:, 1],
        spectral_radius=errors[:, 2],
        predicted_error=predicted,
        law=law,
        tol_sd=tol_sd,
        tol_mean=tol_mean,
    )


def check_step_size(step_size: float, report: StepSizeReport) -> bool:
    """Warn when ``step_size`` lies outside the ranges ``report`` found.

    Above the stable range the pilot diverged or grew; above the accurate range the exact
    stationary law is biased beyond ``report.tol_sd`` or ``report.tol_mean`` (for a report
    without stationary errors: the spread of the chains was inflated by more than
    ``report.spread_tolerance``); below it the chains mix more slowly than an accurate step
    allows (expect a longer burn-in). A proposal made with a ``score_fn`` may itself lie outside
    the accurate range, and is then warned about too.

    Returns:
        ``True`` when ``step_size`` lies in ``report.accurate_range`` (no warning).
    """
    eta = float(step_size)
    if not (math.isfinite(eta) and eta > 0):
        raise ValueError(f"`step_size` must be positive and finite; got {step_size!r}.")
    low, high = report.accurate_range
    ratio = lambda r: f"{r:.3g}x"
    if eta > report.stable_range[1]:
        message = (f"step size {eta:.4g} is above the stable range {_range(report.stable_range)}"
                   f" found by the pilot: chains diverged or grew there. Proposed: "
                   f"{report.step_size:.4g}.")
    elif eta > high * (1 + 1e-6):
        why = (f"the exact stationary law's bias exceeds sd {report.tol_sd:g} or mean "
               f"{report.tol_mean:g} there" if report.stationary_sd_ratio is not None else
               f"the pilot's spread across chains grew by more than "
               f"{report.spread_tolerance:g}x there")
        message = (f"step size {eta:.4g} is {ratio(eta / high)} the largest accurate step "
                   f"{high:.4g}: {why} (discretization/network bias).")
    elif eta < low * (1 - 1e-6):
        message = (f"step size {eta:.4g} is below the accurate range {_range((low, high))}: "
                   + ("the chains mix more slowly than an accurate step allows; "
                      if report.stationary_sd_ratio is not None else
                      f"the chains had not reached their spread in {report.num_steps} "
                      "iterations; ")
                   + "expect slow mixing (a longer burn-in).")
    else:
        return True
    warnings.warn(message, RuntimeWarning, stacklevel=2)
    return False
