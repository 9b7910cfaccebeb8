"""Stored reference posteriors of the benchmark targets (computed by
``benchmarks/references/make_references.py``; no sampler library needed to read them).

Each ``references/<target>.npz`` holds, for the target's compared coordinates (``q`` of them):

* ``draws (NUM_DRAWS, q)`` float32: thinned NUTS draws (i.i.d. exact draws for the Gaussian
  anchor);
* ``mean, sd (q,)``, ``quantiles (len(QUANTILES), q)`` and their Monte Carlo standard errors
  ``mcse_mean, mcse_sd, mcse_quantiles`` (zero where exact);
* ``rhat, ess_bulk (q,)``: the checks the reference passed (R-hat < 1.01, bulk ESS >= 2000);
* ``names``, ``fingerprint`` (of the target's data), ``method`` (``"nuts"`` or ``"exact"``),
  ``settings`` (JSON: chains, warm-up, draws, divergences, wall time).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["NUM_DRAWS", "QUANTILES", "Reference", "available", "load_reference", "path"]

#: Draws kept per reference.
NUM_DRAWS = 2000
#: Probabilities of the stored quantiles.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)

_DIR = Path(__file__).with_name("references")


class Reference(NamedTuple):
    """A target's reference posterior (arrays as described in the module doc)."""

    name: str
    names: tuple
    draws: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    quantiles: np.ndarray
    mcse_mean: np.ndarray
    mcse_sd: np.ndarray
    mcse_quantiles: np.ndarray
    rhat: np.ndarray
    ess_bulk: np.ndarray
    fingerprint: str
    method: str
    settings: str


def path(name: str) -> Path:
    """Where the reference of target ``name`` is stored."""
    return _DIR / f"{name}.npz"


def available() -> list[str]:
    """Names of the targets with a stored reference."""
    return sorted(p.stem for p in _DIR.glob("*.npz"))


def load_reference(name: str, *, fingerprint: str | None = None) -> Reference:
    """The stored reference of target ``name``.

    Args:
        name: a target name with a stored reference (see :func:`available`).
        fingerprint: when given, the target's data fingerprint
            (:attr:`dgsgld.posteriors.Target.fingerprint`); a reference computed on other
            data raises ``ValueError``.
    """
    p = path(name)
    if not p.exists():
        raise ValueError(f"no stored reference for target {name!r}; available: {available()}.")
    with np.load(p, allow_pickle=False) as f:
        ref = Reference(name=name, names=tuple(str(n) for n in f["names"]),
                        **{k: f[k] for k in ("draws", "mean", "sd", "quantiles", "mcse_mean",
                                             "mcse_sd", "mcse_quantiles", "rhat", "ess_bulk")},
                        fingerprint=str(f["fingerprint"]), method=str(f["method"]),
                        settings=str(f["settings"]))
    if fingerprint is not None and fingerprint != ref.fingerprint:
        raise ValueError(
            f"the stored reference of {name!r} was computed on data with fingerprint "
            f"{ref.fingerprint}, but the target's data have {fingerprint}: the bundled data "
            "set changed; recompute the reference.")
    return ref
