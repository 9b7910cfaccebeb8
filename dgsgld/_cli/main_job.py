"""The main job behind ``python -m dgsgld run``: Bayesian linear regression (the paper's
Figure 2 problem) at fixed step sizes, no tuning, final per-agent W2 of every sampler.

One compiled program (:func:`_final_w2`): the three sampling loops (each a plain
:func:`dgsgld.sample` call) and every W2 (all agents of all samplers and the exact-draw floor's
replicates side by side). On XLA:CPU one program compiles about twice as fast as one per
sampler, and a later process loads it from JAX's persistent compilation cache
(:mod:`dgsgld._cli.cache`) as one entry. The data, starts, key and step sizes are its arguments;
the network is a constant of it, so each network (``--network``, ``--seed``) compiles once.
"""

import time
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import communication, evaluate, networks
from ..posteriors.problems import derive_seeds, linear_regression_problem
from ..runner.loop import Output, sample
from ..samplers import DESGLD, SGLD, DIGingSGLD

__all__ = ["MainJob", "main_job"]

#: Default decentralized step size: near the tuned optimum of Figure 2(a) for both
#: DIGing-SGLD and DE-SGLD (DIGing-SGLD diverges above about 0.02 on the barbell).
DEFAULT_STEP_SIZE = 0.008
NUM_AGENTS, PERIOD, INIT_STD = 20, 50, 1.0
SAMPLERS = (DIGingSGLD, DESGLD, SGLD)   # the last one is the centralized reference

#: The channel the decentralized runs count their messages with: exact float32 messages, the
#: same draws as no channel.
_MESSAGE = communication.Channel()


@dataclass(frozen=True)
class MainJob:
    """Result of :func:`main_job`.

    Attributes:
        step_sizes: sampler name -> step size used.
        final_w2: sampler name -> ``(N,)`` per-agent W2 at the last iteration (``(1,)`` for
            centralized SGLD).
        floor: expected W2 of ``trials`` exact posterior draws (the best any sampler can show).
        wall_time: seconds, compilation included.
        bytes_sent: sampler name -> ``(N,)`` bytes each agent sent over the run (float32
            messages to each out-neighbour of every snapshot; ``(1,)`` zeros for centralized
            SGLD), counted by an exact :class:`dgsgld.communication.Channel`.
    """

    step_sizes: dict
    final_w2: dict
    floor: float
    wall_time: float
    bytes_sent: dict

    def table(self) -> str:
        """A compact text table: W2 mean/min/max over agents and the mean kB an agent sent,
        per sampler."""
        lines = [f"{'algorithm':<20} {'step':>9} {'W2 mean':>9} {'min':>9} {'max':>9} "
                 f"{'kB/agent':>9}"]
        for name, w2 in self.final_w2.items():
            lines.append(
                f"{name:<20} {self.step_sizes[name]:>9.3g} {w2.mean():>9.4f} {w2.min():>9.4f} "
                f"{w2.max():>9.4f} {self.bytes_sent[name].mean() / 1e3:>9.1f}"
            )
        lines.append(f"{'exact draws':<20} {'':>9} {self.floor:>9.4f}")
        return "\n".join(lines)


def _name(cls) -> str:
    return cls.name if cls.decentralized else f"{cls.name} (centralized)"


def main_job(
    *,
    network: str = "barbell",
    batch_size: int | None = None,
    trials: int = 200,
    num_steps: int = 100,
    step_size: float = DEFAULT_STEP_SIZE,
    sgld_step_size: float | None = None,
    seed: int = 0,
) -> MainJob:
    """Sample Figure 2's posterior with DIGing-SGLD, DE-SGLD and centralized SGLD at fixed steps.

    Args:
        network: ``"barbell"`` or ``"lollipop"`` (``N = 20``, period 50).
        batch_size: local mini-batch, ``None`` for the full batch of 5.
        trials: independent chains (at least 2).
        num_steps: iterations.
        step_size: decentralized step size ``η``.
        sgld_step_size: centralized step (default ``η / N``, the same scale).
        seed: master seed.

    Returns:
        A :class:`MainJob`.
    """
    start = time.perf_counter()
    if network not in ("barbell", "lollipop"):
        raise ValueError(f"`network` must be 'barbell' or 'lollipop'; got {network!r}.")
    if trials < 2:
        raise ValueError(f"`trials` must be at least 2 (a covariance over chains); got {trials}.")
    if not (step_size > 0 and np.isfinite(step_size)):
        raise ValueError(f"`step_size` must be positive and finite; got {step_size!r}.")
    if sgld_step_size is None:
        sgld_step_size = step_size / NUM_AGENTS
    elif not (sgld_step_size > 0 and np.isfinite(sgld_step_size)):
        raise ValueError(f"`sgld_step_size` must be positive and finite; got {sgld_step_size!r}.")
    seeds = derive_seeds(seed)
    problem = linear_regression_problem(seeds["data"])
    build = networks.barbell if network == "barbell" else networks.lollipop
    schedule = build(NUM_AGENTS, period=PERIOD, seed=seeds["network"])
    potential = problem.potential(batch_size)
    rng = np.random.default_rng(seeds["init"])
    init_dec = (INIT_STD * rng.standard_normal((trials, NUM_AGENTS, problem.dim))).astype(
        np.float32)
    init_cen = (INIT_STD * rng.standard_normal((trials, problem.dim))).astype(np.float32)
    steps = {_name(cls): float(step_size if cls.decentralized else sgld_step_size)
             for cls in SAMPLERS}
    rng = np.random.default_rng(seeds["reference"])
    draws = rng.multivariate_normal(
        np.asarray(problem.posterior_mean, np.float64), np.asarray(problem.posterior_cov,
                                                                    np.float64),
        size=(trials, 64)).astype(np.float32)
    # The network is a constant of the program, so that `dgsgld.sample` checks it on the host
    # (a traced one is checked inside the program by host callbacks, `equinox.error_if`, and JAX
    # does not store programs with host callbacks in its persistent cache). Step sizes are
    # float32 arrays: traced, so that other step sizes reuse the program. So is the sampling
    # seed: the key is made inside (an eager ``jax.random.key`` is a program of its own).
    program = eqx.filter_jit(lambda *args: _final_w2(schedule, *args))
    w2, divergences, sent = program(
        tuple(np.float32(eta) for eta in steps.values()), potential, init_dec, init_cen,
        np.uint32(seeds["sampling"]), num_steps, draws, problem.posterior_mean,
        problem.posterior_cov,
    )
    w2 = np.asarray(w2, np.float64)
    final_w2, bytes_sent, lo = {}, {}, 0
    for cls, name, divergence, count in zip(SAMPLERS, steps, divergences, sent, strict=True):
        hi = lo + (NUM_AGENTS if cls.decentralized else 1)
        final_w2[name], lo = w2[lo:hi], hi
        _refuse_divergence(name, cls.decentralized, steps[name], divergence, final_w2[name])
        bytes_sent[name] = np.asarray(count, np.int64) * _MESSAGE.message_bytes(problem.dim)
    floor = float(np.mean(w2[lo:]))
    return MainJob(steps, final_w2, floor, time.perf_counter() - start, bytes_sent)


def _refuse_divergence(name: str, decentralized: bool, step_size: float, divergence,
                       w2: np.ndarray) -> None:
    """A ``ValueError`` naming the sampler and its step size when a chain diverged or its
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
    option = "--step-size" if decentralized else "--sgld-step-size"
    raise ValueError(
        f"{name} diverged at step size {step_size:g}: {what}. Lower the step size ({option}; "
        f"the default {DEFAULT_STEP_SIZE} is near Fig. 2(a)'s tuned value, and DIGing-SGLD "
        "diverges above about 0.02 on the barbell)."
    )


def _final_w2(schedule, steps, potential, init_dec, init_cen, seed, num_steps, draws,
              target_mean, target_cov):
    """Every sampler's final per-agent W2 to the target, then the exact draws' (one program).

    ``seed``: a uint32 scalar, the sampling key's ``jax.random.key(seed)``. Returns ``(M,)``
    W2 of the Gaussian fits over chains, agents of the samplers in :data:`SAMPLERS` order
    (``N``, ``N``, ``1``) then the ``draws``' replicates (``(C, R, p)``), each sampler's
    :class:`dgsgld.Divergence` record, and the messages ``(N,)`` each agent sent (chain 0; every
    chain sends the same; ``(1,)`` zeros for the centralized run).
    """
    key = jax.random.key(seed)
    finals, divergences, sent = [], [], []
    for cls, eta in zip(SAMPLERS, steps, strict=True):
        central = not cls.decentralized
        trace = sample(cls(eta), potential, None if central else schedule,
                       init_cen if central else init_dec, key, num_steps,
                       output=Output(positions=False), on_divergence="flag",
                       channel=None if central else _MESSAGE)
        position = trace.state.position
        finals.append(position[:, None, :] if central else position)
        divergences.append(trace.divergence)
        sent.append(jnp.zeros((1,), jnp.int32) if central
                    else communication.messages_sent(trace.state)[0])
    positions = jnp.concatenate([*finals, draws], axis=1)
    mean, cov = evaluate.empirical_moments(positions, axis=0, ddof=1)
    w2 = evaluate.gaussian_w2(mean, cov, jnp.broadcast_to(target_mean, mean.shape),
                              jnp.broadcast_to(target_cov, cov.shape))
    return w2, divergences, sent
