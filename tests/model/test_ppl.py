"""numpyro models as potentials: the same numbers as the model written by hand, numpyro's own
log-density and transforms, NUTS's posterior, and clear errors for models that do not factor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer.util import constrain_fn, potential_energy  # noqa: E402

import dgsgld  # noqa: E402
from dgsgld.model import ppl as ppl  # noqa: E402

NUM_AGENTS, LOCAL, DIM = 4, 5, 2


def regression(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[-1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.deterministic("variance", sigma**2)
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ beta, sigma), obs=y)


# The same model by hand, on the same unconstrained space: sigma = exp(u), log|dsigma/du| = u.
def hand_log_likelihood(params, datum):
    sigma = jnp.exp(params["sigma"])
    r = (datum["y"] - datum["x"] @ params["beta"]) / sigma
    return -0.5 * r**2 - jnp.log(sigma) - 0.5 * jnp.log(2 * jnp.pi)


def hand_log_prior(params):
    sigma = jnp.exp(params["sigma"])
    beta = -0.5 * jnp.sum(params["beta"] ** 2) - 0.5 * DIM * jnp.log(2 * jnp.pi)
    half_normal = jnp.log(2.0) - 0.5 * jnp.log(2 * jnp.pi) - 0.5 * sigma**2
    return beta + half_normal + params["sigma"]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(NUM_AGENTS, LOCAL, DIM)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + 0.3 * rng.normal(size=(NUM_AGENTS, LOCAL)))
    return {"x": x, "y": y.astype(np.float32)}


@pytest.fixture(scope="module")
def potentials():
    data = _data()
    return (dgsgld.Potential.from_numpyro(regression, data, batch_size=2),
            dgsgld.Potential(hand_log_likelihood, hand_log_prior, data, batch_size=2), data)


def test_numpyro_potential_equals_the_model_written_by_hand(potentials):
    auto, hand, data = potentials
    # 3 chains, as test_constrain_maps_draws_back_like_numpyro draws: the same init programs.
    init = ppl.init_params(auto, jax.random.key(0), 3)
    x = jax.tree.map(lambda leaf: leaf[0], init)  # (N, ...) one point per agent
    point = jax.tree.map(lambda leaf: leaf[0], x)
    pooled = {k: v.reshape(NUM_AGENTS * LOCAL, *v.shape[2:]) for k, v in data.items()}

    @jax.jit  # one program (op by op, every numpyro operation would compile alone)
    def numbers(x, key):
        return ([(pot.agent_values(x), pot.full_grad(x), pot.grad(x, key)) for pot in (auto, hand)],
                auto.value(point), potential_energy(regression, (), pooled, point))

    ((values, full, stochastic), want), pooled_value, energy = numbers(x, jax.random.key(3))
    np.testing.assert_allclose(values, want[0], rtol=1e-5)
    # Same mini-batches (the key picks the indices, whatever the model) and the same gradients
    # to float32 rounding: full batch and stochastic.
    for got, ref in ((full, want[1]), (stochastic, want[2])):
        for name in ("beta", "sigma"):
            np.testing.assert_allclose(got[name], ref[name], rtol=2e-5, atol=2e-5)
    # The pooled potential is numpyro's own potential energy (log-density of the pooled data
    # plus the log-Jacobian, negated) at one point.
    np.testing.assert_allclose(pooled_value, energy, rtol=1e-5)


def test_constrain_maps_draws_back_like_numpyro(potentials):
    auto, _, _ = potentials
    info = ppl.numpyro_model(auto)
    assert (info.plate, list(info.latent), info.observed, info.deterministic) == (
        "data", ["beta", "sigma"], ("y",), ("variance",))
    draws = ppl.init_params(auto, jax.random.key(1), 3)  # (chains, agents, ...)
    draws = jax.tree.map(lambda leaf: jnp.stack([leaf, -leaf], axis=1), draws)  # (3, 2, N, ..)
    out = jax.jit(lambda d: ppl.constrain(auto, d))(draws)
    assert out["beta"].shape == (3, 2, NUM_AGENTS, DIM) and out["sigma"].shape == (3, 2, 4)
    np.testing.assert_allclose(out["sigma"], np.exp(draws["sigma"]), rtol=1e-6)
    np.testing.assert_allclose(out["variance"], np.exp(2 * draws["sigma"]), rtol=1e-5)
    np.testing.assert_array_equal(out["beta"], draws["beta"])


def simplex(counts=None):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    with numpyro.plate("obs", counts.shape[0]):
        numpyro.sample("c", dist.Categorical(probs=w), obs=counts)


def test_simplex_site_lives_on_its_unconstrained_space():
    data = {"counts": np.array([[0, 1, 2, 2], [1, 1, 0, 2]])}
    pot = dgsgld.Potential.from_numpyro(simplex, data)
    assert ppl.numpyro_model(pot).latent["w"] == ppl.Site((3,), (2,))
    u = ppl.init_params(pot, jax.random.key(2), 5, agents=False)  # (5, 2)
    pooled = {"counts": data["counts"].reshape(-1)}

    @jax.jit
    def numbers(u):
        numpyro_w = jax.vmap(lambda p: constrain_fn(simplex, (), pooled, p)["w"])(u)
        point = {"w": u["w"][0]}
        return (ppl.constrain(pot, u)["w"], numpyro_w, pot.value(point),
                potential_energy(simplex, (), pooled, point))

    ours, theirs, value, energy = numbers(u)
    assert ours.shape == (5, 3)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    np.testing.assert_allclose(ours.sum(-1), 1.0, rtol=1e-6)
    # Dirichlet(1) prior, categorical counts pooled: the potential is numpyro's.
    np.testing.assert_allclose(value, energy, rtol=1e-5)


# ---------------------------------------------------------------- models that do not fit


def local_latent(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(beta * x + z, 1.0), obs=y)


def fixed_plate(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", 20):
        numpyro.sample("y", dist.Normal(beta, 1.0), obs=y)


def subsampled(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", 100, subsample_size=x.shape[0]):
        numpyro.sample("y", dist.Normal(beta * x, 1.0), obs=y)


@pytest.mark.reliability
def test_models_that_do_not_factor_per_datum_are_refused():
    data = {"x": np.ones((2, 3), np.float32), "y": np.zeros((2, 3), np.float32)}
    with pytest.raises(ValueError, match="latent site 'z' is inside the data plate 'data'"):
        dgsgld.Potential.from_numpyro(local_latent, data)
    with pytest.raises(ValueError, match="found no plate over the data: no observed site"):
        dgsgld.Potential.from_numpyro(fixed_plate, data)  # a plate of 20 whatever the data
    with pytest.raises(ValueError, match="observed site 'y' is scaled"):
        dgsgld.Potential.from_numpyro(subsampled, data)
    with pytest.raises(ValueError, match=r"`plate` = 'rows' holds no observed site"):
        dgsgld.Potential.from_numpyro(regression, _data(), plate="rows")
    with pytest.raises(ValueError, match=r"`data` leaves must share leading axes"):
        dgsgld.Potential.from_numpyro(regression, {"x": np.ones((2, 3, 2)), "y": np.ones(2)})
    with pytest.raises(TypeError, match="was not built by Potential.from_numpyro"):
        ppl.constrain(dgsgld.Potential(hand_log_likelihood, None, _data()), {})


@pytest.mark.reliability
def test_constrain_names_the_site_of_a_wrong_draw(potentials):
    auto, _, _ = potentials
    with pytest.raises(ValueError, match=r"`draws` lacks the latent sites \['sigma'\]"):
        ppl.constrain(auto, {"beta": jnp.zeros((3, DIM))})
    with pytest.raises(ValueError, match=r"`draws`\['beta'\] must end in the site's "
                                         r"unconstrained shape \(2,\); got shape \(3, 4\)"):
        ppl.constrain(auto, {"beta": jnp.zeros((3, 4)), "sigma": jnp.zeros(3)})


# ---------------------------------------------------------------- against NUTS


def poisson(x, y=None):
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 1.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(alpha + beta * x)), obs=y)


@pytest.mark.slow
def test_diging_sgld_on_a_numpyro_model_matches_nuts():
    """Fast twin: test_numpyro_potential_equals_the_model_written_by_hand."""
    from numpyro.infer import MCMC, NUTS

    from dgsgld import evaluate, networks

    rng = np.random.default_rng(0)
    n_agents, local = 6, 10
    x = rng.normal(size=(n_agents, local)).astype(np.float32)
    y = rng.poisson(np.exp(0.5 + 0.4 * x)).astype(np.float32)
    mcmc = MCMC(NUTS(poisson), num_warmup=500, num_samples=2000, num_chains=2,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.key(0), x=x.reshape(-1), y=y.reshape(-1))
    nuts = mcmc.get_samples(group_by_chain=True)  # (2, 2000)

    pot = dgsgld.Potential.from_numpyro(poisson, {"x": x, "y": y})
    init = ppl.init_params(pot, jax.random.key(1), 32, radius=0.5)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(2e-3), pot, networks.ring(n_agents), init,
                          jax.random.key(2), 6000, output=dgsgld.Output(thin=10, burn_in=1000))
    decentralized = ppl.constrain(pot, evaluate.network_average(trace.positions))
    # The centralized sampler on the same potential: no agent axis, step η / N.
    init = ppl.init_params(pot, jax.random.key(3), 32, agents=False, radius=0.5)
    trace = dgsgld.sample(dgsgld.SGLD(2e-3 / n_agents), pot, None, init, jax.random.key(4),
                          6000, output=dgsgld.Output(thin=10, burn_in=1000))
    centralized = ppl.constrain(pot, trace.positions)
    for draws in (decentralized, centralized):  # leaves (32, 501)
        for name in ("alpha", "beta"):
            ours, ref = np.asarray(draws[name]), np.asarray(nuts[name])
            mcse = [v.std() / np.sqrt(float(evaluate.ess(v))) for v in (ours, ref)]
            # Means agree within 4 joint Monte Carlo standard errors (a z-test at p ≈ 6e-5);
            # the step's O(η) bias is ~1e-3 posterior sd here, far below either error. The
            # sd's relative error from ESS ≥ 500 draws is below 0.05 each, so 0.15 is 3 sds.
            assert abs(ours.mean() - ref.mean()) < 4 * np.hypot(*mcse), (name, ours.mean(),
                                                                         ref.mean(), mcse)
            assert abs(ours.std() / ref.std() - 1) < 0.15
