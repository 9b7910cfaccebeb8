"""The step-size proposer's import path; it lives in :mod:`dgsgld.tuning`."""

from .tuning import StepSizeReport as StepSizeReport
from .tuning import check_step_size as check_step_size
from .tuning import local_curvature as local_curvature
from .tuning import propose_step_size as propose_step_size

__all__ = ["StepSizeReport", "propose_step_size", "check_step_size", "local_curvature"]
