"""Tuning: the decentralized warm-up (:func:`warmup`: a preconditioner and a step size agreed
by the agents), step sizes (a one-call grid over every step size and chain, grid search, gradient
tuning, the step-size proposer) and network design (mixing weights learned by differentiating
the exact laws of :mod:`dgsgld.theory` or a sampled criterion), and simulation-based
calibration at the warm-up's settings (:func:`adapted_sbc`)."""

from .adaptation import WarmupReport as WarmupReport
from .adaptation import WindowReport as WindowReport
from .adaptation import warmup as warmup
from .calibration import adapted_sbc as adapted_sbc
from .design import EdgeParametrization as EdgeParametrization
from .design import WeightDesign as WeightDesign
from .design import edge_parametrization as edge_parametrization
from .design import learn_weights as learn_weights
from .design import learn_weights_by_sampling as learn_weights_by_sampling
from .stepsize import GradientTuning as GradientTuning
from .stepsize import GridRun as GridRun
from .stepsize import GridSearch as GridSearch
from .stepsize import StepSizeReport as StepSizeReport
from .stepsize import check_step_size as check_step_size
from .stepsize import grid_run as grid_run
from .stepsize import grid_search as grid_search
from .stepsize import local_curvature as local_curvature
from .stepsize import log_grid as log_grid
from .stepsize import propose_step_size as propose_step_size
from .stepsize import tune_step_size_gradient as tune_step_size_gradient

__all__ = [
    "warmup", "WarmupReport", "WindowReport", "adapted_sbc",
    "grid_run", "GridRun", "grid_search", "GridSearch", "log_grid",
    "tune_step_size_gradient", "GradientTuning",
    "propose_step_size", "StepSizeReport", "check_step_size", "local_curvature",
    "learn_weights", "learn_weights_by_sampling", "WeightDesign", "EdgeParametrization",
    "edge_parametrization",
]
