"""Command line: ``python -m dgsgld run`` (the main job) and ``python -m dgsgld launch``.

``run`` samples the Bayesian linear-regression posterior of the paper's Figure 2 over its
time-varying barbell with DIGing-SGLD, DE-SGLD and centralized SGLD at fixed step sizes and
prints each sampler's final per-agent W2 distance (:mod:`dgsgld._cli.main_job`). ``launch``
starts the local processes of one multi-process run (:func:`dgsgld.parallel.launch`). The
paper's experiments and the benchmarks are the repository's application: ``python -m
experiments``.
"""

import argparse
import gc
import sys

from ._cli import (
    add_no_cache,
    check_memory,
    estimate_bytes,
    positive_float,
    positive_int,
    run_command,
    seed,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dgsgld",
        description="Decentralized stochastic gradient Langevin sampling over time-varying "
        "networks (DIGing-SGLD): the main job, and the launcher of multi-process runs.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="on an error, show the full traceback"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="quick decentralized run: Bayesian linear regression on the time-varying barbell",
        description="Sample the Bayesian linear-regression posterior of the paper's Figure 2 "
        "(n=100, d=5 plus intercept, N=20 agents) with DIGing-SGLD, DE-SGLD and centralized "
        "SGLD at fixed step sizes (no tuning), and print the per-agent W2 distance to the "
        "exact posterior at the final iteration (mean/min/max over agents) and the wall time.",
    )
    run.add_argument(
        "--network",
        choices=("barbell", "lollipop"),
        default="barbell",
        help="time-varying network schedule (default: barbell)",
    )
    run.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        metavar="B",
        help="local mini-batch size, 1..5 (default: the full local batch of 5)",
    )
    run.add_argument(
        "--trials",
        type=positive_int,
        default=200,
        metavar="C",
        help="independent chains, used for the Gaussian fit (default: 200)",
    )
    run.add_argument(
        "--num-steps",
        type=positive_int,
        default=100,
        metavar="T",
        help="iterations (default: 100)",
    )
    run.add_argument(
        "--step-size",
        type=positive_float,
        default=0.008,
        metavar="ETA",
        help="decentralized step size (default: 0.008, near Fig. 2(a)'s tuned value)",
    )
    run.add_argument(
        "--sgld-step-size",
        type=positive_float,
        default=None,
        metavar="ETA",
        help="centralized SGLD step size (default: step size / N, the same scale)",
    )
    run.add_argument("--seed", type=seed, default=0, help="master seed (default: 0)")

    launch = sub.add_parser(
        "launch",
        help="start P local processes of one multi-process run (dgsgld.parallel.processes.launch)",
        description="Run COMMAND as P processes on this machine, appending --process-id I "
        "--num-processes P --coordinator 127.0.0.1:PORT to each; stop all and fail when one "
        "fails. Example: python -m dgsgld launch --processes 2 -- python "
        "examples/multi_process.py --placement agents --out positions.npz",
    )
    launch.add_argument("--processes", type=positive_int, required=True, metavar="P",
                        help="number of local processes")
    launch.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS",
                        help="stop all processes and fail (code 124) after this long")
    launch.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the program and its arguments, after --")
    add_no_cache(run)
    return parser


# -- subcommands -----------------------------------------------------------------------------------


def _run(args) -> int:
    from ._cli.main_job import main_job

    # Three samplers run one after the other; positions are not stored (20 agents, d = 6).
    check_memory(estimate_bytes(args.trials, 1, 20, 6), f"--trials {args.trials}")

    print(
        f"Bayesian linear regression (Fig. 2 problem) on the time-varying {args.network}, "
        f"N=20 agents, {args.trials} trials, {args.num_steps} iterations"
    )
    result = main_job(
        network=args.network,
        batch_size=args.batch_size,
        trials=args.trials,
        num_steps=args.num_steps,
        step_size=args.step_size,
        sgld_step_size=args.sgld_step_size,
        seed=args.seed,
    )
    print("per-agent W2 to the exact posterior at the final iteration:")
    print(result.table())
    print(f"wall time {result.wall_time:.1f} s (compilation included)")
    return 0


def _dispatch(args) -> int:
    if args.command == "run":
        return _run(args)
    from .parallel.processes import launch

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    return launch(args.processes, cmd, timeout=args.timeout)


def main(argv=None) -> int:
    """Entry point of ``python -m dgsgld`` and the ``dgsgld`` script; returns the exit code.

    Every error (not only bad values) becomes one ``error: ...`` line on standard error and exit
    status 2; ``--debug`` shows the traceback instead. Ctrl-C stops every command within a few
    seconds with status 130 (:func:`dgsgld._cli.run_command`).
    """
    return run_command(build_parser(), _dispatch, argv)


if __name__ == "__main__":
    code = main()
    # The process ends here: freeze the heap, so that the interpreter's garbage collections at
    # exit skip every imported module's objects (walking JAX's alone takes 0.1-0.3 s).
    gc.freeze()
    sys.exit(code)
