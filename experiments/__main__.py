"""Command line of the application: ``python -m experiments reproduce TARGET --out DIR``,
``sweep`` and ``bench``, run from the repository root.

``reproduce`` runs the paper's figures (step-size tuning included) and writes JSON results and
PNG plots, the theory report, or one of the real-data, directed, communication or design
experiments. ``sweep`` repeats figures over several seeds. ``bench posteriors`` scores every
sampler against the stored NUTS references (``docs/results/posteriors.md``).
"""

import argparse
import dataclasses
import gc
import sys
import time
from pathlib import Path

from dgsgld._cli import (
    add_no_cache,
    check_memory,
    estimate_bytes,
    positive_float,
    positive_int,
    run_command,
    seed,
)

FIGURE_TARGETS = ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b", "fig3c", "fig2", "fig3", "all")
#: Real-data benchmarks (experiments.digits): Bayesian models across label-skewed agents.
DATA_TARGETS = ("digits", "diabetes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments",
        description="The paper's experiments and the reference-posterior benchmark of dgsgld.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="on an error, show the full traceback"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
                                                                 "design", "privacy",
                                                                 "personalized"),
        metavar="TARGET",
        help="fig2a|fig2b|fig2c|fig3a|fig3b|fig3c, fig2 or fig3 (a family), all "
        "(the six figures), theory, digits|diabetes (real-data benchmarks), directed "
        "(push-sum samplers on directed networks), communication (compressed messages: "
        "W2 against bytes), design (learned mixing weights), privacy (utility against "
        "each agent's differential-privacy ε) or personalized (shared and agent-private "
        "parameters)",
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
        type=positive_int,
        default=None,
        metavar="C",
        help="independent trials (chains) per figure (default: 200, the paper's)",
    )
    rep.add_argument(
        "--seed",
        type=seed,
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
                     help="digits|diabetes, directed, communication, design, privacy and "
                          "personalized only: "
                          "the reduced size the tests run")
    rep.add_argument("--consensus", type=positive_float, default=None, metavar="GAMMA",
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
        "sampler and gradient estimator on every panel: docs/results/methods.md)",
    )
    sweep.add_argument(
        "--seeds",
        type=positive_int,
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
        type=positive_int,
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

    bench = sub.add_parser(
        "bench",
        help="benchmark the samplers against stored reference posteriors "
        "(docs/results/posteriors.md)",
        description="Run every sampler on every target with a stored NUTS reference, with "
        "step sizes from dgsgld.tuning, then simulation-based calibration of DIGing-SGLD and "
        "DE-SGLD on the simulated targets, and write DIR/leaderboard.json and leaderboard.md "
        "(with the SBC p-values), DIR/sbc_ranks.json and, with matplotlib, leaderboard.png and "
        "sbc_ranks.png.",
    )
    bench.add_argument("suite", choices=("posteriors",), metavar="SUITE", help="posteriors")
    bench.add_argument("--out", required=True, type=Path, metavar="DIR",
                       help="output directory (created if missing)")
    bench.add_argument("--small", action="store_true",
                       help="three targets, five samplers and three adapted ones, one network, "
                       "small SBC runs: a quick "
                       "check")
    bench.add_argument("--seed", type=seed, default=0, help="seed of splits, starts and keys")
    bench.add_argument("--targets", default=None, metavar="NAMES",
                       help="run a part: these targets only (comma-separated; their rows and "
                       "calibration cells), with the keys they have in the whole run")
    parts = bench.add_mutually_exclusive_group()
    parts.add_argument("--no-sbc", action="store_true",
                       help="run a part: no simulation-based calibration")
    parts.add_argument("--sbc-only", action="store_true",
                       help="run a part: the simulation-based calibration alone")
    bench.add_argument("--merge", nargs="+", type=Path, default=None, metavar="PART",
                       help="run nothing: join the parts in these directories (same settings "
                       "and seed) into DIR, the files of one whole run")
    bench.add_argument("--partial", action="store_true",
                       help="with --merge: parts may leave targets out (the files name them)")
    bench.add_argument("--resume", action="store_true",
                       help="keep the rows already in DIR (a run of the same settings and "
                       "part that stopped) and run the others")
    for command in (rep, sweep, bench):
        add_no_cache(command)
    return parser


# -- checks before computing ----------------------------------------------------------------------


def _figure_memory(args) -> tuple[int, str]:
    """The largest estimated memory of the figures ``args`` would run (tuning grid included)."""
    from .configs import LogisticRegressionConfig, apply_overrides, figure_config, load_overrides
    from .reproduce import expand_target

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



# -- subcommands -----------------------------------------------------------------------------------


def _bench(args) -> int:
    from .bench import BenchSettings, bench_posteriors, merge

    if args.merge is not None:
        if args.targets is not None or args.no_sbc or args.sbc_only or args.resume:
            raise ValueError("--merge joins parts already run: no --targets, --no-sbc, "
                             "--sbc-only or --resume.")
        merge(args.out, args.merge, partial=args.partial)
        print(f"wrote {args.out / 'leaderboard.md'}, leaderboard.json and sbc_ranks.json")
        return 0
    if args.partial:
        raise ValueError("--partial applies to --merge.")
    settings = BenchSettings.small() if args.small else BenchSettings.full()
    only = None
    if args.targets is not None:
        only = tuple(args.targets.split(","))
        names = dict.fromkeys(settings.targets + settings.sbc_targets)
        unknown = [t for t in only if t not in names]
        if unknown:
            raise ValueError(f"--targets: {unknown} are not targets of this suite "
                             f"({', '.join(names)}).")
    bench_posteriors(args.out, settings, seed=args.seed, only=only,
                     calibration=not args.no_sbc, leaderboard=not args.sbc_only,
                     resume=args.resume)
    print(f"wrote {args.out / 'leaderboard.md'}, leaderboard.json and sbc_ranks.json")
    return 0


def _theory(args) -> int:
    if args.config is not None:
        raise ValueError("--config applies to the figures, not to the theory report.")
    try:
        from .theory_report import theory_report
    except ImportError as err:
        raise ValueError(
            f"The theory report is not available in this installation "
            f"(experiments.theory_report could not be imported: {err})."
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
    from .digits import reproduce_digits

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
        from .directed import directed_experiment

        directed_experiment(args.out, small=args.small, seed=args.seed,
                            plot=not args.no_plots, logger=None if args.quiet else print)
        return 0
    if args.target == "communication":
        from .communication import communication_experiment

        extra = {} if args.consensus is None else {"consensus": args.consensus}
        communication_experiment(args.out, small=args.small, seed=args.seed,
                                 plot=not args.no_plots, logger=None if args.quiet else print,
                                 **extra)
        return 0
    if args.target == "design":
        from .design import design_experiment

        design_experiment(args.out, small=args.small, seed=args.seed,
                          logger=None if args.quiet else print)
        return 0
    if args.target == "personalized":
        from .personalized import personalized_experiment

        personalized_experiment(args.out, small=args.small, seed=args.seed,
                                logger=None if args.quiet else print)
        return 0
    if args.target == "privacy":
        from .privacy import privacy_experiment

        privacy_experiment(args.out, small=args.small, seed=args.seed,
                           logger=None if args.quiet else print)
        return 0
    from . import reproduce as reproduce

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
    """``sweep methods``: :func:`experiments.methods.methods_sweep`; ``--config`` keys
    (top level) override every panel's configuration, e.g. ``num_step_sizes = 9``."""
    import tomllib

    from .methods import methods_sweep

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
    from . import seed_sweep

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


def _dispatch(args) -> int:
    if args.command == "sweep":
        return _sweep(args)
    if args.command == "bench":
        return _bench(args)
    return _reproduce(args)


def main(argv=None) -> int:
    """Entry point of ``python -m experiments``; returns the exit code (see
    :func:`dgsgld._cli.run_command`: every error one line, Ctrl-C within seconds)."""
    return run_command(build_parser(), _dispatch, argv)


if __name__ == "__main__":
    code = main()
    gc.freeze()   # skip every imported module's objects in the collections at exit
    sys.exit(code)
