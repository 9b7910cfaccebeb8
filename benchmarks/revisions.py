"""Two revisions side by side: did a change make what a user runs faster?

``python -m benchmarks.revisions BEFORE [AFTER] [--rounds 11]`` checks ``BEFORE`` (and
``AFTER``; default: this working tree) out into temporary git worktrees and times, in fresh
processes of this interpreter, alternated round by round so that a shared machine's load hits
both alike:

* ``run``: ``python -m dgsgld run`` with the compile cache its warm-up run filled (every run
  after the first);
* ``quick_start``: the Python block under "Quick start" in that revision's README.md.

Prints medians of wall time, the ratio ``BEFORE / AFTER`` (median of the per-round ratios)
and whether both revisions print the same lines (wall-time lines aside); ``--out FILE.md``
writes the table too. Python's bytecode cache is on, in a temporary directory, as for an
installed package.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start(tree: Path) -> str:
    """The Quick start block of ``tree``'s README.md."""
    text = (tree / "README.md").read_text()
    section = text[text.index("## Quick start"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _worktree(stack: ExitStack, rev: str) -> Path:
    path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev],
                   check=True)
    stack.callback(subprocess.run, ["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                    str(path)], check=False)
    return path


def _command(tree: Path, name: str, cache: str, pycache: str):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "DGSGLD_NO_CACHE")}
    env |= {"PYTHONPATH": str(tree), "DGSGLD_CACHE_DIR": cache, "PYTHONPYCACHEPREFIX": pycache}
    argv = ([sys.executable, "-m", "dgsgld", "run"] if name == "run"
            else [sys.executable, "-c", quick_start(tree)])

    def call() -> tuple[float, list[str]]:
        start = time.perf_counter()
        out = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True,
                             check=True).stdout
        lines = [line for line in out.splitlines() if not line.startswith("wall time")]
        return time.perf_counter() - start, lines

    return call


def compare(before: str, after: str | None, rounds: int) -> list[dict]:
    """One row per command: median wall seconds of each revision, the ratio, same output."""
    rows = []
    with ExitStack() as stack:
        trees = {"before": _worktree(stack, before),
                 "after": ROOT if after is None else _worktree(stack, after)}
        temp = lambda: stack.enter_context(tempfile.TemporaryDirectory())  # noqa: E731
        for name in ("run", "quick_start"):
            calls = {k: _command(tree, name, temp(), temp()) for k, tree in trees.items()}
            outputs = {k: call()[1] for k, call in calls.items()}   # warm-up: caches filled
            times = {k: [] for k in calls}
            for r in range(rounds):
                for k in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    times[k].append(calls[k]()[0])
            rows.append({
                "command": name,
                "before_s": statistics.median(times["before"]),
                "after_s": statistics.median(times["after"]),
                "before_over_after": statistics.median(
                    b / a for b, a in zip(times["before"], times["after"])),
                "same_output": outputs["before"] == outputs["after"],
            })
    return rows


def table(rows: list[dict], before: str, after: str | None, rounds: int) -> str:
    lines = ["# Two revisions side by side", "",
             f"`python -m benchmarks.revisions {before}{'' if after is None else ' ' + after} "
             f"--rounds {rounds}` ({time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} CPUs; "
             f"after: {after or 'the working tree'})", "",
             "| command | before s | after s | before / after | same output |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['command']}` | {r['before_s']:.2f} | {r['after_s']:.2f} | "
                     f"{r['before_over_after']:.2f}× | {'yes' if r['same_output'] else 'NO'} |")
    lines += ["", f"{rounds} alternated rounds, medians of wall time; the ratio is the median "
              "of per-round ratios; `run` with its compile cache filled."]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="git revision to compare against")
    parser.add_argument("after", nargs="?", default=None, help="default: the working tree")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    text = table(compare(args.before, args.after, args.rounds), args.before, args.after,
                 args.rounds)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
