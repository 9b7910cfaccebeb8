"""DIGing-SGLD (adapted) rows at the full settings but ONE seed (8 chains), the targets after
gaussian_linear (which ran with the full 3 seeds), ring and complete; no plain rows, no SBC."""
import dataclasses, sys
from pathlib import Path
from experiments.bench import BenchSettings, bench_posteriors
full = BenchSettings.full()
settings = dataclasses.replace(full, samplers=(), adapted=("DIGing-SGLD",), sbc_targets=(),
                               seeds=1, targets=full.targets[1:])
bench_posteriors(Path(sys.argv[1]), settings, seed=0)
