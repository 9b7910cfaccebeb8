"""The machinery shared by the command lines (``python -m dgsgld`` and the repository's
``python -m experiments``): argument types, checks of ``--out`` and memory, and one entry point
that turns every error into one ``error: ...`` line and stops on Ctrl-C within seconds."""

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import interrupt as _interrupt

__all__ = ["check_memory", "check_out", "estimate_bytes", "number", "positive_float",
           "positive_int", "run_command", "seed"]


def number(convert, valid, what: str):
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


positive_int = number(int, lambda v: v >= 1, "a positive integer")
seed = number(int, lambda v: v >= 0, "a non-negative integer")
positive_float = number(float, lambda v: math.isfinite(v) and v > 0, "a positive finite number")

#: Copies of the positions a decentralized sampler keeps per chain (position, tracker, gradient,
#: noise) when estimating a run's memory.
_STATE_COPIES = 4


def estimate_bytes(chains: int, kept: int, agents: int, dim: int) -> int:
    """Float32 bytes of a run: kept positions ``chains × kept × agents × dim`` plus the state
    (:data:`_STATE_COPIES` arrays of ``chains × agents × dim``)."""
    return 4 * chains * agents * dim * (kept + _STATE_COPIES)


def check_memory(nbytes: int, what: str, available: int | None = None) -> None:
    """Refuse a run whose estimated memory exceeds what is available, naming the option."""
    from .._util.validation import available_memory, format_bytes

    available = available_memory() if available is None else available
    if available is not None and nbytes > available:
        raise ValueError(
            f"{what} needs about {format_bytes(nbytes)} of memory (estimated: chains x kept "
            f"iterations x agents x d x 4 bytes plus the samplers' state) but about "
            f"{format_bytes(available)} is available; lower --trials."
        )


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


def add_no_cache(command: argparse.ArgumentParser) -> None:
    """The ``--no-cache`` option of every compiling command."""
    command.add_argument(
        "--no-cache",
        action="store_true",
        help="do not store or reuse compiled programs (default: keep them in "
        "$DGSGLD_CACHE_DIR, $XDG_CACHE_HOME/dgsgld/jax or ~/.cache/dgsgld/jax; "
        "DGSGLD_NO_CACHE=1 also disables)",
    )


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


def run_command(parser: argparse.ArgumentParser, dispatch: Callable, argv=None) -> int:
    """Parse ``argv`` and run ``dispatch(args)``; returns the exit code.

    Every error (not only bad values) becomes one ``error: ...`` line on standard error and exit
    status 2; ``--debug`` shows the traceback instead. Ctrl-C stops every command within a few
    seconds with status 130 (:mod:`dgsgld._cli.interrupt`). Compiling commands (those with
    ``--no-cache``) use JAX's persistent compilation cache (:mod:`dgsgld._cli.cache`).
    """
    _interrupt.restore()  # the package is imported: Ctrl-C raises KeyboardInterrupt again
    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    grace = LAUNCH_INTERRUPT_GRACE if args.command == "launch" else INTERRUPT_GRACE
    with _interrupt.stop_on_interrupt(grace) as interrupted:
        code = _guarded(dispatch, args)
    if interrupted.is_set() and code != 130:  # the KeyboardInterrupt was lost on the way
        print("error: interrupted", file=sys.stderr)
        return 130
    return code


def _guarded(dispatch: Callable, args) -> int:
    from . import cache as _cache

    if hasattr(args, "no_cache"):
        _cache.enable(disabled=args.no_cache)
    try:
        if getattr(args, "out", None) is not None:  # every command writing a directory
            check_out(args.out)
        return dispatch(args)
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
