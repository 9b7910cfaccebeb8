"""Evaluation: distances to a target, streamed metrics computed inside the compiled run,
convergence diagnostics, predictive scores, the kernel Stein discrepancy, and plots.

Every metric has one name here (``dgsgld.evaluate.per_agent_w2``, ``dgsgld.evaluate.ess``,
``dgsgld.evaluate.nll``, ...), defined in one of the submodules:
:mod:`~dgsgld.evaluate.distances` (Gaussian W2, per-agent W2, consensus error, empirical W2),
:mod:`~dgsgld.evaluate.stein` (the kernel Stein discrepancy),
:mod:`~dgsgld.evaluate.diagnostics` (R-hat, ESS, ArviZ), :mod:`~dgsgld.evaluate.predictive`
(NLL, accuracy, calibration) and :mod:`~dgsgld.evaluate.streaming` (metrics kept per iteration
inside :func:`dgsgld.sample`). A streamed metric is a :class:`Metric` built by a function named
``streamed_*`` (``streamed_per_agent_w2``, ``streamed_ksd``, ...): it computes, inside the run,
what the function of the stored trace computes afterwards.

Plots stay in their submodule, :mod:`dgsgld.evaluate.plots` (matplotlib, the ``plots`` extra,
imported on first use): they draw metrics rather than compute them.
"""

from . import diagnostics as diagnostics
from . import distances as distances
from . import plots as plots
from . import predictive as predictive
from . import stein as stein
from . import streaming as streaming
from .diagnostics import agent_summary as agent_summary
from .diagnostics import diverged_chains as diverged_chains
from .diagnostics import ess as ess
from .diagnostics import network_average as network_average
from .diagnostics import rhat as rhat
from .diagnostics import split_rhat as split_rhat
from .diagnostics import to_arviz as to_arviz
from .distances import consensus_error as consensus_error
from .distances import empirical_moments as empirical_moments
from .distances import empirical_w2 as empirical_w2
from .distances import ensemble_consensus_error as ensemble_consensus_error
from .distances import gaussian_w2 as gaussian_w2
from .distances import gaussian_w2_to_target as gaussian_w2_to_target
from .distances import per_agent_w2 as per_agent_w2
from .distances import sqrtm_psd as sqrtm_psd
from .predictive import accuracy as accuracy
from .predictive import auroc as auroc
from .predictive import brier as brier
from .predictive import calibration_curve as calibration_curve
from .predictive import ece as ece
from .predictive import entropy as entropy
from .predictive import gaussian_nll as gaussian_nll
from .predictive import label_accuracy as label_accuracy
from .predictive import log_predictive as log_predictive
from .predictive import nll as nll
from .predictive import rmse as rmse
from .stein import ksd as ksd
from .stein import stein_scores as stein_scores
from .streaming import Metric as Metric
from .streaming import Moments as Moments
from .streaming import SteinSums as SteinSums
from .streaming import combine as combine
from .streaming import pool_ksd as pool_ksd
from .streaming import pool_moments as pool_moments
from .streaming import streamed_accuracy as streamed_accuracy
from .streaming import streamed_consensus_error as streamed_consensus_error
from .streaming import streamed_ksd as streamed_ksd
from .streaming import streamed_moments as streamed_moments
from .streaming import streamed_per_agent_w2 as streamed_per_agent_w2

# Privacy accounting of each agent's messages (dp-accounting, the ``privacy`` extra, imported
# on use).
from . import privacy as privacy
from .privacy import PrivacyReport as PrivacyReport
from .privacy import privacy_epsilon as privacy_epsilon

__all__ = [
    # distances
    "consensus_error",
    "empirical_moments",
    "empirical_w2",
    "ensemble_consensus_error",
    "gaussian_w2",
    "gaussian_w2_to_target",
    "per_agent_w2",
    "sqrtm_psd",
    # stein
    "ksd",
    "stein_scores",
    # diagnostics
    "agent_summary",
    "diverged_chains",
    "ess",
    "network_average",
    "rhat",
    "split_rhat",
    "to_arviz",
    # predictive
    "accuracy",
    "auroc",
    "brier",
    "calibration_curve",
    "ece",
    "entropy",
    "gaussian_nll",
    "label_accuracy",
    "log_predictive",
    "nll",
    "rmse",
    # streaming
    "Metric",
    "Moments",
    "SteinSums",
    "combine",
    "pool_ksd",
    "pool_moments",
    "streamed_accuracy",
    "streamed_consensus_error",
    "streamed_ksd",
    "streamed_moments",
    "streamed_per_agent_w2",
    # submodules
    "diagnostics",
    "distances",
    "plots",
    "predictive",
    "stein",
    "streaming",
    # privacy accounting
    "privacy",
    "PrivacyReport",
    "privacy_epsilon",
]
