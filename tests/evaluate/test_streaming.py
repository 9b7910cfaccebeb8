"""Streamed metrics equal the same metrics computed afterwards from the stored trace."""

import logging
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _problems import linear_regression, permuted_rings

import dgsgld
from dgsgld import evaluate

N, D, C, T = 4, 2, 16, 12
_rng = np.random.default_rng(3)
TEST_INPUTS = jnp.asarray(_rng.normal(size=(40, D)), jnp.float32)
TEST_LABELS = jnp.asarray(_rng.integers(0, 2, 40))


def predict(x, z):
    return (z @ x > 0).astype(jnp.int32)


@pytest.fixture(scope="module")
def run():
    """One DIGing-SGLD run storing positions AND streaming every metric (one compilation), so
    that both are computed from the very same draws."""
    prob = linear_regression(num_agents=N, dim=D, batch_size=2)
    precision = jnp.asarray(np.linalg.inv(prob.cov), jnp.float32)
    mean = jnp.asarray(prob.mean, jnp.float32)
    mixing = permuted_rings(N, 3)
    init = jnp.asarray(np.random.default_rng(0).normal(size=(C, N, D)), jnp.float32)
    ensemble = evaluate.combine(
        w2=evaluate.streamed_per_agent_w2(prob.mean, prob.cov),
        mom=evaluate.streamed_moments(),
        var=evaluate.streamed_moments(full=False),
        ce=evaluate.streamed_consensus_error(),
        acc=evaluate.streamed_accuracy(predict, TEST_INPUTS, TEST_LABELS),
        ksd=evaluate.streamed_ksd(lambda x: -precision @ (x - mean)),
    )
    per_chain = evaluate.combine(
        ce=evaluate.streamed_consensus_error(per_chain=True),
        acc=evaluate.streamed_accuracy(predict, TEST_INPUTS, TEST_LABELS, per_chain=True),
    )
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, mixing, init,
                          jax.random.key(1), T,
                          output=dgsgld.Output(thin=2, ensemble_fn=ensemble, trace_fn=per_chain,
                                               positions=True))
    return prob, trace


def test_w2_equals_metric_of_stored_trace(run):
    prob, trace = run
    expected = evaluate.per_agent_w2(trace.positions, prob.mean, prob.cov)
    assert trace.ensemble["w2"].shape == (T // 2 + 1, N)
    np.testing.assert_allclose(trace.ensemble["w2"], expected, rtol=1e-5, atol=1e-6)


def test_moments_equal_those_of_stored_trace(run):
    _, trace = run
    mean, cov = evaluate.empirical_moments(trace.positions, axis=0)      # (T', N, d), (T', N, d, d)
    np.testing.assert_allclose(trace.ensemble["mom"].mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trace.ensemble["mom"].cov, cov, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trace.ensemble["var"].cov, np.diagonal(cov, axis1=-2, axis2=-1),
                               rtol=1e-5, atol=1e-6)


def test_consensus_error_equals_metric_of_stored_trace(run):
    _, trace = run
    per_chain = evaluate.consensus_error(trace.positions)                # (C, T')
    np.testing.assert_allclose(trace.values["ce"], per_chain, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(trace.ensemble["ce"], np.sqrt(np.mean(per_chain**2, axis=0)),
                               rtol=1e-5, atol=1e-7)


def test_pooled_moments_equal_sample_moments_over_chains_and_iterations(run):
    _, trace = run
    mean, cov = evaluate.pool_moments(trace.ensemble["mom"], start=2)
    kept = np.asarray(trace.positions[:, 2:], np.float64)               # (C, T'', N, d)
    pooled = kept.reshape(-1, N, D)
    np.testing.assert_allclose(mean, pooled.mean(axis=0), rtol=1e-5, atol=1e-6)
    expected = np.stack([np.cov(pooled[:, i].T) for i in range(N)])
    np.testing.assert_allclose(cov, expected, rtol=1e-4, atol=1e-6)


def test_streamed_ksd_equals_the_ksd_of_the_stored_draws(run):
    # Each kept iteration's C = 16 chains of agent i are the draws of evaluate.ksd (V-statistic,
    # the same IMQ kernel), with the exact Gaussian scores -S^{-1}(x - m) computed in float64
    # there: the streamed float32 sums agree to float32 rounding of a sum of C^2 = 256 terms of
    # magnitude ~ the total (rtol 1e-4). pool_ksd is the root of the mean of the iterations'
    # KSD^2 from `start` on.
    pytest.importorskip("scipy")
    prob, trace = run
    sums = trace.ensemble["ksd"]
    assert sums.total.shape == (T // 2 + 1, N) and (np.asarray(sums.num_pairs) == C * C).all()
    streamed = np.sqrt(np.asarray(sums.total) / C**2)
    x = np.asarray(trace.positions, np.float64)                     # (C, T', N, d)
    precision = np.linalg.inv(prob.cov)
    want = np.array([[evaluate.ksd(x[:, t, i], -(x[:, t, i] - prob.mean) @ precision)
                      for i in range(N)] for t in range(x.shape[1])])
    np.testing.assert_allclose(streamed, want, rtol=1e-4)
    np.testing.assert_allclose(evaluate.pool_ksd(sums, start=2),
                               np.sqrt(np.mean(want[2:] ** 2, axis=0)), rtol=1e-4)


def test_w2_of_a_point_mass_is_the_root_trace_of_the_target_covariance():
    # W2(δ_m, N(m, S))² = tr S: every chain at the target mean gives zero sample covariance.
    mean, cov = np.array([1.0, -2.0]), np.array([[2.0, 0.3], [0.3, 0.5]])
    states = dgsgld.DESGLDState(jnp.broadcast_to(jnp.asarray(mean, jnp.float32), (5, 3, 2)),
                                None, jnp.zeros((5,), jnp.int32))
    w2 = evaluate.streamed_per_agent_w2(mean, cov)(states)
    np.testing.assert_allclose(w2, np.full(3, np.sqrt(np.trace(cov))), rtol=1e-5)


def test_accuracy_streamed_equals_accuracy_of_stored_trace(run):
    _, trace = run
    pred = np.asarray(trace.positions) @ np.asarray(TEST_INPUTS).T > 0  # (C, T', N, n_test)
    acc = (pred == np.asarray(TEST_LABELS, bool)).mean(axis=-1)
    np.testing.assert_allclose(trace.values["acc"], acc, atol=1e-6)
    np.testing.assert_allclose(trace.ensemble["acc"], acc.mean(axis=0), atol=1e-6)


def test_streaming_stores_no_positions_and_thinning_keeps_every_thin_th_iteration():
    prob = linear_regression(num_agents=N, dim=D)
    w2 = evaluate.streamed_per_agent_w2(prob.mean, prob.cov)

    def run(init):
        return dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, permuted_rings(N, 2),
                             init, jax.random.key(0), 20,
                             output=dgsgld.Output(thin=5, ensemble_fn=w2))

    # Shapes only (no compilation): memory O(num_kept N), not O(C num_kept N d).
    trace = jax.eval_shape(run, jnp.zeros((4, N, D)))
    assert trace.positions is None
    assert trace.ensemble.shape == (5, N)


def test_pytree_positions_need_flatten():
    states = dgsgld.DESGLDState({"a": jnp.zeros((3, 2, 1)), "b": jnp.ones((3, 2, 1))},
                                None, jnp.zeros((3,), jnp.int32))
    with pytest.raises(ValueError, match="flatten"):
        evaluate.streamed_moments()(states)
    def flatten(p):
        return jnp.concatenate([p["a"], p["b"]], axis=-1)
    m = evaluate.streamed_moments(flatten=flatten)(states)
    np.testing.assert_allclose(m.mean, np.broadcast_to([0.0, 1.0], (2, 2)))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`mean` must be"):
        evaluate.streamed_per_agent_w2(np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="at least one metric"):
        evaluate.combine()
    with pytest.raises(TypeError, match="`score` must be a function"):
        evaluate.streamed_ksd(None)
    with pytest.raises(ValueError, match=r"`beta` must lie in \(-1, 0\)"):
        evaluate.streamed_ksd(lambda x: -x, beta=0.5)
    with pytest.raises(ValueError, match="`c` must be a positive number"):
        evaluate.streamed_ksd(lambda x: -x, c=0.0)
    with pytest.raises(TypeError, match="`predict` must be a function"):
        evaluate.streamed_accuracy(None, TEST_INPUTS, TEST_LABELS)
    with pytest.raises(ValueError, match=r"`labels` must be \(n_test,\)"):
        evaluate.streamed_accuracy(predict, TEST_INPUTS, TEST_LABELS[None])
    with pytest.raises(TypeError, match="`per_chain` must be True or False"):
        evaluate.streamed_consensus_error(per_chain="yes")
    with pytest.raises(TypeError, match="`flatten` must be a function"):
        evaluate.streamed_moments(flatten=3)
    states = dgsgld.DESGLDState(jnp.zeros((1, 2, 2)), None, jnp.zeros((1,), jnp.int32))
    with pytest.raises(ValueError, match="at least 2 chains"):
        evaluate.streamed_moments()(states)


# ---------------------------------------------------------------- metrics as pytrees


class GaussianScore(eqx.Module):
    """The score ``-P (x - m)`` of ``N(m, P⁻¹)``, its arrays as leaves."""

    mean: jax.Array
    precision: jax.Array

    def __call__(self, x):
        return -self.precision @ (x - self.mean)


class Target(NamedTuple):
    mean: jax.Array
    cov: jax.Array
    precision: jax.Array
    inputs: jax.Array
    labels: jax.Array


def _target(seed, d=D, n_test=7):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    cov = a @ a.T + d * np.eye(d)
    return Target(*(jnp.asarray(v, jnp.float32) for v in (
        rng.normal(size=d), cov, np.linalg.inv(cov), rng.normal(size=(n_test, d)))),
        jnp.asarray(rng.integers(0, 2, n_test), jnp.int32))


# (constructor of a metric of a target, the target's fields that are its array leaves, in order)
METRICS = {
    "moments": (lambda t: evaluate.streamed_moments(), ()),
    "variances": (lambda t: evaluate.streamed_moments(full=False), ()),
    "per_agent_w2": (lambda t: evaluate.streamed_per_agent_w2(t.mean, t.cov), ("mean", "cov")),
    "ksd": (lambda t: evaluate.streamed_ksd(GaussianScore(t.mean, t.precision)),
            ("mean", "precision")),
    "consensus_error": (lambda t: evaluate.streamed_consensus_error(), ()),
    "consensus_error per chain": (lambda t: evaluate.streamed_consensus_error(per_chain=True), ()),
    "accuracy": (lambda t: evaluate.streamed_accuracy(predict, t.inputs, t.labels),
                 ("inputs", "labels")),
    "accuracy per chain": (
        lambda t: evaluate.streamed_accuracy(predict, t.inputs, t.labels, per_chain=True),
        ("inputs", "labels")),
    # combine's metrics in the order of their names: "acc", then "w2".
    "combine": (lambda t: evaluate.combine(
        w2=evaluate.streamed_per_agent_w2(t.mean, t.cov),
        acc=evaluate.streamed_accuracy(predict, t.inputs, t.labels)),
                ("inputs", "labels", "mean", "cov")),
}


# Each metric compiles its own evaluation. By default: ksd (a score given as an equinox
# module: its arrays are the metric's leaves), combine (per_agent_w2's and accuracy's leaves, in
# the order of their names) and a per-chain metric; the other metrics are slow.
FAST_METRICS = ("ksd", "combine", "accuracy per chain")


@pytest.mark.parametrize("name", [
    name if name in FAST_METRICS
    else pytest.param(name, marks=pytest.mark.slow)  # fast twins: the FAST_METRICS cases
    for name in METRICS])
def test_a_metric_is_a_pytree_of_its_targets_arrays_so_a_new_target_does_not_recompile(name):
    build, fields = METRICS[name]
    targets = _target(0), _target(1)
    first, second = build(targets[0]), build(targets[1])
    assert isinstance(first, evaluate.Metric)
    for metric, target in zip((first, second), targets):
        leaves = jax.tree.leaves(eqx.filter(metric, eqx.is_array))
        assert len(leaves) == len(fields)
        for leaf, field in zip(leaves, fields):
            np.testing.assert_array_equal(leaf, getattr(target, field))

    traces = []

    @eqx.filter_jit
    def evaluate_jitted(metric, states):
        traces.append(1)
        return metric(states)

    rng = np.random.default_rng(2)
    states = dgsgld.DESGLDState(jnp.asarray(rng.normal(size=(5, 3, D)), jnp.float32), None,
                                jnp.zeros((5,), jnp.int32))
    if first.per_chain:
        states = jax.tree.map(lambda a: a[0], states)
    values = [evaluate_jitted(metric, states) for metric in (first, second)]
    assert len(traces) == 1  # the second target is an argument of the same program
    for metric, value in zip((first, second), values):  # each its own target's value
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                     value, metric(states))
    if fields:
        assert not all(np.array_equal(a, b) for a, b in
                       zip(jax.tree.leaves(values[0]), jax.tree.leaves(values[1])))


@pytest.mark.slow  # fast twin:
# test_a_metric_is_a_pytree_of_its_targets_arrays_so_a_new_target_does_not_recompile
def test_sample_with_a_new_target_of_the_same_shape_reuses_the_compiled_run(caplog):
    # Shapes (3 agents, d = 3, 6 chains) that no other test of this module compiles. The
    # streamed W2 of each target equals evaluate.per_agent_w2 of the stored positions.
    prob = linear_regression(num_agents=3, local_size=3, dim=3)
    init = jnp.asarray(np.random.default_rng(0).normal(size=(6, 3, 3)), jnp.float32)
    targets = [(prob.mean, prob.cov), (prob.mean + 1.0, 2.0 * prob.cov)]
    traces = []
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        for mean, cov in targets:
            traces.append(dgsgld.sample(
                dgsgld.DIGingSGLD(0.05), prob.potential, permuted_rings(3, 2), init,
                jax.random.key(0), 6, output=dgsgld.Output(
                    thin=2, positions=True, ensemble_fn=evaluate.streamed_per_agent_w2(mean, cov))))
    compiled = [r.getMessage().split()[1] for r in caplog.records
                if r.getMessage().startswith("Compiling")]
    assert compiled.count("jit(_run)") == 1, compiled
    for trace, (mean, cov) in zip(traces, targets):
        np.testing.assert_allclose(trace.ensemble,
                                   evaluate.per_agent_w2(trace.positions, mean, cov),
                                   rtol=1e-5, atol=1e-6)
    assert not np.allclose(traces[0].ensemble, traces[1].ensemble)


def test_output_refuses_a_metric_of_the_other_kind():
    prob = linear_regression(num_agents=N, dim=D)
    init = jnp.zeros((2, N, D))

    def sample(**output):
        return dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, permuted_rings(N, 2),
                             init, jax.random.key(0), 2, output=dgsgld.Output(**output))

    with pytest.raises(ValueError, match="`output.trace_fn` is an ensemble metric"):
        sample(trace_fn=evaluate.streamed_per_agent_w2(prob.mean, prob.cov))
    with pytest.raises(ValueError, match="`output.trace_fn` is an ensemble metric"):
        sample(trace_fn=evaluate.combine(ce=evaluate.streamed_consensus_error(),
                                         own=lambda s: s.count))
    with pytest.raises(ValueError, match="`output.ensemble_fn` is a per-chain metric"):
        sample(ensemble_fn=evaluate.streamed_consensus_error(per_chain=True))
    with pytest.raises(ValueError, match=r"mixes per-chain metrics \(ce\) with ensemble "
                                         r"metrics \(w2\)"):
        evaluate.combine(w2=evaluate.streamed_per_agent_w2(prob.mean, prob.cov),
                         ce=evaluate.streamed_consensus_error(per_chain=True))
    # Functions that are not metrics are of either kind.
    assert evaluate.combine(own=lambda s: s.count).per_chain is None


def test_combined_metrics_stream_beside_static_parameter_leaves(key):
    # Parameters with a non-array leaf (an eqx.nn.MLP's activation, here a function) make
    # the runner wrap the streamed functions with that static part, which must hash by
    # value: combine(...) keeps its metrics as (name, metric) pairs. Its values are those of
    # the metrics streamed on their own (the same program and draws).
    prob = linear_regression(num_agents=4, local_size=3, dim=2)
    p = prob.potential

    def log_likelihood(params, datum):
        return p.log_likelihood(params["w"], datum)

    def log_prior(params):
        return p.log_prior(params["w"])

    potential = dgsgld.Potential(log_likelihood, log_prior, p.data)
    init = {"w": jnp.zeros((3, 4, 2)), "act": jax.nn.relu}
    flat = lambda q: q["w"]  # noqa: E731
    both = evaluate.combine(ce=evaluate.streamed_consensus_error(flatten=flat),
                            m=evaluate.streamed_moments(flatten=flat))
    hash(both)
    run = dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, permuted_rings(4, 2), init, key, 6,
                        output=dgsgld.Output(positions=False, ensemble_fn=both))
    alone = dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, permuted_rings(4, 2), init, key,
                          6, output=dgsgld.Output(positions=False,
                                                  ensemble_fn=dict(both.fns)["ce"]))
    np.testing.assert_array_equal(run.ensemble["ce"], alone.ensemble)
    assert float(np.max(run.ensemble["ce"])) > 0
