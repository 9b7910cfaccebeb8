"""Adapted DIGing-SGLD rows on two small targets against their NUTS references: a reduced
check of the warm-up (1 seed, 8 chains, 4000 steps, ring; the warm-up in the first half).

``PYTHONPATH=. python benchmarks/references/adapted/small_targets_warmup.py OUT
[--preconditioner auto|dense|diagonal]`` writes ``OUT/leaderboard.{json,md}``; the rows'
``sd_ratio_worst`` and ``mean_error_max`` are the worst sd ratio and the largest
standardized mean error over the target's compared quantities.
"""
import argparse
import dataclasses
import functools
from pathlib import Path

import dgsgld.tuning
from experiments.bench import BenchSettings, bench_posteriors

p = argparse.ArgumentParser()
p.add_argument("out", type=Path)
p.add_argument("--preconditioner", default="auto")
p.add_argument("--targets", nargs="+", default=["logistic_breast_cancer", "multinomial_wine"])
a = p.parse_args()
if a.preconditioner != "auto":  # the adapted rows call dgsgld.tuning.warmup with its default
    dgsgld.tuning.warmup = functools.partial(dgsgld.tuning.warmup,
                                             preconditioner=a.preconditioner)
settings = dataclasses.replace(BenchSettings.full(), samplers=(), networks=("ring",),
                               adapted=("DIGing-SGLD",), sbc_targets=(), seeds=1,
                               targets=tuple(a.targets))
bench_posteriors(a.out, settings, seed=0)
