"""What ``dgsgld.sample`` guarantees about its own inputs (issues 13 and 15).

Each test here failed on the main branch before these guarantees existed (a silent wrong
result, an error naming no argument, or a missing option): explicit chain identity, refusal of
networks that never connect, mixing checks that survive a user's ``jit``, int32 iteration
counts, a model's NaN reported as such, arguments that would be silently ignored, parameters as
any pytree (equinox modules included) and ``burn_in``.
"""

import functools
import logging
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

import dgsgld
from dgsgld import networks
from dgsgld.networks import onthefly, sparse

pytestmark = pytest.mark.reliability

N, C, D = 4, 8, 2
KEY = jax.random.key(7)


def log_likelihood(theta, x):
    return -0.5 * jnp.sum((x - theta) ** 2)


@functools.cache
def problem():
    data = jnp.asarray(np.random.default_rng(0).normal(size=(N, 3, D)), jnp.float32)
    potential = dgsgld.Potential(log_likelihood, lambda t: -0.5 * t @ t, data)
    ring = jnp.asarray(networks.ring(N).matrices)
    init = jnp.asarray(np.random.default_rng(1).normal(size=(C, N, D)), jnp.float32)
    return potential, ring, init


def run(mixing=None, init=None, num_steps=20, **kwargs):
    """``dgsgld.sample`` on the ring problem; ``Output`` fields may be given as keywords."""
    potential, ring, init0 = problem()
    output = dgsgld.Output(**{k: kwargs.pop(k) for k in list(kwargs) if k in dgsgld.Output._fields})
    return dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, ring if mixing is None else mixing,
                         init0 if init is None else init, KEY, num_steps, output=output, **kwargs)


# -- 1. chain identity ------------------------------------------------------------------------


@functools.cache
def full_and_part():
    """The 8-chain run and its chains 6-7 run alone (compiled once for the module)."""
    return run(), run(init=problem()[2][6:], chain_offset=6)


def test_chains_run_alone_with_their_offset_equal_those_of_the_full_run():
    full, part = full_and_part()
    # Same keys, same arithmetic per chain; XLA compiles the step for a batch of 2 chains
    # instead of 8 and may order its reductions differently, so agreement is to float32
    # rounding accumulated over 20 steps (entries are O(1): 1e-5 is ~100 ulps), not bitwise.
    np.testing.assert_allclose(np.asarray(part.positions), np.asarray(full.positions[6:]),
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(part.state.tracker),
                               np.asarray(full.state.tracker[6:]), rtol=0, atol=1e-5)


def test_calls_with_the_same_key_and_offset_are_coupled_and_disjoint_offsets_are_not():
    """The documented pitfall: the noise is a function of (key, global chain index) only."""
    part = full_and_part()[1]                        # init[6:8] as global chains 6, 7
    same = run(init=problem()[2][6:], chain_offset=6)
    other = run(init=problem()[2][6:], chain_offset=0)
    assert np.array_equal(np.asarray(part.positions), np.asarray(same.positions))
    # Different noise: step 1 differs by sqrt(2 η) |ξ - ξ'| = O(0.3) per entry.
    assert np.abs(np.asarray(part.positions[:, 1] - other.positions[:, 1])).min() > 0


# -- 2. networks that never connect -----------------------------------------------------------


def two_pairs():
    """Two snapshots that both average only within {0, 1} and within {2, 3}."""
    half = np.kron(np.eye(2), np.full((2, 2), 0.5))
    return np.stack([half, 0.5 * (half + np.eye(N))])


DISCONNECTED = {
    "identity": (lambda: np.eye(N), "agents {0} | {1} | {2} | {3}"),
    "never_jointly_connected": (two_pairs, "agents {0, 1} | {2, 3}"),
    "link_failures_p1": (lambda: networks.link_failures(nx.cycle_graph(N), 1.0, period=5),
                         "agents {0} | {1} | {2} | {3}"),
    "sparse": (lambda: sparse.from_dense(two_pairs(), format="neighbors"),
               "agents {0, 1} | {2, 3}"),
    "sparse_edges": (lambda: sparse.from_dense(two_pairs(), format="edges"),
                     "agents {0, 1} | {2, 3}"),
    "on_the_fly": (lambda: onthefly.link_failures_on_the_fly(nx.cycle_graph(N), 1.0, key=1),
                   "agents {0} | {1} | {2} | {3}"),
}


@pytest.mark.parametrize("case", [
    # The on-the-fly case compiles the generation of its snapshots (~2 s); fast twins: the
    # same network precomputed ([link_failures_p1], the same message) and
    # tests/networks/test_reliability_networks_divergence.py::
    # test_on_the_fly_and_plain_objects_get_the_dense_checks.
    pytest.param(case, marks=pytest.mark.slow) if case == "on_the_fly" else case
    for case in sorted(DISCONNECTED)])
def test_a_network_that_never_connects_is_refused(case):
    make, components = DISCONNECTED[case]
    with pytest.raises(ValueError, match="not jointly connected") as err:
        run(mixing=make())
    assert components in str(err.value)
    assert "allow_disconnected=True" in str(err.value)


def test_allow_disconnected_runs_a_disconnected_network():
    trace = run(mixing=np.eye(N, dtype=np.float32), allow_disconnected=True)
    # W = I: each agent runs its own chain; nothing else is checked here.
    assert trace.positions.shape == (C, 21, N, D)


def pair_swaps():
    """P = 3 snapshots averaging the pairs (0, 1), (1, 2), (2, 3) of a path: every snapshot is
    disconnected, the period's union is the path, and no 2 consecutive snapshots connect."""
    out = []
    for i, j in ((0, 1), (1, 2), (2, 3)):
        w = np.eye(N)
        w[np.ix_([i, j], [i, j])] = 0.5
        out.append(w)
    return np.stack(out)


def test_connectivity_window_checks_every_cyclic_window():
    networks.check_joint_connectivity(pair_swaps())  # the period's union is a path
    networks.check_joint_connectivity(pair_swaps(), 3)
    with pytest.raises(ValueError, match=r"snapshots 0\.\.1 \(cyclic window B = 2\).*"
                                         r"agents \{0, 1, 2\} \| \{3\}"):
        run(mixing=pair_swaps(), num_steps=3, connectivity_window=2)


# Compiles the on-the-fly generation of 100 snapshots. Fast twins: every default sampling run
# passes this check first: tests/networks/test_onthefly.py::
# test_sample_with_on_the_fly_schedule_equals_sample_with_its_materialized_stack
# (on the fly), tests/networks/test_sparse.py::test_sampler_trace_with_sparse_mixing_equals_dense
# (sparse) and the dense runs of this module.
@pytest.mark.slow  # fast twins: see above
def test_connected_schedules_of_every_kind_are_accepted():
    for mixing in (networks.barbell(N, period=5), sparse.from_dense(networks.ring(N)),
                   onthefly.link_failures_on_the_fly(nx.cycle_graph(N), 0.5, key=1)):
        networks.check_joint_connectivity(mixing)


# -- 3. checks under jit ----------------------------------------------------------------------


@functools.cache
def jitted_run():
    potential, _, init = problem()
    return jax.jit(lambda w: dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, w, init, KEY,
                                           20).positions)


def test_a_traced_stack_whose_rows_sum_to_one_half_raises_inside_jit():
    bad = 0.5 * problem()[1]
    with pytest.raises(Exception, match="not doubly stochastic"):
        jax.block_until_ready(jitted_run()(bad))


def test_a_traced_disconnected_stack_raises_inside_jit():
    with pytest.raises(Exception, match="not jointly connected"):
        jax.block_until_ready(jitted_run()(jnp.eye(N)[None]))


# Compiles a run that generates its on-the-fly snapshots and checks them inside the program.
@pytest.mark.slow  # fast twin: test_a_traced_disconnected_stack_raises_inside_jit (the traced
# check)
def test_a_schedule_with_a_traced_key_is_checked_inside_jit():
    potential, _, init = problem()
    run_with = jax.jit(lambda k: dgsgld.sample(
        dgsgld.DIGingSGLD(0.05), potential,
        onthefly.link_failures_on_the_fly(nx.cycle_graph(N), 1.0, key=k), init, KEY, 2).positions)
    with pytest.raises(Exception, match="not jointly connected.*first 100 snapshots"):
        jax.block_until_ready(run_with(jax.random.key(1)))


def test_a_traced_valid_stack_gives_the_eager_result():
    got = jitted_run()(problem()[1])
    want = full_and_part()[0].positions
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-6)


def _primitives(jaxpr, acc=None) -> set[str]:
    """Names of every primitive in ``jaxpr`` and its sub-jaxprs (scan bodies, conds, jits)."""
    acc = set() if acc is None else acc
    for eqn in jaxpr.eqns:
        acc.add(eqn.primitive.name)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    _primitives(inner, acc)
    return acc


def test_a_checked_network_runs_traced_without_host_callbacks_and_gives_the_same_draws():
    # A traced network is checked inside the program by host callbacks, which JAX's persistent
    # cache refuses to store; a network checked on the host (`checked_network`) carries none.
    # (on_divergence="flag": the default "raise" checks divergence inside the program too.)
    potential, ring, init = problem()
    fn = lambda w: dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, w, init, KEY,  # noqa: E731
                                 20, on_divergence="flag").positions
    callbacks = lambda w: {p for p in _primitives(jax.make_jaxpr(fn)(w).jaxpr)  # noqa: E731
                           if "callback" in p}
    assert callbacks(ring)                        # the check is in the program ...
    checked = dgsgld.checked_network(ring)
    assert callbacks(checked) == set()            # ... and not once checked on the host
    # The same draws as the eager run, to the tolerance of the traced-stack test above.
    want = full_and_part()[0].positions
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(checked)), np.asarray(want), rtol=0,
                               atol=1e-6)


def test_checked_network_runs_samples_checks_on_the_host():
    with pytest.raises(ValueError, match="not doubly stochastic"):
        dgsgld.checked_network(0.5 * problem()[1])
    with pytest.raises(ValueError, match="not doubly stochastic"):  # no unchecked way to build one
        dgsgld.CheckedNetwork(0.5 * problem()[1])
    with pytest.raises(ValueError, match="not jointly connected") as err:
        dgsgld.checked_network(np.eye(N, dtype=np.float32))
    assert "agents {0} | {1} | {2} | {3}" in str(err.value)
    with pytest.raises(ValueError, match=r"snapshots 0\.\.1 \(cyclic window B = 2\)"):
        dgsgld.checked_network(pair_swaps(), connectivity_window=2)
    alone = dgsgld.checked_network(np.eye(N, dtype=np.float32), allow_disconnected=True)
    assert run(mixing=alone).positions.shape == (C, 21, N, D)
    with pytest.raises(ValueError, match="`mixing` is traced"):
        jax.jit(dgsgld.checked_network)(problem()[1])
    with pytest.raises(ValueError, match="give `allow_disconnected`.*to dgsgld.checked_network"):
        run(mixing=alone, allow_disconnected=True)


@pytest.mark.parametrize("sampler", [
    "DIGingSGLD",
    # One compilation per sampler: the second sampler (with its friction constant) is slow-only.
    pytest.param("DESGHMC", marks=pytest.mark.slow),  # fast twin: [DIGingSGLD]
])
def test_a_sample_call_on_host_inputs_compiles_one_program(caplog, sampler):
    # The host-side work of a call (sampler constants, the dense stack, the keys) runs no
    # eager JAX operation: each would be a program of its own, compiled on first use. Shapes
    # (3 agents, d = 5) that no other test of this worker compiles.
    rng = np.random.default_rng(3)
    data = rng.normal(size=(3, 2, 5)).astype(np.float32)
    potential = dgsgld.Potential(log_likelihood, lambda t: -0.5 * t @ t, data)
    mixing = np.full((3, 3), 1 / 3)                                 # a NumPy float64 matrix
    init = rng.normal(size=(2, 3, 5)).astype(np.float32)
    algorithm = {"DIGingSGLD": lambda: dgsgld.DIGingSGLD(0.05),
                 "DESGHMC": lambda: dgsgld.DESGHMC(0.05, friction=1.0)}[sampler]()
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        trace = dgsgld.sample(algorithm, potential, mixing, init, KEY, 4)
    compiled = [r.getMessage().split()[1] for r in caplog.records
                if r.getMessage().startswith("Compiling")]
    assert compiled == ["jit(_run)"], compiled
    assert np.all(np.isfinite(np.asarray(trace.positions)))


# Compiles the agent placement's program. Fast twins:
# test_a_checked_network_runs_traced_without_host_callbacks_and_gives_the_same_draws (a checked
# network through sample, whose front end placement=Agents shares) and
# tests/runner/test_runner_matrix.py::test_every_runner_refuses_a_mistake_with_the_same_message
# (a disconnected network refused alike by every runner, the agent placement's included).
@pytest.mark.slow  # fast twins: the two named above
def test_the_agent_sharded_runner_takes_a_checked_network_as_sample_does():
    # Run as it was checked, without checking again (one device here: the same code path).

    potential, ring, init = problem()
    algorithm = dgsgld.DIGingSGLD(0.05)
    plain = dgsgld.sample(algorithm, potential, ring, init, KEY, 5,
                          placement=dgsgld.Agents()).positions
    checked = dgsgld.sample(algorithm, potential, dgsgld.checked_network(ring),
                            init, KEY, 5, placement=dgsgld.Agents()).positions
    np.testing.assert_array_equal(np.asarray(checked), np.asarray(plain))
    eye = np.eye(N, dtype=np.float32)
    with pytest.raises(ValueError, match="not jointly connected"):
        dgsgld.sample(algorithm, potential, eye, init, KEY, 5, placement=dgsgld.Agents())
    alone = dgsgld.checked_network(eye, allow_disconnected=True)
    out = dgsgld.sample(algorithm, potential, alone, init, KEY, 5, placement=dgsgld.Agents())
    assert out.positions.shape == (C, 6, N, D)


# -- 4. iteration counts ----------------------------------------------------------------------


def test_num_steps_beyond_int32_is_refused():
    with pytest.raises(ValueError, match="`num_steps` must be at most 2\\*\\*31 - 1"):
        run(num_steps=2**31, thin=2**31)


def test_a_continuation_past_int32_is_refused():
    state = full_and_part()[0].state
    state = state._replace(count=jnp.full((C,), 2**31 - 10, jnp.int32))
    with pytest.raises(ValueError, match="init.count.*num_steps = 20"):
        run(init=state, num_steps=20)


# -- 5. a model that returns NaN --------------------------------------------------------------


def test_a_nan_in_the_model_is_reported_as_such():
    # sqrt(2 - θ) is NaN (with a NaN gradient) for θ > 2, and the data at 3 pull every chain
    # there within a few steps: the positions stay O(1) until the model fails.
    def nan_model(theta, x):
        return -0.5 * jnp.sum((x - theta) ** 2) + jnp.sum(jnp.sqrt(2.0 - theta))

    potential = dgsgld.Potential(nan_model, None, jnp.full((N, 3, D), 3.0))
    with pytest.raises(dgsgld.DivergenceError) as err:
        dgsgld.sample(dgsgld.DIGingSGLD(0.05), potential, problem()[1],
                      jnp.zeros((2, N, D)), KEY, 100)
    message = str(err.value)
    assert "The model's gradient is already non-finite" in message
    assert "Reduce the step size" not in message


def test_a_too_large_step_is_still_reported_as_one():
    # Curvature 3 + 1/N per agent: η = 100 multiplies |x| by ~300 a step, past float32's
    # 3e38 within 20 steps; the last finite positions are far beyond sqrt(3e38).
    potential, ring, init = problem()
    with pytest.raises(dgsgld.DivergenceError, match="Reduce the step size"):
        dgsgld.sample(dgsgld.DIGingSGLD(100.0), potential, ring, init, KEY, 20)


# -- 6. arguments that one would silently win over ------------------------------------------


def test_sgld_refuses_a_mixing():
    with pytest.raises(ValueError, match="`mixing` must be None for SGLD"):
        dgsgld.sample(dgsgld.SGLD(0.01), problem()[0], problem()[1], jnp.zeros((2, D)), KEY, 2)


def test_potential_refuses_both_log_likelihood_and_gradient_fn():
    with pytest.raises(ValueError, match="`log_likelihood` or `gradient_fn`, not both"):
        dgsgld.Potential(log_likelihood, None, jnp.ones((N, 3, D)),
                         gradient_fn=lambda p, d, k: p)


# -- 7. parameters as any pytree --------------------------------------------------------------


@pytest.mark.slow  # default run: tests/runner/test_traceio.py samples an MLP passed directly
def test_an_equinox_mlp_passed_directly_matches_the_same_network_written_by_hand():
    xs = jnp.linspace(-1.0, 1.0, N * 3, dtype=jnp.float32).reshape(N, 3, 1)
    data = (xs, jnp.sin(3 * xs))
    keys = jax.random.split(jax.random.key(0), 2 * N).reshape(2, N)
    # One MLP per chain and agent, the equinox way (jit: one compilation, not one per op).
    make = eqx.filter_vmap(eqx.filter_vmap(lambda k: eqx.nn.MLP(1, 1, 4, 1, key=k)))
    mlp = eqx.filter_jit(make)(keys)

    def ll_module(model, datum):
        return -0.5 * jnp.sum((model(datum[0]) - datum[1]) ** 2)

    def ll_arrays(p, datum):  # the same MLP by hand: relu hidden layer, identity output
        (w0, b0), (w1, b1) = p
        return -0.5 * jnp.sum((w1 @ jax.nn.relu(w0 @ datum[0] + b0) + b1 - datum[1]) ** 2)

    ring = problem()[1]
    got = dgsgld.sample(dgsgld.DIGingSGLD(1e-2), dgsgld.Potential(ll_module, None, data), ring,
                        mlp, KEY, 10)
    arrays = tuple((layer.weight, layer.bias) for layer in mlp.layers)
    want = dgsgld.sample(dgsgld.DIGingSGLD(1e-2), dgsgld.Potential(ll_arrays, None, data), ring,
                         arrays, KEY, 10)
    assert isinstance(got.positions, eqx.nn.MLP) and got.positions.activation is mlp.activation
    for layer, (w, b) in zip(got.positions.layers, want.positions):
        # Same leaves in the same order, so the same noise; the gradients are the same
        # functions, so agreement to float32 rounding.
        np.testing.assert_allclose(np.asarray(layer.weight), np.asarray(w), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(layer.bias), np.asarray(b), rtol=1e-5, atol=1e-6)
    # The result is a model: chain 0, last iteration, agent 0, on one input.
    last = jax.tree.map(lambda a: a[0, -1, 0], eqx.filter(got.positions, eqx.is_array))
    model = eqx.combine(last, eqx.filter(got.positions, eqx.is_array, inverse=True))
    assert model(jnp.zeros(1)).shape == (1,)
    # Continuing from trace.state (a full module again) runs on.
    more = dgsgld.sample(dgsgld.DIGingSGLD(1e-2), dgsgld.Potential(ll_module, None, data), ring,
                         got.state, KEY, 2)
    assert isinstance(more.state.position, eqx.nn.MLP)


@pytest.mark.slow  # default run: tests/runner/test_traceio.py samples an MLP passed directly
def test_an_equinox_mlp_runs_through_the_chunked_and_sharded_runners(tmp_path):
    """The checkpointed and sharded runners take the same pytrees as ``sample``: an MLP whose
    activation is a static leaf comes back as an MLP with the same numbers."""

    xs = jnp.linspace(-1.0, 1.0, N * 3, dtype=jnp.float32).reshape(N, 3, 1)
    potential = dgsgld.Potential(
        lambda model, datum: -0.5 * jnp.sum((model(datum[0]) - datum[1]) ** 2), None,
        (xs, jnp.sin(3 * xs)))
    keys = jax.random.split(jax.random.key(0), 2 * N).reshape(2, N)
    mlp = eqx.filter_jit(eqx.filter_vmap(eqx.filter_vmap(
        lambda k: eqx.nn.MLP(1, 1, 4, 1, key=k))))(keys)
    args = (dgsgld.DIGingSGLD(1e-2), potential, problem()[1], mlp, KEY, 6)
    want = dgsgld.sample(*args)

    def same(got, exact):
        assert isinstance(got.positions, eqx.nn.MLP) and isinstance(got.state.position, eqx.nn.MLP)
        for a, b in zip(jax.tree.leaves(eqx.filter((got.positions, got.state), eqx.is_array)),
                        jax.tree.leaves(eqx.filter((want.positions, want.state), eqx.is_array))):
            if exact:  # the same program on the same numbers
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            else:  # products split over devices may round differently: float32 rounding
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)

    same(dgsgld.sample_chunked(*args, chunk_size=2, path=tmp_path / "run"), exact=True)
    same(dgsgld.sample_chunked(*args, chunk_size=2, path=tmp_path / "run"), exact=True)  # resumed
    same(dgsgld.sample(*args, placement=dgsgld.Chains()), exact=False)
    same(dgsgld.sample(*args, placement=dgsgld.Agents()), exact=False)


class Line(NamedTuple):
    slope: jax.Array
    intercept: jax.Array


def test_a_namedtuple_parameter_is_not_taken_for_a_sampler_state():
    def ll(p, datum):
        return -0.5 * (datum[1] - p.slope * datum[0] - p.intercept) ** 2

    data = (jnp.ones((N, 3)), jnp.ones((N, 3)))
    init = Line(jnp.zeros((2, N)), jnp.zeros((2, N)))
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.01), dgsgld.Potential(ll, None, data),
                          problem()[1], init, KEY, 4)
    assert isinstance(trace.positions, Line) and trace.positions.slope.shape == (2, 5, N)


def test_init_errors_name_the_leaf_path():
    init = {"w": jnp.zeros((2, N, D)), "b": jnp.zeros((2,))}
    with pytest.raises(ValueError, match=r"`init\['b'\]` of shape \(2,\)"):
        dgsgld.sample(dgsgld.DIGingSGLD(0.01), problem()[0], problem()[1], init, KEY, 2)


def linear_gaussian(num_local=5, seed=3):
    """y = w·x + b + ε, ε ~ N(0, 1); prior N(0, I / λ) on (w, b), λ = 0.1: the posterior
    mean is (Xᵀ X + λ I)⁻¹ Xᵀ y over the pooled data, X = [x, 1]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, num_local, 2))
    y = x @ np.array([1.0, -0.5]) + 0.3 + rng.normal(size=(N, num_local))
    design = np.concatenate([x.reshape(-1, 2), np.ones((N * num_local, 1))], axis=1)
    mean = np.linalg.solve(design.T @ design + 0.1 * np.eye(3), design.T @ y.reshape(-1))
    return (jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)), mean


def test_dict_parameters_reach_the_linear_gaussian_posterior_mean():
    data, mean = linear_gaussian()

    def ll(p, datum):
        return -0.5 * (datum[1] - datum[0] @ p["w"] - p["b"]) ** 2

    def lp(p):
        return -0.05 * (p["w"] @ p["w"] + p["b"] ** 2)

    chains = 32
    init = {"w": jnp.zeros((chains, N, 2)), "b": jnp.zeros((chains, N))}
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.02), dgsgld.Potential(ll, lp, data),
                          problem()[1], init, KEY, 600, output=dgsgld.Output(thin=2, burn_in=200))
    # For a Gaussian target the iterates are linear in the noise and the stationary mean of
    # DIGing-SGLD is the posterior mean exactly (no step-size bias in the mean). Chains are
    # independent, so the Monte Carlo error of the grand mean is the spread of the chains'
    # time averages / sqrt(chains); 4 of those bound a false failure at ~6e-5.
    per_chain = np.concatenate([np.asarray(trace.positions["w"]).mean(axis=(1, 2)),
                                np.asarray(trace.positions["b"]).mean(axis=(1, 2))[:, None]],
                               axis=1)                                     # (chains, 3)
    error = per_chain.std(axis=0, ddof=1) / np.sqrt(chains)
    assert np.all(np.abs(per_chain.mean(axis=0) - mean) < 4 * error + 1e-3), (per_chain.mean(0),
                                                                              mean, error)


@pytest.mark.slow  # fast twin: test_dict_parameters_reach_the_linear_gaussian_posterior_mean
def test_a_scalar_parameter_reaches_the_gaussian_posterior_mean():
    # y ~ N(μ, 1), prior N(0, 10): posterior mean Σy / (n + 0.1) over n = 12 data.
    y = np.random.default_rng(4).normal(1.5, 1.0, size=(N, 3))
    chains = 32
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.02),
                          dgsgld.Potential(lambda mu, d: -0.5 * (d - mu) ** 2,
                          lambda mu: -0.05 * mu**2, jnp.asarray(y, jnp.float32)),
                          problem()[1], jnp.zeros((chains, N)), KEY, 400,
                          output=dgsgld.Output(burn_in=100))
    per_chain = np.asarray(trace.positions).mean(axis=(1, 2))
    error = per_chain.std(ddof=1) / np.sqrt(chains)  # as in the dict test above
    assert abs(per_chain.mean() - y.sum() / (y.size + 0.1)) < 4 * error + 1e-3


# -- 8. burn-in -------------------------------------------------------------------------------


@pytest.mark.slow  # fast twin:
# tests/samplers/test_samplers.py::test_thinning_trace_fn_and_ensemble_fn_in_one_run (what a run
# keeps)
def test_burn_in_drops_the_first_iterations_only():
    kwargs = dict(num_steps=12, thin=2, trace_fn=lambda s: s.position[:, 0],
                  ensemble_fn=lambda s: jnp.mean(s.position), positions=True)
    full = run(**kwargs)
    cut = run(burn_in=6, **kwargs)
    # Kept iterations 0, 2, ..., 12 -> 6, 8, ..., 12: drop the first 3 of 7.
    assert cut.positions.shape[1] == 4
    assert np.array_equal(np.asarray(cut.positions), np.asarray(full.positions[:, 3:]))
    assert np.array_equal(np.asarray(cut.values), np.asarray(full.values[:, 3:]))
    assert np.array_equal(np.asarray(cut.ensemble), np.asarray(full.ensemble[3:]))
    for a, b in zip(jax.tree.leaves(cut.state), jax.tree.leaves(full.state)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("burn_in, match", [(3, "multiple of `thin`"), (14, "must not exceed"),
                                            (-2, "nonnegative")])
def test_bad_burn_in_is_refused(burn_in, match):
    with pytest.raises(ValueError, match=f"`output.burn_in`.*{match}"):
        run(num_steps=12, thin=2, burn_in=burn_in)


@pytest.mark.parametrize("kwargs, name", [
    (dict(chain_offset=-1), "chain_offset"), (dict(chain_offset=1.5), "chain_offset"),
    (dict(chain_offset=2**31 - 4), "chain_offset"),
    (dict(connectivity_window=0), "connectivity_window"),
])
def test_bad_new_arguments_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        run(**kwargs)
