"""README.md's Quick start, run exactly as written, and its result checked against exact theory."""

import contextlib
import io
import pathlib
import re

import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import theory

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def quick_start_code() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md's Quick start has no python block"
    return match.group(1)


def test_quick_start_runs_as_written_and_matches_the_exact_law():
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(quick_start_code(), str(README), "exec"), namespace)
    printed = out.getvalue()
    assert "(200, 101, 20, 6)" in printed
    ns = namespace
    # On this linear-Gaussian model every iterate of every agent is exactly Gaussian; its law at
    # iteration 500 comes from the exact moment recursion (dgsgld.theory.exact_moments).
    # By the triangle inequality for W2 between Gaussian fits, |W2(fit of 200 draws, π) −
    # W2(exact law, π)| ≤ W2(fit of 200 draws, exact law), whose typical size for 200 draws
    # in d = 6 is ~0.03 (the floor quoted in docs/paper/reproduction.md); averaged over 20 agents it
    # fluctuates far less, so 0.06 (twice the floor) fails only on a real discrepancy.
    quad = theory.quadratic_from_potential(ns["potential"], jnp.zeros((20, 6)))
    moments = theory.exact_moments(
        dgsgld.DIGingSGLD(0.005), quad, ns["mixing"].matrices, np.zeros(6), np.eye(6), 500,
        step_size=0.005
    )
    exact = np.asarray(theory.exact_w2(moments, ns["post_mean"], ns["post_cov"]))
    sampled = np.asarray(ns["w2"])
    assert abs(sampled[-1].mean() - exact[-1].mean()) < 0.06
    assert abs(sampled[0].mean() - exact[0].mean()) < 0.06 * 3  # W2 ~ 3 at the start: ~3x noise


def test_readme_is_a_front_page():
    """At most 150 lines; its relative links all lead to files of the repository."""
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    root = README.parent
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if not re.match(r"^[a-z]+:", target):
            assert (root / target).exists(), target


def test_readme_results_are_the_generated_summary():
    """The results table quotes docs/figures/summary.md (``python -m experiments reproduce all
    --out docs/figures``): the three samplers' values, figure by figure."""
    text = README.read_text()
    rows = [line for line in text[text.index("## Results in brief"):].splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    summary = {}
    for line in (README.parent / "docs" / "figures" / "summary.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"fig\d\w", cells[0]):
            summary[cells[0][3:]] = cells[1:5]
    assert len(rows) == len(summary) == 6
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1:5] == summary[cells[0].split()[0].replace("(", "").replace(")", "")], row


def test_readme_commands_are_those_ci_runs():
    """The test command is the one `.ci/run` runs, and the main job is the library's."""
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    tests = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '
             '.venv/bin/python -m pytest')
    assert tests in text and tests in ci
    assert ".venv/bin/pip install -e . && .venv/bin/python -m dgsgld run" in text
