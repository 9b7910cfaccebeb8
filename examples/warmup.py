"""Warm-up instead of a hand-picked step: DIGing-SGLD adapts a preconditioner and a step size
across 4 agents on the breast-cancer logistic regression (31 parameters, label-skewed split),
then samples; the draws are scored against the stored NUTS reference.

The warm-up spends half of the budget; its report says what it chose, why, what the agreement
cost in bytes, and whether the budget was enough. The plain sampler at the step the proposer
gives runs the whole budget for comparison (its second half scored).

    python examples/warmup.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import tuning
from dgsgld.posteriors import get_target, moment_errors
from dgsgld.posteriors.references import load_reference


def main(small: bool = False) -> dict:
    chains, budget = (4, 800) if small else (8, 4000)
    target = get_target("logistic_breast_cancer")
    reference = load_reference(target.name, fingerprint=target.fingerprint)
    potential = target.potential(4, "skew", batch_size=32, seed=0)
    network = dgsgld.networks.ring(4)
    start = target.init(jax.random.key(0), chains)
    init = jnp.broadcast_to(start[:, None], (chains, 4, target.dim))

    sampler, state, report = dgsgld.warmup(dgsgld.DIGingSGLD, potential, network, init,
                                           jax.random.key(1), budget // 2,
                                           sampling_steps=budget // 2)
    print(report.explain())
    trace = dgsgld.sample(sampler, potential, network, state, jax.random.key(2), budget // 2,
                          output=dgsgld.Output(thin=5))
    adapted = moment_errors(np.asarray(trace.positions).reshape(-1, target.dim), reference)

    proposal = tuning.propose_step_size(dgsgld.DIGingSGLD, potential, network, init,
                                        jax.random.key(3), num_steps=100, num_step_sizes=8)
    plain = dgsgld.sample(dgsgld.DIGingSGLD(proposal.step_size), potential, network, init,
                          jax.random.key(2), budget, output=dgsgld.Output(thin=5))
    kept = np.asarray(plain.positions)[:, plain.positions.shape[1] // 2:]
    proposed = moment_errors(kept.reshape(-1, target.dim), reference)
    for name, m in (("adapted (warm-up)", adapted),
                    (f"proposed step {proposal.step_size:.3g}", proposed)):
        print(f"{name:24s} worst sd ratio {m['sd_ratio_worst']:.3f}  median "
              f"{m['sd_ratio_median']:.3f}  max mean error {m['mean_error_max']:.3f}")
    return {"adapted": adapted, "proposed": proposed, "report": report}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="fewer chains and steps")
    main(parser.parse_args().small)
