"""The real-data benchmark (experiments.digits): data protocol, splits, scoring, CLI.

The default tests check the protocol pieces without sampling; the whole benchmark at its
``--small`` size runs under ``@pytest.mark.slow``.
"""

import json

import jax
import numpy as np
import pytest
from _commands import main

from experiments import digits as bench


@pytest.fixture(scope="module")
def task():
    return bench.digits_task(0)


def test_digits_protocol(task):
    # 1797 images: 20 % stratified test (360), then 20 % of the 1437 for validation (288)
    assert (len(task.train[1]), len(task.val[1]), len(task.test[1])) == (1149, 288, 360)
    # standardized with training statistics: mean 0, std 1 (0 on constant pixels)
    np.testing.assert_allclose(task.train[0].mean(axis=0), 0, atol=1e-5)
    assert set(np.round(task.train[0].std(axis=0), 4)) <= {0.0, 1.0}
    # stratified: every class in the test set in its overall share (about 36 each)
    assert np.bincount(task.test[1]).min() >= 35
    # OOD: the same test images, every image's pixels permuted by one permutation
    ood = task.extra["ood"]["x"]
    perm = np.random.default_rng(task.extra["ood"]["seed"]).permutation(64)
    np.testing.assert_array_equal(ood, task.test[0][:, perm])
    assert task.extra["num_params"] == 64 * 64 + 64 + 64 * 10 + 10


def test_splits_share_shapes_and_respect_batch(task):
    splits = bench.make_splits(task, bench.DIGITS)
    assert list(splits) == ["iid", "dirichlet(0.5)", "dirichlet(0.1)"]
    shapes = {s.mask.shape for s in splits.values()}
    assert len(shapes) == 1  # one compiled run serves every split
    for s in splits.values():
        assert s.sizes.sum() == len(task.train[1]) and s.sizes.min() >= bench.DIGITS.batch_size
    entropy = [bench._label_entropy(s, task.strata) for s in splits.values()]
    assert entropy[0] > entropy[1] > entropy[2]  # skew grows as alpha shrinks


def test_post_burn_in_is_the_mixture_over_kept_iterations():
    # classification: kept iterations of chain-mean log-probs (K, N, P, C); the predictive of
    # the kept iterations burn.. is the mean of their probabilities
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(3), size=(4, 2, 5)).astype(np.float32)
    out = bench._post_burn_in(np.log(p), True, 2)
    np.testing.assert_allclose(np.exp(out), p[2:].mean(axis=0), rtol=1e-5)
    # regression: leaves (K, C, N, P) -> (N, K' C, P), every (iteration, chain) a sample
    means = rng.normal(size=(4, 3, 2, 5)).astype(np.float32)
    m, s = bench._post_burn_in((means, np.ones_like(means)), False, 1)
    assert m.shape == (2, 9, 5)
    np.testing.assert_allclose(np.sort(m[1, :, 0]), np.sort(means[1:, :, 1, 0].ravel()))


def test_scores_agent_mean_and_pooled(task):
    scorer = bench._Scorer(task)
    num_points = len(task.val[1]) + 2 * len(task.test[1])
    rng = np.random.default_rng(1)
    lp = np.log(rng.dirichlet(np.ones(10), size=(3, num_points))).astype(np.float32)
    scores = scorer.score(lp, "test")
    labels = task.test[1]
    test = lp[:, scorer.slices["test"]].astype(np.float64)
    assert len(scores["agents"]) == 3
    # The expected values in NumPy (float64), by the definitions of dgsgld.evaluate.predictive's
    # nll, accuracy, log_predictive and brier (each of those would compile a program of its own).
    points = np.arange(labels.size)
    expect = -np.mean(test[1][points, labels])
    assert scores["agents"][1]["nll"] == pytest.approx(expect, rel=1e-5)
    assert scores["agent_mean"]["accuracy"] == pytest.approx(
        np.mean([np.mean(np.argmax(t, axis=-1) == labels) for t in test]))
    pooled = np.exp(test).mean(axis=0)                       # the mixture of the agents
    expect = np.mean(np.sum((pooled - np.eye(10)[labels]) ** 2, axis=-1))
    assert scores["network"]["brier"] == pytest.approx(expect, rel=1e-5)
    assert 0 <= scores["network"]["ood_auroc"] <= 1


def test_results_table_rows():
    agent = {"accuracy": 0.9, "nll": 0.3, "ece": 0.02, "brier": 0.15, "ood_auroc": 0.8}
    worst = dict(agent, accuracy=0.8)
    result = {"task": "digits", "results": {"iid": {
        "SGLD (centralized)": {"agent_mean": agent, "agent_worst": worst, "network": agent},
        "MAP, ensemble of agents": {"network": agent},
        "DE-SGLD (ring)": None}}}
    lines = bench.results_table(result).splitlines()
    assert len(lines) == 5 and "0.900 (0.800)" in lines[2]
    assert "diverged" in lines[4]


def test_cli_rejects_config_for_data_targets(tmp_path, capsys):
    assert main(["reproduce", "digits", "--out", str(tmp_path), "--config", "x.toml"]) == 2
    assert "--config" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_digits_small_cli(tmp_path):
    assert main(["reproduce", "digits", "--small", "--out", str(tmp_path), "--quiet"]) == 0
    result = json.loads((tmp_path / "digits.json").read_text())
    assert (tmp_path / "digits.png").exists() and (tmp_path / "digits.md").exists()
    methods = {"DIGing-SGLD (barbell)", "DIGing-SGLD (ring)", "DE-SGLD (barbell)",
               "DE-SGLD (ring)", "SGLD (centralized)", "MAP, each agent alone",
               "MAP, ensemble of agents"}
    for split, rows in result["results"].items():
        assert set(rows) == methods
        sgld = rows["SGLD (centralized)"]["network"]
        # 200 iterations already beat chance (0.1) by far; NLL below the uniform log 10
        assert sgld["accuracy"] > 0.7 and sgld["nll"] < np.log(10)
        diging = rows["DIGing-SGLD (barbell)"]
        assert len(diging["agents"]) == 10
        for scores in diging["agents"]:
            assert 0 <= scores["ece"] <= 1 and 0 <= scores["brier"] <= 2
    assert result["timings"]["total_cpu_s"] > 0


@pytest.mark.slow
def test_reproduce_diabetes_small(tmp_path):
    result = bench.reproduce_digits(tmp_path, small=True, tasks=("diabetes",), plot=False,
                                    logger=None)["diabetes"]
    # the target's std is about 77 in its units: a fitted linear model does far better
    for rows in result["results"].values():
        assert rows["SGLD (centralized)"]["network"]["rmse"] < 70
    assert jax.tree.leaves(result["tuning"])
