"""Scores of a sample against a reference posterior (:class:`dgsgld.posteriors.Reference`).

* :func:`moment_errors`: per coordinate, the standardized mean error
  ``|mean(x) − m_ref| / sd_ref`` and the sd ratio ``sd(x) / sd_ref``, with their maximum (the
  sd ratio farthest from 1 on the log scale) and median.
* :func:`predictive_scores`: for classifiers, the total variation between the sampled and the
  reference posterior predictive ``p(y | z_j, D)`` at each input, averaged over inputs, and
  how often their most probable classes agree.

The scores that need no reference object live with the other metrics in
:mod:`dgsgld.evaluate`: the exact W2 between the sample and the reference draws
(:func:`dgsgld.evaluate.empirical_w2`, with ``scale=reference.sd``) and the kernel Stein
discrepancy from the target's score (:func:`dgsgld.evaluate.ksd` with
:func:`dgsgld.evaluate.stein_scores`).
"""

from __future__ import annotations

import numpy as np

from .._util.types import Array
from ..evaluate._checks import host_draws as _draws
from .references import Reference

__all__ = ["moment_errors", "predictive_scores"]


def moment_errors(draws: Array, reference: Reference) -> dict:
    """Standardized mean errors and sd ratios of ``draws (m, q)`` against ``reference``.

    Returns:
        ``{"mean_error": (q,), "sd_ratio": (q,), "mean_error_max", "mean_error_median",
        "sd_ratio_worst", "sd_ratio_median"}``: ``mean_error = |mean − m_ref| / sd_ref``,
        ``sd_ratio = sd / sd_ref``; ``sd_ratio_worst`` is the ratio with the largest
        ``|log ratio|``.
    """
    x = _draws(draws, "draws", len(reference.mean))
    err = np.abs(x.mean(0) - reference.mean) / reference.sd
    ratio = x.std(0, ddof=1) / reference.sd
    return {"mean_error": err, "sd_ratio": ratio, "mean_error_max": float(err.max()),
            "mean_error_median": float(np.median(err)),
            "sd_ratio_worst": float(ratio[np.argmax(np.abs(np.log(ratio)))]),
            "sd_ratio_median": float(np.median(ratio))}


def predictive_scores(probs: Array, reference_probs: Array) -> dict:
    """Compare posterior predictives ``(n, K)`` (class probabilities at ``n`` inputs).

    Returns:
        ``{"predictive_tv": mean_j ½ Σ_k |p_jk − r_jk|, "predictive_agreement": mean_j
        1[argmax_k p_jk = argmax_k r_jk]}``.
    """
    p = _draws(probs, "probs")
    r = _draws(reference_probs, "reference_probs", p.shape[1])
    if p.shape != r.shape:
        raise ValueError(f"`reference_probs` must have the shape of `probs` {p.shape}; got "
                         f"{r.shape}.")
    return {"predictive_tv": float(np.mean(0.5 * np.abs(p - r).sum(1))),
            "predictive_agreement": float(np.mean(p.argmax(1) == r.argmax(1)))}
