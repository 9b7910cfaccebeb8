"""Grid search and gradient tuning's import path; they live in :mod:`dgsgld.tuning`."""

from ..tuning import GradientTuning as GradientTuning
from ..tuning import GridSearch as GridSearch
from ..tuning import grid_search as grid_search
from ..tuning import log_grid as log_grid
from ..tuning import tune_step_size_gradient as tune_step_size_gradient

__all__ = ["GradientTuning", "GridSearch", "grid_search", "log_grid", "tune_step_size_gradient"]
