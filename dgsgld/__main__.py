"""Command line: ``python -m dgsgld run`` and ``python -m dgsgld reproduce TARGET --out DIR``.

``run`` samples the Bayesian linear-regression posterior of Figure 2 over the paper's
time-varying barbell with DIGing-SGLD, DE-SGLD and centralized SGLD at fixed step sizes and
prints each algorithm's final per-agent W2 distance. ``reproduce`` runs the paper's figures
(step-size tuning included) and writes JSON results and PNG plots, or the theory report.
``sweep`` repeats figures over several seeds.
"""

import argparse
import dataclasses
import gc
import math
import os
import sys
import tempfile
import time
from pathlib import Path

FIGURE_TARGETS = ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b", "fig3c", "fig2", "fig3", "all")
#: Real-data benchmarks (dgsgld.experiments.digits): Bayesian models across label-skewed agents.
DATA_TARGETS = ("digits", "diabetes")


def _number(convert, valid, what: str):
    """An argparse ``type``: ``convert(text)``, rejected unless ``valid``, naming ``what``."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _number(int, lambda v: v >= 1, "a positive integer")
_seed = _number(int, lambda v: v >= 0, "a non-negative integer")
_positive_float = _number(float, lambda v: math.isfinite(v) and v > 0, "a positive finite number")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dgsgld",
        description="Decentralized stochastic gradient Langevin sampling over time-varying "
        "networks (DIGing-SGLD): a quick run, and the paper's experiments.",
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
        type=_positive_int,
        default=None,
        metavar="B",
        help="local mini-batch size, 1..5 (default: the full local batch of 5)",
    )
    run.add_argument(
        "--trials",
        type=_positive_int,
        default=200,
        metavar="C",
        help="independent chains, used for the Gaussian fit (default: 200)",
    )
    run.add_argument(
        "--num-steps",
        type=_positive_int,
        default=100,
        metavar="T",
        help="iterations (default: 100)",
    )
    run.add_argument(
        "--step-size",
        type=_positive_float,
        default=0.008,
        metavar="ETA",
        help="decentralized step size (default: 0.008, near Fig. 2(a)'s tuned value)",
    )
    run.add_argument(
        "--sgld-step-size",
        type=_positive_float,
        default=None,
        metavar="ETA",
        help="centralized SGLD step size (default: step size / N, the same scale)",
    )
    run.add_argument("--seed", type=_seed, default=0, help="master seed (default: 0)")

    rep = sub.add_parser(
        "reproduce",
        help="reproduce the paper's figures (or the theory report) into a directory",
        description="Run the paper's experiments with step-size tuning and write, per figure, "
        "a JSON file (configuration, seeds, tuning grid, chosen step sizes, per-iteration mean "
        "and std over agents per algorithm) and a PNG plot; for several figures also overview "
        "plots and summary.md / summary.json. TARGET 'theory' writes the theory report.",
    )
    rep.add_argument(
        "target",
        choices=FIGURE_TARGETS + ("theory",) + DATA_TARGETS + ("directed", "communication",
                                                                 "design"),
        metavar="TARGET",
        help="fig2a|fig2b|fig2c|fig3a|fig3b|fig3c, fig2 or fig3 (a family), all "
        "(the six figures), theory, digits|diabetes (real-data benchmarks), directed "
        "(push-sum samplers on directed networks), communication (compressed messages: "
        "W2 against bytes) or design (learned mixing weights)",
    )
    rep.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="output directory (created if missing)",
    )
    rep.add_argument(
        "--trials",
        type=_positive_int,
        default=None,
        metavar="C",
        help="independent trials (chains) per figure (default: 200, the paper's)",
    )
    rep.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="master seed; data, networks and chains derive from it (default: 0)",
    )
    rep.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE.toml",
        help="TOML file of experiment settings: top-level keys apply to every "
        "figure, [fig2]/[fig3] tables to a family, [fig2a]-style tables to one "
        "figure; unknown keys are errors",
    )
    rep.add_argument("--no-plots", action="store_true", help="write JSON only, no PNG files")
    rep.add_argument("--quiet", action="store_true", help="print nothing but errors")
    rep.add_argument("--small", action="store_true",
                     help="digits|diabetes, directed, communication and design only: the reduced "
                          "size the tests run")
    rep.add_argument("--consensus", type=_positive_float, default=None, metavar="GAMMA",
                     help="communication only: CHOCO's consensus step in (0, 1] of the "
                          "error-feedback rows (default: 0.3)")

    sweep = sub.add_parser(
        "sweep",
        help="repeat figures over several seeds (new data, network and chains per seed)",
        description="Run figures for seeds 0..K-1 (step sizes tuned per seed, no gradient "
        "tuning) and write sweep_TARGET.json and a Markdown table of the final values over "
        "seeds and how often DIGing-SGLD beat DE-SGLD.",
    )
    sweep.add_argument(
        "target",
        choices=FIGURE_TARGETS + ("methods",),
        metavar="TARGET",
        help="fig2a|fig2b|fig2c|fig3a|fig3b|fig3c, fig2, fig3, all, or methods (every "
        "sampler and gradient estimator on every panel: docs/methods.md)",
    )
    sweep.add_argument(
        "--seeds",
        type=_positive_int,
        default=8,
        metavar="K",
        help="number of seeds, 0..K-1 (default: 8)",
    )
    sweep.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="output directory (created if missing)",
    )
    sweep.add_argument(
        "--trials",
        type=_positive_int,
        default=None,
        metavar="C",
        help="independent trials (chains) per figure (default: 200)",
    )
    sweep.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE.toml",
        help="TOML file of experiment settings, as for reproduce",
    )
    sweep.add_argument("--quiet", action="store_true", help="print nothing but errors")
    sweep.add_argument(
        "--panels", nargs="+", default=None, metavar="PANEL",
        help="methods only: the panels to run, e.g. 'fig3c (random)' (default: all)",
    )
    sweep.add_argument(
        "--methods", nargs="+", default=None, metavar="METHOD",
        help="methods only: the methods to run, e.g. D-ULA (default: all)",
    )
    sweep.add_argument(
        "--update", action="store_true",
        help="methods only: replace these panels' and methods' rows in DIR/methods.json "
        "(same seeds, trials and config) and rewrite its table and figure",
    )

    launch = sub.add_parser(
        "launch",
        help="start P local processes of one multi-process run (dgsgld.distributed.launch)",
        description="Run COMMAND as P processes on this machine, appending --process-id I "
        "--num-processes P --coordinator 127.0.0.1:PORT to each; stop all and fail when one "
        "fails. Example: python -m dgsgld launch --processes 2 -- python "
        "examples/multi_process.py --placement agents --out positions.npz",
    )
    launch.add_argument("--processes", type=_positive_int, required=True, metavar="P",
                        help="number of local processes")
    launch.add_argument("--timeout", type=_positive_float, default=None, metavar="SECONDS",
                        help="stop all processes and fail (code 124) after this long")
    launch.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the program and its arguments, after --")
    bench = sub.add_parser(
        "bench",
        help="benchmark the samplers against stored reference posteriors (docs/benchmark.md)",
        description="Run every sampler on every target with a stored NUTS reference, with "
        "step sizes from dgsgld.stepsize, then simulation-based calibration of DIGing-SGLD and "
        "DE-SGLD on the simulated targets, and write DIR/leaderboard.json and leaderboard.md "
        "(with the SBC p-values), DIR/sbc_ranks.json and, with matplotlib, leaderboard.png and "
        "sbc_ranks.png.",
    )
    bench.add_argument("suite", choices=("posteriors",), metavar="SUITE", help="posteriors")
    bench.add_argument("--out", required=True, type=Path, metavar="DIR",
                       help="output directory (created if missing)")
    bench.add_argument("--small", action="store_true",
                       help="two targets, five samplers, one network, small SBC runs: a quick "
                       "check")
    bench.add_argument("--seed", type=_seed, default=0, help="seed of splits, starts and keys")
    for command in (run, rep, sweep, bench):
        command.add_argument(
            "--no-cache",
            action="store_true",
            help="do not store or reuse compiled programs (default: keep them in "
            "$DGSGLD_CACHE_DIR, $XDG_CACHE_HOME/dgsgld/jax or ~/.cache/dgsgld/jax; "
            "DGSGLD_NO_CACHE=1 also disables)",
        )
    return parser


# -- checks before computing ----------------------------------------------------------------------

#: Copies of the positions a decentralized sampler keeps per chain (position, tracker, gradient,
#: noise) when estimating a run's memory.
_STATE_COPIES = 4


def _available_memory() -> int | None:
    from dgsgld._validation import available_memory

    return available_memory()


def _size(nbytes: float) -> str:
    from dgsgld._validation import format_bytes

    return format_bytes(nbytes)


def estimate_bytes(chains: int, kept: int, agents: int, dim: int) -> int:
    """Float32 bytes of a run: kept positions ``chains × kept × agents × dim`` plus the state
    (:data:`_STATE_COPIES` arrays of ``chains × agents × dim``)."""
    return 4 * chains * agents * dim * (kept + _STATE_COPIES)


def check_memory(nbytes: int, what: str, available: int | None = None) -> None:
    """Refuse a run whose estimated memory exceeds what is available, naming the option."""
    available = _available_memory() if available is None else available
    if available is not None and nbytes > available:
        raise ValueError(
            f"{what} needs about {_size(nbytes)} of memory (estimated: chains x kept iterations "
            f"x agents x d x 4 bytes plus the samplers' state) but about {_size(available)} is "
            "available; lower --trials."
        )


def _figure_memory(args) -> tuple[int, str]:
    """The largest estimated memory of the figures ``args`` would run (tuning grid included)."""
    from dgsgld.experiments.configs import LogisticRegressionConfig, apply_overrides, figure_config
    from dgsgld.experiments.configs import load_overrides
    from dgsgld.experiments.reproduce import expand_target

    figures = expand_target(args.target)
    overrides = load_overrides(args.config, figures) if args.config is not None else {}
    worst = (0, "")
    for fig in figures:
        cfg = apply_overrides(figure_config(fig), overrides.get(fig, {}))
        if args.trials is not None:  # checked with the figure's settings now, not mid-run
            try:
                cfg = dataclasses.replace(cfg, trials=args.trials)
            except ValueError as err:
                raise ValueError(f"{fig}: {err}") from None
        if args.command == "reproduce" and hasattr(cfg, "check_gradient_tuning"):
            try:
                cfg.check_gradient_tuning()
            except ValueError as err:
                raise ValueError(f"{fig}: {err}") from None
        trials = cfg.trials
        # Metrics are streamed (one kept state per chain); breast-cancer data has 30 features.
        dim = 31 if isinstance(cfg, LogisticRegressionConfig) else cfg.dim + 1
        nbytes = estimate_bytes(trials * cfg.num_step_sizes, 1, cfg.num_agents, dim)
        what = f"{fig} with --trials {trials} ({cfg.num_step_sizes} step sizes)"
        worst = max(worst, (nbytes, what))
    return worst


def check_out(out: Path) -> None:
    """``--out`` is a directory this process can write: created if missing, else an error."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file, not a directory.")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".dgsgld-write-test-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(
            f"--out {str(out)!r} is not a writable directory ({err.strerror or err})."
        ) from err


# -- subcommands -----------------------------------------------------------------------------------


def _bench(args) -> int:
    from dgsgld.posteriors.bench import BenchSettings, bench_posteriors

    settings = BenchSettings.small() if args.small else BenchSettings.full()
    bench_posteriors(args.out, settings, seed=args.seed)
    print(f"wrote {args.out / 'leaderboard.md'}, leaderboard.json and sbc_ranks.json")
    return 0


def _run(args) -> int:
    from dgsgld.experiments import quick_run

    # Three samplers run one after the other; positions are not stored (20 agents, d = 6).
    check_memory(estimate_bytes(args.trials, 1, 20, 6), f"--trials {args.trials}")

    print(
        f"Bayesian linear regression (Fig. 2 problem) on the time-varying {args.network}, "
        f"N=20 agents, {args.trials} trials, {args.num_steps} iterations"
    )
    result = quick_run(
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


def _theory(args) -> int:
    if args.config is not None:
        raise ValueError("--config applies to the figures, not to the theory report.")
    try:
        from dgsgld.experiments.theory_report import theory_report
    except ImportError as err:
        raise ValueError(
            f"The theory report is not available in this installation "
            f"(dgsgld.experiments.theory_report could not be imported: {err})."
        ) from err
    kwargs = {"seed": args.seed}
    if args.trials is not None:
        kwargs["num_chains"] = args.trials
    try:
        theory_report(args.out, **kwargs)
    except NotImplementedError as err:
        raise ValueError("The theory report is not implemented yet in this installation.") from err
    if not args.quiet:
        print(f"wrote the theory report to {args.out}")
    return 0


def _real_data(args) -> int:
    from dgsgld.experiments.digits import reproduce_digits

    if args.config is not None:
        raise ValueError("--config applies to the figures, not to the digits/diabetes benchmarks.")
    reproduce_digits(args.out, small=args.small, tasks=(args.target,), seed=args.seed,
                     num_chains=args.trials, plot=not args.no_plots,
                     logger=None if args.quiet else print)
    return 0


def _reproduce(args) -> int:
    if args.consensus is not None and args.target != "communication":
        raise ValueError(f"--consensus applies to the communication experiment, not to "
                         f"{args.target!r}.")
    if args.target == "theory":
        return _theory(args)
    if args.target in DATA_TARGETS:
        return _real_data(args)
    if args.target == "directed":
        from dgsgld.experiments.directed import directed_experiment

        directed_experiment(args.out, small=args.small, seed=args.seed,
                            plot=not args.no_plots, logger=None if args.quiet else print)
        return 0
    if args.target == "communication":
        from dgsgld.experiments.communication import communication_experiment

        extra = {} if args.consensus is None else {"consensus": args.consensus}
        communication_experiment(args.out, small=args.small, seed=args.seed,
                                 plot=not args.no_plots, logger=None if args.quiet else print,
                                 **extra)
        return 0
    if args.target == "design":
        from dgsgld.experiments.design import design_experiment

        design_experiment(args.out, small=args.small, seed=args.seed,
                          logger=None if args.quiet else print)
        return 0
    from dgsgld.experiments import reproduce

    check_memory(*_figure_memory(args))
    start = time.perf_counter()
    reproduce(
        args.target,
        args.out,
        trials=args.trials,
        seed=args.seed,
        config=args.config,
        plot=not args.no_plots,
        logger=None if args.quiet else print,
    )
    if not args.quiet:
        print(f"done in {time.perf_counter() - start:.1f} s; results in {args.out}")
    return 0


def _sweep_methods(args) -> int:
    """``sweep methods``: :func:`dgsgld.experiments.methods.methods_sweep`; ``--config`` keys
    (top level) override every panel's configuration, e.g. ``num_step_sizes = 9``."""
    import tomllib

    from dgsgld.experiments.methods import methods_sweep

    overrides = {}
    if args.config is not None:
        try:
            overrides = tomllib.loads(args.config.read_text())
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise ValueError(f"Config file {str(args.config)!r} could not be read: {err}") from err
    methods_sweep(range(args.seeds), args.out, trials=args.trials, overrides=overrides,
                  panels=args.panels, methods=args.methods, update=args.update,
                  logger=None if args.quiet else print)
    return 0


def _sweep(args) -> int:
    if args.target == "methods":
        return _sweep_methods(args)
    if args.panels or args.methods or args.update:
        raise ValueError("--panels, --methods and --update apply to `sweep methods` only; "
                         f"got target {args.target!r}.")
    from dgsgld.experiments import seed_sweep

    check_memory(*_figure_memory(args))
    seed_sweep(
        args.target,
        range(args.seeds),
        args.out,
        trials=args.trials,
        config=args.config,
        logger=None if args.quiet else print,
    )
    return 0


def _one_line(err: BaseException) -> str:
    """An exception as one line: the message of an error we raise, else its type too."""
    if isinstance(err, OSError) and err.strerror:
        text = f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    elif isinstance(err, ValueError):  # our own checks (and CheckpointError): the message says it
        text = str(err)
    elif isinstance(err, MemoryError):
        text = f"out of memory ({str(err) or 'MemoryError'}); lower --trials or --num-steps"
    else:
        text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return " ".join(text.split()) + ("" if isinstance(err, ValueError) else
                                     " (run with --debug for the traceback)")


#: Seconds the main thread gets to unwind after Ctrl-C before the process is ended (``launch``
#: gets longer: it stops its processes, waiting up to 10 s for them).
INTERRUPT_GRACE = 2.0
LAUNCH_INTERRUPT_GRACE = 15.0


def main(argv=None) -> int:
    """Entry point of ``python -m dgsgld`` and the ``dgsgld`` script; returns the exit code.

    Every error (not only bad values) becomes one ``error: ...`` line on standard error and exit
    status 2; ``--debug`` shows the traceback instead. Ctrl-C stops every command within a few
    seconds with status 130 (:mod:`dgsgld._interrupt`).
    """
    from dgsgld import _interrupt

    _interrupt.restore()  # the package is imported: Ctrl-C raises KeyboardInterrupt again
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    grace = LAUNCH_INTERRUPT_GRACE if args.command == "launch" else INTERRUPT_GRACE
    with _interrupt.stop_on_interrupt(grace) as interrupted:
        code = _dispatch(args)
    if interrupted.is_set() and code != 130:  # the KeyboardInterrupt was lost on the way
        print("error: interrupted", file=sys.stderr)
        return 130
    return code


def _dispatch(args) -> int:
    from dgsgld import _cache

    # Compiling commands only (not `launch`, which starts other processes).
    if hasattr(args, "no_cache"):
        _cache.enable(disabled=args.no_cache)
    try:
        if getattr(args, "out", None) is not None:  # every command writing a directory
            check_out(args.out)
        if args.command == "run":
            return _run(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "launch":
            from dgsgld.distributed import launch

            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            return launch(args.processes, cmd, timeout=args.timeout)
        return _reproduce(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - every error is reported the same way
        if args.debug:
            raise
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    # The process ends here: freeze the heap, so that the interpreter's garbage collections at
    # exit skip every imported module's objects (walking JAX's alone takes 0.1-0.3 s).
    gc.freeze()
    sys.exit(code)
