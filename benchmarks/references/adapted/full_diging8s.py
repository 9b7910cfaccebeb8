"""eight_schools alone, DIGing-SGLD (adapted), full settings with one seed (rerun with the
warm-up that returns the last good window when divergences use up the budget)."""
import dataclasses, sys
from pathlib import Path
from experiments.bench import BenchSettings, bench_posteriors
full = BenchSettings.full()
settings = dataclasses.replace(full, samplers=(), adapted=("DIGing-SGLD",), sbc_targets=(),
                               seeds=1, targets=("eight_schools",))
bench_posteriors(Path(sys.argv[1]), settings, seed=0)
