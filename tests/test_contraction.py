"""``dgsgld._contraction.contract_data_last``: the same function, whose matrix products get the
data operands with their contracted axes last (see the module doc)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import _contraction, _layout
from dgsgld._contraction import contract_data_last
from _problems import log_likelihood as _linear
from _problems import paper_size_loop_hlo, paper_size_potential

RNG = np.random.default_rng(0)


def _x(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def _data_term(log_likelihood):
    """``(params, data) -> -sum_j log p(d_j | params)``, per-datum likelihoods vmapped."""
    return lambda th, data: -jnp.sum(jax.vmap(log_likelihood, (None, 0))(th, data))


def _logistic(th, d):
    # dict parameters, an integer label, a nested jit (jax.nn.log_sigmoid)
    z, label = d
    logit = z @ th["w"] + th["b"]
    return jnp.where(label == 1, jax.nn.log_sigmoid(logit), jax.nn.log_sigmoid(-logit))


def _mlp(th, d):
    z, y = d
    h = jnp.tanh(th["w1"] @ z + th["b1"])
    return -0.5 * (th["w2"] @ h - y) ** 2


def _batched(th, d):
    # a per-datum product with a batch axis: rows of z against rows of th
    return -0.5 * jnp.sum((jnp.einsum("kd,kd->k", d, th) - 1.0) ** 2)


CASES = {
    "linear": (_linear, _x(6), (_x(5, 6), _x(5))),
    "logistic": (_logistic, {"w": _x(4), "b": _x()},
                 (_x(7, 4), jnp.asarray(RNG.integers(0, 2, size=7)))),
    "mlp": (_mlp, {"w1": _x(8, 3), "b1": _x(8), "w2": _x(8)}, (_x(9, 3), _x(9))),
    "batched": (_batched, _x(3, 4), _x(5, 3, 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_values_under_jit_and_vmap(name):
    ll, th, data = CASES[name]
    grad = jax.grad(_data_term(ll))
    fast = contract_data_last(grad)
    expect = grad(th, data)
    # The same products on the same numbers: equal up to the order XLA sums in.
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b),  # noqa: E731
                                                    rtol=1e-5, atol=1e-6)
    jax.tree.map(close, fast(th, data), expect)
    jax.tree.map(close, jax.jit(fast)(th, data), expect)
    # Chains of parameters, as the sampler calls it.
    chains = jax.tree.map(lambda p: jnp.stack([p, 2 * p, -p]), th)
    jax.tree.map(close, jax.vmap(fast, (0, None))(chains, data),
                 jax.vmap(grad, (0, None))(chains, data))


def test_derivatives_through_it():
    # jax.grad of the sampler's output w.r.t. step size or model parameters differentiates
    # through the gradient: second derivatives and derivatives w.r.t. closed-over values.
    th, data = CASES["linear"][1:]
    grad = jax.grad(_data_term(_linear))
    v = _x(6)
    hvp = lambda g: jax.jvp(lambda t: g(t, data), (th,), (v,))[1]  # noqa: E731
    np.testing.assert_allclose(np.asarray(hvp(contract_data_last(grad))),
                               np.asarray(hvp(grad)), rtol=1e-5)

    def outer(scale, wrap):
        g = jax.grad(lambda t, d: scale * _data_term(_linear)(t, d) + scale ** 2 * t @ t)
        return jnp.sum(wrap(g)(th, data) ** 2)

    np.testing.assert_allclose(float(jax.grad(outer)(1.3, contract_data_last)),
                               float(jax.grad(outer)(1.3, lambda g: g)), rtol=1e-5)


def test_only_the_data_operand_of_the_transposed_product_is_restored():
    th, data = CASES["linear"][1:]
    jaxpr = jax.make_jaxpr(contract_data_last(jax.grad(_data_term(_linear))))(th, data).jaxpr
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    barriers = [e for e in jaxpr.eqns if e.primitive.name == "optimization_barrier"]
    # Forward Z x contracts the last axis of Z (5, 6) already; the gradient's Z^T r contracts
    # its first: only that operand goes through transpose -> barrier -> transpose.
    assert len(dots) == 2 and len(barriers) == 1
    (stored,) = barriers[0].outvars
    assert stored.aval.shape == (6, 5)
    producers = {v: e for e in jaxpr.eqns for v in e.outvars}
    backward = dots[1]
    (contracting_lhs, contracting_rhs), _ = backward.params["dimension_numbers"]
    data_operand = backward.invars[1]
    assert contracting_rhs == (0,) and data_operand.aval.shape == (5, 6)
    assert producers[data_operand].primitive.name == "transpose"
    assert producers[data_operand].invars[0] is stored
    # The forward product reads the data input itself.
    assert dots[0].invars[0] is jaxpr.invars[1]


def test_other_backends_get_the_function_itself(monkeypatch):
    grad = jax.grad(_data_term(_linear))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert _contraction.contract_data_last(grad) is grad


def test_potential_applies_it_only_in_a_chains_last_loop():
    # dgsgld.sample keeps chains last for (20, 6) leaves of 16 chains; with chains first (as
    # at d = 1000) the product's output would need a large transpose, and outside a sampling
    # loop the layout is unknown: the gradient is then left as jax.grad makes it.
    pot = paper_size_potential(1)
    x, key = jnp.zeros((16, 20, 6)), jax.random.key(0)
    barriers = lambda: str(jax.make_jaxpr(jax.vmap(pot.grad, (0, None)))(x, key)).count(  # noqa: E731
        "optimization_barrier")
    assert barriers() == 0
    with _layout.chain_layout(16, lambda shape: -1):
        assert barriers() == 1
    with _layout.chain_layout(16, lambda shape: 0):
        assert barriers() == 0
    assert not _layout.chains_last([(20, 6)])
    with _layout.chain_layout(200, lambda shape: _layout.chain_axis(shape, 200)):
        assert _layout.chains_last([(20, 6), (20, 1)])
        assert not _layout.chains_last([(20, 6), (20, 1000)])


def test_sample_is_unchanged(monkeypatch):
    # The same run with the rewrite off: every number of the trace agrees to the last bit
    # (the products are the same; only where XLA reads their operand from changes).
    pot = paper_size_potential(1)
    W = jnp.full((20, 20), 0.05)
    init = _x(16, 20, 6)
    run = lambda p: dgsgld.sample(  # noqa: E731
        dgsgld.diging_sgld(0.01), p, W, init, jax.random.key(3), 20
    ).positions
    mini = dgsgld.Potential(_linear, None, pot.data, batch_size=2)
    on = [np.asarray(run(pot)), np.asarray(run(mini))]
    monkeypatch.setattr(_contraction, "contract_data_last", lambda fun: fun)
    jax.clear_caches()
    off = [np.asarray(run(pot)), np.asarray(run(mini))]
    jax.clear_caches()
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU product emission")
def test_paper_size_loop_products_contract_the_last_axis_of_their_left_operand():
    # The purpose: at paper size every matrix product in the DIGing-SGLD loop reads its left
    # operand along its last axis (XLA:CPU's fast path). Without the rewrite the gradient's
    # product was dot(Z, r) with lhs_contracting_dims={1} on Z (20, 5, 6).
    hlo = paper_size_loop_hlo()
    shapes = dict(re.findall(r"(%\S+) = \w+\[([0-9,]*)\]", hlo))
    products = [line for line in hlo.splitlines()
                if "while/body" in line and re.search(r"= f32\[[0-9,]+\]\S* dot\(", line)]
    assert products, "the loop should contain matrix products"
    for line in products:
        lhs = re.search(r" dot\((%[^,]+),", line).group(1)
        contracted = re.search(r"lhs_contracting_dims=\{([0-9,]+)\}", line).group(1)
        rank = len(shapes[lhs].split(","))
        assert contracted == str(rank - 1), (shapes[lhs], line)
