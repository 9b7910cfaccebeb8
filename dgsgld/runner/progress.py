"""Progress reports for long runs, between chunks or from inside the compiled loop.

Off by default. ``progress=True`` turns a report on only when standard error is a terminal, so
logs, CI and benchmarks stay quiet; ``progress="always"`` forces it. The environment variable
``DGSGLD_PROGRESS`` overrides both: ``0`` silences every report (benchmarks set it), ``1``
forces reports on.

Two places report:

* :func:`dgsgld.runner.checkpoint.sample_chunked` updates a bar after each chunk (host side, free);
* ``dgsgld.sample(..., progress=...)`` reports from inside the compiled scan with
  ``jax.debug.callback`` every ``m`` iterations (:func:`tick`). Each report is one host
  callback, so the default spacing gives about 100 reports per run.

The bar is ``tqdm``'s when it is installed, else a plain line on standard error per update
(at most one per ``min_interval`` seconds).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time

import jax
import numpy as np

__all__ = ["ProgressBar", "wants_progress", "report_every", "register", "unregister", "tick"]

#: Reports per run when ``progress=True`` (in-loop reports cost one host callback each).
DEFAULT_REPORTS = 100


def wants_progress(progress, stream=None) -> bool:
    """Whether ``progress`` (``False``/``None``, ``True``, ``"always"`` or an int) asks for a bar.

    ``True`` and ints mean "when ``stream`` (standard error) is a terminal"; ``"always"`` forces
    it; ``DGSGLD_PROGRESS=0``/``1`` in the environment overrides everything.
    """
    if progress is None or progress is False:
        requested = False
    elif progress is True or progress == "always":
        requested = True
    elif isinstance(progress, int) and progress > 0:
        requested = True
    else:
        raise ValueError(
            "`progress` must be False, True, 'always' or a positive number of iterations between "
            f"reports; got {progress!r}."
        )
    env = os.environ.get("DGSGLD_PROGRESS", "").strip()
    if env in ("0", "1"):
        return env == "1"
    if not requested:
        return False
    if progress == "always":
        return True
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def report_every(progress, num_steps: int, thin: int) -> int:
    """Iterations between in-loop reports: ``progress`` if an int, else ``num_steps / 100``;
    rounded up to a multiple of ``thin`` (reports happen at kept iterations)."""
    if isinstance(progress, int) and not isinstance(progress, bool):
        every = progress
    else:
        every = max(1, num_steps // DEFAULT_REPORTS)
    return max(thin, -(-every // thin) * thin)


class ProgressBar:
    """A progress bar over ``total`` iterations: ``tqdm`` when installed, else plain lines.

    Args:
        total: iterations in the run.
        initial: iterations already done (a resumed run).
        desc: label.
        stream: where to write (standard error by default).
        min_interval: seconds between plain-text lines.
        use_tqdm: ``None`` uses ``tqdm`` when importable.
    """

    def __init__(self, total: int, *, initial: int = 0, desc: str = "dgsgld", stream=None,
                 min_interval: float = 0.5, use_tqdm: bool | None = None):
        self.total = int(total)
        self.n = int(initial)
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        self.min_interval = min_interval
        self._start = time.monotonic()
        self._last_line = -float("inf")
        self._lock = threading.Lock()
        self._tqdm = None
        if use_tqdm is None or use_tqdm:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                if use_tqdm:
                    raise
            else:
                self._tqdm = tqdm(total=self.total, initial=self.n, desc=desc, unit="it",
                                  file=self.stream, mininterval=min_interval, dynamic_ncols=True)

    def update_to(self, n: int) -> None:
        """Set the number of iterations done (reports may arrive out of order: never go back)."""
        with self._lock:
            n = min(int(n), self.total)
            if n <= self.n:
                return
            if self._tqdm is not None:
                self._tqdm.update(n - self.n)
                self.n = n
                return
            self.n = n
            now = time.monotonic()
            if n < self.total and now - self._last_line < self.min_interval:
                return
            self._last_line = now
            percent = 100.0 * n / max(self.total, 1)
            self.stream.write(
                f"{self.desc}: {n}/{self.total} iterations ({percent:.0f}%), "
                f"{now - self._start:.1f} s\n"
            )
            self.stream.flush()

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- reports from inside a compiled loop ------------------------------------------------------
#
# The compiled loop must not close over a bar (a new Python object per call would recompile the
# run every time). It holds an int32 token instead, an ordinary traced argument, and the host
# callback looks the bar up in this registry.

_ACTIVE: dict[int, ProgressBar] = {}
_TOKENS = itertools.count(1)


def register(bar: ProgressBar) -> np.int32:
    """Make ``bar`` reachable from :func:`tick`; returns the int32 token to pass into the
    compiled function."""
    token = next(_TOKENS) % (2**31 - 1)
    _ACTIVE[token] = bar
    return np.int32(token)   # NumPy: no eager program to make it


def unregister(token) -> None:
    """Wait for pending reports, then forget the bar of ``token``."""
    jax.effects_barrier()
    _ACTIVE.pop(int(token), None)


def _host_report(token, done) -> None:
    bar = _ACTIVE.get(int(token))
    if bar is not None:
        bar.update_to(int(done))


def tick(token: jax.Array, done: jax.Array, every: int) -> None:
    """Inside ``jit``/``scan``: report ``done`` iterations to the bar of ``token`` whenever
    ``done`` is a positive multiple of ``every`` (a static positive int)."""
    jax.lax.cond(
        (done % every == 0) & (done > 0),
        lambda: jax.debug.callback(_host_report, token, done),
        lambda: None,
    )
