"""The guides' code blocks run as written, and what they print is what they say."""

import contextlib
import io
import json
import pathlib
import re

import numpy as np
import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def blocks(name: str, section: str | None = None) -> str:
    """The python blocks of ``docs/name`` (of its ``## section`` only, if given), joined."""
    text = (DOCS / name).read_text()
    if section is not None:
        start = text.index(f"## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start:end if end > 0 else None]
    code = re.findall(r"```python\n(.*?)```", text, re.S)
    assert code, f"{name} has no python block"
    return "\n".join(code)


def run(name: str, section: str | None = None) -> tuple[dict, str]:
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks(name, section), str(DOCS / name), "exec"), namespace)
    return namespace, out.getvalue()


def test_data_guide_runs():
    ns, printed = run("data.md")
    split = ns["split"]
    assert split.sizes.sum() == 120 and split.sizes.min() >= 4
    assert f"(6, {split.mask.shape[1]}, 3) (6, {split.mask.shape[1]})" in printed
    assert "(6, 3, 4)" in printed


@pytest.mark.slow  # one compile per score (~5 s); fast twin: tests/evaluate/test_predictive.py
# (every score of the guide on hand-checked cases)
def test_predictive_guide_runs():
    ns, printed = run("predictive.md")
    assert ns["pred"].shape == (40, 3) and float(ns["counts"].sum()) == 40
    # Logits scaled by 0.05 give near-uniform predictives: every far point has higher entropy.
    auroc = float(printed.splitlines()[2])
    assert auroc > 0.95


@pytest.mark.slow  # fast twin: tests/test_samplers.py::test_centralized_sgld_matches_exact_ula_
# covariance (centralized SGLD through dgsgld.sample, no agent axis)
def test_centralized_sgld_section_of_the_runner_guide_runs():
    ns, printed = run("runner.md", "Centralized SGLD through the runner")
    assert "(64, 101, 1)" in printed
    # Posterior N(Σy/(n+1), 1/(n+1)), n = 100: sd 0.0995. 64 chains x 101 kept draws, thinned
    # by 10 steps of relaxation time 1/(η(n+1)) ≈ 5 steps, are nearly independent: the mean's
    # standard error is ≈ 0.1 / √6464 ≈ 0.0013 (doubled for the mini-batch noise); 0.01 is
    # beyond 3 such errors plus the O(η) bias of the mean (zero for a Gaussian target).
    y = ns["y"]
    assert abs(float(ns["trace"].positions.mean()) - y.sum() / (y.size + 1)) < 0.01


@pytest.mark.slow  # fast twin: tests/evaluate/test_plots.py::
# test_plot_run_draws_each_run_and_the_network
def test_plots_guide_runs(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib").use("Agg")
    monkeypatch.chdir(tmp_path)
    ns, printed = run("plots.md")
    assert "(41, 6)" in printed
    assert (tmp_path / "w2.png").stat().st_size > 5_000 and (tmp_path / "w2_bytes.png").exists()
    # A ring of 6 agents sends 12 messages of 4 float32 per iteration; the curve is the mean
    # over agents of the streamed W2 against those bytes.
    np.testing.assert_array_equal(ns["sent"], 5 * np.arange(41) * 12 * 4 * 4)
    (line,) = ns["ax"].lines
    np.testing.assert_array_equal(line.get_xdata(), ns["sent"])
    np.testing.assert_allclose(line.get_ydata(), np.asarray(ns["trace"].ensemble).mean(1),
                               rtol=1e-6)
    pytest.importorskip("matplotlib.pyplot").close("all")


@pytest.mark.slow
def test_numpyro_guide_runs():
    """Fast twins: tests/test_ppl.py (the same potential against the model by hand, constrain)."""
    pytest.importorskip("numpyro")
    ns, printed = run("numpyro.md")
    assert "(8, 51, 4) True" in printed
    assert "latent=['alpha', 'beta', 'scale']" in printed


def test_the_matched_choco_steps_are_quoted_from_the_full_table():
    """The digits BNN's error-feedback rows at a CHOCO step other than the default (a step
    matched to the compressor) are quoted by the guide (NLL and its standard error, both
    samplers) and the README (both NLLs) as the generated JSON holds them, and the generated
    table has their line."""
    from experiments.communication import CONSENSUS

    root = DOCS.parent
    rows = json.loads((DOCS / "figures" / "communication_full.json").read_text())["rows"]
    flat = lambda text: " ".join(text.split())  # noqa: E731
    guide, readme = flat((DOCS / "communication.md").read_text()), flat(
        (root / "README.md").read_text())
    table = (DOCS / "figures" / "communication_full.md").read_text()
    matched = {}
    for r in rows:
        gamma = r.get("consensus")
        if r["problem"].startswith("digits") and r["error_feedback"] and gamma not in (
                None, CONSENSUS):
            matched.setdefault((r["channel"], gamma), {})[r["method"]] = r
    assert len(matched) >= 3, matched
    for (channel, gamma), by in matched.items():
        diging, de = by["DIGing-SGLD"], by["DE-SGLD"]
        for r in (diging, de):
            assert f"{r['value']:.3f} ± {r['se']:.3f}" in guide, (channel, gamma, r["method"])
        assert f"{diging['value']:.3f} against {de['value']:.3f}" in readme, (channel, gamma)
        line = f"| {channel} | yes, γ = {gamma:g} |"
        assert any(row.startswith(line) and f"{diging['value']:.3f} ± {diging['se']:.3f}" in row
                   for row in table.splitlines()), line
