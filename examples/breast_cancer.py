"""Breast Cancer Wisconsin (Diagnostic): Bayesian logistic regression on 30 agents, one
sample each, over the paper's time-varying barbell (§4.2.2).

The data set ships with scikit-learn (no download). Labels: 1 = benign, 0 = malignant. We
report each agent's test accuracy, and the uncertainty of the posterior predictive: the
probability of "benign" averaged over all chains and agents, its accuracy, and how often the
prediction is confident (probability outside [0.2, 0.8]) on correct versus wrong predictions.

    python examples/breast_cancer.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import networks
from dgsgld.posteriors.problems import breast_cancer_problem


def main(small: bool = False) -> dict:
    num_chains, num_steps = (32, 60) if small else (200, 100)
    problem = breast_cancer_problem(seed=0, partition="by_label")  # λ = 0.3
    potential = problem.potential(batch_size=1)
    schedule = networks.barbell(problem.num_agents, period=50, seed=1)
    init = jax.random.normal(jax.random.key(0), (num_chains, problem.num_agents, problem.dim))
    out = {}
    for name, algorithm in [
        ("DIGing-SGLD", dgsgld.DIGingSGLD(0.5)),
        ("DE-SGLD", dgsgld.DESGLD(0.5)),
    ]:
        trace = dgsgld.sample(
            algorithm,
            potential,
            schedule,
            init,
            jax.random.key(1),
            num_steps,
            output=dgsgld.Output(positions=False),
        )
        final = trace.state.position  # (chains, agents, 31)
        per_agent = np.asarray(problem.test_accuracy(final).mean(axis=0))  # (agents,)
        logits = jnp.einsum("cnp,tp->cnt", final, problem.test_features)
        prob = np.asarray(jax.nn.sigmoid(logits).mean(axis=(0, 1)))  # posterior predictive
        labels = np.asarray(problem.test_targets)
        correct = (prob > 0.5) == (labels > 0.5)
        confident = (prob < 0.2) | (prob > 0.8)
        print(
            f"{name:<12} per-agent accuracy {per_agent.mean():.3f} ± {per_agent.std():.3f} "
            f"(min {per_agent.min():.3f}); predictive accuracy {correct.mean():.3f}; "
            f"confident on {confident[correct].mean():.0%} of correct and "
            f"{confident[~correct].mean():.0%} of wrong predictions"
        )
        out[name] = float(per_agent.mean())
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="reduced size, for tests")
    main(parser.parse_args().small)
