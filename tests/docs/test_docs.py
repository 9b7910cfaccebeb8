"""The guides' code blocks run as written, what they print is what they say, and the numbers the
pages quote are those of the generated tables they come from."""

import contextlib
import io
import json
import math
import pathlib
import re

import numpy as np
import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
ROOT = DOCS.parent


def section_text(name: str, section: str | None = None) -> str:
    """The text of ``docs/name``, or of its ``## section`` only (up to the next ``## ``)."""
    text = (DOCS / name).read_text()
    if section is not None:
        start = text.index(f"## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start:end if end > 0 else None]
    return text


def blocks(name: str, *sections: str) -> str:
    """The python blocks of ``docs/name`` (of the given ``## sections`` only, if any), joined."""
    texts = [section_text(name, s) for s in sections] or [section_text(name)]
    code = [c for text in texts for c in re.findall(r"```python\n(.*?)```", text, re.S)]
    assert code, f"{name} has no python block"
    return "\n".join(code)


def run(name: str, *sections: str) -> tuple[dict, str]:
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks(name, *sections), str(DOCS / name), "exec"), namespace)
    return namespace, out.getvalue()


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])[+−-]?\d+\.\d+", text.replace("−", "-"))]


# --------------------------------------------------------------------------- getting started


def test_getting_started_walks_through_the_readme_quick_start_line_by_line():
    """The page explains the README's Quick start piece by piece: its python blocks, joined,
    are the README's block, line for line (tests/docs/test_readme.py runs that block)."""
    readme = (ROOT / "README.md").read_text()
    quick = re.search(r"```python\n(.*?)```", readme[readme.index("## Quick start"):], re.S)
    page = blocks("getting-started.md", "The Quick start, line by line")
    lines = lambda code: [line.rstrip() for line in code.splitlines() if line.strip()]  # noqa: E731
    assert lines(page) == lines(quick.group(1))


# --------------------------------------------------------------------------- user guide


def test_data_guide_runs():
    ns, printed = run("guide/data.md")
    split = ns["split"]
    assert split.sizes.sum() == 120 and split.sizes.min() >= 4
    assert f"(6, {split.mask.shape[1]}, 3) (6, {split.mask.shape[1]})" in printed
    assert "(6, 3, 4)" in printed


@pytest.mark.slow  # fast twins: tests/model/test_potential.py::test_uneven_data_with_mask and
# ::test_dict_parameters_called_directly
def test_model_guide_runs():
    ns, printed = run("guide/model.md")
    assert "{'b': (16, 51, 4), 'w': (16, 51, 4, 3)}" in printed
    assert "(16, 4, 16, 1)" in printed
    # At θ = 0 every datum's log-likelihood is y·0 − softplus(0) = −log 2 and the prior is 0,
    # so Σ_i f_i(0) = (Σ_i n_i) log 2 with Σ_i n_i = 44; the agents' values at 0 sum to it.
    value = float(ns["potential"].value(ns["point"]))
    assert value == pytest.approx(44 * math.log(2), rel=1e-5)
    assert float(ns["potential"].agent_values(ns["x0"]).sum()) == pytest.approx(value, rel=1e-5)


@pytest.mark.slow  # fast twins: tests/gradients/test_gradients.py (every estimator, the
# evaluation counts)
def test_estimators_guide_runs():
    _, printed = run("guide/estimators.md")
    # b = 5 of n_i = 50: plain mini-batches and SAGA evaluate b per step, SVRG 2b + n_i/m.
    assert printed.split() == ["MiniBatch", "5.0", "SVRG", "15.0", "SAGA", "5.0"]


@pytest.mark.slow  # fast twins: tests/networks/test_onthefly.py, tests/networks/test_networks.py
def test_networks_guide_runs():
    ns, printed = run("guide/networks.md")
    assert "(50, 20, 20)" in printed and "(4, 101, 20, 2)" in printed
    # The guide's δ table: barbell(20, 50, seed 0), B = 10.
    assert f"{ns['networks'].delta(ns['barbell'], 10).sup:.4f}" == "0.8268"


def test_directed_guide_runs():
    ns, printed = run("guide/directed.md")
    assert "(16, 4, 8, 2)" in printed and "(51, 8) True" in printed
    # Push-sum weights are propagated from v⁰ = 1 by column-stochastic matrices: they sum to N
    # at every step, up to the float32 matrices' column sums (1 within ~1e-7 each, 50 steps).
    np.testing.assert_allclose(ns["v"].sum(1), 8.0, rtol=1e-5)


@pytest.mark.slow  # fast twins:
# tests/samplers/test_samplers.py::test_thinning_trace_fn_and_ensemble_fn_in_one_run and
# ::test_optax_schedule_equals_constant
def test_running_guide_runs():
    ns, printed = run("guide/running.md", "What comes back: `Output` and `Trace`",
                      "Samplers in your own loop")
    assert "(32, 21, 6, 2) (32, 21) (21,)" in printed
    assert "(6, 2)" in printed.splitlines()[-1]


@pytest.mark.slow  # fast twin:
# tests/samplers/test_samplers.py::test_centralized_sgld_matches_exact_ula_covariance
# (centralized SGLD through dgsgld.sample, no agent axis)
def test_centralized_sgld_section_of_the_runner_guide_runs():
    ns, printed = run("guide/running.md", "Centralized SGLD through the runner")
    assert "(64, 101, 1)" in printed
    # Posterior N(Σy/(n+1), 1/(n+1)), n = 100: sd 0.0995. 64 chains x 101 kept draws, thinned
    # by 10 steps of relaxation time 1/(η(n+1)) ≈ 5 steps, are nearly independent: the mean's
    # standard error is ≈ 0.1 / √6464 ≈ 0.0013 (doubled for the mini-batch noise); 0.01 is
    # beyond 3 such errors plus the O(η) bias of the mean (zero for a Gaussian target).
    y = ns["y"]
    assert abs(float(ns["trace"].positions.mean()) - y.sum() / (y.size + 1)) < 0.01


@pytest.mark.slow  # fast twins:
# tests/tuning/test_stepsize.py::test_proposal_lies_in_the_stable_range_and_warnings_fire_outside
# and ::test_score_is_the_users_criterion_on_the_pilots_final_samples
def test_step_sizes_guide_runs():
    with pytest.warns(RuntimeWarning, match="step size"):
        ns, printed = run("guide/step-sizes.md", "A step size proposed for your model",
                          "Every step of a grid in one call")
    report, search = ns["report"], ns["search"]
    low, high = report.accurate_range
    assert report.step_size == high and low <= high <= report.stable_range[1]
    scored = ns["scored"]  # chosen by the validation score: a stable step, scored
    assert scored.score is not None
    assert scored.stable_range[0] <= scored.step_size <= scored.stable_range[1]
    # The grid search's best step is one of its grid points, with the lowest finite score.
    scores = np.asarray(search.scores)
    assert search.best_step_size == pytest.approx(float(ns["steps"][np.nanargmin(scores)]))


@pytest.mark.slow  # fast twin: tests/tuning/test_warmup.py (a Gaussian, known answer)
def test_warmup_section_of_the_step_sizes_guide_runs():
    with pytest.warns(RuntimeWarning, match="step size"):
        ns, printed = run("guide/step-sizes.md", "A step size proposed for your model",
                          "Warm-up and preconditioning")
    warm, trace = ns["warm"], ns["trace"]
    assert warm.num_steps == 1000 and warm.preconditioner == "dense"
    assert "Verdict:" in printed
    assert np.all(np.isfinite(np.asarray(trace.positions)))


@pytest.mark.slow  # fast twins: tests/evaluate/test_streaming.py::test_w2_equals_metric_of_
# stored_trace, tests/evaluate/test_diagnostics.py
def test_diagnostics_guide_runs():
    pytest.importorskip("arviz")
    _, printed = run("guide/diagnostics.md")
    lines = printed.splitlines()
    assert lines[0] == "(201, 6) (6, 2) (6, 2)"
    assert lines[1] == "(8, 201, 2) (2,)"
    assert lines[2:] == ["(201, 6)", "True"]  # the streamed W2 is the stored trace's


@pytest.mark.slow  # one compile per score (~5 s); fast twin: tests/evaluate/test_predictive.py
# (every score of the guide on hand-checked cases)
def test_predictive_guide_runs():
    ns, printed = run("guide/predictive.md")
    assert ns["pred"].shape == (40, 3) and float(ns["counts"].sum()) == 40
    # Logits scaled by 0.05 give near-uniform predictives: every far point has higher entropy.
    auroc = float(printed.splitlines()[2])
    assert auroc > 0.95


@pytest.mark.slow  # fast twin: tests/evaluate/test_plots.py::
# test_plot_run_draws_each_run_and_the_network
def test_plots_guide_runs(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib").use("Agg")
    monkeypatch.chdir(tmp_path)
    ns, printed = run("guide/plots.md")
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
    """Fast twins: tests/model/test_ppl.py (the same potential against the model by hand,
    constrain)."""
    pytest.importorskip("numpyro")
    ns, printed = run("guide/numpyro.md")
    assert "(8, 51, 4) True" in printed
    assert "latent=['alpha', 'beta', 'scale']" in printed


# --------------------------------------------------------------------------- the paper


def test_exact_laws_section_of_the_theory_page_runs():
    ns, printed = run("paper/theory.md", "Exact laws")
    w2, limit = np.asarray(ns["w2"]), np.asarray(ns["w2_limit"])[0]
    assert w2.shape == (201, 4)
    # After 200 steps of DIGing-SGLD at η = 0.01 the law has converged (the page says within
    # 0.001 of the stationary W2, about 0.06), and the printed numbers are these.
    np.testing.assert_allclose(w2[-1], limit, atol=1e-3)
    assert np.all((limit > 0.05) & (limit < 0.07))
    assert printed.strip().startswith("(201, 4)")


@pytest.mark.slow  # fast twin:
# tests/tuning/test_design.py::test_learned_schedule_is_valid_and_lowers_the_exact_w2
def test_learned_weights_example_prints_what_the_page_says():
    _, printed = run("paper/design.md", "Learning weights")
    page = section_text("paper/design.md", "Learning weights")
    said = re.search(r"prints `(.*?)` and `(.*?)`", page)
    assert printed.splitlines() == [said.group(1), said.group(2)]


def test_the_reproduction_tables_quote_the_generated_summaries():
    """Every final value, standard deviation and centralized value of the seed-0 table
    (figures/summary.md) and of the 8-seed table (figures/sweep_all.md) appears in the page's
    row of that figure, rounded to the page's 3 decimals (a tolerance of half a unit in the
    last digit, plus float rounding of the generated 4-digit values)."""
    page = (DOCS / "paper" / "reproduction.md").read_text()
    # (file, columns quoted with their ± part, column quoted by its mean only, the page's table)
    for generated, full, mean_only, which in (("summary.md", (2, 3), 4, 0),
                                              ("sweep_all.md", (3, 4), 5, -1)):
        for line in table_rows((DOCS / "figures" / generated).read_text())[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            label = f"{cells[0][3]}({cells[0][4]})"  # fig2a -> 2(a)
            row = [r for r in table_rows(page) if r.startswith(f"| {label} ")][which]
            quoted = numbers(row)
            values = numbers(" ".join(cells[i] for i in full)) + numbers(cells[mean_only])[:1]
            assert len(values) == 5, (generated, line)
            for value in values:
                assert any(abs(q - value) <= 5e-4 + 1e-9 for q in quoted), (generated, label,
                                                                            value, row)


def test_the_theory_page_quotes_the_theory_report():
    """The numbers of "What the bound means in practice" are the generated report's
    (docs/theory/theory_report.md), rounded to the digits the page prints."""
    report = " ".join((DOCS / "theory" / "theory_report.md").read_text().split())
    page = " ".join(section_text("paper/theory.md", "The paper's bounds").split())
    num = r"([0-9.]+(?:e[+-]?[0-9]+)?)"
    checks = [  # (the report's number, what the page says, significant digits printed)
        (rf"L = {num} \(κ", "L = 19.6", 3),
        (rf"δ = {num}\.", "(δ = 0.860)", 3),
        (rf"η̄ corrected = {num}", "corrected η̄ = 7.0e-9", 2),
        (rf"printed = {num} \(fails", "printed η̄ = 1.9e-7", 2),
        (rf"λ\(η̄\)\^B = {num}\)", "λ(η̄)^B = 1.58", 3),
        (rf"\(3\.16\): {num}\.", "force η ≤ 2.8e-8", 2),
        (rf"DIGing-SGLD: tuned η = {num};", "tuned step 7.3e-3", 2),
        (rf"loop gain over λ, β is {num}\)", "a factor 3e5 in loop gain", 1),
        (rf"E₁\+E₂\+E₃ at k = 100 is {num} \(best λ, α, β: [0-9.e+-]+\); exact W2 there "
         r"2\.8709", "the bound at k = 100 is 1.9e10", 2),
        (rf"exact W2 there {num}: ratio 6", "exact W2 of 2.87", 3),
        (rf"ratio {num} \(vs the tuned run's exact W2: 7", "(ratio 6.7e9)", 2),
        (rf"η\* = {num},", "η* = 5.1e-33", 2),
        (rf"k\*\(ε\) = {num} \(printed", "k*(0.1) = 7.5e35", 2),
        (rf"DIGing-SGLD {num}, DE-SGLD [0-9.]+, centralized", "read 0.92 (DIGing-SGLD)", 2),
        (rf"DIGing-SGLD [0-9.]+, DE-SGLD {num}, centralized", "0.87 (DE-SGLD)", 2),
    ]
    for pattern, said, digits in checks:
        assert said in page, said
        match = re.search(pattern, report)
        assert match, pattern
        value = float(match.group(1))
        quoted = float(re.findall(r"[0-9.]+(?:e[+-]?[0-9]+)?", said.replace("3.16", ""))[-1])
        assert quoted == pytest.approx(float(f"{value:.{digits}g}"), rel=1e-9), (said, value)


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize("generated,page", [
    ("figures/stepsize_proposals.md", "results/step-sizes.md"),
    ("figures/stepsize_pilot200/stepsize_proposals.md", "results/step-sizes.md"),
    ("figures/stepsize_spread_only/stepsize_proposals.md", "results/step-sizes.md"),
    ("figures/digits.md", "results/real-data.md"),
    ("figures/diabetes.md", "results/real-data.md"),
    ("../benchmarks/references/adapted/sbc_adapted.md", "results/posteriors.md"),
    ("../benchmarks/cost_to_accuracy.md", "results/cost-to-accuracy.md"),
    ("../benchmarks/adapted_longrun.md", "results/posteriors.md"),
    ("../benchmarks/criterion_tolerance.md", "results/posteriors.md"),
    ("../benchmarks/pooled_inflation.md", "results/posteriors.md"),
])
def test_result_pages_quote_every_row_of_their_generated_tables(generated, page):
    text = (DOCS / page).read_text()
    rows = table_rows((DOCS / generated).read_text())
    assert rows
    missing = [row for row in rows if row not in text]
    assert not missing, missing[:3]


def test_the_matched_choco_steps_are_quoted_from_the_full_table():
    """The digits BNN's error-feedback rows at a CHOCO step other than the default (a step
    matched to the compressor) are quoted by the communication results page (NLL and its
    standard error, both samplers) as the generated JSON holds them, and the generated table
    has their line."""
    from experiments.communication import CONSENSUS

    rows = json.loads((DOCS / "figures" / "communication_full.json").read_text())["rows"]
    flat = lambda text: " ".join(text.split())  # noqa: E731
    guide = flat((DOCS / "results" / "communication.md").read_text())
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
        line = f"| {channel} | yes, γ = {gamma:g} |"
        assert any(row.startswith(line) and f"{diging['value']:.3f} ± {diging['se']:.3f}" in row
                   for row in table.splitlines()), line


@pytest.mark.slow  # fast twin: tests/model/test_private.py, the warm-up's private tests
def test_private_parameters_guide_runs():
    pytest.importorskip("numpyro")
    ns, _ = run("guide/private-parameters.md")
    trace = ns["trace"]
    assert trace.positions["intercept"].shape == (4, 1001, 8)
    # the intercepts were never mixed: agents' values differ; nothing is NaN
    assert np.isfinite(np.asarray(trace.positions["slope"])).all()
    # the warm-up's block-diagonal M: the private intercept apart from the shared (mu, slope)
    report, adapted = ns["report"], ns["adapted"]
    assert report.private_coordinates == 1 and np.isfinite(
        np.asarray(adapted.positions["intercept"])).all()
    M = np.asarray(ns["sampler"].preconditioner.matrix)
    np.testing.assert_array_equal(M[0, 1:], 0.0)           # leaf order: intercept, mu, slope
    from dgsgld.model import ppl
    assert ppl.numpyro_model(ns["potential"]).private == ("a",)


def test_personalized_results_page_quotes_the_generated_tables():
    page = section_text("results/personalized.md")
    generated = (DOCS / "figures" / "personalized" / "personalized.md").read_text()
    rows = table_rows(generated)
    assert len(rows) > 20 and all(row in page for row in rows)
    record = json.loads((DOCS / "figures" / "personalized" / "personalized.json").read_text())
    dig = record["hierarchical"]["scores"]["DIGing-SGLD"]
    assert dig["bytes_per_step"] == 80 and record["hierarchical"]["scores"][
        "DIGing-SGLD, all shared"]["bytes_per_step"] == 336
