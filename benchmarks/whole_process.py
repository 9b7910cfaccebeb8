"""Whole-process time of the main job: ``python -m dgsgld run`` against the same job in NumPy.

Three commands, alternated round by round (so that load on a shared machine hits all alike),
medians over rounds of wall time, CPU time (user + system of the process and its threads) and
peak memory:

* ``first``: ``python -m dgsgld run`` with an empty compile cache (a first run);
* ``second``: the same with the cache the first runs filled (every later run);
* ``numpy``: ``python benchmarks/main_job_numpy.py`` (the same job, NumPy only);
* ``import_jax``: ``python -c "import jax; jax.numpy.zeros(1)..."``, the floor of any process
  that computes with JAX (interpreter start, the import, the CPU client).

Run: ``python -m benchmarks.whole_process [--rounds 5]``; the suite runs it as its ``process``
section. Ratios are medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


_TIME = "/usr/bin/time"


def _timed(argv: list[str], env: dict) -> dict:
    """Wall and CPU seconds and peak resident MiB of one child process.

    The peak comes from ``/usr/bin/time`` when present: a child forked from this (large)
    process would otherwise report this process's resident memory as its own peak.
    """
    wrapped = os.path.exists(_TIME)
    if wrapped:
        argv = [_TIME, "-f", "MAXRSS_KB=%M", *argv]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)      # rusage includes the waited-for child
    wall = time.perf_counter() - start
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} failed: {err[-2000:]}")
    peak = usage.ru_maxrss
    if wrapped:
        peak = int(err.rsplit("MAXRSS_KB=", 1)[1].split()[0])
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "memory_mib": peak / 1024,
            "output": out}


def measure(rounds: int = 5) -> dict:
    """Alternated rounds of the three commands; medians and per-round ratios."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DGSGLD_NO_CACHE", None)
    job = [sys.executable, "-m", "dgsgld", "run"]
    numpy_job = [sys.executable, str(ROOT / "benchmarks" / "main_job_numpy.py")]
    # The floor of any JAX program: the interpreter, `import jax` and the CPU client.
    jax_floor = [sys.executable, "-c", "import jax; jax.numpy.zeros(1).block_until_ready()"]
    runs = {"first": [], "second": [], "numpy": [], "import_jax": []}
    with tempfile.TemporaryDirectory() as tmp:
        warm = dict(env, DGSGLD_CACHE_DIR=str(Path(tmp) / "warm"))
        _timed(job, warm)                                 # fill the warm cache once
        for r in range(rounds):
            cold = dict(env, DGSGLD_CACHE_DIR=str(Path(tmp) / f"cold{r}"))
            runs["first"].append(_timed(job, cold))
            runs["second"].append(_timed(job, warm))
            runs["numpy"].append(_timed(numpy_job, env))
            runs["import_jax"].append(_timed(jax_floor, env))
    out = {"rounds": rounds}
    for name, rs in runs.items():
        out[name] = {k: float(np.median([x[k] for x in rs]))
                     for k in ("wall_s", "cpu_s", "memory_mib")}
    for name in ("first", "second", "import_jax"):
        for k in ("wall_s", "cpu_s"):
            ratios = [a[k] / b[k] for a, b in zip(runs[name], runs["numpy"])]
            out[f"{name}_over_numpy_{k[:-2]}"] = float(np.median(ratios))
    out["toolkit_output"] = runs["second"][-1]["output"]
    out["numpy_output"] = runs["numpy"][-1]["output"]
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.whole_process",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    res = measure(parser.parse_args(argv).rounds)
    for name in ("first", "second", "numpy", "import_jax"):
        r = res[name]
        print(f"{name:>7}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, "
              f"{r['memory_mib']:.0f} MiB")
    print(f"first / numpy {res['first_over_numpy_wall']:.1f}x wall "
          f"({res['first_over_numpy_cpu']:.1f}x CPU); second / numpy "
          f"{res['second_over_numpy_wall']:.1f}x wall ({res['second_over_numpy_cpu']:.1f}x CPU)")
    return res


if __name__ == "__main__":
    main()
