"""Sparse mixing gives the dense results: same matrices, same products, same sampler traces."""

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from _problems import linear_regression

import dgsgld
from dgsgld import networks
from dgsgld._util import validation as _validation
from dgsgld.networks import sparse


def _stacks():
    return {
        "ring": np.asarray(networks.ring(12).matrices),
        "barbell": np.asarray(networks.barbell(10, period=4, seed=0).matrices),
        "link_failures": np.asarray(
            networks.link_failures(nx.cycle_graph(9), 0.4, period=5).matrices),
        "star": np.asarray(networks.star(9).matrices),
    }


# Each case compiles its own product (~1 s). Default cases: neighbour lists of a time-varying
# schedule (degrees change from snapshot to snapshot) and the edge list of a star (the hub's
# degree N - 1, the case the edge list is chosen for); the other stacks and formats are slow.
FAST_ROUND_TRIPS = {("neighbors", "link_failures"), ("edges", "star")}


@pytest.mark.parametrize("fmt, name", [
    pytest.param(fmt, name, id=f"{fmt}-{name}",
                 marks=() if (fmt, name) in FAST_ROUND_TRIPS
                 else pytest.mark.slow)  # fast twins: the FAST_ROUND_TRIPS cases
    for fmt in ("neighbors", "edges") for name in sorted(_stacks())])
def test_round_trip_and_products_equal_dense(name, fmt):
    stack = _stacks()[name]
    s = sparse.from_dense(stack, format=fmt)
    np.testing.assert_allclose(s.todense(), stack, atol=1e-7)
    x = np.random.default_rng(0).normal(size=(stack.shape[1], 3, 2)).astype(np.float32)
    ks = np.arange(stack.shape[0] + 2)    # past the period: cyclic like the dense stack
    got = jax.jit(jax.vmap(lambda k: s.matrix_at(k) @ jnp.asarray(x)))(ks)
    expected = np.einsum("kij,jab->kiab", stack[ks % stack.shape[0]], x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_products_keep_the_row_sums_conserved():
    # Doubly stochastic W: 1ᵀ W x = 1ᵀ x, the invariant behind the samplers' averages.
    stack = _stacks()["link_failures"]
    s = sparse.from_dense(stack, format="edges")
    x = jnp.asarray(np.random.default_rng(1).normal(size=(9, 4)), jnp.float32)
    for k in range(5):
        np.testing.assert_allclose(jnp.sum(s.matrix_at(k) @ x, axis=0), jnp.sum(x, axis=0),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make, formats", [
    # One compiled run per format: by default the edge list (the neighbour lists' products
    # are checked against the dense stack by test_round_trip_and_products_equal_dense
    # [neighbors-link_failures]); DIGing-SGLD's neighbour lists and the other samplers are slow.
    pytest.param(dgsgld.DIGingSGLD, ("edges",), id="DIGingSGLD-edges"),
    pytest.param(dgsgld.DIGingSGLD, ("neighbors",), id="DIGingSGLD-neighbors",
                 marks=pytest.mark.slow),  # fast twin: [DIGingSGLD-edges]
    pytest.param(dgsgld.DESGLD, ("neighbors", "edges"), id="DESGLD", marks=pytest.mark.slow),
    pytest.param(dgsgld.EXTRASGLD, ("neighbors", "edges"), id="EXTRASGLD",
                 marks=pytest.mark.slow),
])
def test_sampler_trace_with_sparse_mixing_equals_dense(make, formats):
    prob = linear_regression(num_agents=12, dim=2, batch_size=2)
    stack = np.asarray(networks.link_failures(nx.cycle_graph(12), 0.3, period=7, seed=1).matrices)
    init = jnp.asarray(np.random.default_rng(2).normal(size=(3, 12, 2)), jnp.float32)
    key = jax.random.key(4)
    dense = dgsgld.sample(make(0.05), prob.potential, stack, init, key, 15)
    for fmt in formats:
        sp = dgsgld.sample(make(0.05), prob.potential, sparse.from_dense(stack, format=fmt),
                           init, key, 15)
        # Same draws, same weights; only the order of the float32 sums differs.
        np.testing.assert_allclose(sp.positions, dense.positions, rtol=1e-5, atol=1e-5)


def _circulant_graph(n, shifts):
    """Metropolis-Hastings weights of the circulant graph linking i and i ± s for s in shifts."""
    adj = np.zeros((n, n), bool)
    i = np.arange(n)
    for s in shifts:
        adj[i, (i + s) % n] = adj[(i + s) % n, i] = True
    return np.asarray(networks.from_graph(nx.from_numpy_array(adj.astype(int)),
                                          weights="metropolis_hastings").matrices)


@pytest.mark.parametrize("stack", [np.asarray(networks.ring(12).matrices),
                                   _circulant_graph(11, (1, 3))],
                         ids=["ring", "shifts_1_3"])
def test_circulant_products_equal_dense(stack):
    s = sparse.from_dense(stack)                      # auto: circulant graphs take shifts
    assert isinstance(s.snapshots, sparse.CirculantMixing)
    np.testing.assert_allclose(s.todense(), stack, atol=1e-7)
    x = np.random.default_rng(0).normal(size=(stack.shape[1], 3, 2)).astype(np.float32)
    got = jax.jit(lambda x: s.matrix_at(5) @ x)(jnp.asarray(x))
    # float32 products of O(1) numbers: |error| ≲ K · 2⁻²⁴ · max|x| ≈ 1e-6.
    np.testing.assert_allclose(got, np.einsum("ij,jab->iab", stack[0], x), rtol=1e-5, atol=1e-6)


def test_circulant_is_refused_for_a_non_circulant_graph():
    with pytest.raises(ValueError, match="circulant"):
        sparse.from_dense(networks.star(6), format="circulant")
    assert not isinstance(sparse.from_dense(networks.star(6)).snapshots, sparse.CirculantMixing)


@pytest.mark.slow  # fast twin: test_sampler_trace_with_sparse_mixing_equals_dense (and the
# circulant products' test)
def test_sampler_trace_with_circulant_mixing_equals_dense():
    prob = linear_regression(num_agents=12, dim=2, batch_size=2)
    stack = np.asarray(networks.ring(12).matrices)
    init = jnp.asarray(np.random.default_rng(2).normal(size=(3, 12, 2)), jnp.float32)
    key = jax.random.key(4)
    dense = dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, stack, init, key, 15)
    sp = dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential,
                       sparse.from_dense(stack, format="circulant"), init, key, 15)
    np.testing.assert_allclose(sp.positions, dense.positions, rtol=1e-5, atol=1e-5)


def test_automatic_choice_follows_the_cost_model():
    model = sparse.CostModel()
    ring = networks.ring(100)
    assert sparse.density(ring) == pytest.approx(2 / 100)
    # dense N (1 + N / 143) against circulant N (2 + 0.17 · 3): equal at N = 143 · 1.51 ≈ 216.
    assert sparse.cost(ring, "dense") == pytest.approx(100 * (1 + 100 / 143))
    assert sparse.cost(ring, "auto") == pytest.approx(100 * (2 + 0.17 * 3))
    # Neighbour lists run chains first: N (4 + 0.33 · 3), equal to dense at N ≈ 570.
    assert sparse.cost(ring, "neighbors") == pytest.approx(100 * (4 + 0.33 * 3))
    assert not isinstance(sparse.auto(networks.ring(200)), sparse.SparseSchedule)
    big = sparse.auto(networks.ring(240))
    assert (isinstance(big, sparse.SparseSchedule)
            and isinstance(big.snapshots, sparse.CirculantMixing))
    # A cheaper loop moves the crossover down.
    cheaper = model._replace(circulant_loop=1.0)
    assert isinstance(sparse.auto(ring, model=cheaper), sparse.SparseSchedule)
    barbell = networks.barbell(100, period=2)
    assert sparse.auto(barbell, model=model._replace(sparse_loop=1.0)) is barbell   # dense-ish
    # A star's hub has degree N - 1 ≫ the mean degree: the edge list is chosen.
    assert isinstance(sparse.from_dense(networks.star(100)).snapshots, sparse.EdgeMixing)
    assert isinstance(sparse.from_dense(ring, format="neighbors").snapshots, sparse.NeighborMixing)


def test_bad_input_is_rejected_with_the_argument_named():
    with pytest.raises(ValueError, match="symmetric"):
        sparse.from_dense(np.array([[0.5, 0.5], [0.4, 0.6]]))
    with pytest.raises(ValueError, match="`format`"):
        sparse.from_dense(np.eye(3), format="csr")
    with pytest.raises(ValueError, match="N = 3"):
        sparse.from_dense(np.eye(3)).matrix_at(0) @ jnp.ones((4, 2))


def test_a_disconnected_circulant_schedule_is_refused_like_its_dense_stack():
    # Shift 2 on 8 agents links evens and odds separately: two components, whatever format.
    prob = linear_regression(num_agents=8, dim=2, batch_size=2)
    stack = _circulant_graph(8, (2,))
    init = jnp.zeros((2, 8, 2), jnp.float32)
    for mixing in (stack, sparse.from_dense(stack, format="circulant")):
        with pytest.raises(ValueError, match="connected"):
            dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, mixing, init,
                          jax.random.key(0), 2)


def test_circulant_rolls_are_exact_and_keep_a_vmapped_axis_in_place():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(7, 3)), jnp.float32)
    for shift in (1, 3, 6):
        np.testing.assert_array_equal(sparse._roll_up(x, shift), jnp.roll(x, -shift, axis=0))
    # Chains on the last axis stay there (what lets dgsgld.sample keep its chains-last loop).
    batched = jax.vmap(lambda v: sparse._roll_up(v, 2), in_axes=-1, out_axes=-1)
    jaxpr = jax.make_jaxpr(batched)(jnp.zeros((7, 3, 5)))
    assert "concatenate" not in str(jaxpr) and "transpose" not in str(jaxpr)
    assert sparse.CirculantMixing.chains_last
    assert not getattr(sparse.NeighborMixing, "chains_last", False)


@pytest.mark.parametrize("cut", [None, 13], ids=["ring", "path_cut_in_two"])
def test_traced_connectivity_check_on_a_long_ring(cut):
    # Checked inside the computation (the stack is traced), by label propagation with pointer
    # jumps: a 40-agent ring, or a path cut into two pieces (disconnected).
    n = 40
    adj = np.zeros((n, n), bool)
    i = np.arange(n)
    adj[i, (i + 1) % n] = adj[(i + 1) % n, i] = True
    if cut is not None:
        adj[cut, cut + 1] = adj[cut + 1, cut] = adj[n - 1, 0] = adj[0, n - 1] = False
    check = jax.jit(lambda a: _validation.connectivity_error_if(jnp.zeros(1), a))
    if cut is None:
        jax.block_until_ready(check(jnp.asarray(adj)))
    else:
        with pytest.raises(Exception, match="not jointly connected"):
            jax.block_until_ready(check(jnp.asarray(adj)))
