"""Malformed inputs at every public entry point fail at once, with a message naming the argument.

Property-based: hypothesis draws one defect at a time into an otherwise valid configuration and
the entry point must raise ``ValueError`` whose message names the argument (a ``TypeError`` from
deep inside JAX, a crash in the compiled loop or a silently returned NaN all fail the test).
Validation runs before compilation, so these tests compile nothing except one valid run.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dgsgld
from dgsgld import evaluate
from dgsgld._util import validation as _validation
from dgsgld.runner.checkpoint import sample_chunked

N, N_LOCAL, D, C = 3, 4, 2, 2
NUM_STEPS = 10
FUZZ = settings(
    max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
#: Path graph with Metropolis weights: symmetric, nonnegative, doubly stochastic.
W_PATH = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])


def log_likelihood(theta, x):
    return -0.5 * jnp.sum((x - theta) ** 2)


def log_prior(theta):
    return -0.5 * jnp.sum(theta**2)


@functools.cache
def base():
    data = jax.random.normal(jax.random.key(1), (N, N_LOCAL, D))
    potential = dgsgld.Potential(log_likelihood, log_prior, data)
    init = jnp.zeros((C, N, D))
    return dict(algorithm=dgsgld.DIGingSGLD(0.05), potential=potential, mixing=W_PATH,
                init=init, key=jax.random.key(0), num_steps=NUM_STEPS)


def sample(**changes):
    return dgsgld.sample(**{**base(), **changes})


def assert_names(call, argument, *also):
    """``call()`` raises ValueError naming ``argument`` (and the strings ``also``)."""
    with pytest.raises(ValueError) as err:
        call()
    message = str(err.value)
    assert f"`{argument}" in message, message
    for text in also:
        assert text in message, message
    return message


@functools.cache
def valid_trace():
    return sample()


def test_the_valid_configuration_runs():
    # Guards the tests below: the unmodified configuration passes every check.
    trace = valid_trace()
    assert trace.positions.shape == (C, NUM_STEPS + 1, N, D)
    assert np.isfinite(np.asarray(trace.positions)).all()


# -- mixing matrices ------------------------------------------------------------------------------


@st.composite
def valid_stacks(draw):
    """``(P, N, N)`` lazy path-graph matrices ``(1 − a) I + a W``: valid for any ``a ∈ [0, 1]``."""
    p = draw(st.integers(1, 3))
    a = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=p, max_size=p)))
    return (1.0 - a)[:, None, None] * np.eye(N) + a[:, None, None] * W_PATH


DEFECTS = {
    "nan": "not finite", "inf": "not finite", "asymmetric": "not symmetric",
    "negative": "not nonnegative", "row_sums": "not doubly stochastic",
    "agents": "agents", "ndim": "must be a (P, N, N) stack",
}


@st.composite
def bad_stacks(draw):
    stack = draw(valid_stacks()).copy()
    kind = draw(st.sampled_from(sorted(DEFECTS)))
    k = draw(st.integers(0, stack.shape[0] - 1))
    i, j = draw(st.permutations(range(N)))[:2]
    delta = draw(st.floats(1e-3, 0.5))
    if kind == "nan":
        stack[k, i, j] = np.nan
    elif kind == "inf":
        stack[k, i, j] = draw(st.sampled_from([np.inf, -np.inf]))
    elif kind == "asymmetric":  # rows still sum to one
        stack[k, i, j] += delta
        stack[k, i, i] -= delta
    elif kind == "negative":  # symmetric and doubly stochastic, one negative pair
        shift = stack[k, i, j] + delta
        stack[k, i, j] -= shift
        stack[k, j, i] -= shift
        stack[k, i, i] += shift
        stack[k, j, j] += shift
    elif kind == "row_sums":
        stack[k] *= 1.0 + draw(st.sampled_from([-1.0, 1.0])) * delta
    elif kind == "agents":
        m = draw(st.sampled_from([1, 2, 4, 5]))
        stack = np.full((stack.shape[0], m, m), 1.0 / m)
    else:
        stack = draw(st.sampled_from([stack[0, 0], stack[..., None], np.ones(())]))
    return kind, stack


@FUZZ
@given(valid_stacks())
def test_valid_mixing_stacks_pass(stack):
    _validation.check_mixing(stack)


@FUZZ
@given(bad_stacks())
def test_bad_mixing_is_refused(case):
    kind, stack = case
    assert_names(lambda: sample(mixing=stack), "mixing", DEFECTS[kind])


@pytest.mark.reliability
def test_check_mixing_sums_the_axis_it_is_asked_for():
    # Agent 0 sends half to agent 1 and keeps half; agent 1 keeps all: columns sum to 1, rows
    # to 0.5 and 1.5. Its transpose is row stochastic. Neither is symmetric.
    cols = np.array([[[0.5, 0.0], [0.5, 1.0]]])
    _validation.check_mixing(cols, sums="columns")
    _validation.check_mixing(np.swapaxes(cols, 1, 2), sums="rows")
    with pytest.raises(ValueError) as err:
        _validation.check_mixing(cols, sums="rows")
    assert str(err.value) == ("`mixing`[0] is not row stochastic: row 0 (the weights agent 0 "
                              "puts on what it hears) sums to 0.5, expected 1 (tolerance 1e-05).")
    with pytest.raises(ValueError) as err:
        _validation.check_mixing(np.swapaxes(cols, 1, 2), sums="columns", name="w", first=3)
    assert str(err.value) == ("`w`[3] is not column stochastic: column 0 (what agent 0 sends "
                              "out) sums to 0.5, expected 1 (tolerance 1e-05).")
    with pytest.raises(ValueError, match=r"`mixing`\[0\] is not symmetric: W\[0, 1\] = 0.0"):
        _validation.check_mixing(cols)
    # The entry checks are the same whichever axis sums.
    nan = np.where(np.eye(2, dtype=bool), np.nan, cols)
    for sums in ("both", "rows", "columns"):
        with pytest.raises(ValueError) as err:
            _validation.check_mixing(nan, sums=sums)
        assert str(err.value) == ("`mixing`[0] is not finite: non-finite weight at entry (0, 0) "
                                  "(value nan, tolerance 1e-05).")
    with pytest.raises(ValueError, match=r"`sums` must be one of \('both', 'rows', 'columns'\)"):
        _validation.check_mixing(cols, sums="cols")


def test_missing_mixing_for_a_decentralized_sampler():
    assert_names(lambda: sample(mixing=None), "mixing", "required by DIGingSGLD")


# -- step sizes -----------------------------------------------------------------------------------

SAMPLERS = [dgsgld.DIGingSGLD, dgsgld.DESGLD, dgsgld.EXTRASGLD, dgsgld.SGLD]
bad_constants = st.one_of(
    st.floats(max_value=0.0),  # zero, negatives, -inf
    st.just(float("nan")), st.just(float("inf")),
    st.lists(st.floats(0.01, 1.0), min_size=2, max_size=3).map(jnp.asarray),
)


@FUZZ
@given(st.sampled_from(SAMPLERS), bad_constants)
def test_bad_constant_step_size_is_refused_by_every_sampler(make, step_size):
    assert_names(lambda: make(step_size), "step_size")


@FUZZ
@given(st.floats(0.01, 1.0), st.integers(1, NUM_STEPS - 1))
def test_schedule_that_reaches_zero_within_the_run_is_refused(start, zero_at):
    # Linear decay hitting zero at iteration `zero_at` < NUM_STEPS: fine at count 0, so the
    # sampler accepts it; sample() checks the last count it will run and refuses.
    algorithm = dgsgld.DIGingSGLD(lambda k: start * (1.0 - k / zero_at))
    assert_names(lambda: sample(algorithm=algorithm), "step_size", f"count {NUM_STEPS - 1}")


def test_schedule_that_is_nan_or_not_scalar_is_refused():
    assert_names(lambda: dgsgld.DIGingSGLD(lambda k: jnp.nan * k), "step_size")
    assert_names(lambda: dgsgld.DIGingSGLD(lambda k: jnp.full(2, 0.1)), "step_size", "scalar")


# -- the potential: data, batch size, mask --------------------------------------------------------


@FUZZ
@given(st.one_of(
    st.integers(max_value=0), st.integers(N_LOCAL + 1, 10**6),
    st.floats(allow_nan=True), st.booleans(), st.just("2"),
))
def test_bad_batch_size_is_refused(batch_size):
    data = base()["potential"].data
    assert_names(lambda: dgsgld.Potential(log_likelihood, log_prior, data, batch_size),
                 "batch_size")


@FUZZ
@given(st.lists(st.integers(1, N_LOCAL), min_size=N, max_size=N), st.integers(1, N_LOCAL))
def test_batch_size_is_bounded_by_the_smallest_local_data_set(sizes, batch_size):
    mask = np.arange(N_LOCAL)[None, :] < np.array(sizes)[:, None]
    data = base()["potential"].data
    def make():
        return dgsgld.Potential(log_likelihood, log_prior, data, batch_size, mask=mask)

    if batch_size <= min(sizes):
        assert make().batch_size == batch_size
    else:
        assert_names(make, "batch_size", f"({min(sizes)})")


@FUZZ
@given(st.one_of(
    st.tuples(st.integers(1, 5), st.integers(1, 6)).filter(lambda s: s != (N, N_LOCAL)).map(
        lambda s: np.ones(s, bool)),
    st.lists(st.booleans(), min_size=N * N_LOCAL, max_size=N * N_LOCAL).map(
        lambda b: np.array(b).reshape(N, N_LOCAL)),
))
def test_bad_mask_is_refused(mask):
    if mask.shape == (N, N_LOCAL):
        counts = mask.sum(axis=1)
        prefix = np.arange(N_LOCAL)[None, :] < counts[:, None]
        assume(not ((mask == prefix).all() and counts.min() >= 1))  # skip valid masks
    data = base()["potential"].data
    assert_names(lambda: dgsgld.Potential(log_likelihood, log_prior, data, mask=mask), "mask")


@st.composite
def bad_data(draw):
    data = np.asarray(base()["potential"].data).copy()
    kind = draw(st.sampled_from(["nonfinite", "agents", "ndim", "empty"]))
    if kind == "nonfinite":
        index = tuple(draw(st.integers(0, s - 1)) for s in data.shape)
        data[index] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        return data
    if kind == "agents":
        return (data, np.zeros((draw(st.sampled_from([1, 2, 4])), N_LOCAL)))
    if kind == "ndim":
        return data[0, 0]
    return np.zeros((draw(st.sampled_from([(0, N_LOCAL, D), (N, 0, D)]))))


@FUZZ
@given(bad_data())
def test_bad_data_is_refused(data):
    assert_names(lambda: dgsgld.Potential(log_likelihood, log_prior, data), "data")


def test_model_functions_must_be_callable():
    data = base()["potential"].data
    assert_names(lambda: dgsgld.Potential(3, log_prior, data), "log_likelihood")
    assert_names(lambda: dgsgld.Potential(log_likelihood, "flat", data), "log_prior")
    assert_names(lambda: dgsgld.Potential(None, None, data, gradient_fn=1), "gradient_fn")


# -- sample(): initial positions, key, counts, callbacks ------------------------------------------


@st.composite
def bad_init(draw):
    init = np.zeros((C, N, D), np.float32)
    kind = draw(st.sampled_from(
        ["agents", "axes", "dtype", "nonfinite", "param_shape", "pytree", "chains", "no_chains"]
    ))
    if kind == "agents":
        return np.zeros((C, draw(st.sampled_from([1, 2, 4, 7])), D), np.float32)
    if kind == "axes":
        return init[0, 0, : draw(st.integers(0, 1))] if draw(st.booleans()) else init[0]
    if kind == "dtype":
        return init.astype(draw(st.sampled_from([np.int32, np.uint8, np.bool_, np.complex64])))
    if kind == "nonfinite":
        index = tuple(draw(st.integers(0, s - 1)) for s in init.shape)
        init[index] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        return init
    if kind == "param_shape":
        return np.zeros((C, N, draw(st.sampled_from([1, 3, 5]))), np.float32)
    if kind == "pytree":
        return draw(st.sampled_from([{"theta": init}, {"theta": init, "scale": init[..., 0]}]))
    if kind == "chains":
        return (init, np.zeros((C + 1, N, D), np.float32))
    return np.zeros((0, N, D), np.float32)


@FUZZ
@given(bad_init())
def test_bad_init_is_refused(init):
    assert_names(lambda: sample(init=jnp.asarray(init) if isinstance(init, np.ndarray) else init),
                 "init")


@functools.cache
def odd_keys():
    """Arrays that are not one PRNG key (built once: each new jax op costs a compilation)."""
    return [
        *(jnp.zeros(n, jnp.uint32) for n in (0, 1, 3, 4)),
        *(jax.random.split(jax.random.key(0), n) for n in (1, 2, 3)),
        jnp.zeros(2, jnp.float32),
        jnp.zeros((1, 2), jnp.uint32),
    ]


@FUZZ
@given(st.one_of(
    st.integers(), st.floats(), st.none(), st.text(max_size=3),
    st.integers(0, 8).map(lambda i: odd_keys()[i]),
))
def test_bad_key_is_refused(key):
    assert_names(lambda: sample(key=key), "key")


@FUZZ
@given(st.one_of(st.integers(max_value=0), st.floats(), st.booleans(), st.just("10")))
def test_bad_num_steps_is_refused(num_steps):
    assert_names(lambda: sample(num_steps=num_steps), "num_steps")


@FUZZ
@given(st.one_of(st.integers(max_value=0), st.floats(), st.integers(NUM_STEPS + 1, 100),
                 st.sampled_from([3, 4, 6, 7, 8, 9])))
def test_bad_thin_is_refused(thin):
    assert_names(lambda: sample(output=dgsgld.Output(thin=thin)), "output.thin")


def test_bad_arguments_of_sample_are_named():
    assert_names(lambda: sample(algorithm="diging"), "algorithm")
    assert_names(lambda: sample(potential=log_likelihood), "potential")
    assert_names(lambda: sample(output=dgsgld.Output(trace_fn="mean")), "output.trace_fn")
    assert_names(lambda: sample(output=dgsgld.Output(ensemble_fn=3)), "output.ensemble_fn")
    assert_names(lambda: sample(output={"thin": 2}), "output")  # a dict, not an Output
    assert_names(lambda: sample(output=dgsgld.Output(positions="yes")), "output.positions")
    assert_names(lambda: sample(on_divergence="ignore"), "on_divergence")


def test_model_output_and_structure_are_checked_before_compiling():
    data = base()["potential"].data
    vector_ll = dgsgld.Potential(lambda t, x: -((x - t) ** 2), log_prior, data)
    assert_names(lambda: sample(potential=vector_ll), "log_likelihood", "scalar", "got shape")
    vector_prior = dgsgld.Potential(log_likelihood, lambda t: -(t**2), data)
    assert_names(lambda: sample(potential=vector_prior), "log_prior", "scalar")
    dict_ll = dgsgld.Potential(lambda p, x: -jnp.sum((x - p["w"]) ** 2), log_prior, data)
    assert_names(lambda: sample(potential=dict_ll), "log_likelihood", "`init`")


def test_gradient_oracle_must_match_init_shape_and_dtype():
    data = base()["potential"].data

    def wrong_dtype(params, agent_data, key):
        return jnp.zeros(params.shape, jnp.float16)

    def wrong_shape(params, agent_data, key):
        return jnp.zeros((D + 1,))

    # The message shows one chain's shapes, (N, *param_shape).
    for oracle, text in [(wrong_dtype, "dtype float16"), (wrong_shape, "shape (3, 3)")]:
        potential = dgsgld.Potential(None, None, data, gradient_fn=oracle)
        assert_names(lambda: sample(potential=potential), "init", text)


def test_resume_state_must_come_from_the_same_sampler():
    state = valid_trace().state
    assert_names(lambda: sample(algorithm=dgsgld.DESGLD(0.05), init=state), "init",
                 "DIGingState", "DESGLDState")
    mixed = state._replace(count=jnp.array([10, 3], jnp.int32))
    assert_names(lambda: sample(init=mixed), "init.count", "[10, 3]")


# -- metrics and diagnostics ----------------------------------------------------------------------


@st.composite
def bad_gaussians(draw):
    d = draw(st.integers(1, 4))
    mean, cov = np.zeros(d), np.eye(d)
    kind = draw(st.sampled_from(["cov_shape", "nonfinite_mean", "nonfinite_cov", "asymmetric"]))
    if kind == "cov_shape":
        e = draw(st.integers(1, 5).filter(lambda e: e != d))
        return kind, mean, np.eye(e), "cov"
    if kind == "nonfinite_mean":
        mean[draw(st.integers(0, d - 1))] = np.nan
        return kind, mean, cov, "mean"
    if kind == "nonfinite_cov":
        cov[draw(st.integers(0, d - 1)), draw(st.integers(0, d - 1))] = np.inf
        return kind, mean, cov, "cov"
    assume(d > 1)
    cov[0, 1] = draw(st.floats(0.1, 1.0))
    return kind, mean, cov, "cov"


@FUZZ
@given(bad_gaussians(), st.booleans())
def test_bad_gaussians_are_refused_by_gaussian_w2(case, first):
    _, mean, cov, argument = case
    d = mean.shape[0]
    good = (np.zeros(d), np.eye(d))
    args = (mean, cov, *good) if first else (*good, mean, cov)
    assert_names(lambda: evaluate.gaussian_w2(*map(jnp.asarray, args)),
                 argument + ("1" if first else "2"))


@FUZZ
@given(st.integers(0, 5), st.sampled_from([np.nan, np.inf]), st.data())
def test_positions_from_a_diverged_run_are_refused_by_metrics(ndim_drop, value, data):
    positions = np.zeros((2, 5, N, D), np.float32)
    if ndim_drop < 2:  # wrong number of axes
        bad = positions[(0,) * (ndim_drop + 1)]
        assert_names(lambda: evaluate.per_agent_w2(jnp.asarray(bad), jnp.zeros(D), jnp.eye(D)),
                     "positions")
        return
    index = tuple(data.draw(st.integers(0, s - 1)) for s in positions.shape)
    positions[index] = value
    message = assert_names(
        lambda: evaluate.per_agent_w2(jnp.asarray(positions), jnp.zeros(D), jnp.eye(D)),
        "positions",
    )
    assert f"at index {index}" in message and "trace.divergence" in message
    assert_names(lambda: evaluate.consensus_error(jnp.asarray(positions)), "positions")
    assert_names(lambda: evaluate.ess(positions), "samples")


def test_other_metric_shapes_are_checked():
    assert_names(lambda: evaluate.per_agent_w2(jnp.zeros((2, 5, N, D)), jnp.zeros(3), jnp.eye(3)),
                 "mean", "2 coordinates")
    assert_names(lambda: evaluate.consensus_error(jnp.zeros(3)), "positions")
    assert_names(lambda: evaluate.empirical_moments(jnp.zeros((1, 2))), "samples", "ddof")
    assert_names(lambda: evaluate.empirical_moments(jnp.zeros((5, 2)), axis=-1), "axis")
    assert_names(lambda: evaluate.sqrtm_psd(jnp.zeros((2, 3))), "matrix")
    assert_names(lambda: evaluate.ess(np.zeros((2, 3))), "samples", "4 draws")
    assert_names(lambda: evaluate.rhat(np.zeros((1, 10))), "samples", "2 chains")


def test_chunked_runs_validate_like_sample(tmp_path):
    b = base()
    args = (b["algorithm"], b["potential"], b["mixing"], b["init"])
    assert_names(lambda: sample_chunked(*args, 0, NUM_STEPS, chunk_size=5), "key")
    assert_names(lambda: sample_chunked(*args, b["key"], NUM_STEPS, chunk_size=-5),
                 "chunk_size")
    bad_init = b["init"].at[0, 0, 0].set(jnp.nan)
    assert_names(lambda: sample_chunked(*args[:3], bad_init, b["key"], NUM_STEPS, chunk_size=5,
                                        path=tmp_path), "init")
