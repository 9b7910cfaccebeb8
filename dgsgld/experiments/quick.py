"""The quick decentralized run behind ``python -m dgsgld run``: Bayesian linear regression
(Figure 2's problem) at fixed step sizes, no tuning, final per-agent W2 of every algorithm.

One compiled program (:func:`_final_w2`): the three sampling loops (each a plain
:func:`dgsgld.sample` call) and every W2 (all agents of all algorithms and the exact-draw
floor's replicates side by side). On XLA:CPU one program compiles about twice as fast as one
per algorithm, and a later process loads it from JAX's persistent compilation cache (the
command line's :mod:`dgsgld._cache`) as one entry (``benchmarks/process.md``). The data,
starts, key and step sizes are its arguments; the network is a constant of it (see
:func:`quick_run`), so each network (``--network``, ``--seed``) compiles once.
"""

import time
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import communication, run
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
        bytes_sent: algorithm -> ``(N,)`` bytes each agent sent over the run (float32
            messages to each out-neighbour of every snapshot; ``(1,)`` zeros for centralized
            SGLD), counted by an exact :class:`dgsgld.communication.Channel`.
    """

    config: LinearRegressionConfig
    step_sizes: dict
    final_w2: dict
    floor: float
    wall_time: float
    bytes_sent: dict

    def table(self) -> str:
        """A compact text table: W2 mean/min/max over agents and the mean kB an agent sent,
        per algorithm."""
        lines = [f"{'algorithm':<20} {'step':>9} {'W2 mean':>9} {'min':>9} {'max':>9} "
                 f"{'kB/agent':>9}"]
        for name, w2 in self.final_w2.items():
            lines.append(
                f"{name:<20} {self.step_sizes[name]:>9.3g} {w2.mean():>9.4f} {w2.min():>9.4f} "
                f"{w2.max():>9.4f} {self.bytes_sent[name].mean() / 1e3:>9.1f}"
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
    if not (step_size > 0 and np.isfinite(step_size)):
        raise ValueError(f"`step_size` must be positive and finite; got {step_size!r}.")
    if sgld_step_size is None:
        sgld_step_size = step_size / config.num_agents
    elif not (sgld_step_size > 0 and np.isfinite(sgld_step_size)):
        raise ValueError(f"`sgld_step_size` must be positive and finite; got {sgld_step_size!r}.")
    seeds = derive_seeds(seed)
    problem = linear_regression_problem(seeds["data"])
    schedule = make_network(config, seeds["network"])
    potential = problem.potential(batch_size)
    init_dec, init_cen = _initial_positions(seeds["init"], config, problem.dim)
    steps = {name: float(sgld_step_size if name == CENTRALIZED else step_size)
             for name in ALGORITHMS}
    draws = _exact_draws(problem, trials, seeds["reference"])
    # The network is a constant of the program, so that `dgsgld.sample` checks it on the host
    # (a traced one is checked inside the program by host callbacks, `equinox.error_if`, and JAX
    # does not store programs with host callbacks in its persistent cache). Step sizes are
    # float32 arrays: traced, so that other step sizes reuse the program. So is the sampling
    # seed: the key is made inside (an eager ``jax.random.key`` is a program of its own).
    program = eqx.filter_jit(lambda *args: _final_w2(schedule, *args))
    w2, divergences, sent = program(
        {name: np.float32(eta) for name, eta in steps.items()}, potential, init_dec, init_cen,
        np.uint32(seeds["sampling"]), num_steps, draws, problem.posterior_mean,
        problem.posterior_cov,
    )
    w2 = np.asarray(w2, np.float64)
    final_w2, bytes_sent, lo = {}, {}, 0
    for name, divergence, count in zip(steps, divergences, sent, strict=True):
        hi = lo + (1 if name == CENTRALIZED else config.num_agents)
        final_w2[name], lo = w2[lo:hi], hi
        _refuse_divergence(name, steps[name], divergence, final_w2[name])
        bytes_sent[name] = np.asarray(count, np.int64) * _MESSAGE.message_bytes(problem.dim)
    floor = float(np.mean(w2[lo:]))
    return QuickRun(config, steps, final_w2, floor, time.perf_counter() - start, bytes_sent)


#: The channel the decentralized runs count their messages with: exact float32 messages, the
#: same draws as no channel.
_MESSAGE = communication.Channel()


def _refuse_divergence(name: str, step_size: float, divergence, w2: np.ndarray) -> None:
    """A ``ValueError`` naming the algorithm and its step size when a chain diverged or its
    W2 is not finite (positions too large for float32 moments): no table of NaN."""
    iteration = np.asarray(divergence.iteration)
    bad = np.flatnonzero(iteration >= 0)
    if bad.size:
        what = (f"{bad.size} of {iteration.size} chains became non-finite, the first at "
                f"iteration {int(iteration[bad].min())}")
    elif not np.all(np.isfinite(w2)):
        what = "its chains' positions grew too large for their W2 to be computed in float32"
    else:
        return
    option = "--sgld-step-size" if name == CENTRALIZED else "--step-size"
    raise ValueError(
        f"{name} diverged at step size {step_size:g}: {what}. Lower the step size ({option}; "
        f"the default {DEFAULT_STEP_SIZE} is near Fig. 2(a)'s tuned value, and DIGing-SGLD "
        "diverges above about 0.02 on the barbell)."
    )


def _final_w2(schedule, steps, potential, init_dec, init_cen, seed, num_steps, draws,
              target_mean, target_cov):
    """Every algorithm's final per-agent W2 to the target, then the exact draws' (one program).

    ``seed``: a uint32 scalar, the sampling key's ``jax.random.key(seed)``. Returns ``(M,)``
    W2 of the Gaussian fits over chains, agents of the algorithms in
    :data:`ALGORITHMS` order (``N``, ``N``, ``1``) then the ``draws``' replicates
    (``(C, R, p)``), each algorithm's :class:`dgsgld.Divergence` record, and the messages
    ``(N,)`` each agent sent (chain 0; every chain sends the same; ``(1,)`` zeros for the
    centralized run). Traced under one ``jit`` by :func:`quick_run`.
    """
    key = jax.random.key(seed)
    finals, divergences, sent = [], [], []
    for name, make in ALGORITHMS.items():
        central = name == CENTRALIZED
        trace = run.sample(make(steps[name]), potential, None if central else schedule,
                           init_cen if central else init_dec, key, num_steps,
                           output=run.Output(positions=False), on_divergence="flag",
                           channel=None if central else _MESSAGE)
        finals.append(_agent_axis(trace.state.position))
        divergences.append(trace.divergence)
        sent.append(jnp.zeros((1,), jnp.int32) if central
                    else communication.messages_sent(trace.state)[0])
    positions = jnp.concatenate([*finals, draws], axis=1)
    return _w2(*_moments(positions), target_mean, target_cov), divergences, sent
