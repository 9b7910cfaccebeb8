"""The formulas of §3.1, Lemma 3.6 and Corollary 3.7, checked by hand and against their claims."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgsgld import theory as th
from dgsgld.theory import bounds as bd

SQ2, SQ3 = math.sqrt(2.0), math.sqrt(3.0)


def make_inputs(**kw):
    base = {
        "mu": 1.0,
        "L": 2.0,
        "num_agents": 2,
        "dim": 1,
        "sigma2": 0.25,
        "delta": 0.5,
        "B": 2,
        "init_mean_error": 1.0,
        "init_norm": 2.0,
        "x_consensus": np.array([0.5, 0.25]),
        "y_consensus": np.array([1.0, 0.75]),
    }
    base.update(kw)
    return th.BoundInputs(**base)


# ---------------------------------------------------------------- hand-computed cases


def test_omegas_gammas_by_hand():
    # μ=1, L=2, N=2, d=1, σ=0.5, δ=0.5, B=2, η=0.01, λ=0.9, α=1, β=4.
    inp = make_inputs()
    eta, lam, alpha, beta = 0.01, 0.9, 1.0, 4.0
    lam_b = 0.81
    ratio = lam_b / (lam_b - 0.5)  # λ^B/(λ^B − δ) = 0.81/0.31
    s = math.sqrt(2.0 * 2.0 / 1.0 + 4.0)  # √(L(1+α)/(μα) + β) = √8
    w = th.omegas(inp, eta, lam, alpha, beta)
    assert w.tilde1 == pytest.approx(ratio * (1.0 + 0.75 / 0.9))
    assert w.hat1 == pytest.approx(ratio * 2 * 2 * 0.5 * SQ2)
    assert w.tilde3 == pytest.approx(2 * SQ2 * 1.0)
    assert w.hat3 == pytest.approx(SQ2 / 0.9 * s * (0.5 + math.sqrt(2 * 1 / 0.01)))
    assert w.tilde4 == pytest.approx(ratio * (0.5 + 0.25 / 0.9))
    assert w.hat4 == pytest.approx(ratio * 2 * math.sqrt(2 * 0.01 * 2 * 1))  # keeps (3.13)'s B
    g = th.gammas(inp, eta, lam, alpha, beta)
    assert g.g1 == pytest.approx(0.9 * (1 - lam_b) / ((lam_b - 0.5) * (1 - 0.9)))
    assert g.g2 == pytest.approx(2.0 * (1 + 1 / 0.9))
    assert g.g3 == pytest.approx(1 + SQ2 / 0.9 * s)
    assert g.g4 == pytest.approx(0.01 * (1 - lam_b) / ((lam_b - 0.5) * (1 - 0.9)))
    # Pinned numbers worked out on paper: γ₁ = 0.9·1.9/0.31, γ₂ = 2·19/9.
    assert g.g1 == pytest.approx(5.516129032258, rel=1e-12)
    assert g.g2 == pytest.approx(4.222222222222, rel=1e-12)


def test_tracker_bound_by_hand():
    inp = make_inputs()
    eta, lam, alpha, beta = 1e-4, 0.99, 1.0, 4.0
    w = th.omegas(inp, eta, lam, alpha, beta)
    g = th.gammas(inp, eta, lam, alpha, beta)
    gain = g.g1 * g.g2 * g.g3 * g.g4
    assert 0 < gain < 1
    t1 = (
        g.g1 * g.g2 * g.g3 * (w.tilde4 + w.hat4)
        + g.g1 * g.g2 * (w.tilde3 + w.hat3)
        + w.tilde1
        + w.hat1
    ) / (1 - gain)
    t2 = (g.g3 * g.g4 * (w.tilde1 + w.hat1) + g.g3 * (w.tilde4 + w.hat4) + w.tilde3 + w.hat3) / (
        1 - gain
    )
    printed = math.sqrt(2 * t1**2 + 4 * 4.0 / 2 * t2**2 + 4 / 2 * 0.25)  # (3.20): L² = 4, N = 2
    corrected = math.sqrt(2 * t1**2 + 4 * 4.0 * t2**2 + 4 * 0.25)
    assert th.tracker_bound(inp, eta, lam, alpha, beta, variant="printed") == pytest.approx(printed)
    assert th.tracker_bound(inp, eta, lam, alpha, beta) == pytest.approx(corrected)
    # Loop gain >= 1: D bounds nothing.
    assert th.tracker_bound(inp, 1.0, 0.8, alpha, beta) == np.inf


def brute_h(a, b, k):
    return sum(a ** (k - 1 - i) * b**i for i in range(k))


def test_e_terms_by_hand():
    inp = make_inputs()
    mu, L, d, N, B, delta, sigma, x0 = 1.0, 2.0, 1, 2, 2, 0.5, 0.5, 2.0
    eta, k, D = 0.01, 7, 30.0
    e1 = (1 - mu * eta) ** k * (1.0 + math.sqrt(2 * d / (mu * N))) + 1.65 * L / mu * math.sqrt(
        eta * d / N
    )
    h = 1 - eta * L / 2
    a1, b1 = delta ** (2 / B), 1 - eta * mu * h
    hk = brute_h(a1, b1, k)
    net = 3 * L**2 * D**2 * eta / (delta**2 * N * (1 - delta ** (1 / B)) ** 2) + 6 * d * L**2 / (
        delta**2 * (1 - delta ** (2 / B))
    )
    steady = (
        math.sqrt(eta)
        * math.sqrt(eta / (mu * h) + (1 + eta * L) ** 2 / (mu * h) ** 2)
        * math.sqrt(net)
    )
    noise = math.sqrt(eta) * sigma / math.sqrt(mu * h * N)
    printed_tail = math.sqrt(hk) * SQ3 * L / (delta * math.sqrt(N)) * delta ** (1 / B) * x0
    c_eta = eta * (eta + (1 + eta * L) ** 2 / (mu * h))
    corrected_tail = math.sqrt(c_eta * hk) * SQ3 * L / (delta * math.sqrt(N)) * x0
    e3 = (
        SQ3 / (delta * math.sqrt(N)) * delta ** (k / B) * x0
        + SQ3 * D * eta / (delta * math.sqrt(N) * (1 - delta ** (1 / B)))
        + math.sqrt(6 * d * eta) / (delta * math.sqrt(1 - delta ** (2 / B)))
    )
    assert th.e1(inp, k, eta) == pytest.approx(e1)
    assert th.e2(inp, k, eta, D, variant="printed") == pytest.approx(steady + noise + printed_tail)
    assert th.e2(inp, k, eta, D) == pytest.approx(steady + noise + corrected_tail)
    assert th.e3(inp, k, eta, D) == pytest.approx(e3)


@pytest.mark.parametrize("k", [0, 1, 2, 5, 40])
def test_h_k_matches_sum_including_equal_rates(k):
    for a, b in [(0.3, 0.9), (0.9, 0.3), (0.7, 0.7), (0.5, 0.5 + 1e-13)]:
        got = bd._h_k(np, np.log(a), np.log(b), k)
        assert got == pytest.approx(brute_h(a, b, k), rel=1e-9, abs=1e-300)
    # Appendix B (corrected, ERRATA 8): H_k(a, a) = k a^{k−1}.
    assert bd._h_k(np, np.log(0.6), np.log(0.6), k) == pytest.approx(
        k * 0.6 ** (k - 1) if k else 0.0
    )


def _unit_inputs():
    """κ = 1, B = 1, N = 1, δ = 1/2, agents at consensus."""
    return make_inputs(mu=1.0, L=1.0, num_agents=1, B=1, delta=0.5,
                       x_consensus=np.array([0.0]), y_consensus=np.array([0.0]))


def test_lemma36_constants_by_hand():
    # κ = 1, B = 1, N = 1: J₁ = 3·1·1·(1 + 4) = 15.
    inp = _unit_inputs()
    assert th.j1(inp) == pytest.approx(15.0)
    assert th.eta_bar(inp) == pytest.approx(1.5 * 0.25 / 15)  # 0.025
    assert th.eta_bar(inp, variant="printed") == pytest.approx(3 * 0.75 / 15)  # 0.15
    root = math.sqrt(225 + 0.75 * 15)
    assert th.lambda_lower(inp) == pytest.approx((root + 0.5) / 16)
    eta_c = 1.5 * (root - 0.5 * 15) ** 2 / (15 * 16**2)
    assert th.eta_check(inp) == pytest.approx(eta_c)
    # The two branches of (3.24) meet at η̌ and give λ̲ there.
    assert th.lemma36_lambda(inp, eta_c) == pytest.approx(th.lambda_lower(inp))
    assert th.lemma36_lambda(inp, eta_c * 0.5) == pytest.approx(math.sqrt(1 - eta_c * 0.5 / 1.5))
    assert eta_c == pytest.approx(0.024195, rel=1e-4)  # η̌ < 0.0245 < η̄ = 0.025: second branch
    assert th.lemma36_lambda(inp, 0.0245) == pytest.approx(math.sqrt(0.0245 * 15 / 1.5) + 0.5)


def test_corollary37_by_hand():
    inp = make_inputs(sigma2=0.0, B=1, x_consensus=np.array([0.5]), y_consensus=np.array([1.0]))
    mu, L, d, N, delta, x0, eps = 1.0, 2.0, 1, 2, 0.5, 2.0, 0.1
    lem = th.lemma36(inp)
    eb, Db = lem.eta_bar, lem.D_bar
    assert Db == pytest.approx(
        th.tracker_bound(inp, eb, th.lambda_lower(inp), 1.0, 2 * L / mu) * math.sqrt(eb)
    )
    net_noise = math.sqrt(6 * d * L**2 / (delta**2 * (1 - delta**2)))
    net_drift = math.sqrt(3 * L**2 / (delta**2 * N * (1 - delta) ** 2))
    C1 = 1.0 + math.sqrt(2 * d / (mu * N))
    margin = 1 - eb * mu / 1.5 - delta**2
    C2 = (
        math.sqrt(eb * (eb + 3 / mu) / margin) * SQ3 * L / (delta * math.sqrt(N)) * x0
        + SQ3 / (delta * math.sqrt(N)) * x0
    )
    # Printed: no c_η factor, an extra δ^{1/B}, and the printed η̄ in the margin.
    margin_p = 1 - th.eta_bar(inp, variant="printed") * mu / 1.5 - delta**2
    C2p = (
        1 / math.sqrt(margin_p) * SQ3 * L / (delta * math.sqrt(N)) * delta * x0
        + SQ3 / (delta * math.sqrt(N)) * x0
    )
    C3 = (
        1.65 * L / mu * math.sqrt(d / N)
        + math.sqrt(6 * d) / (delta * math.sqrt(1 - delta**2))
        + 2 / mu * net_noise
        + SQ3 * Db / (delta * math.sqrt(N) * (1 - delta))
        + 2 / mu * net_drift * Db
    )
    C4 = 2 / math.sqrt(3 * mu) * (net_noise + net_drift * Db)
    eta_star = min(eb, eps**2 / (9 * C3**2), eps / (3 * C4))
    cor = th.corollary37(inp, eps)
    assert (cor.C1, cor.C2, cor.C3, cor.C4) == pytest.approx((C1, C2, C3, C4))
    assert cor.eta_star == pytest.approx(eta_star)
    assert cor.k_star == pytest.approx(3 / (mu * eta_star) * math.log(3 * (C1 + C2) / eps))
    printed = th.corollary37(inp, eps, variant="printed")
    assert printed.C2 == pytest.approx(C2p)
    if np.isfinite(printed.eta_star) and printed.eta_star > 0:
        assert printed.k_star == pytest.approx(
            3 / (mu * printed.eta_star) * math.log(4 * (C1 + printed.C2) / eps)
        )


# ---------------------------------------------------------------- the paper's claims


def sweep_inputs(rng, count):
    """Random constants: κ ∈ [1, 100], N ∈ 2..50, B ∈ 1..6, δ ∈ (0.01, 0.99)."""
    for _ in range(count):
        mu = 10 ** rng.uniform(-2, 1)
        B = int(rng.integers(1, 7))
        yield make_inputs(
            mu=mu,
            L=mu * 10 ** rng.uniform(0, 2),
            num_agents=int(rng.integers(2, 51)),
            dim=int(rng.integers(1, 10)),
            sigma2=float(rng.uniform(0, 2)),
            delta=float(rng.uniform(0.01, 0.99)),
            B=B,
            x_consensus=rng.uniform(0, 3, B),
            y_consensus=rng.uniform(0, 10, B),
        )


def test_lemma36_choices_satisfy_316_on_a_sweep():
    rng = np.random.default_rng(0)
    fractions = np.array([1e-8, 1e-3, 0.1, 0.5, 0.9, 0.999])
    for inp in sweep_inputs(rng, 200):
        etas = fractions * th.eta_bar(inp)
        lam = th.lemma36_lambda(inp, etas)
        cond = th.conditions_316(inp, etas, lam, 1.0, 2 * inp.L / inp.mu)
        assert np.all(cond.holds), (inp, th.failed_conditions(cond))
        assert np.all(lam >= th.lambda_lower(inp) * (1 - 1e-12))
        # D̄ is finite (γ̄₁γ̄₂γ̄₃γ̄₄ < 1) and bounds D√η, as Lemma 3.6 claims.
        lem = th.lemma36(inp)
        assert lem.gain_bar < 1
        D = th.tracker_bound(inp, etas, lam, 1.0, 2 * inp.L / inp.mu)
        assert np.all(D * np.sqrt(etas) <= lem.D_bar * (1 + 1e-9))


def test_printed_eta_bar_violates_316():
    # ERRATA 1: λ(η̄)^B = √(2(1−δ²)) + δ > 1 for every δ ∈ (0, 1).
    rng = np.random.default_rng(1)
    for inp in sweep_inputs(rng, 100):
        eta = th.eta_bar(inp, variant="printed")
        lam = th.lemma36_lambda(inp, eta)
        d = inp.delta
        assert lam**inp.B == pytest.approx(math.sqrt(2 * (1 - d**2)) + d)
        cond = th.conditions_316(inp, eta, lam, 1.0, 2 * inp.L / inp.mu)
        assert not cond.holds and "lambda_range" in th.failed_conditions(cond)
        # The corrected η̄ is the edge: λ(η̄) = 1 exactly (the interval is open on the right).
        assert th.lemma36_lambda(inp, th.eta_bar(inp)) ** inp.B == pytest.approx(1.0)


def test_printed_d_bar_can_be_vacuous():
    # ERRATA 2: with the printed η̄ the barred loop gain can exceed 1 (D̄ = inf).
    inp = _unit_inputs()
    assert th.lemma36(inp, variant="printed").gain_bar > 1
    assert th.lemma36(inp, variant="printed").D_bar == np.inf
    assert th.lemma36(inp).gain_bar < 1


def test_max_step_316_is_the_edge():
    rng = np.random.default_rng(2)
    for inp in sweep_inputs(rng, 50):
        top = th.max_step_316(inp)
        assert top >= th.eta_bar(inp)  # Lemma 3.6 is one feasible choice among many
        for eta, ok in ((top * 0.999, True), (top * 1.001, False)):
            cond = th.conditions_316(inp, eta, *th.optimal_parameters(inp, eta))
            assert bool(cond.holds) == ok


def test_optimal_parameters_give_the_smallest_bound():
    rng = np.random.default_rng(3)
    for inp in sweep_inputs(rng, 30):
        eta = 0.5 * th.eta_bar(inp)
        best = th.theorem35(inp, 10, eta, *th.optimal_parameters(inp, eta))
        paper = th.theorem35(inp, 10, eta)
        assert best.valid and paper.valid
        assert best.total <= paper.total * (1 + 1e-12)


def test_corollary37_envelope_reaches_epsilon():
    # With η = η*(ε) and k ≥ k*(ε), Theorem 3.5's bound is ≤ ε (checked on the bound itself).
    inp = make_inputs(
        mu=1.0,
        L=1.2,
        num_agents=2,
        dim=1,
        sigma2=0.0,
        delta=0.2,
        B=1,
        x_consensus=np.array([0.3]),
        y_consensus=np.array([0.5]),
    )
    for eps in (1.0, 0.3):
        cor = th.corollary37(inp, eps)
        terms = th.theorem35(inp, np.ceil(cor.k_star), cor.eta_star)
        assert terms.valid
        assert terms.total <= eps


@pytest.mark.slow
def test_jax_path_matches_numpy_and_jits():
    inp = make_inputs()
    ks = np.arange(0, 50, 7)
    etas = np.geomspace(1e-5, 1e-3, 4)[:, None]
    ref = th.theorem35(inp, ks, etas)
    with jax.enable_x64(True):
        jinp = inp._replace(
            x_consensus=jnp.asarray(inp.x_consensus), y_consensus=jnp.asarray(inp.y_consensus)
        )
        out = jax.jit(lambda k, e: th.theorem35(jinp, k, e))(jnp.asarray(ks), jnp.asarray(etas))
        np.testing.assert_allclose(np.asarray(out.total), ref.total, rtol=1e-10)
        # vmap over step sizes, under the strict rank-promotion setting of conftest.
        per = jax.vmap(lambda e: th.theorem35(jinp, jnp.asarray(ks), e).total)(
            jnp.asarray(etas[:, 0])
        )
        np.testing.assert_allclose(np.asarray(per), ref.total, rtol=1e-10)


def test_consensus_inputs_broadcast_with_step_grid():
    # Leading axes of the consensus inputs broadcast with `eta` (one row per step size).
    xc = np.array([[0.5, 0.2], [0.6, 0.3], [0.7, 0.4]])
    yc = np.array([[1.0, 0.7], [1.1, 0.8], [1.2, 0.9]])
    inp = make_inputs(x_consensus=xc[:, None, :], y_consensus=yc[:, None, :])
    etas = np.array([1e-5, 1e-4, 1e-3])
    out = th.theorem35(inp, np.arange(4)[None, :], etas[:, None])
    assert out.total.shape == (3, 4)
    for i in range(3):
        one = make_inputs(x_consensus=xc[i], y_consensus=yc[i])
        np.testing.assert_allclose(out.total[i], th.theorem35(one, np.arange(4), etas[i]).total)
