"""``dgsgld reproduce communication``: its standard errors and its rows' byte accounting."""

import json

import numpy as np
import pytest

from dgsgld import communication as C
from dgsgld.experiments import communication as experiment


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


@pytest.mark.slow  # fast twins: test_sample_channel_option_counts_bytes, the jackknife identity
def test_communication_experiment_small(tmp_path):
    """``reproduce communication --small``: every row's bytes per agent and step are exact
    (4 out-neighbours on the 4-regular graph; DIGing sends 2 messages a step, DE-SGLD 1; the
    encodings of d = 6 float32 entries; a round every τ steps); triggers send at most what
    exact messages send; stragglers send a fraction q of it; exact and error-feedback rows stay
    finite with positive standard errors; the JSON holds the configuration and every row and
    the figure is written."""
    rows = experiment.communication_experiment(tmp_path, small=True, logger=None)
    size = {label: C.Channel(c).message_bytes(6) for label, c in
            experiment.compressors(True).items()}
    assert size == {"exact": 24, "top_k(k=2)": 16, "random_k(k=2)": 8, "quantize(4)": 7,
                    "sign": 5}
    per_problem = 1 + 3 + 2 * 4 + 2 + 2 + 3
    assert len(rows) == 2 * 2 * per_problem                 # 2 problems, 2 methods
    for row in rows:
        per = 2 if row["method"] == "DIGing-SGLD" else 1
        full = per * 4 * size["exact"]
        label = row["channel"]
        if label.startswith("trigger"):
            assert 0 < row["bytes_per_agent_step"] <= full, row
        elif label.startswith("stragglers"):
            # Activity is Bernoulli(q) per agent and step: 4000 steps x 20 agents x 64 chains
            # = 5.1e6 draws, standard error of the sent fraction <= 0.5 / sqrt(5.1e6) = 2.2e-4;
            # 3e-3 is over 10 of them.
            q = float(label.split("=")[1])
            assert row["bytes_per_agent_step"] / full == pytest.approx(q, abs=3e-3), row
        elif label == "gossip, matching":
            # Agent i is matched when it and a neighbour propose each other: 4 · (1/4)² = 1/4
            # (binomial over the same 5.1e6 agent-steps, pairs counted twice: s.e. < 2.7e-4).
            assert row["bytes_per_agent_step"] / full == pytest.approx(1 / 16, abs=3e-3 / 4)
        elif label == "gossip, one link":
            # Exactly one link a step: 2 of the 20 agents send one message per message kind.
            assert row["bytes_per_agent_step"] == pytest.approx(per * size["exact"] / 10)
        elif label.startswith("deadline"):
            # t_i = c_i (1/2 + E/2) <= 3 s: agent 0 (c = 5) w.p. 1 − e^−0.2, the others
            # 1 − e^−5; an agent not done in time sends nothing (s.e. as for stragglers).
            done = (1 - np.exp(-0.2) + 19 * (1 - np.exp(-5))) / 20
            assert row["bytes_per_agent_step"] / full == pytest.approx(done, abs=3e-3), row
            assert row["seconds_per_step"] <= experiment.DEADLINE + 0.1
        else:
            name, _, tau = label.partition(", every ")
            tau = int(tau or 1)                  # 4000 steps: rounds at k = 0, τ, 2τ, ...
            assert row["bytes_per_agent_step"] == per * 4 * size[name] / tau, row
        if row["error_feedback"] or label.startswith(("exact", "stragglers", "trigger")):
            assert row["value"] is not None and np.isfinite(row["value"]), row
            assert row["se"] > 0, row
        if row["metric"] == "accuracy" and row["value"] is not None:
            assert 0 <= row["value"] <= 1, row
    # The clock draws the same compute times in every row (the step keys): rows without
    # stragglers or a deadline take the same seconds but for the 0.1 s latency of each round,
    # which every τ steps is paid at 1/τ of them. A step waits for the slow agent (mean 5 s).
    # The float32 sum of 4000 steps of about 5 s rounds each addition by at most 2⁻²⁴ of the
    # running total (≤ 2.1e4 s): 4000 · 1.3e-3 s = 5 s at worst, 2.5e-4 of the total.
    exact = next(r["seconds_per_step"] for r in rows if r["channel"] == "exact")
    assert exact > 5.0
    for row in rows:
        label = row["channel"]
        if not label.startswith(("stragglers", "deadline")):
            tau = int(label.partition(", every ")[2] or 1)
            assert row["seconds_per_step"] == pytest.approx(exact - 0.1 * (1 - 1 / tau),
                                                            rel=2.5e-4), row
    saved = json.loads((tmp_path / "communication.json").read_text())
    assert saved["rows"] == rows and saved["config"]["num_agents"] == 20
    assert (tmp_path / "communication.png").stat().st_size > 0
