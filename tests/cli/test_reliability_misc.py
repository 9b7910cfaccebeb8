"""Misuse that must fail loudly, not give a number: predictive scores, data splitters, the
command line (garbage, sizes, Ctrl-C), the Gaussian W2 at every scale, small input checks, and
the documented stationary bias of D-ULA's network average."""

import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from _commands import main, module_for

import dgsgld
from dgsgld import evaluate
from dgsgld.evaluate import predictive as pr
from dgsgld.model import data as dd

pytestmark = pytest.mark.reliability
ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- predictive scores: values

_P = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]], np.float32)   # rows sum to one
_LP = np.log(_P)
_Y = np.array([0, 1])


@pytest.mark.parametrize("call, match", [
    (lambda: evaluate.nll(_P, _Y), "holds probabilities .* where log-probabilities are expected"),
    (lambda: evaluate.brier(_P, _Y), "holds probabilities"),
    (lambda: evaluate.ece(_P, _Y), "holds probabilities"),
    (lambda: evaluate.accuracy(_P, _Y), "holds probabilities"),
    (lambda: evaluate.entropy(_P), "holds probabilities"),
    (lambda: evaluate.nll(_LP + 2.0, _Y), r"row 0 sums to 7\.389"),                 # logits
    (lambda: evaluate.nll(_LP - 1.0, _Y), r"row 0 sums to 0\.3678"),                # not normalised
    (lambda: evaluate.nll(np.where(_P > 0.5, np.nan, _LP), _Y), r"got nan at index \(0, 0\)"),
    (lambda: evaluate.ece(np.where(_P > 0.5, np.inf, _LP), _Y), r"got inf at index \(0, 0\)"),
    (lambda: evaluate.nll(_LP, np.array([0, 3])), r"classes in \[0, 3\) .* got 3 at index 1"),
    (lambda: evaluate.brier(_LP, np.array([-1, 0])), r"got -1 at index 0"),
    (lambda: evaluate.calibration_curve(_LP, np.array([0, 7])), r"got 7 at index 1"),
    (lambda: evaluate.accuracy(_LP, np.array([0, 2**40])), r"got 1099511627776 at index 1"),
    (lambda: evaluate.auroc(np.array([0.1, np.nan]), np.array([0.3])),
     r"`scores_in` must not be NaN"),
    (lambda: evaluate.auroc(np.array([0.1]), np.array([np.nan])), r"`scores_out` must not be NaN"),
    (lambda: evaluate.gaussian_nll(np.zeros((2, 3)), np.array([[1.0], [0.0]]), np.zeros(3)),
     r"`stds` must be positive and finite; got 0\.0 at index \(1, 0\)"),
    (lambda: evaluate.gaussian_nll(np.zeros((2, 3)), -1.0, np.zeros(3)), "`stds` must be positive"),
    (lambda: evaluate.gaussian_nll(np.zeros((2, 3)), np.inf, np.zeros(3)),
     "`stds` must be positive"),
    (lambda: evaluate.gaussian_nll(np.full((2, 3), np.nan), 1.0, np.zeros(3)),
     "`means` must be finite"),
    (lambda: evaluate.rmse(np.zeros((2, 3)), np.array([0.0, np.inf, 0.0])),
     r"`targets` must be finite; got inf at index 1"),
])
def test_scores_refuse_bad_values_on_the_host(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_scores_accept_log_distributions_with_zeros_and_low_precision():
    # Probability zero (-inf) is a valid log-probability (host check; the compiled scores'
    # handling of it is tested in tests/evaluate/test_predictive.py).
    lp = np.array([[0.0, -np.inf, -np.inf], np.log([0.25, 0.25, 0.5])], np.float32)
    pr._host_labels(lp, np.array([0, 2]))
    pr._host_log_probs(lp[None])
    # float16 log-softmax rows are off one by up to a few eps (9.8e-4 each): the tolerance
    # max(1e-3, 10 K eps) = 2.9e-2 for K = 3 accepts them, and refuses a row off by 0.05.
    assert pr.log_prob_tol(np.float16, 3) == pytest.approx(30 * float(np.finfo(np.float16).eps))
    assert pr.log_prob_tol(np.float32, 10) == 1e-3
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 3)) * 4
    half = (logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)).astype(np.float16)
    pr._host_log_probs(half)
    with pytest.raises(ValueError, match=r"row 0 sums to 1\.0(49|50)"):
        pr._host_log_probs(half + np.float16(np.log(1.05)))


_JIT_CASES = {
    "probabilities": (lambda: jax.jit(evaluate.nll)(_P, _Y), "must be log-probabilities, each row"),
    "label": (lambda: jax.jit(evaluate.brier)(_LP, np.array([0, 3])), r"classes in \[0, 3\)"),
    "nan score": (lambda: jax.jit(evaluate.auroc)(np.array([0.1, np.nan]), np.array([0.3])),
                  "must not be NaN"),
    "zero sd": (lambda: jax.jit(evaluate.gaussian_nll)(np.zeros((2, 3)), 0.0, np.zeros(3)),
                "`stds` must be positive and finite"),
}


@pytest.mark.parametrize("case", [
    "probabilities", "label",
    pytest.param("nan score", marks=pytest.mark.slow),   # fast twins: the two above
    pytest.param("zero sd", marks=pytest.mark.slow),
])
def test_scores_refuse_bad_values_under_jit(case):
    # The host cannot see traced values: the checks run inside the program (equinox.error_if).
    call, match = _JIT_CASES[case]
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(call())


# ---------------------------------------------------------------- data splitters: sizes


def test_splitters_cost_nothing_per_possible_label_value():
    # Labels 0 and 10⁹: the splitters used to allocate per possible class (10⁹ lists or
    # 10⁹ passes over the labels). Now the work is O(n log n) in the labels present.
    x = np.arange(12, dtype=np.float32)[:, None]
    labels = np.array([0] * 6 + [10**9] * 6)
    start = time.perf_counter()
    split = dd.split_dirichlet(x, labels, 3, 1.0, seed=0)
    assert sorted(np.concatenate(split.indices).tolist()) == list(range(12))
    # k = 10⁹ + 1 classes per agent: every agent holds both classes, split evenly.
    split = dd.split_by_label(x, labels, 3, 10**9 + 1, seed=0)
    assert split.sizes.tolist() == [4, 4, 4]
    with pytest.raises(ValueError, match="class 1000000000 would be held by no agent"):
        dd.split_by_label(x, labels, 3, 1)
    assert time.perf_counter() - start < 2.0
    with pytest.raises(ValueError, match=r"`labels` must be at most 2147483647"):
        dd.split_dirichlet(x, labels.astype(float) * 1e30, 3, 1.0)
    with pytest.raises(ValueError, match="integer class labels"):
        dd.split_by_label(x, np.where(labels > 0, np.inf, 0.0), 3, 1)


def test_user_sizes_are_bounded_before_allocating():
    x = np.zeros((6, 2), np.float32)
    with pytest.raises(ValueError, match=r"`local_size` = 1000000000000 \(x 2 agents\) needs "
                                         r"about 18\.0 TB of memory but about"):
        dd.split_iid(x, 2, local_size=10**12)
    with pytest.raises(ValueError, match="`num_bins` = 1000000000 exceeds the 6 values"):
        dd.quantile_bins(np.arange(6.0), 10**9)
    with pytest.raises(ValueError, match="`local_size` must be an int or None; got 4.5"):
        dd.split_iid(x, 2, local_size=4.5)


@pytest.mark.parametrize("alpha", ["0.5", None, True, [0.5], np.nan, -1.0])
def test_split_dirichlet_alpha_of_the_wrong_type_is_named(alpha):
    with pytest.raises(ValueError, match=r"`alpha` must be a positive finite number; got"):
        dd.split_dirichlet(np.zeros((6, 1)), np.array([0, 1] * 3), 2, alpha)


# ---------------------------------------------------------------- the command line


def _cli(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def test_cli_refuses_garbage_before_computing(tmp_path, capsys):
    # Each case is refused by checks only (no compilation): one `error:` line, exit 2.
    out = str(tmp_path / "out")
    for value in ("inf", "nan", "-1", "1e400"):
        with pytest.raises(SystemExit) as exc:
            main(["run", "--step-size", value])
        assert exc.value.code == 2
        assert "expected a positive finite number" in capsys.readouterr().err
    cases = {
        "prior_precision = inf\n": "`prior_precision` must be a positive finite number; got inf",
        "step_max = inf\n": "`step_max` must be a positive finite number; got inf",
        "period = 1000000000\n": "`period` = 1000000000 exceeds `num_steps` = 100",
        "[fig2a]\nnum_steps = 20\nperiod = 51\n": "use a period of at most 50",
    }
    for text, message in cases.items():
        config = tmp_path / "c.toml"
        config.write_text(text)
        code, err = _cli(["reproduce", "fig2a", "--out", out, "--config", str(config),
                          "--no-cache"], capsys)
        assert code == 2 and err.startswith("error: ") and message in err, err
        assert err.count("\n") == 1
    for trials in (2, 6):   # d = 6 parameters: gradient tuning needs 7 chains
        code, err = _cli(["reproduce", "fig2a", "--out", out, "--trials", str(trials),
                          "--no-cache"], capsys)
        assert code == 2 and err.count("\n") == 1
        assert (f"fig2a: `trials` = {trials} is too few for gradient tuning" in err
                and "at least 7 chains" in err), err
    from experiments.configs import LinearRegressionConfig
    LinearRegressionConfig(trials=7).check_gradient_tuning()
    LinearRegressionConfig(trials=2, gradient_tuning=False).check_gradient_tuning()


@pytest.mark.slow  # fast twin: test_cli_refuses_garbage_before_computing (the trials check)
def test_gradient_tuning_criterion_needs_more_chains_than_dimensions():
    # What the trials check guards: a NaN gradient below full rank, finite from d + 1 chains.
    from experiments.figures import _W2Criterion
    crit = _W2Criterion(jnp.zeros(6), jnp.eye(6))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, 2, 6)), jnp.float32)
    grads = [float(jax.grad(lambda s: crit(s * x[:c]))(1.0)) for c in (6, 7)]
    assert math.isnan(grads[0]) and math.isfinite(grads[1])


def test_run_refuses_a_diverged_result():
    from dgsgld._cli.main_job import _refuse_divergence

    ok = dgsgld.Divergence(np.array([-1, -1]), np.array([-1, -1]))
    _refuse_divergence("DE-SGLD", True, 0.008, ok, np.array([0.3, 0.2]))
    with pytest.raises(ValueError, match=r"DIGing-SGLD diverged at step size 1: 1 of 2 chains "
                                         r"became non-finite, the first at iteration 3\. Lower "
                                         r"the step size \(--step-size"):
        _refuse_divergence("DIGing-SGLD", True, 1.0, dgsgld.Divergence(np.array([-1, 3]),
                                                                 np.array([-1, 0])), np.ones(2))
    with pytest.raises(ValueError, match=r"too large for their W2 to be computed.*--sgld-step"):
        _refuse_divergence("SGLD (centralized)", False, 0.05, ok, np.array([np.nan]))


@pytest.mark.slow  # fast twin: test_run_refuses_a_diverged_result
def test_run_with_a_diverging_step_fails_with_one_line(capsys):
    code, err = _cli(["run", "--step-size", "1", "--trials", "4", "--num-steps", "20",
                      "--no-cache"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: DIGing-SGLD diverged at step size 1"), err


_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "print('ready', flush=True); module = sys.argv.pop(1); "
    "sys.argv[0] = module; runpy.run_module(module, run_name='__main__', alter_sys=True)")


def _interrupt(argv, delay: float, timeout: float = 20.0):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DGSGLD_NO_CACHE": "1"}
    # `python -m dgsgld` with Python's own Ctrl-C handler, as started from a terminal: a test run
    # started in the background ignores SIGINT, and its children would inherit that.
    proc = subprocess.Popen([sys.executable, "-c", _AS_FROM_A_TERMINAL, module_for(argv), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    # `delay` counts from Ctrl-C's handler being in place: on a loaded machine the interpreter
    # may take longer than `delay` to start, and a SIGINT before the handler would be ignored.
    assert proc.stdout.readline() == "ready\n"
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"still running {timeout} s after Ctrl-C")
    return proc.returncode, time.monotonic() - sent, out, err


def test_ctrl_c_while_the_package_imports_stops_with_130(tmp_path):
    # A SIGINT during `import jax` used to be raised inside JAX's garbage-collection callback,
    # printed as "Exception ignored" and lost: the command then ran to the end and exited 0.
    # 1 s after the interpreter's start: inside the imports on any machine this runs on (or,
    # on a fast one, already in the command: 130 as well).
    code, waited, _, err = _interrupt(
        ["reproduce", "fig2a", "--trials", "8", "--no-plots", "--out", str(tmp_path)], 1.0)
    assert code == 130, (code, err)
    assert err.strip().splitlines()[-1] == "error: interrupted" and "Traceback" not in err, err
    assert waited < 5.0


@pytest.mark.slow  # fast twin:
# tests/cli/test_cli.py::test_command_line_process_prints_one_error_line
def test_a_keyboard_interrupt_lost_in_a_callback_ends_the_command_with_130():
    # Ctrl-C raised inside a garbage-collection callback or a `__del__` (JAX registers such a
    # callback) reaches `sys.unraisablehook` instead of the command: it must end the process
    # with the one error line, not print "Exception ignored" and wait for the watcher.
    code = ("import gc, time\n"
            "from dgsgld import _interrupt\n"
            "class Lost:\n"
            "    def __del__(self): raise KeyboardInterrupt\n"
            "with _interrupt.stop_on_interrupt(60.0):\n"
            "    Lost(); gc.collect(); time.sleep(30)\n"
            "print('ran on')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "error: interrupted\n", "")
    assert time.monotonic() - start < 25.0


@pytest.mark.slow  # fast twin: test_ctrl_c_while_the_package_imports_stops_with_130
@pytest.mark.parametrize("delay", [2.0, 5.0, 9.0, 14.0])
def test_ctrl_c_at_any_point_of_reproduce_stops_within_seconds(tmp_path, delay):
    # 200 trials, no compilation cache: the command runs for a minute or more, so each delay
    # lands in it (imports, compilation, the grid runs, gradient tuning).
    code, waited, out, err = _interrupt(
        ["reproduce", "fig2a", "--trials", "200", "--no-plots", "--out", str(tmp_path)], delay)
    if code == 0 and "results in" in out:  # a quiet machine finished first: nothing to stop
        return
    assert code == 130 and "error: interrupted" in err, (code, err)
    assert waited < 6.0


# ---------------------------------------------------------------- Gaussian W2 at every scale


def _w2_reference(m1, c1, m2, c2) -> float:
    """Float64 SciPy trace form (its cancellation, sqrt(1e-16 tr Σ), is far below the bound)."""
    root = scipy.linalg.sqrtm(c1).real
    cross = scipy.linalg.sqrtm(root @ c2 @ root).real
    sq = np.sum((m1 - m2) ** 2) + np.trace(c1) + np.trace(c2) - 2 * np.trace(cross)
    return math.sqrt(max(sq, 0.0))


def _w2_cases(dim: int, rng):
    """Covariances ``s (G Gᵀ/d + 0.1 I)`` (condition number below about 50) at scales
    10⁻⁴..10⁴: identical, nearly identical (``+ 10⁻³ s I``) and unrelated pairs."""
    cases = []
    for scale in 10.0 ** np.arange(-4, 5, 2):
        def cov():
            g = rng.normal(size=(dim, dim))
            return scale * (g @ g.T / dim + 0.1 * np.eye(dim))
        c1, c2 = cov(), cov()
        m1 = math.sqrt(scale) * rng.normal(size=dim)
        for b_mean, b_cov in ((m1, c1), (m1, c1 + 1e-3 * scale * np.eye(dim)),
                              (m1 + math.sqrt(scale) * rng.normal(size=dim), c2)):
            cases.append([np.float32(a) for a in (m1, c1, b_mean, b_cov)])
    return cases


def _check_w2(dim: int):
    cases = _w2_cases(dim, np.random.default_rng(dim))
    batch = [np.stack(parts) for parts in zip(*cases)]
    got = np.asarray(evaluate.gaussian_w2(*batch), np.float64)            # one batched call
    for value, case in zip(got, cases):
        m1, c1, m2, c2 = (np.asarray(a, np.float64) for a in case)
        ref = 0.0 if (m1 == m2).all() and (c1 == c2).all() else _w2_reference(m1, c1, m2, c2)
        bound = 2e-3 * ref + 2e-5 * math.sqrt(np.trace(c1) + np.trace(c2))  # metrics' docstring
        assert abs(value - ref) <= bound, (dim, np.trace(c1) / dim, value, ref, bound)


@pytest.mark.parametrize("dim", [8])
def test_gaussian_w2_meets_its_stated_tolerance_at_every_scale(dim):
    # Two identical covariances of scale 10⁴ gave 0.5 (trace-form cancellation in float32).
    _check_w2(dim)


@pytest.mark.slow  # fast twin: test_gaussian_w2_meets_its_stated_tolerance_at_every_scale
@pytest.mark.parametrize("dim", [1, 3, 20, 50])
def test_gaussian_w2_meets_its_stated_tolerance_in_other_dimensions(dim):
    _check_w2(dim)


@pytest.mark.parametrize("cov, match", [
    (np.array([[1.0, 2.0], [0.0, 1.0]]), "must be symmetric"),
    (np.array([[1.0, 0.0], [0.0, -1.0]]), "must be positive semidefinite"),
    (np.array([[np.inf, 0.0], [0.0, 1.0]]), "must be finite"),
    (np.array([[np.nan, 0.0], [0.0, 1.0]]), "must be finite"),
])
def test_streaming_w2_refuses_what_metrics_w2_refuses(cov, match):
    with pytest.raises(ValueError, match=match):
        evaluate.gaussian_w2(np.zeros(2), cov, np.zeros(2), np.eye(2))
    with pytest.raises(ValueError, match=match):
        evaluate.streamed_per_agent_w2(np.zeros(2), cov)
    with pytest.raises(ValueError, match="must be finite"):
        evaluate.streamed_per_agent_w2(np.array([0.0, np.nan]), np.eye(2))


# ---------------------------------------------------------------- small input checks


def _ll(x, d):
    return -0.5 * jnp.sum((x - d) ** 2)


def test_a_float_mask_must_be_zero_or_one():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"`mask` must be boolean \(or 0/1\); got 0\.5 at "
                                         r"index \(0, 1\)"):
        dgsgld.Potential(_ll, None, data, mask=np.array([[1.0, 0.5, 0.0], [1.0, 1.0, 1.0]]))
    pot = dgsgld.Potential(_ll, None, data, mask=np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    assert np.asarray(pot.mask).tolist() == [[True, False, False], [True, True, True]]


def test_trace_and_ensemble_functions_must_return_arrays(key):
    pot = dgsgld.Potential(_ll, None, np.zeros((2, 3), np.float32))
    w = np.full((2, 2), 0.5, np.float32)
    init = np.zeros((3, 2), np.float32)
    for field, fn, what in (("ensemble_fn", lambda s: "abc", "str 'abc' at the top level"),
                            ("trace_fn", lambda s: {"a": object()}, "object <object")):
        with pytest.raises(TypeError, match=f"`output.{field}` must return a pytree of arrays; "
                                            f"got {what}"):
            dgsgld.sample(dgsgld.DIGingSGLD(0.01), pot, w, init, key, 2,
                          output=dgsgld.Output(**{field: fn}))


def test_svrg_schedule_must_return_one_scalar():
    from dgsgld.gradients import svrg

    with pytest.raises(ValueError, match=r"`update_every` schedule must return one scalar .* "
                                         r"got shape\(s\) \[\(2,\)\]"):
        svrg(lambda count: jnp.array([True, False]))
    with pytest.raises(ValueError, match="must be true at count 0"):
        svrg(lambda count: count % 3 == 1)
    assert svrg(lambda count: count % 3 == 0).update_every(jnp.int32(3))


# ---------------------------------------------------------------- D-ULA's documented bias


@pytest.mark.parametrize("row", [0, 1, 2, 3])
def test_documented_d_ula_stationary_w2_is_exact(row):
    """docs/guide/samplers.md's table: the exact stationary W2 of D-ULA's network average (β = 0.5,
    β = 1), of one agent, and of centralized ULA at the same step, recomputed with
    theory.exact (float64) to the 3 digits printed: the average is O(α) from the posterior and
    several times further than ULA, so it samples the posterior only as α → 0."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _problems import linear_regression, ring

    from dgsgld.theory import exact

    text = (ROOT / "docs" / "guide" / "samplers.md").read_text()
    rows = re.findall(r"^\| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$",
                      text, flags=re.M)
    assert len(rows) == 4, rows
    pb = linear_regression()  # f_i(x) = ½|y_i − Z_i x|² + λ|x|²/(2N): A_i = Z_iᵀZ_i + λ/N I
    q = exact.Quadratic(pb.hessians, np.einsum("nki,nk->ni", pb.Z, pb.y))
    np.testing.assert_allclose(q.target()[0], pb.mean, rtol=1e-12)
    target = [np.asarray(t, np.float64) for t in q.target()]
    alpha, documented = float(rows[row][0]), [float(v) for v in rows[row][1:]]
    half = exact.stationary_moments(dgsgld.DULA(alpha, 0.5), q, ring(5))
    one = exact.stationary_moments(dgsgld.DULA(alpha, 1.0), q, ring(5))
    ula = exact.stationary_moments(dgsgld.SGLD(alpha), q, None, step_size=alpha)
    # One batched float64 W2: the two averages, the five agents, ULA.
    means = np.stack([half.average_mean[0], one.average_mean[0], *half.mean[0], ula.mean[0]])
    covs = np.stack([half.average_cov[0], one.average_cov[0], *half.cov[0], ula.cov[0]])
    with jax.enable_x64(True):
        w = np.asarray(evaluate.gaussian_w2(means, covs, np.broadcast_to(target[0], means.shape),
                                            np.broadcast_to(target[1], covs.shape)))
    values = [w[0], w[1], w[2:7].mean(), w[7]]
    for value, doc in zip(values, documented):
        # to the three significant digits printed
        assert value == pytest.approx(doc, abs=0.6 * 10 ** (math.floor(math.log10(doc)) - 2))
    assert values[0] > 5 * values[3]
