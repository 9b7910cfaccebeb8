"""Progress reports: off unless asked for and on a terminal; reported from inside the compiled
loop without recompiling, and between chunks."""

import functools
import inspect
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld.runner import progress as progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def no_env_override(monkeypatch):
    monkeypatch.delenv("DGSGLD_PROGRESS", raising=False)


def test_off_by_default_and_off_when_not_a_terminal():
    pipe, tty = io.StringIO(), Terminal()
    assert not progress.wants_progress(False, tty)
    assert not progress.wants_progress(None, tty)
    assert not progress.wants_progress(True, pipe)  # logs, CI, benchmarks
    assert not progress.wants_progress(50, pipe)
    assert progress.wants_progress(True, tty)
    assert progress.wants_progress(50, tty)
    assert progress.wants_progress("always", pipe)


@pytest.mark.parametrize("env, expected", [("0", False), ("1", True)])
def test_environment_overrides(monkeypatch, env, expected):
    monkeypatch.setenv("DGSGLD_PROGRESS", env)
    for requested in (False, True, "always"):
        assert progress.wants_progress(requested, io.StringIO()) is expected


@pytest.mark.parametrize("bad", [-1, 0, "yes", 2.5])
def test_bad_progress_argument_is_named(bad):
    with pytest.raises(ValueError, match="`progress` must be"):
        progress.wants_progress(bad)


def test_report_spacing_is_a_multiple_of_thin():
    assert progress.report_every(True, 10_000, 1) == 100  # about 100 reports
    assert progress.report_every(True, 50, 1) == 1
    assert progress.report_every(7, 1000, 5) == 10  # rounded up to kept iterations
    assert progress.report_every(True, 10_000, 300) == 300


def test_plain_bar_never_goes_back_and_ends_at_the_total():
    out = io.StringIO()
    bar = progress.ProgressBar(10, stream=out, min_interval=0.0, use_tqdm=False, desc="run")
    for n in (5, 3, 10, 12):
        bar.update_to(n)
    bar.close()
    assert out.getvalue().splitlines() == [
        line for line in out.getvalue().splitlines() if line.startswith("run: ")
    ]
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["5/10", "10/10"]


def test_plain_bar_is_throttled_but_prints_the_end():
    out = io.StringIO()
    bar = progress.ProgressBar(100, stream=out, min_interval=3600.0, use_tqdm=False)
    for n in range(1, 101):
        bar.update_to(n)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "1/100" in lines[0] and "100/100 iterations (100%)" in lines[1]


def test_tqdm_bar():
    pytest.importorskip("tqdm")
    out = io.StringIO()
    with progress.ProgressBar(8, initial=2, stream=out, use_tqdm=True) as bar:
        bar.update_to(8)
    assert "8/8" in out.getvalue()


def test_tick_reports_from_inside_a_compiled_loop():
    out = io.StringIO()
    bar = progress.ProgressBar(20, stream=out, min_interval=0.0, use_tqdm=False)
    token = progress.register(bar)

    @jax.jit
    def loop(token):
        def body(x, done):
            progress.tick(token, done, 5)
            return x + 1.0, None

        return jax.lax.scan(body, 0.0, jnp.arange(1, 21))[0]

    assert float(loop(token)) == 20.0
    progress.unregister(token)
    assert [line.split()[1] for line in out.getvalue().splitlines()] == [
        "5/20", "10/20", "15/20", "20/20"
    ]


# -- hooked into the runners ----------------------------------------------------------------------

N, D, C = 3, 2, 2
W = np.full((N, N), 1.0 / N, np.float32)


def log_likelihood(theta, x):
    return -0.5 * jnp.sum((x - theta) ** 2)


@functools.cache
def problem():
    potential = dgsgld.Potential(log_likelihood, None, jnp.zeros((N, 2, D)))
    return dgsgld.DIGingSGLD(0.05), potential, jnp.zeros((C, N, D))


has_hook = "progress" in inspect.signature(dgsgld.sample).parameters


@pytest.mark.skipif(not has_hook, reason="dgsgld.sample has no progress hook")
def test_sample_reports_every_m_iterations_without_recompiling(monkeypatch):
    monkeypatch.setenv("DGSGLD_PROGRESS", "1")  # stderr is captured here, not a terminal
    reports, finals, traces = [], [], []
    real_report, real_update = progress._host_report, progress.ProgressBar.update_to
    monkeypatch.setattr(progress, "_host_report",
                        lambda token, done: (reports.append(int(done)), real_report(token, done)))
    monkeypatch.setattr(progress.ProgressBar, "update_to",
                        lambda self, n: (finals.append(int(n)), real_update(self, n)))

    def trace_fn(state):
        traces.append(1)  # runs only while compiling
        return state.count

    alg, potential, init = problem()
    traced = []
    for key in (0, 1):
        reports.clear()
        finals.clear()
        trace = dgsgld.sample(alg, potential, W, init, jax.random.key(key), 20,
                              output=dgsgld.Output(thin=2, trace_fn=trace_fn), progress=4)
        # Every 4 iterations counted from the start of this call, from inside the scan; then
        # the bar is closed at the total.
        assert sorted(reports) == [4, 8, 12, 16, 20]
        assert finals[-1] == 20
        traced.append(len(traces))
    assert traced[0] > 0 and traced[1] == traced[0]  # the second call reused the compiled run
    assert np.asarray(trace.values)[0, -1] == 20


def test_chunked_runs_report_after_each_chunk(monkeypatch, tmp_path):
    # The runs of test_checkpoint.py (same functions and shapes: compiled once per session).
    from test_checkpoint import run_chunked

    seen = []
    monkeypatch.setattr(progress.ProgressBar, "update_to", lambda self, n: seen.append(int(n)))
    run_chunked(tmp_path, progress="always")
    assert seen == [10, 20, 24]
    seen.clear()
    run_chunked(tmp_path, progress=False)
    assert seen == []  # off by default; nothing left to run either
