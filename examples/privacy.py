"""Differential privacy: what each agent's messages reveal, against the accuracy they buy.

The paper's Bayesian logistic regression (380 training data over N = 20 agents on a random
4-regular graph). Every per-datum gradient is clipped to norm C; each agent's (ε, δ) is that
of all the positions it sends (docs/guide/privacy.md: an adversary who sees them and knows
everything but the agent's data). DE-SGLD against centralized DP-SGLD on the same data (a
trusted curator releasing its chain), whose network average moves alike, and DIGing-SGLD with
private gradient tracking: its trackers travel as Gaussian copies of noise σ = κ √(2/η)
(κ = 1), so its ε is finite, (1 + 1/κ²) times DE-SGLD's μ².

    python examples/privacy.py            # 64 chains, 4000 iterations
    python examples/privacy.py --small    # a few seconds
"""

import argparse
import math

import jax

import dgsgld
from dgsgld import networks
from dgsgld.evaluate.privacy import privacy_epsilon
from dgsgld.posteriors.problems import logistic_regression_problem


def main(small: bool = False) -> dict:
    num_chains, num_steps = (16, 500) if small else (64, 4000)
    problem = logistic_regression_problem(0, num_agents=20)
    network = networks.random_regular(20, 4, seed=0)
    average_step = 2e-4                              # DE-SGLD steps at N times it
    results = {}
    for clip in (0.3, 1.0, None):
        potential = dgsgld.Potential(problem.log_likelihood, problem.log_prior,
                                     (problem.features, problem.targets), clip=clip)
        eta = 20 * average_step
        for name, algorithm, shape in (
                ("DE-SGLD", dgsgld.DESGLD(eta), (num_chains, 20, problem.dim)),
                ("SGLD (centralized)", dgsgld.SGLD(average_step), (num_chains, problem.dim)),
                ("DIGing-SGLD (private)", dgsgld.DIGingSGLD(
                    eta, tracking_noise=math.sqrt(2 / eta)), (num_chains, 20, problem.dim))):
            init = jax.random.normal(jax.random.key(1), shape)
            trace = dgsgld.sample(algorithm, potential, network if algorithm.decentralized
                                  else None, init, jax.random.key(2), num_steps,
                                  output=dgsgld.Output(thin=num_steps))
            accuracy = float(problem.test_accuracy(trace.positions[:, -1]).mean())
            report = privacy_epsilon(algorithm, potential, num_steps, 1e-5, network=network)
            epsilon = float(report.epsilon.max())
            results[(name, clip)] = (accuracy, epsilon)
            print(f"{name:<21} C = {clip!s:<5} accuracy {accuracy:.3f}   "
                  f"ε per agent {epsilon:.2f} (δ = 1e-5)")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(parser.parse_args().small)
