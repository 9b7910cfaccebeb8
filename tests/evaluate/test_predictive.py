"""Predictive scores of dgsgld.evaluate.predictive against hand-computed cases."""

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dgsgld import evaluate


def _log(p):
    return np.log(np.asarray(p, dtype=np.float32))


def test_log_predictive_is_log_of_mean_probability():
    # two samples of one point: mean probabilities [0.7, 0.3]
    lp = _log([[[0.9, 0.1]], [[0.5, 0.5]]])
    out = evaluate.log_predictive(lp)
    np.testing.assert_allclose(np.exp(out), [[0.7, 0.3]], rtol=1e-6)
    labels = np.array([0])
    assert float(evaluate.nll(out, labels)) == pytest.approx(-math.log(0.7), rel=1e-6)
    # not the mean of the logs: -(log 0.9 + log 0.5)/2 = 0.399 != 0.357
    assert float(evaluate.nll(out, labels)) < -(math.log(0.9) + math.log(0.5)) / 2 - 0.04
    # several sample axes pooled at once
    np.testing.assert_allclose(evaluate.log_predictive(lp[:, None], axis=(0, 1)), out, rtol=1e-6)


def test_accuracy_and_brier():
    lp = _log([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]])
    labels = np.array([0, 0, 0])
    assert float(evaluate.accuracy(lp, labels)) == pytest.approx(2 / 3)
    # (0.3² + 0.3²), (0.8² + 0.8²), (0.4² + 0.4²) -> mean 0.18, 1.28, 0.32 = 0.5933
    assert float(evaluate.brier(lp, labels)) == pytest.approx((0.18 + 1.28 + 0.32) / 3, rel=1e-5)


def test_ece_hand_case_15_bins():
    # confidence 0.95 (bin 15: right, wrong) and 0.55 (bin 9: right, right):
    # (2/4)|0.5 - 0.95| + (2/4)|1 - 0.55| = 0.45
    lp = _log([[0.95, 0.05], [0.95, 0.05], [0.55, 0.45], [0.45, 0.55]])
    labels = np.array([0, 1, 0, 1])
    assert float(evaluate.ece(lp, labels)) == pytest.approx(0.45, rel=1e-5)
    counts, acc, conf = evaluate.calibration_curve(lp, labels)
    assert counts.shape == (15,) and float(counts.sum()) == 4
    assert float(counts[14]) == 2 and float(acc[14]) == 0.5 and float(counts[8]) == 2
    # 2 bins: [0, 0.5] and (0.5, 1] -> all four in the upper bin: |0.75 - 0.75| = 0
    assert float(evaluate.ece(lp, labels, num_bins=2)) == pytest.approx(0.0, abs=1e-6)


def test_entropy_handles_zero_probabilities():
    lp = np.array([[0.0, -np.inf], [np.log(0.5)] * 2], dtype=np.float32)
    np.testing.assert_allclose(evaluate.entropy(lp), [0.0, math.log(2)], rtol=1e-6)


def test_auroc_ties_count_half_and_matches_sklearn():
    # out 1 beats in {0} and ties in {1}: 1.5; out 3 beats all three: 3 -> 4.5 / 6
    assert float(evaluate.auroc(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0]))) == \
        pytest.approx(0.75)
    assert float(evaluate.auroc(np.zeros(4), np.zeros(3))) == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    s_in = rng.integers(0, 5, 50).astype(np.float32)
    s_out = rng.integers(1, 6, 40).astype(np.float32)
    expect = roc_auc_score(np.r_[np.zeros(50), np.ones(40)], np.r_[s_in, s_out])
    assert float(evaluate.auroc(s_in, s_out)) == pytest.approx(expect, rel=1e-6)


def test_regression_rmse_and_mixture_nll():
    means = np.array([[0.0, 2.0], [2.0, 2.0]], dtype=np.float32)  # predictive means 1, 2
    y = np.array([1.0, 0.0], dtype=np.float32)
    assert float(evaluate.rmse(means, y)) == pytest.approx(math.sqrt((0 + 4) / 2))
    # one sample: the Gaussian NLL 0.5 z² + log σ + 0.5 log 2π
    one = float(evaluate.gaussian_nll(means[:1], np.float32(2.0), y))
    z = np.array([1.0, 2.0]) / 2  # residuals 1 - 0 and 0 - 2
    expect = np.mean(0.5 * z**2 + math.log(2) + 0.5 * math.log(2 * math.pi))
    assert one == pytest.approx(expect, rel=1e-6)
    # two samples, sigma 1: point 0 at distance 1 from both; point 1 at 2 from both
    dens = lambda r: math.exp(-0.5 * r * r) / math.sqrt(2 * math.pi)  # noqa: E731
    expect = -(math.log(dens(1)) + math.log(dens(2))) / 2
    two = float(evaluate.gaussian_nll(means, np.ones((2, 1), np.float32), y))
    assert two == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize(
    "call",
    [
        lambda: evaluate.nll(np.zeros((3, 2)), np.zeros(4, int)),
        lambda: evaluate.nll(np.zeros((3, 2)), np.zeros(3)),
        lambda: evaluate.ece(np.zeros((3, 2)), np.zeros(3, int), num_bins=0),
        lambda: evaluate.auroc(np.zeros(0), np.zeros(3)),
        lambda: evaluate.log_predictive(np.zeros((0, 3, 2))),
        lambda: evaluate.gaussian_nll(np.zeros(3), 1.0, np.zeros(3)),
    ],
)
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()


def test_each_score_is_one_compiled_program(caplog):
    # Op-by-op dispatch would compile each operation of a score as a program of its own
    # (dozens for these six). Shapes no other test of this file uses.
    import logging

    import jax

    rng = np.random.default_rng(5)
    lp = np.log(rng.dirichlet(np.ones(3), size=(4, 7)).astype(np.float32))   # (S, P, K)
    labels = rng.integers(0, 3, 7)
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        pred = evaluate.log_predictive(lp)
        entropy = np.asarray(evaluate.entropy(pred))
        scores = [evaluate.accuracy(pred, labels), evaluate.nll(pred, labels),
                  evaluate.brier(pred, labels), evaluate.ece(pred, labels),
                  evaluate.auroc(entropy[:3], entropy[3:])]
    compiled = sorted(r.getMessage().split()[1] for r in caplog.records
                      if r.getMessage().startswith("Compiling"))
    assert compiled == sorted(f"jit({f})" for f in ("log_predictive", "accuracy", "nll", "brier",
                                                     "ece", "auroc", "entropy")), compiled
    probs = np.exp(np.asarray(pred, np.float64))
    np.testing.assert_allclose(scores[0], np.mean(probs.argmax(-1) == labels))
    np.testing.assert_allclose(scores[1], -np.mean(np.log(probs[np.arange(7), labels])), rtol=1e-5)
