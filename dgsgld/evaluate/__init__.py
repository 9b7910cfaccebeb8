"""Evaluation: distances to a target, streamed metrics computed inside the compiled run,
convergence diagnostics, predictive scores and plots.

Submodules: :mod:`~dgsgld.evaluate.distances` (Gaussian W2, per-agent W2, consensus error),
:mod:`~dgsgld.evaluate.streaming` (metrics kept per iteration inside :func:`dgsgld.sample`),
:mod:`~dgsgld.evaluate.diagnostics` (R-hat, ESS, ArviZ), :mod:`~dgsgld.evaluate.predictive`
(NLL, accuracy, calibration) and :mod:`~dgsgld.evaluate.plots` (matplotlib, the ``plots`` extra).
"""

from . import diagnostics as diagnostics
from . import distances as distances
from . import plots as plots
from . import predictive as predictive
from . import streaming as streaming

# Privacy accounting of each agent's messages (dp-accounting, the ``privacy`` extra, imported
# on use).
from . import privacy as privacy
from .privacy import PrivacyReport as PrivacyReport
from .privacy import privacy_epsilon as privacy_epsilon
