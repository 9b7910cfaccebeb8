"""The paper's Fig. 2(a) run (DIGing-SGLD, Bayesian linear regression, time-varying barbell)
spread over several processes with ``jax.distributed``.

Start one copy per process, e.g. two on this machine::

    python -m dgsgld launch --processes 2 -- python examples/multi_process.py \\
        --placement agents --out positions.npz

(``launch`` adds ``--process-id``, ``--num-processes`` and ``--coordinator``.) ``--placement
chains``: each process runs a block of the chains on all the data
(``placement=dgsgld.Processes()``; ``--ensemble`` adds a statistic over all chains);
``agents``: each process holds only its agents' data, and the mixing is the only communication
(all rows each step, or with ``--mixing sparse`` only the rows neighbours need; ``--channel``
compresses the messages, and over ``--mixing sparse`` the compressed payloads travel). Process 0
writes ``positions``, the final positions of all chains ``(chains, agents, d)``, to ``--out``
(with ``--channel`` also ``bytes_sent``, the bytes each agent sent ``(chains, agents)``).
Without ``--coordinator`` the script runs in one process (the reference run).
See docs/guide/scale.md.
"""

import argparse
import sys
import time


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--process-id", type=int, default=0)
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--coordinator", default=None, help="HOST:PORT of process 0")
    p.add_argument("--placement", choices=("chains", "agents"), default="chains")
    p.add_argument("--out", required=True, help=".npz written by process 0")
    p.add_argument("--network", choices=("barbell", "ring", "directed_ring"), default="barbell",
                   help="the paper's time-varying barbell, a ring (circulant), or a one-way "
                   "ring (agent i sends to i + 1 only), run by Push-DIGing-SGLD")
    p.add_argument("--mixing", choices=("dense", "sparse"), default="dense",
                   help="sparse: dgsgld.networks.sparse snapshots; the agents placement then "
                   "exchanges only the rows neighbours need (ppermute) instead of all-gathering "
                   "them")
    p.add_argument("--channel", choices=("none", "exact", "top_k", "random_k", "quantize", "sign"),
                   default="none",
                   help="a dgsgld.communication.Channel on every message: exact, top-k / "
                   "random-k with --fraction of the entries, quantize to --levels levels, or "
                   "scaled sign")
    p.add_argument("--fraction", type=float, default=0.25, help="of --channel top_k, random_k")
    p.add_argument("--levels", type=int, default=4, help="of --channel quantize")
    p.add_argument("--error-feedback", action="store_true",
                   help="of --channel: CHOCO-style public copies (over a sparse exchange every "
                   "process keeps copies of the public copies its agents listen to and receives "
                   "their compressed updates)")
    p.add_argument("--activity", type=float, default=1.0,
                   help="of --channel: each agent active at a step with this probability "
                   "(stragglers; over a sparse exchange each process draws every agent's flag)")
    p.add_argument("--gossip", choices=("none", "matching", "edge"), default="none",
                   help="of --channel: randomized gossip, a random matching or one random link "
                   "per step (over a sparse exchange each process draws the round for every "
                   "agent)")
    p.add_argument("--chains", type=int, default=200, help="trials (200 in the paper)")
    p.add_argument("--agents", type=int, default=20, help="N (20 in the paper)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-size", type=float, default=0.008)
    p.add_argument("--batch-size", type=int, default=None,
                   help="local mini-batch b (Fig. 2(b): 3); default: full batch (Fig. 2(a))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-state", default=None, metavar="DIR",
                   help="write each process's final state to DIR/process_<id>.npz")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue from the states written with --save-state (same key)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="run in chunks (dgsgld.sample_chunked), each process committing its "
                   "own DIR/process_<id> after every chunk; started again with the same "
                   "arguments, the run resumes after the last chunk all processes committed")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="iterations per chunk with --checkpoint (default: steps / 4)")
    p.add_argument("--repeat", type=int, default=1,
                   help="run R times; report the first (compilation included) or, for R > 1, "
                   "the median of the others")
    p.add_argument("--ensemble", action="store_true",
                   help="chains placement: also write `ensemble`, the chains' mean and variance "
                   "per agent at every iteration, computed over all processes' chains")
    p.add_argument("--heartbeat-timeout", type=int, default=30,
                   help="seconds before a silent process is declared dead")
    return p.parse_args(argv)


def channel(args):
    """The ``--channel`` (``None``: no channel)."""
    from dgsgld import communication as comm

    compressor = {"exact": comm.identity, "top_k": lambda: comm.top_k(args.fraction),
                  "random_k": lambda: comm.random_k(args.fraction),
                  "quantize": lambda: comm.quantize(args.levels), "sign": comm.sign}
    gossip = None if args.gossip == "none" else args.gossip
    if args.channel == "none":
        if args.activity != 1.0 or args.error_feedback or gossip:
            raise SystemExit("--activity, --error-feedback and --gossip need a --channel")
        return None
    return comm.Channel(compressor[args.channel](), activity=args.activity,
                        error_feedback=args.error_feedback, gossip=gossip)


def setup(args):
    """``(problem, mixing, init (C, N, p), key, algorithm)`` of the Fig. 2(a) run,
    the same on every process (the data of every agent are generated; see ``local`` below)."""
    import jax
    import numpy as np

    import dgsgld
    from dgsgld.posteriors.problems import derive_seeds, linear_regression_problem

    seeds = derive_seeds(args.seed)  # the paper's figures' seeds: the same data and network
    problem = linear_regression_problem(seeds["data"], num_samples=5 * args.agents,
                                        num_agents=args.agents)
    make = dgsgld.DIGingSGLD
    if args.network == "ring":
        mixing = dgsgld.networks.ring(args.agents).matrices
    elif args.network == "directed_ring":    # column stochastic: 1/2 kept, 1/2 sent on
        import networkx as nx

        mixing = dgsgld.networks.from_digraph(nx.cycle_graph(args.agents, nx.DiGraph))
        make = dgsgld.PushDIGingSGLD
    else:
        mixing = dgsgld.networks.barbell(args.agents, period=50, seed=seeds["network"]).matrices
    if args.mixing == "sparse":
        # circulant for the rings (a directed one stays directed), else neighbour lists
        mixing = dgsgld.networks.sparse.from_dense(mixing)
    rng = np.random.default_rng(seeds["init"])  # N(0, I) starts, i.i.d. over chains and agents
    init = rng.standard_normal((args.chains, args.agents, problem.dim)).astype(np.float32)
    return problem, mixing, init, jax.random.key(seeds["sampling"]), \
        make(args.step_size, channel=channel(args))


def spread(states):
    """Per kept iteration, over all chains: the mean and variance of every agent's position
    ``(2, N, d)`` (an ``ensemble_fn``)."""
    import jax.numpy as jnp

    return jnp.stack([jnp.mean(states.position, axis=0), jnp.var(states.position, axis=0)])


def main(argv=None) -> int:
    args = parse(argv)
    import jax

    from dgsgld import parallel

    if args.coordinator is not None:
        parallel.initialize(args.process_id, args.num_processes, args.coordinator,
                            heartbeat_timeout=args.heartbeat_timeout)
        print(f"process {args.process_id} of {args.num_processes} joined", flush=True)
    import numpy as np

    import dgsgld

    problem, mixing, init, key, algorithm = setup(args)
    like = jax.eval_shape(jax.vmap(algorithm.init, (0, None, 0)), init, problem.potential(),
                          jax.random.split(key, args.chains))  # shapes only
    if args.placement == "chains":
        potential = problem.potential(args.batch_size)
        state = init
        if args.resume:  # each process's block of chains, gathered: all chains everywhere
            state = parallel.gather(parallel.load_process_state(args.resume, like))
        ensemble_fn = spread if args.ensemble else None

        placement = parallel.Processes()
        output = dgsgld.Output(positions=False, ensemble_fn=ensemble_fn)

        def run():
            # This process's block of the chains; the whole Trace gathered on every process.
            return dgsgld.sample(algorithm, potential, mixing, state, key,
                                 args.steps, output=output,
                                 placement=dgsgld.Processes())
    else:
        mesh = parallel.agent_mesh()
        first, size = parallel.agent_block(args.agents)
        # Keep this process's agents only (a deployment would read only its own files).
        local = dgsgld.Potential(problem.log_likelihood, problem.log_prior,
                                 (problem.features[first:first + size],
                                  problem.targets[first:first + size]),
                                 batch_size=args.batch_size)
        del problem
        potential = parallel.agent_potential(local, mesh)
        state = init
        if args.resume:
            state = parallel.load_process_state(args.resume, like, mesh)

        placement, output = parallel.Agents(mesh), dgsgld.Output(positions=False)

        def run():
            return dgsgld.sample(algorithm, potential, mixing, state, key,
                                 args.steps, output=output,
                                 placement=dgsgld.Agents(mesh=mesh))

    if args.checkpoint:
        def run():  # the same run in chunks; its Trace whole on every process
            return dgsgld.sample_chunked(
                algorithm, potential, mixing, state, key, args.steps, placement=placement,
                chunk_size=args.chunk_size or max(1, args.steps // 4), path=args.checkpoint,
                output=output)

    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        trace = run()
        # Whole arrays on every process: a collective (placement=Processes() and sample_chunked
        # have gathered already).
        split = args.placement == "agents" and not args.checkpoint
        whole = parallel.gather(trace) if split else trace
        times.append(time.perf_counter() - start)
    # The first call compiles; with --repeat R > 1, the median of the other R - 1.
    seconds = float(np.median(times[1:] if len(times) > 1 else times))
    if args.save_state:  # this process's agents, or its block of the (gathered) chains
        state = trace.state
        if args.placement == "chains":
            offset, size = parallel.chain_block(args.chains)
            state = jax.tree.map(lambda leaf: leaf[offset:offset + size], state)
        parallel.save_process_state(args.save_state, state)
    if jax.process_index() == 0:
        extra = {} if whole.ensemble is None else {"ensemble": np.asarray(whole.ensemble)}
        if algorithm.channel is not None:
            extra["bytes_sent"] = algorithm.channel.bytes_sent(whole.state)
        np.savez(args.out, positions=np.asarray(whole.state.position),
                 diverged=np.asarray(whole.divergence.iteration) >= 0, seconds=seconds, **extra)
        print(f"{args.placement}: {jax.process_count()} processes, {args.chains} chains, "
              f"{args.agents} agents, {args.steps} steps: {seconds:.2f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
