"""Wall and CPU time of the paper's schedule generators and their checks, by network size.

    python -m benchmarks.networks_generation [--sizes 100,300,1000] [--period 50]

The tests check the guarantee behind these times (tests/networks/test_networks.py: Python-level work
independent of N, host memory at most twice the schedule); this script measures the times.
"""

from __future__ import annotations

import argparse
import time

from dgsgld import networks


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1000")
    parser.add_argument("--period", type=int, default=50)
    args = parser.parse_args(argv)
    networks.barbell(20), networks.lollipop(20)  # warm-up: imports and first-call caches
    print(f"{'generator':>10} {'N':>6} {'P':>4} {'wall s':>8} {'cpu s':>8}")
    for gen in (networks.barbell, networks.lollipop):
        for n in (int(s) for s in args.sizes.split(",")):
            wall, cpu = time.perf_counter(), time.process_time()
            gen(n, period=args.period, seed=0)
            print(f"{gen.__name__:>10} {n:>6} {args.period:>4} "
                  f"{time.perf_counter() - wall:>8.2f} {time.process_time() - cpu:>8.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
