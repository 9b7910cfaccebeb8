"""Helper of tests/model/test_private.py: the hierarchical model with private intercepts, its agents
split over the processes of a ``dgsgld launch`` (or one process without ``--coordinator``);
process 0 writes the final positions to ``--out``."""

import argparse
import sys
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--process-id", type=int, default=0)
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--coordinator", default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    from dgsgld import parallel

    if args.coordinator:
        parallel.initialize(args.process_id, args.num_processes, args.coordinator)
    import numpy as np

    import dgsgld

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _problems import hierarchical_gaussian, hierarchical_params, ring

    pb = hierarchical_gaussian(num_agents=8, batch_size=2, dtype=np.float64)
    init = hierarchical_params(np.random.default_rng(0).normal(size=(4, 8, 3)))
    key, alg, W = jax.random.key(3), dgsgld.DIGingSGLD(0.02), ring(8)
    if args.coordinator:
        # Each process builds its own agents' potential (their data only).
        mesh = parallel.agent_mesh()
        first, size = parallel.agent_block(8)
        pot = pb.potential
        local = dgsgld.Potential(
            pot.log_likelihood, pot.log_prior,
            jax.tree.map(lambda d: np.asarray(d)[first:first + size], pot.data), 2,
            private=("intercept",), log_agent_prior=pot.log_agent_prior)
        trace = dgsgld.sample(alg, parallel.agent_potential(local, mesh), W, init, key, 15,
                              output=dgsgld.Output(positions=False),
                              placement=dgsgld.Agents(mesh=mesh))
        state = parallel.gather(trace.state.position)
    else:
        state = dgsgld.sample(alg, pb.potential, W, init, key, 15).state.position
    if args.process_id == 0:
        np.savez(args.out, **{k: np.asarray(v) for k, v in state.items()})


if __name__ == "__main__":
    main()
