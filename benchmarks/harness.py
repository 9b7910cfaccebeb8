"""Timing, compilation and memory measurement shared by the benchmark suite.

Methods (stated in the results):

* steady-state time: the median wall time of ``repeats`` calls after one warm-up call, each
  ending with ``jax.block_until_ready``; process CPU time is recorded beside it, because on a
  shared machine the wall time of a two-thread run also measures other people's load.
* compile time: wall time of ``jax.jit(f).lower(*args).compile()`` (tracing, lowering and XLA
  compilation), measured once per workload.
* peak memory of a compiled JAX function: from ``compiled.memory_analysis()``, the arguments +
  outputs + XLA temporaries (generated code excluded); for NumPy, ``tracemalloc``'s peak during
  one run (NumPy reports its array allocations to it).
* recompilation: XLA backend compilations counted through ``jax.monitoring``.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@dataclass
class Timing:
    """Wall and CPU seconds of repeated calls (lists), with medians."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return float(np.median(self.wall))

    @property
    def cpu_median(self) -> float:
        return float(np.median(self.cpu))

    @property
    def minimum(self) -> float:
        return float(np.min(self.wall))


def time_calls(fn: Callable[[], object], repeats: int, warmup: int = 1) -> Timing:
    """Call ``fn()`` ``warmup`` times untimed, then ``repeats`` times timed."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    out = Timing()
    for _ in range(repeats):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(fn())
        out.wall.append(time.perf_counter() - t0)
        out.cpu.append(time.process_time() - c0)
    return out


def time_rounds(fns: dict[str, Callable[[], object]], repeats: int,
                warmup: int = 1) -> dict[str, Timing]:
    """Time callables in alternation, one call of each per round.

    On a shared machine the load drifts over seconds; alternating the calls exposes all of them
    to the same drift, and the median of per-round ratios (:func:`round_ratio`) is the robust
    comparison.
    """
    for _ in range(warmup):
        for fn in fns.values():
            jax.block_until_ready(fn())
    out = {name: Timing() for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(fn())
            out[name].wall.append(time.perf_counter() - t0)
            out[name].cpu.append(time.process_time() - c0)
    return out


def round_ratio(num: Timing, den: Timing, cpu: bool = False) -> float:
    """Median over rounds of ``num / den`` (wall, or CPU with ``cpu``)."""
    a, b = (num.cpu, den.cpu) if cpu else (num.wall, den.wall)
    return float(np.median([x / y for x, y in zip(a, b)]))


def compile_jax(fn: Callable, *args, static_argnums=()) -> tuple[object, float]:
    """``(compiled, seconds)``: ahead-of-time compile of ``jax.jit(fn)`` for ``args``."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn, static_argnums=static_argnums).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def jax_memory(compiled) -> int | None:
    """Bytes of arguments + outputs + temporaries of a compiled function (``None`` if unknown)."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        return None
    if m is None:
        return None
    alias = getattr(m, "alias_size_in_bytes", 0)
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - alias)


def numpy_peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes allocated (as seen by ``tracemalloc``) during one call of ``fn``."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return int(peak)


class CompileCounter:
    """Counts XLA backend compilations while active (``with CompileCounter() as c: ...``)."""

    def __init__(self):
        self.count = 0

    def _listener(self, event: str, duration: float, **_) -> None:
        if event == _BACKEND_COMPILE:
            self.count += 1

    def __enter__(self) -> CompileCounter:
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listener)


@contextmanager
def x64():
    """Enable float64 inside the block."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old)


def stream_table(header: list[str], rows, out=None) -> str:
    """A Markdown table: ``header`` lines, then each line of ``rows`` (an iterable of strings,
    printed as it comes, since a row can take minutes), then the wall time; written to ``out``
    (a path) when given. Returns the text."""
    start = time.perf_counter()
    lines = list(header)
    for line in rows:
        lines.append(line)
        print(line, flush=True)
    text = "\n".join(lines) + f"\n\n{time.perf_counter() - start:.0f} s.\n"
    if out is not None:
        Path(out).write_text(text)
    return text



def resumable_results(path, markdown: Callable[[dict], str]):
    """``(result, save)``: the JSON results at ``path`` so far (``{}`` when none), and
    ``save(name, entry)``, which records one entry and rewrites the JSON and its Markdown
    table (``path`` with the suffix ``.md``), so that an interrupted run keeps what it did."""
    import json

    result = json.loads(path.read_text()) if path.exists() else {}

    def save(name, entry):
        result[name] = entry
        path.write_text(json.dumps(result, indent=1) + "\n")
        path.with_suffix(".md").write_text(markdown(result))

    return result, save
