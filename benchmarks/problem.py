"""The benchmarked problem: the paper's Bayesian linear regression (§4.1), at any size.

The data are :func:`dgsgld.posteriors.problems.linear_regression_problem`'s (``z = [ẑ, 1]``,
``ẑ ~ N(0, I_{d-1})``, ``x ~ N(0, I/λ)``, ``y = z·x + N(0, 1)``, ``λ = 0.1``), five per agent
as in the paper, so that agent ``i`` has ``f_i(x) = ‖Z_i x − y_i‖²/2 + λ‖x‖²/(2N)`` and
``∇f_i(x) = Z_iᵀ(Z_i x − y_i) + λx/N``. The network is the paper's time-varying barbell
(period 50, eq. 4.1 weights). The model functions below are written as a user would write them.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import networks
from dgsgld.posteriors.problems import linear_regression_problem

LAMBDA = 0.1
LOCAL_SIZE = 5
PERIOD = 50


@dataclass(frozen=True)
class Problem:
    """Host (NumPy) arrays of one benchmark problem.

    Attributes:
        features: ``(N, n_local, d)``; responses: ``(N, n_local)``; mixing: ``(P, N, N)``;
        post_mean ``(d,)``, post_cov ``(d, d)``: the closed-form posterior.
    """

    features: np.ndarray
    responses: np.ndarray
    mixing: np.ndarray
    post_mean: np.ndarray
    post_cov: np.ndarray

    @property
    def num_agents(self) -> int:
        return self.features.shape[0]


def make_problem(num_agents: int = 20, dim: int = 6, seed: int = 0, network: str = "barbell",
                 period: int = PERIOD) -> Problem:
    """Synthetic data and network; ``network`` is ``"barbell"`` (``period`` snapshots) or
    ``"ring"``."""
    if network == "barbell":
        mixing = np.asarray(networks.barbell(num_agents, period=period, seed=seed).matrices)
    elif network == "ring":
        mixing = np.asarray(networks.ring(num_agents).matrices)
    else:
        raise ValueError(f"`network` must be 'barbell' or 'ring'; got {network!r}.")
    data = linear_regression_problem(seed, num_samples=num_agents * LOCAL_SIZE, dim=dim - 1,
                                     num_agents=num_agents, prior_precision=LAMBDA)
    return Problem(np.asarray(data.features, np.float32), np.asarray(data.targets, np.float32),
                   mixing.astype(np.float32), np.asarray(data.posterior_mean),
                   np.asarray(data.posterior_cov))


def log_likelihood(x, datum):
    z, y = datum
    return -0.5 * (z @ x - y) ** 2


def log_prior(x):
    return -0.5 * LAMBDA * x @ x


def potential(problem: Problem, batch_size: int | None = None,
              dtype=jnp.float32) -> dgsgld.Potential:
    data = (jnp.asarray(problem.features, dtype), jnp.asarray(problem.responses, dtype))
    return dgsgld.Potential(log_likelihood, log_prior, data, batch_size=batch_size)


def step_size(problem: Problem) -> float:
    """A stable step size: a fraction of ``1/L`` with ``L`` the largest local curvature."""
    zz = np.einsum("nki,nkj->nij", problem.features, problem.features)
    top = float(np.linalg.eigvalsh(zz).max()) + LAMBDA / problem.num_agents
    return 0.05 / top
