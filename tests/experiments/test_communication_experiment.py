"""``python -m experiments reproduce communication``: its standard errors and its rows' byte
accounting."""

import json
import sys

import jax
import numpy as np
import pytest

from dgsgld import communication as C
from experiments import communication as experiment
from experiments import digits as digits

#: Entries of one message with ``--small``: the linear and logistic problems' 6 parameters,
#: the BNN's 64·16 + 16 + 16·10 + 10 (hidden width 16).
SIZES = {"linear, iid": 6, "logistic, by label": 6, "digits BNN, dirichlet(0.5)": 1210}


def test_compressor_ratios_are_fractions_of_any_message_size():
    """Top-k and random-k keep ``k = ⌈f d⌉`` entries: 2 of 6, 404 of 1210 and 1604 of 4810
    at f = 1/3. Bytes by hand (float32): exact 4d; top-k k (4 + 4) (values and int32
    indices); random-k 4k; quantize(4) d (1 + ⌈log₂ 5⌉) + 32 bits; sign d + 32 bits; rounded
    up to bytes."""
    small = experiment.compressors(True)
    assert {label: C.Channel(c).message_bytes(6) for label, c in small.items()} == {
        "exact": 24, "top_k(1/3)": 16, "random_k(1/3)": 8, "quantize(4)": 7, "sign": 5}
    assert {label: C.Channel(c).message_bytes(1210) for label, c in small.items()} == {
        "exact": 4840, "top_k(1/3)": 3232, "random_k(1/3)": 1616, "quantize(4)": 609,
        "sign": 156}
    assert {label: C.Channel(c).message_bytes(4810) for label, c in small.items()} == {
        "exact": 19240, "top_k(1/3)": 12832, "random_k(1/3)": 6416, "quantize(4)": 2409,
        "sign": 606}
    full = experiment.compressors(False)
    assert [C.Channel(full[f"top_k({f})"]).message_bytes(4810) for f in ("1/6", "1/3", "1/2")] \
        == [802 * 8, 1604 * 8, 2405 * 8]


@pytest.fixture(scope="module")
def task():
    return digits.digits_task(0)


@pytest.mark.slow  # fast twin: tests/evaluate/test_predictive.py (the scores it pools)
def test_predictive_score_pools_probabilities_over_chains(task):
    """The digits rows' NLL and accuracy are those of each agent's predictive ``p̂ = mean over
    chains of p_c`` (computed here by hand in float64 to float32 rounding), averaged over
    agents; by Jensen the predictive's NLL is below the chains' mean NLL (strictly, as the
    chains differ: averaging log-probabilities instead would give equality). Identical chains
    give a jackknife standard error of exactly zero."""
    # 16 draws of the MLP's initial parameters, stacked as 8 chains of 2 agents: each drawn
    # by the program the task itself compiled for one (vmapping the initializer compiles
    # another, for 5 s).
    draws = [task.init(k) for k in jax.random.split(jax.random.key(0), 16)]
    params = jax.tree.map(lambda *a: np.stack(a).reshape(8, 2, *a[0].shape), *draws)
    scores = experiment._predictive_score(task, params, groups=8)
    log_probs = np.asarray(jax.vmap(jax.vmap(lambda p: task.outputs(p, task.test[0])))(params),
                           np.float64)                                      # (8, 2, P, 10)
    labels = task.test[1]
    p = np.exp(log_probs).mean(axis=0)                                      # (2, P, 10)
    nll = -np.log(p[:, np.arange(len(labels)), labels]).mean()
    accuracy = (p.argmax(axis=-1) == labels).mean()
    assert scores["nll"][0] == pytest.approx(nll, rel=1e-5)
    assert scores["accuracy"][0] == pytest.approx(accuracy, abs=1e-6)
    per_chain = -log_probs[:, :, np.arange(len(labels)), labels].mean()
    assert scores["nll"][0] < per_chain
    assert scores["nll"][1] > 0
    same = jax.tree.map(lambda a: np.repeat(a[:1], 8, axis=0), params)
    one = experiment._predictive_score(task, same, groups=8)
    assert one["nll"][1] == 0 and one["accuracy"][1] == 0
    assert one["nll"][0] == pytest.approx(
        -log_probs[0, :, np.arange(len(labels)), labels].mean(), rel=1e-5)


def _check_bytes(row: dict, num_draws: int) -> None:
    """A row's bytes per agent and step against the encodings of its message size, on the
    4-regular graph (4 out-neighbours; DIGing sends 2 messages a step, DE-SGLD 1).
    ``num_draws``: agents x steps x chains of the row's run."""
    sizes = {label: C.Channel(c).message_bytes(SIZES[row["problem"]])
             for label, c in experiment.compressors(True).items()}
    per = 2 if row["method"] == "DIGing-SGLD" else 1
    full = per * 4 * sizes["exact"]
    # Activity and matchings are Bernoulli per agent and step: the sent fraction's standard
    # error is <= 0.5 / sqrt(num_draws) (2.2e-4 at 4000 steps x 20 agents x 64 chains, where
    # 3e-3 is over 10 of them); the tolerance scales with it.
    tol = 3e-3 * np.sqrt(4000 * 20 * 64 / num_draws)
    label = row["channel"]
    if label.startswith("trigger"):
        assert 0 < row["bytes_per_agent_step"] <= full, row
    elif label.startswith("stragglers"):
        q = float(label.split("=")[1])
        assert row["bytes_per_agent_step"] / full == pytest.approx(q, abs=tol), row
    elif label == "gossip, matching":
        # Agent i is matched when it and a neighbour propose each other: 4 · (1/4)² = 1/4
        # (binomial over the same agent-steps, pairs counted twice).
        assert row["bytes_per_agent_step"] / full == pytest.approx(1 / 16, abs=tol / 4)
    elif label == "gossip, one link":
        # Exactly one link a step: 2 of the 20 agents send one message per message kind.
        assert row["bytes_per_agent_step"] == pytest.approx(per * sizes["exact"] / 10)
    elif label.startswith("deadline"):
        # t_i = c_i (1/2 + E/2) <= 3 s: agent 0 (c = 5) w.p. 1 − e^−0.2, the others
        # 1 − e^−5; an agent not done in time sends nothing (s.e. as for stragglers).
        done = (1 - np.exp(-0.2) + 19 * (1 - np.exp(-5))) / 20
        assert row["bytes_per_agent_step"] / full == pytest.approx(done, abs=tol), row
        assert row["seconds_per_step"] <= experiment.DEADLINE + 0.1
    else:
        name, _, tau = label.partition(", every ")
        tau = int(tau or 1)           # steps a multiple of τ: rounds at k = 0, τ, 2τ, ...
        assert row["bytes_per_agent_step"] == per * 4 * sizes[name] / tau, row


@pytest.mark.slow  # fast twin: tests/evaluate/test_predictive.py (the BNN rows' scores); every
# row's bytes: test_sample_channel_option_counts_bytes
def test_digits_rows_tiny(tmp_path, monkeypatch):
    """The digits BNN rows at a tiny size (DIGing-SGLD, 10 steps, 8 chains, two channels):
    bytes per agent and step exact for messages of 1210 entries, NLL and accuracy with
    positive jackknife standard errors, both in the JSON and the table (every row at the
    ``--small`` size: the slow test below); the JSON holds the rows so far after each row."""
    monkeypatch.setitem(experiment.DIGITS_SMALL, "num_steps", 10)
    monkeypatch.setattr(experiment, "METHODS", {"DIGing-SGLD": experiment.DIGingSGLD})
    every = experiment.channels
    monkeypatch.setattr(experiment, "channels", lambda small, consensus, noise: [
        (label, c) for label, c in every(small, consensus, noise)
        if label == "exact, every 5" or (label == "top_k(1/3)" and c.error_feedback)])
    saved_so_far = []              # the JSON as each row is logged: it holds the rows so far

    def logger(line):
        saved = json.loads((tmp_path / "communication.json").read_text())
        saved_so_far.append((len(saved["rows"]), saved["config"]["complete"]))

    rows = experiment.communication_experiment(tmp_path, small=True, problems=("digits",),
                                               plot=False, logger=logger)
    assert len(rows) == 2 and saved_so_far == [(1, False), (2, False)]
    for row in rows:
        _check_bytes(row, 10 * 20 * 8)
        assert row["metric"] == "nll" and not row["diverged"], row
        assert row["value"] > 0 and row["se"] > 0 and row["accuracy_se"] > 0, row
        assert 0 <= row["accuracy"] <= 1, row
    saved = json.loads((tmp_path / "communication.json").read_text())
    assert saved["rows"] == rows and saved["config"]["digits"]["num_steps"] == 10
    assert saved["config"]["complete"] and not list(tmp_path.glob("*.part"))
    md = (tmp_path / "communication.md").read_text()
    assert "DIGing-SGLD NLL | DIGing-SGLD accuracy" in md
    assert md.count("| top_k(1/3) | yes |") == 1
    with pytest.raises(ValueError, match="problems"):
        experiment.communication_experiment(tmp_path, problems=("mnist",))


def test_experiment_refuses_unknown_problems_and_channel_labels(tmp_path, monkeypatch):
    """Both are checked before any row runs, naming the argument and the choices, and so is
    scikit-learn, which the digits BNN's data come from."""
    with pytest.raises(ValueError, match="`problems` must name some of"):
        experiment.communication_experiment(tmp_path, problems=("mnist",))
    with pytest.raises(ValueError, match=r"`only` must be .* among \['exact', 'exact, every 2'"):
        experiment.communication_experiment(tmp_path, small=True, only=("top_k(1/4)",))
    with pytest.raises(ValueError, match="`only` must be a collection"):
        experiment.communication_experiment(tmp_path, small=True, only="exact")
    with pytest.raises(ValueError, match=r"`consensus` must be a number in \(0, 1\]"):
        experiment.communication_experiment(tmp_path, small=True, consensus=0.0)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)     # as if not installed
    with pytest.raises(ValueError, match=r"pip install 'dgsgld\[examples\]'"):
        experiment.communication_experiment(tmp_path, small=True, problems=("linear", "digits"))
    assert not list(tmp_path.iterdir())


def test_rows_with_another_consensus_step_get_their_own_table_lines():
    """An error-feedback row records its CHOCO step γ; rows of the default γ (or written
    before γ was recorded) read "yes", others "yes, γ = ..." on lines of their own, both
    methods' cells on one line."""
    def row(method, ef, gamma="absent", value=0.1):
        r = {"problem": "digits BNN, dirichlet(0.5)", "method": method,
             "channel": "quantize(4)", "error_feedback": ef, "bytes_per_agent_step": 10.0,
             "seconds_per_step": 1.0, "metric": "nll", "value": value, "se": 0.01,
             "accuracy": 0.9, "accuracy_se": 0.01}
        return r if gamma == "absent" else r | {"consensus": gamma}

    rows = [row(m, ef, g, v) for m in experiment.METHODS
            for ef, g, v in ((False, None, None), (True, "absent", None), (True, 0.05, 0.152))]
    md = experiment.table(rows)
    assert md.count("| quantize(4) | no |") == 1 and md.count("| quantize(4) | yes |") == 1
    line = next(ln for ln in md.splitlines() if "| yes, γ = 0.05 |" in ln)
    assert line.count("0.152 ± 0.010") == 2 and line.count("diverged") == 0
    assert experiment.CONSENSUS == 0.3


def test_jackknife_of_a_mean_is_the_standard_error_of_the_group_means():
    """For the mean, the delete-a-group jackknife is exactly the textbook standard error of the
    G group means, ``sd(group means) / √G`` (``m₋g = (G m̄ − m_g)/(G − 1)``, so
    ``(G−1)/G Σ (m₋g − m̄)² = Σ (m_g − m̄)² / (G (G − 1))``): an identity, checked to float64
    rounding."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3))                      # 64 chains, 3 agents
    groups = 8
    parts = experiment._leave_group_out(x, groups)    # (56, 8, 3)
    assert parts.shape == (56, groups, 3)
    se = experiment._jackknife(parts.mean(axis=(0, 2)))
    means = x.mean(axis=1).reshape(groups, 8).mean(axis=1)
    assert se == pytest.approx(means.std(ddof=1) / np.sqrt(groups), rel=1e-12)


@pytest.mark.slow  # fast twins: test_sample_channel_option_counts_bytes, the jackknife identity,
# tests/evaluate/test_predictive.py
def test_communication_experiment_small(tmp_path):
    """``reproduce communication --small``: every row's bytes per agent and step are exact
    (:func:`_check_bytes`: the encodings of d = 6 and, for the digits BNN, d = 4810 float32
    entries; a round every τ steps); triggers send at most what exact messages send;
    stragglers send a fraction q of it; exact and error-feedback rows stay finite with
    positive standard errors (the BNN's NLL and accuracy alike); the JSON holds the
    configuration and every row and the figure is written."""
    rows = experiment.communication_experiment(tmp_path, small=True, logger=None)
    saved = json.loads((tmp_path / "communication.json").read_text())
    cfg = saved["config"]
    draws = {"digits BNN, dirichlet(0.5)": cfg["digits"]["num_chains"]
             * cfg["digits"]["num_steps"] * 20}
    per_problem = 1 + 3 + 2 * 4 + 2 + 2 + 3
    assert len(rows) == 3 * 2 * per_problem                 # 3 problems, 2 methods
    assert list(dict.fromkeys(r["problem"] for r in rows)) == list(SIZES)
    for row in rows:
        _check_bytes(row, draws.get(row["problem"], 4000 * 20 * 64))
        label = row["channel"]
        if row["error_feedback"] or label.startswith(("exact", "stragglers", "trigger")):
            assert row["value"] is not None and np.isfinite(row["value"]), row
            assert row["se"] > 0, row
            if row["metric"] == "nll":
                assert row["accuracy_se"] > 0, row
        if row["value"] is not None:
            accuracy = row["value"] if row["metric"] == "accuracy" else row.get("accuracy")
            assert accuracy is None or 0 <= accuracy <= 1, row
    # The clock draws the same compute times in every row of a problem (the step keys): rows
    # without stragglers or a deadline take the same seconds but for the 0.1 s latency of each
    # round, which every τ steps is paid at 1/τ of them. A step waits for the slow agent (mean
    # 5 s). The float32 sum of 4000 steps of about 5 s rounds each addition by at most 2⁻²⁴ of
    # the running total (≤ 2.1e4 s): 4000 · 1.3e-3 s = 5 s at worst, 2.5e-4 of the total.
    for problem in SIZES:
        sub = [r for r in rows if r["problem"] == problem]
        exact = next(r["seconds_per_step"] for r in sub if r["channel"] == "exact")
        assert exact > 5.0
        for row in sub:
            label = row["channel"]
            if not label.startswith(("stragglers", "deadline")):
                tau = int(label.partition(", every ")[2] or 1)
                assert row["seconds_per_step"] == pytest.approx(exact - 0.1 * (1 - 1 / tau),
                                                                rel=2.5e-4), row
    assert all(r["consensus"] == (experiment.CONSENSUS if r["error_feedback"] else None)
               for r in rows)
    assert saved["rows"] == rows and cfg["num_agents"] == 20
    assert (tmp_path / "communication.png").stat().st_size > 0
