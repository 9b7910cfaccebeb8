"""Bayesian logistic regression over a time-varying network, with the step size tuned on a grid.

The paper's synthetic set-up (§4.2.1): d = 5 features plus intercept, 380 class-balanced
training samples dealt to N = 20 agents (19 each, sorted by label so that the two halves of
the barbell hold different classes), one-sample mini-batches. Every step size of a grid and
every chain run in ONE compiled call (`grid_search` vmaps `dgsgld.sample` over the grid).

    python examples/logistic_regression.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp

import dgsgld
from dgsgld import networks, tuning
from dgsgld.posteriors.problems import logistic_regression_problem


def log_likelihood(x, datum):
    """log P(y | z, x) for P(y = 1 | z, x) = sigmoid(zᵀx)."""
    z, y = datum
    t = z @ x
    return y * t - jax.nn.softplus(t)


def main(small: bool = False) -> dict:
    num_chains, num_steps, grid = (
        (32, 60, tuning.log_grid(1e-3, 0.1, 5))
        if small
        else (200, 100, tuning.log_grid(1e-3, 1.0, 13))
    )
    problem = logistic_regression_problem(seed=0, partition="by_label")
    potential = dgsgld.Potential(
        log_likelihood,
        lambda x: -0.05 * jnp.sum(x**2),  # N(0, 10 I) prior, λ = 0.1
        (problem.features, problem.targets),
        batch_size=1,
    )
    schedule = networks.barbell(problem.num_agents, period=50, seed=1)
    init = jax.random.normal(jax.random.key(0), (num_chains, problem.num_agents, problem.dim))

    def final_accuracy(trace):  # mean over chains and agents of the final samples' accuracy
        return jnp.mean(problem.test_accuracy(trace.state.position))

    out = {}
    for name, make in [("DIGing-SGLD", dgsgld.DIGingSGLD), ("DE-SGLD", dgsgld.DESGLD)]:
        search = tuning.grid_search(
            make,
            grid,
            potential,
            schedule.matrices,
            init,
            jax.random.key(1),
            num_steps,
            score_fn=final_accuracy,
            mode="max",
        )
        curve = " ".join(f"{s:.3g}:{a:.3f}" for s, a in zip(search.step_sizes, search.scores))
        print(
            f"{name:<12} best step {search.best_step_size:.3g} -> accuracy "
            f"{search.scores[search.best_index]:.3f}   grid {curve}"
        )
        out[name] = float(search.scores[search.best_index])
    truth = float(problem.test_accuracy(problem.true_params))
    print(f"accuracy of the data-generating parameter: {truth:.3f}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(parser.parse_args().small)
