"""The paper's experiments (§4): problems, step-size tuning, Figures 2 and 3, plots, files.

    >>> from dgsgld import experiments
    >>> res = experiments.fig2("a", trials=200, seed=0)              # doctest: +SKIP
    >>> res.final("DIGing-SGLD"), res.final("DE-SGLD")                # doctest: +SKIP

``python -m dgsgld reproduce all --out DIR`` runs every figure and writes JSON and PNG files.
"""

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
from .figures import derive_seeds as derive_seeds
from .figures import fig2 as fig2
from .figures import fig3 as fig3
from .figures import make_network as make_network
from .figures import run_figure as run_figure
from .figures import run_linear_regression as run_linear_regression
from .figures import run_logistic_regression as run_logistic_regression
from .plots import plot_figure as plot_figure
from .plots import plot_overview as plot_overview
from .problems import GaussianLogLikelihood as GaussianLogLikelihood
from .problems import GaussianLogPrior as GaussianLogPrior
from .problems import Problem as Problem
from .problems import logistic_labels as logistic_labels
from .problems import breast_cancer_problem as breast_cancer_problem
from .problems import linear_regression_problem as linear_regression_problem
from .problems import logistic_log_likelihood as logistic_log_likelihood
from .problems import logistic_regression_problem as logistic_regression_problem
from .quick import QuickRun as QuickRun
from .quick import quick_run as quick_run
from .reproduce import TARGETS as TARGETS
from .reproduce import expand_target as expand_target
from .reproduce import reproduce as reproduce
from .reproduce import save_result as save_result
from .reproduce import seed_sweep as seed_sweep
from .reproduce import summary_table as summary_table
from .reproduce import sweep_table as sweep_table
from ..tuning import GradientTuning as GradientTuning
from ..tuning import GridSearch as GridSearch
from ..tuning import grid_search as grid_search
from ..tuning import log_grid as log_grid
from ..tuning import tune_step_size_gradient as tune_step_size_gradient


def __getattr__(name):
    # The theory report loads SciPy and dgsgld.theory: only when asked for (not by `run`).
    if name == "theory_report":
        from .theory_report import theory_report

        globals()[name] = theory_report   # the function, not the submodule of the same name
        return theory_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
