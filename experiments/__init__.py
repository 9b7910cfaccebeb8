"""The application beside the library: the paper's experiments (§4), the real-data and
communication experiments, the reference-posterior leaderboard, and their command line.

Run from the repository root (this package is not installed with ``dgsgld``)::

    python -m experiments reproduce all --out DIR      # every figure: JSON and PNG files
    python -m experiments bench posteriors --out DIR   # the samplers against NUTS

    >>> import experiments
    >>> res = experiments.fig2("a", trials=200, seed=0)              # doctest: +SKIP
    >>> res.final("DIGing-SGLD"), res.final("DE-SGLD")                # doctest: +SKIP

Everything here uses the public API of :mod:`dgsgld`; nothing in :mod:`dgsgld` imports it.
"""

# First: Ctrl-C during `python -m experiments`'s imports ends the process at once.
import dgsgld  # noqa: F401

# isort: split
from .configs import FIGURE_TITLES as FIGURE_TITLES
from .configs import FIGURES as FIGURES
from .configs import LinearRegressionConfig as LinearRegressionConfig
from .configs import LogisticRegressionConfig as LogisticRegressionConfig
from .configs import apply_overrides as apply_overrides
from .configs import figure_config as figure_config
from .configs import load_overrides as load_overrides
from .figures import ALGORITHMS as ALGORITHMS
from .figures import AlgorithmResult as AlgorithmResult
from .figures import FigureResult as FigureResult
from .figures import fig2 as fig2
from .figures import fig3 as fig3
from .figures import make_network as make_network
from .figures import run_figure as run_figure
from .figures import run_linear_regression as run_linear_regression
from .figures import run_logistic_regression as run_logistic_regression
from .plots import plot_figure as plot_figure
from .plots import plot_overview as plot_overview
from .reproduce import TARGETS as TARGETS
from .reproduce import expand_target as expand_target
from .reproduce import reproduce as reproduce
from .reproduce import save_result as save_result
from .reproduce import seed_sweep as seed_sweep
from .reproduce import summary_table as summary_table
from .reproduce import sweep_table as sweep_table


def __getattr__(name):
    # The theory report loads SciPy and dgsgld.theory: only when asked for (not by `run`).
    if name == "theory_report":
        from .theory_report import theory_report

        globals()[name] = theory_report   # the function, not the submodule of the same name
        return theory_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
