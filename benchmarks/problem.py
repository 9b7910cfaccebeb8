"""The benchmarked problem: the paper's Bayesian linear regression (§4.1), at any size.

``n = 5 N`` synthetic data ``y = z·x + δ`` with ``z = [ẑ, 1]``, ``ẑ ~ N(0, I_{d-1})``,
``x ~ N(0, I/λ)``, ``δ ~ N(0, 1)``, ``λ = 0.1``, five data per agent as in the paper, so that
agent ``i`` has ``f_i(x) = ‖Z_i x − y_i‖²/2 + λ‖x‖²/(2N)`` and ``∇f_i(x) = Z_iᵀ(Z_i x − y_i) + λx/N``.
The network is the paper's time-varying barbell (period 50, eq. 4.1 weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import networks

LAMBDA = 0.1
LOCAL_SIZE = 5
PERIOD = 50


@dataclass(frozen=True)
class Problem:
    """Host (NumPy) arrays of one benchmark problem.

    Attributes:
        features: ``(N, n_local, d)``; responses: ``(N, n_local)``;
        mixing: ``(P, N, N)`` barbell stack; post_mean ``(d,)``, post_cov ``(d, d)``: the
        closed-form posterior.
    """

    features: np.ndarray
    responses: np.ndarray
    mixing: np.ndarray
    post_mean: np.ndarray
    post_cov: np.ndarray

    @property
    def num_agents(self) -> int:
        return self.features.shape[0]

    @property
    def dim(self) -> int:
        return self.features.shape[2]


def make_problem(num_agents: int = 20, dim: int = 6, seed: int = 0, network: str = "barbell",
                 period: int = PERIOD) -> Problem:
    """Synthetic data and network; ``network`` is ``"barbell"`` (``period`` snapshots) or ``"ring"``."""
    rng = np.random.default_rng(seed)
    n = num_agents * LOCAL_SIZE
    z = np.concatenate([rng.standard_normal((n, dim - 1)), np.ones((n, 1))], axis=1)
    truth = rng.standard_normal(dim) / np.sqrt(LAMBDA)
    y = z @ truth + rng.standard_normal(n)
    cov = np.linalg.inv(z.T @ z + LAMBDA * np.eye(dim))
    if network == "barbell":
        mixing = np.asarray(networks.barbell(num_agents, period=period, seed=seed).matrices)
    elif network == "ring":
        mixing = np.asarray(networks.ring(num_agents).matrices)
    else:
        raise ValueError(f"`network` must be 'barbell' or 'ring'; got {network!r}.")
    return Problem(
        z.reshape(num_agents, LOCAL_SIZE, dim).astype(np.float32),
        y.reshape(num_agents, LOCAL_SIZE).astype(np.float32),
        mixing.astype(np.float32),
        cov @ z.T @ y,
        cov,
    )


def log_likelihood(x, datum):
    z, y = datum
    return -0.5 * (z @ x - y) ** 2


def log_prior(x):
    return -0.5 * LAMBDA * x @ x


def potential(problem: Problem, batch_size: int | None = None, dtype=jnp.float32) -> dgsgld.Potential:
    data = (jnp.asarray(problem.features, dtype), jnp.asarray(problem.responses, dtype))
    return dgsgld.Potential(log_likelihood, log_prior, data, batch_size=batch_size)


def step_size(problem: Problem) -> float:
    """A stable step size: a fraction of ``1/L`` with ``L`` the largest local curvature."""
    zz = np.einsum("nki,nkj->nij", problem.features, problem.features)
    top = float(np.linalg.eigvalsh(zz).max()) + LAMBDA / problem.num_agents
    return 0.05 / top
