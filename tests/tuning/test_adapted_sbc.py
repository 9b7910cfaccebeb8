"""Simulation-based calibration at the warm-up's adapted settings (dgsgld.tuning.adapted_sbc).

The verdict in every test is the bench's: a cell is rejected when one of its N d chi-square
p-values (per agent and coordinate, one bin per rank) is below 0.01 / (N d). Under uniform
ranks each p-value is uniform, so by Bonferroni the family-wise false alarm is at most 1 %
(the agents' ranks on one data set are dependent; the bound does not need independence).
Seeds are fixed, so each outcome is fixed; the bound says why the threshold is safe.
"""

import dataclasses

import jax
import numpy as np
import pytest

import dgsgld
from dgsgld.posteriors import sbc
from dgsgld.tuning import adapted_sbc

#: The fast test's sizes.
FAST = {"num_draws": 7, "warmup_steps": 100, "num_steps": 400,
        "warmup_options": {"windows": (0.5, 0.5), "probe": 1.0}}


def _rejected(pvalues) -> int:
    p = np.asarray(pvalues)
    return int(np.sum(p < 0.01 / p.size))


def _cold(k, shape, dtype):
    """A noise generator with a quarter of the standard deviation (temperature 1/16)."""
    return 0.25 * jax.random.normal(k, shape, dtype)


def _colder(sampler):
    """The adapted sampler with its noise scaled by 1/4: the same drift, step and ``M``, a
    stationary law 4 times too narrow (on a Gaussian target exactly: the recursion is linear, so
    its stationary covariance scales with the noise's variance, 1/16)."""
    return dataclasses.replace(sampler, normal=_cold)


def test_adapted_diging_sgld_is_calibrated_on_the_gaussian_and_a_cold_one_is_not():
    # The Gaussian anchor's curvature is the same everywhere, so the criterion's step at the
    # starts (probe=1) is the long warm-up's (0.111, as after 500 steps in the default six
    # windows); two windows of 50 steps adapt the dense M (the inverse posterior precision)
    # and the step, and 400 sampling steps follow: the slowest mode (the network average,
    # contraction 1 - eta/N = 0.972 per step) forgets the last window's over-dispersed restart
    # by a factor e^(-14). S = 20 data sets of L = 7 draws, ring of 4, split "skew".
    # Adapted: not rejected (false alarm <= 1 %, module doc); the criterion allows a stationary
    # sd error up to 10 %, which 20 data sets do not resolve (a chi-square test of 8 rank bins
    # on 20 data sets rejects draws 1.5 times too wide with probability < 1 %, by simulation of
    # the ranks). The cold control (draws a quarter as wide) from the same warmed-up states with
    # the same keys: theta falls outside the 7 draws (rank 0 or 7) about 70 % of the time; by
    # simulation of those ranks one coordinate's p-value is below 0.01 / 24 with probability
    # 0.65, so at least one of the 6 coordinates (independent data) is with probability 0.998.
    out = adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, dgsgld.networks.ring(4),
                      jax.random.key(0), num_datasets=20, controls={"cold": _colder}, **FAST)
    assert out["ranks"].shape == (20, 4, 6) and out["draws"].shape == (20, 7, 4, 6)
    assert out["pvalues"].shape == (4, 6) and len(out["reports"]) == 20
    # One step per data set, the warm-up's (the same law on every data set: the same step).
    np.testing.assert_allclose(out["step_sizes"], [r.step_size for r in out["reports"]])
    np.testing.assert_allclose(out["step_sizes"], out["step_sizes"][0], rtol=1e-6)
    np.testing.assert_array_equal(out["reruns"], 0)
    # The ranks are the truths' among the draws (the sbc module's computation).
    np.testing.assert_array_equal(out["ranks"], sbc.sbc_ranks(out["draws"], out["truth"]))
    assert _rejected(out["pvalues"]) == 0, np.sort(out["pvalues"].ravel())[:4]
    cold = out["controls"]["cold"]
    assert _rejected(cold["pvalues"]) >= 1, np.sort(cold["pvalues"].ravel())[:4]
    # The control is what it says: per data set and coordinate, its spread over the draws is
    # about a quarter of the adapted draws' (the median ratio of sample sds of 7 draws).
    ratio = np.median(cold["draws"].std(axis=1) / out["draws"].std(axis=1))
    assert 0.15 < ratio < 0.4, ratio
    # Determinism: the same key gives the same warm-ups, draws and ranks.
    one = [adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, dgsgld.networks.ring(4),
                       jax.random.key(3), num_datasets=1, **FAST) for _ in range(2)]
    np.testing.assert_array_equal(one[0]["draws"], one[1]["draws"])
    np.testing.assert_array_equal(one[0]["ranks"], one[1]["ranks"])
    np.testing.assert_array_equal(one[0]["step_sizes"], one[1]["step_sizes"])


def test_a_diverging_sampling_run_is_run_again_at_a_quarter_step(monkeypatch):
    # The warm-up's sampler with a 16 times larger step diverges on the Gaussian anchor (the
    # adapted step is about a tenth of the stability edge in the preconditioned coordinates):
    # every data set's sampling run is run again at a quarter step until it stays finite, and
    # the steps reported are the ones sampled at. With no reruns allowed the cell is refused.
    from dgsgld.tuning import calibration

    original = calibration.warmup

    def bold(*args, **kwargs):
        adapted, state, report = original(*args, **kwargs)
        return dataclasses.replace(adapted, step_size=16 * adapted.step_size), state, report

    monkeypatch.setattr(calibration, "warmup", bold)
    kw = FAST | {"num_datasets": 2}
    out = adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, dgsgld.networks.ring(4),
                      jax.random.key(0), **kw)
    assert np.all(out["reruns"] >= 1) and np.all(np.isfinite(out["draws"]))
    adapted = np.array([r.step_size for r in out["reports"]])
    np.testing.assert_allclose(out["step_sizes"], 16 * adapted / 4.0 ** out["reruns"],
                               rtol=1e-6)
    with pytest.raises(ValueError, match="diverged on 2 of 2"):
        adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, dgsgld.networks.ring(4),
                    jax.random.key(0), max_reruns=0, **kw)


def test_bad_input_is_refused_by_name():
    kw = FAST | {"num_datasets": 1}
    mixing = dgsgld.networks.ring(4)
    with pytest.raises(ValueError, match="decentralized"):
        adapted_sbc("gaussian_linear", dgsgld.SGLD, None, jax.random.key(0), **kw)
    with pytest.raises(ValueError, match="num_draws"):
        adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, mixing, jax.random.key(0),
                    **(kw | {"num_draws": 1}))
    with pytest.raises(ValueError, match="sampling_steps"):
        adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, mixing, jax.random.key(0),
                    **(kw | {"warmup_options": {"sampling_steps": 5}}))
    with pytest.raises(ValueError, match="target"):
        adapted_sbc("eight_schools", dgsgld.DIGingSGLD, mixing, jax.random.key(0), **kw)
    with pytest.raises(ValueError, match="controls"):
        adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, mixing, jax.random.key(0),
                    **(kw | {"controls": {"x": 1}}))
    with pytest.raises(ValueError, match="max_reruns"):
        adapted_sbc("gaussian_linear", dgsgld.DIGingSGLD, mixing, jax.random.key(0),
                    **(kw | {"max_reruns": -1}))


#: The slow cells: (target, sampler, data sets). On the Poisson data set with the largest
#: counts DIGing-SGLD's first window diverges (the curvature at the mode about 1e4 times that
#: at the starts) and the warm-up moves the starts to the mode (test_warmup.py).
SLOW_CELLS = [
    ("poisson_linnerud", dgsgld.DESGLD, 40),
    ("poisson_linnerud", dgsgld.DIGingSGLD, 40),
    ("logistic_breast_cancer", dgsgld.DIGingSGLD, 20),
]


@pytest.mark.slow  # fast twin: test_adapted_diging_sgld_is_calibrated_on_the_gaussian_and_...
@pytest.mark.parametrize(("target", "sampler", "num_datasets"), SLOW_CELLS)
def test_adapted_sbc_on_the_poisson_and_logistic_targets(target, sampler, num_datasets):
    # The default warm-up (six windows) of 500 steps per data set, then 500 steps; 7 draws,
    # ring of 4, split "skew"; 20 data sets on the logistic target (its warm-up solves the exact
    # stationary law of N d = 124 coordinates: the costly one). Not rejected: false alarm
    # <= 1 % (module doc). The cold control (a quarter of the noise's sd) is rejected: its draws
    # are about 4 times too narrow along every direction (both posteriors are close to Gaussian
    # at these sample sizes). By simulation of such ranks, one coordinate's p-value falls below
    # 0.01 / (N d) with probability 0.99 at S = 40 and N d = 16 (Poisson), and 0.5 at S = 20
    # and N d = 124 (logistic), so at least one of the 4 or 31 coordinates does with
    # probability above 0.99.
    out = adapted_sbc(target, sampler, dgsgld.networks.ring(4), jax.random.key(0),
                      num_datasets=num_datasets, num_draws=7, warmup_steps=500, num_steps=500,
                      controls={"cold": _colder})
    assert _rejected(out["pvalues"]) == 0, np.sort(out["pvalues"].ravel())[:4]
    assert _rejected(out["controls"]["cold"]["pvalues"]) >= 1
