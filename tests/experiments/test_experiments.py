"""The experiments package: problems, configurations, step-size tuning, Figures 2 and 3.

Fast tests check the problems and configurations; the real figure code at toy sizes
(structure and exact invariants) and the reduced-size statistical comparisons of the paper's
claims are marked ``slow``.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
import experiments as ex
from dgsgld import tuning
from dgsgld.posteriors import problems

# ---------------------------------------------------------------- problems


def test_linear_problem_matches_the_closed_form_posterior():
    problem = problems.linear_regression_problem(3)
    assert problem.features.shape == (20, 5, 6) and problem.targets.shape == (20, 5)
    np.testing.assert_array_equal(problem.features[..., -1], 1.0)  # intercept column
    potential = problem.potential()
    mean = problem.posterior_mean
    # The posterior mean is the minimizer of f = sum_i f_i: the agents' gradients there sum
    # to zero. Scale: each f_i's gradient is O(10) at m̂, float32 rounding O(1e-5) each.
    grads = jax.jit(lambda x: potential.full_grad(x))(jnp.broadcast_to(mean, (20, 6)))
    np.testing.assert_allclose(np.asarray(grads.sum(axis=0)), 0.0, atol=2e-3)
    # f is quadratic: its Hessian is the posterior precision Σ̂⁻¹ = ZᵀZ + λI.
    hessian = jax.jit(jax.hessian(lambda x: potential.value(x)))(mean)
    np.testing.assert_allclose(
        np.asarray(hessian),
        np.linalg.inv(np.asarray(problem.posterior_cov, np.float64)),
        rtol=2e-4,
        atol=2e-3,
    )
    # Deterministic in the seed, different across seeds.
    again = problems.linear_regression_problem(3)
    np.testing.assert_array_equal(problem.targets, again.targets)
    assert not np.allclose(problem.targets, problems.linear_regression_problem(4).targets)


def test_linear_problem_rejects_uneven_split():
    with pytest.raises(ValueError, match="num_agents"):
        problems.linear_regression_problem(0, num_samples=100, num_agents=7)


@pytest.mark.parametrize("partition", ["by_label", "random"])
def test_logistic_problem_is_balanced_and_split_as_documented(partition):
    problem = problems.logistic_regression_problem(0, partition=partition)
    assert problem.features.shape == (20, 19, 6)
    assert problem.test_features.shape == (180, 6) and problem.test_targets.shape == (180,)
    labels = np.asarray(problem.targets)
    assert labels.sum() == 190  # 380 balanced training samples
    if partition == "by_label":
        # Sorted by class: agents 0..9 (one barbell clique) class 0, agents 10..19 class 1.
        np.testing.assert_array_equal(labels[:10], 0.0)
        np.testing.assert_array_equal(labels[10:], 1.0)
    else:
        # Shuffled: every agent holds both classes (an agent of 19 is single-class with
        # probability about 2 * 2^-19), and the first clique holds about half of class 1
        # (hypergeometric: mean 95, standard deviation 4.9).
        assert np.all((labels.sum(axis=1) > 0) & (labels.sum(axis=1) < 19))
        assert abs(labels[:10].sum() - 95) < 25
    # Both partitions deal the same training set.
    other = problems.logistic_regression_problem(
        0, partition="random" if partition == "by_label" else "by_label"
    )
    rows = lambda p: np.sort(np.asarray(p.features).reshape(-1, 6), axis=0)
    np.testing.assert_array_equal(rows(problem), rows(other))


def test_logistic_problem_errors_name_the_argument():
    with pytest.raises(ValueError, match="train_size"):
        problems.logistic_regression_problem(0, train_size=381)
    with pytest.raises(ValueError, match="partition"):
        problems.logistic_regression_problem(0, partition="sorted")


def test_breast_cancer_problem_encoding_and_split():
    problem = problems.breast_cancer_problem(0)
    assert problem.features.shape == (30, 1, 31)
    # §4.2.2's 51 training samples: round(51/569 * 212) + round(51/569 * 357) = 19 + 32.
    assert problem.test_features.shape == (569 - 51, 31)
    assert float(problem.targets.sum()) == 15.0
    np.testing.assert_array_equal(problem.features[..., -1], 1.0)
    # Label 1 = benign: benign tumours have a smaller mean radius (feature 0) than malignant
    # ones, by about one standard deviation on this data set.
    z, y = np.asarray(problem.test_features), np.asarray(problem.test_targets)
    assert z[y == 1, 0].mean() < z[y == 0, 0].mean() - 1.0
    # Validation (for tuning): the 51 - 30 training-split samples balancing left out (19 - 15
    # malignant, 32 - 15 benign), none of them a training or test sample.
    val = np.asarray(problem.validation_features)
    assert val.shape == (21, 31) and float(problem.validation_targets.sum()) == 17.0
    train = np.asarray(problem.features).reshape(-1, 31)
    for other in (z, train):
        assert not (val[:, None, :] == other[None, :, :]).all(-1).any()
    # A 31-parameter Bayesian logistic regression with 30 data still separates the classes:
    # the MAP estimate (prior λ = 0.3) classifies the test set well.
    pot = problem.potential()

    @jax.jit
    def map_estimate():  # gradient descent on f = sum_i f_i
        def step(_, x):
            return x - 0.02 * pot.full_grad(jnp.broadcast_to(x, (30, 31))).sum(axis=0)

        return jax.lax.fori_loop(0, 300, step, jnp.zeros(31))

    assert float(problem.test_accuracy(map_estimate())) > 0.85


def test_accuracy_counts_sign_agreement():
    features = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    targets = jnp.array([1.0, 1.0, 0.0, 1.0])
    params = jnp.array([[1.0, 1.0], [-1.0, -1.0]])
    # x=(1,1): logits (1,1,-1,-1) -> predictions (1,1,0,0): 3 of 4 right; the negation 1 of 4.
    got = dgsgld.evaluate.label_accuracy(problems.logistic_labels(params, features), targets > 0.5)
    np.testing.assert_allclose(np.asarray(got), [0.75, 0.25])


# ---------------------------------------------------------------- configurations


def test_presets_follow_section_4():
    a, b, c = (ex.FIGURES[f"fig2{v}"] for v in "abc")
    for cfg in (a, b, c):
        assert (cfg.num_samples, cfg.dim, cfg.num_agents, cfg.prior_precision) == (100, 5, 20, 0.1)
        assert (cfg.trials, cfg.num_steps, cfg.period) == (200, 100, 50)
    assert (a.network, a.batch_size) == ("barbell", None)
    assert (b.network, b.batch_size) == ("barbell", 3)
    assert (c.network, c.batch_size) == ("lollipop", None)
    s1, s2, bc = (ex.FIGURES[f"fig3{v}"] for v in "abc")
    for cfg in (s1, s2):
        assert (
            cfg.dataset,
            cfg.num_samples,
            cfg.dim,
            cfg.train_fraction,
            cfg.train_size,
            cfg.num_agents,
            cfg.batch_size,
            cfg.prior_precision,
        ) == ("synthetic", 600, 5, 0.7, 380, 20, 1, 0.1)
    assert (s1.network, s2.network) == ("barbell", "lollipop")
    assert (
        bc.dataset,
        bc.train_fraction,
        bc.train_size,
        bc.num_agents,
        bc.batch_size,
        bc.prior_precision,
        bc.network,
    ) == ("breast_cancer", 51 / 569, 30, 30, 1, 0.3, "barbell")



def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="network"):
        ex.LinearRegressionConfig(network="ring")
    with pytest.raises(ValueError, match="trials"):
        ex.LinearRegressionConfig(trials=1)
    with pytest.raises(ValueError, match="step_min"):
        ex.LogisticRegressionConfig(step_min=1.0, step_max=0.1)
    with pytest.raises(ValueError, match="Unknown key 'step'.*valid keys: .*step_max"):
        ex.apply_overrides(ex.FIGURES["fig2a"], {"step": 0.1})


def test_toml_overrides_resolve_and_reject_unknown_keys(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text(
        'trials = 50\n[fig2]\nnum_steps = 30\nbatch_size = "full"\n'
        "[fig2b]\nnum_steps = 40\nbatch_size = 2\n[fig3c]\nprior_precision = 0.5\n"
    )
    resolved = ex.load_overrides(path, ["fig2a", "fig2b", "fig3c"])
    a = ex.apply_overrides(ex.FIGURES["fig2a"], resolved["fig2a"])
    b = ex.apply_overrides(ex.FIGURES["fig2b"], resolved["fig2b"])
    c = ex.apply_overrides(ex.FIGURES["fig3c"], resolved["fig3c"])
    assert (a.trials, a.num_steps, a.batch_size) == (50, 30, None)
    assert (b.trials, b.num_steps, b.batch_size) == (50, 40, 2)  # figure table wins
    assert (c.trials, c.prior_precision, c.num_steps) == (50, 0.5, 100)

    path.write_text("[fig3]\nlearning_rate = 0.1\n")  # a Fig. 2-only key
    with pytest.raises(ValueError, match=r"'learning_rate' at \[fig3\].*valid keys: .*partition"):
        ex.load_overrides(path, ["fig3a"])
    path.write_text("[fig4]\ntrials = 3\n")
    with pytest.raises(ValueError, match=r"Unknown table \[fig4\].*fig2a"):
        ex.load_overrides(path, ["fig2a"])
    path.write_text("num_step = 3\n")
    with pytest.raises(ValueError, match="Unknown key 'num_step' at the top level"):
        ex.load_overrides(path, ["fig2a"])
    path.write_text("trials = 0\n")
    with pytest.raises(ValueError, match="trials"):
        ex.load_overrides(path, ["fig2a"])


# ---------------------------------------------------------------- tuning


def _small_linear(num_agents=4):
    problem = problems.linear_regression_problem(
        0, num_samples=8 * num_agents, dim=2, num_agents=num_agents
    )
    schedule = dgsgld.networks.barbell(num_agents, period=5, seed=0)
    return problem, problem.potential(), schedule.matrices


@pytest.mark.slow  # a compile grid; default run:
# tests/samplers/test_samplers.py's vmap over step sizes
def test_grid_search_equals_separate_runs_and_flags_divergence():
    _, potential, mixing = _small_linear()
    init = jax.random.normal(jax.random.key(0), (16, 4, 3))
    key = jax.random.key(1)

    def final_mean(trace):
        return jnp.mean(trace.state.position[..., 0])

    grid = np.array([1e-3, 1e-2, 1e3], np.float32)  # the last one overflows
    search = tuning.grid_search(
        dgsgld.DIGingSGLD, grid, potential, mixing, init, key, 20, score_fn=final_mean, mode="max"
    )
    for eta, score in zip(grid[:2], search.scores[:2]):
        trace = dgsgld.sample(dgsgld.DIGingSGLD(float(eta)), potential, mixing, init, key, 20)
        # Same keys, same initial points: the vmapped grid point is this very run (float32
        # reassociation only).
        np.testing.assert_allclose(score, float(final_mean(trace)), rtol=1e-5, atol=1e-6)
    assert list(search.diverged) == [False, False, True]
    assert search.scores[2] == 0.0  # worst accuracy-like score when maximizing
    assert search.best_index == int(np.argmax(search.scores[:2]))
    with pytest.raises(ValueError, match="step_sizes"):
        tuning.grid_search(
            dgsgld.DIGingSGLD, [-1.0], potential, mixing, init, key, 5, score_fn=final_mean
        )


def test_log_grid():
    grid = tuning.log_grid(1e-3, 1e-1, 5)
    np.testing.assert_allclose(grid, [1e-3, 10**-2.5, 1e-2, 10**-1.5, 1e-1], rtol=1e-6)
    with pytest.raises(ValueError, match="low"):
        tuning.log_grid(0.0, 1.0, 3)


@pytest.mark.slow
def test_gradient_tuning_lands_near_the_grid_optimum():
    problem, potential, mixing = _small_linear()
    init = jax.random.normal(jax.random.key(0), (128, 4, 3))
    key = jax.random.key(1)
    target = (problem.posterior_mean, problem.posterior_cov)
    from experiments.figures import _FinalW2, _stream, _W2Criterion

    grid = tuning.log_grid(1e-3, 0.3, 31)
    search = tuning.grid_search(
        dgsgld.DIGingSGLD,
        grid,
        potential,
        mixing,
        init,
        key,
        40,
        score_fn=_FinalW2(*target),
        ensemble_fn=_stream(),
    )
    assert 0 < search.best_index < grid.size - 1  # an interior optimum
    tuned = tuning.tune_step_size_gradient(
        dgsgld.DIGingSGLD,
        potential,
        mixing,
        init,
        key,
        40,
        _W2Criterion(*target),
        3 * search.best_step_size,
        num_iterations=40,
        learning_rate=0.1,
    )
    # Same criterion, same chains: the minimizer over the continuum lies within two grid
    # spacings (factor 1.2 each) of the grid minimizer unless the curve is flat there, in
    # which case the criterion values must agree.
    ratio = tuned.step_size / search.best_step_size
    best_grid = search.scores[search.best_index]
    assert abs(np.log(ratio)) < 2 * np.log(grid[1] / grid[0]) or (
        np.nanmin(tuned.losses) <= 1.02 * best_grid
    )
    assert np.nanmin(tuned.losses) <= 1.02 * best_grid


# ---------------------------------------------------------------- figures at toy size


# Toy sizes: the real code path (every compiled program of a figure) in a few seconds.
# Gradient tuning has its own (slow) test.
_TINY2 = {
    "num_steps": 12,
    "num_step_sizes": 4,
    "step_min": 1e-3,
    "step_max": 1e-2,
    "gradient_tuning": False,
}


@pytest.fixture(scope="module")
def fig2_toy():
    return ex.fig2("a", trials=12, seed=1, overrides=_TINY2)


@pytest.mark.slow  # fast twins (the toy run compiles a grid run per algorithm, ~10 s in all):
# tests/tuning/test_tuning.py::test_every_grid_point_and_split_is_a_plain_run_with_the_same_draws
# (the figures' grid runner), tests/evaluate/test_streaming.py (the streamed W2 curves),
# test_linear_problem_matches_the_closed_form_posterior (the problem and its posterior)
def test_fig2_toy_run_structure_and_invariants(fig2_toy):
    res = fig2_toy
    assert res.metric == "W2" and set(res.algorithms) == set(ex.ALGORITHMS)
    dig, de, cen = (res.algorithms[k] for k in ex.ALGORITHMS)
    for r in (dig, de):
        assert r.per_agent.shape == (13, 20)
        np.testing.assert_allclose(r.mean, r.per_agent.mean(axis=1))
        np.testing.assert_allclose(r.std, r.per_agent.std(axis=1))
        # The chosen step is the grid's best final W2 and the reported curve ends there.
        assert r.step_size == r.grid[np.argmin(r.grid_scores)]
        np.testing.assert_allclose(r.final, r.grid_scores.min(), rtol=1e-4)
    # DIGing-SGLD and DE-SGLD start from the same chains: identical W2 at iteration 0.
    np.testing.assert_array_equal(dig.per_agent[0], de.per_agent[0])
    np.testing.assert_array_equal(dig.consensus[0], de.consensus[0])
    assert cen.per_agent.shape == (13, 1) and np.all(cen.std == 0) and cen.gradient is None
    # Centralized SGLD's grid: from step_min / N (its natural scale), same log spacing, up to
    # step_max.
    np.testing.assert_allclose(cen.grid[0], dig.grid[0] / 20, rtol=1e-6)
    np.testing.assert_allclose(cen.grid[-1], dig.grid[-1], rtol=1e-6)
    spacing = np.diff(np.log(cen.grid))
    np.testing.assert_allclose(spacing, spacing[0], rtol=1e-4)
    assert spacing[0] <= np.log(dig.grid[1] / dig.grid[0]) + 1e-6
    # Iteration 0 is N(0, I) against the posterior: W2 >= the distance between the means.
    gap = float(jnp.linalg.norm(
        problems.linear_regression_problem(res.seeds["data"]).posterior_mean))
    assert np.all(dig.per_agent[0] >= gap - 0.5)
    json.dumps(res.to_dict())  # JSON-ready


@pytest.mark.slow  # fast twins: those of the Fig. 2 toy run (above), the same pipeline
def test_fig3_toy_run_structure_and_invariants():
    tiny = {"num_steps": 10, "num_step_sizes": 3, "step_min": 1e-3, "step_max": 1e-2}
    res = ex.fig3("a", trials=12, seed=1, overrides=tiny)
    assert res.metric == "accuracy"
    dig, de, cen = (res.algorithms[k] for k in ex.ALGORITHMS)
    for r in (dig, de, cen):
        assert np.all((r.per_agent >= 0) & (r.per_agent <= 1))
        assert r.step_size == r.grid[np.argmax(r.grid_scores)]
        np.testing.assert_allclose(r.final, r.grid_scores.max(), rtol=1e-5)
    np.testing.assert_array_equal(dig.per_agent[0], de.per_agent[0])
    # Random N(0, I) starts: each chain's accuracy is some fraction, but by the symmetry
    # x -> -x of the start distribution the trial average of a balanced-ish test set is near
    # 1/2 (12 chains: standard error below 0.15).
    assert abs(dig.mean[0] - 0.5) < 0.2
    assert 0.0 < res.references["accuracy of the true parameter"] <= 1.0


def test_run_figure_rejects_bad_names_and_configs():
    with pytest.raises(ValueError, match="fig2a"):
        ex.run_figure("fig4a")
    with pytest.raises(ValueError, match="variant"):
        ex.fig2("d")
    with pytest.raises(ValueError, match="LogisticRegressionConfig"):
        ex.fig3("a", config=ex.FIGURES["fig2a"])


@pytest.mark.slow  # needs the Fig. 2 toy run; fast twins: those of that run (above)
def test_save_result_and_summary(fig2_toy, tmp_path):
    res = fig2_toy
    paths = ex.save_result(res, tmp_path, plot=True)
    data = json.loads(paths[0].read_text())
    assert data["config"]["network"] == "barbell" and data["seed"] == 1
    assert set(data["seeds"]) == {"data", "network", "init", "sampling", "reference"}
    dig = data["algorithms"]["DIGing-SGLD"]
    assert len(dig["mean"]) == 13 and dig["step_size"] == res.algorithms["DIGing-SGLD"].step_size
    assert len(dig["tuning_grid"]["step_sizes"]) == 4
    assert paths[1].stat().st_size > 10_000  # a real PNG
    table = ex.summary_table({"fig2a": res})
    assert "fig2a" in table and f"{res.final('DE-SGLD'):.4f}" in table


# ---------------------------------------------------------------- the paper's claims, reduced


@pytest.mark.slow
def test_fig2a_diging_no_worse_than_de_on_the_barbell():
    # Reduced Figure 2(a): 40 trials, seeds 0..7 (compiled once; under a second per seed).
    # DIGing-SGLD and DE-SGLD share data, network, starts and noise (common random numbers), so
    # their ratio is far less noisy than either W2. Over these 8 seeds at 40 trials the ratio
    # DIGing/DE had mean 0.94 and standard deviation 0.11 (seed 0 at 1.10); across data sets the
    # mean of 8 has standard error 0.04, and "no worse" is asserted as mean ratio <= 1.05, over 2.5
    # standard errors above the observed mean.
    ratios = []
    for seed in range(8):
        res = ex.fig2("a", trials=40, seed=seed, overrides={"gradient_tuning": False})
        ratios.append(res.final("DIGing-SGLD") / res.final("DE-SGLD"))
        # Both decentralized samplers are well above the centralized reference here.
        assert res.final("SGLD (centralized)") < res.final("DE-SGLD")
    assert np.mean(ratios) <= 1.05, ratios


@pytest.mark.slow
def test_fig3_accuracies_are_sane_and_diging_leads_on_the_barbell():
    res = ex.fig3("c", trials=40, seed=0)
    # 40 trials x 30 agents on 512 test points: the trial-average accuracy has standard error
    # below 0.01, so "well above 0.85" is checked as > 0.86.
    assert res.final("DIGing-SGLD") > 0.86
    assert res.final("SGLD (centralized)") > 0.86
    res = ex.fig3("a", trials=40, seed=0)
    for name in ex.ALGORITHMS:
        assert 0.6 < res.final(name) <= 1.0
    # Label-sorted agents on the barbell: DE-SGLD's drift costs several points of accuracy
    # (0.08 at 200 trials); 0.02 is over 4 standard errors of a 40-trial accuracy.
    assert res.final("DIGing-SGLD") > res.final("DE-SGLD") + 0.02


@pytest.mark.slow  # needs the Fig. 2 toy run; fast twin of the bit-for-bit repeat:
# tests/tuning/test_tuning.py::test_every_grid_point_and_split_is_a_plain_run_with_the_same_draws
def test_seed_sweep_repeats_the_figure_exactly(fig2_toy, tmp_path):
    cfg = tmp_path / "toy.toml"
    cfg.write_text("\n".join(f"{k} = {str(v).lower()}" for k, v in _TINY2.items()) + "\n")
    sweep = ex.seed_sweep("fig2a", [1, 2], tmp_path, trials=12, config=cfg)["fig2a"]
    # Seed 1 is the fixture's run: the same numbers, bit for bit.
    for name in ex.ALGORITHMS:
        assert sweep["final"][name][0] == fig2_toy.final(name)
    dig, de = (np.asarray(sweep["final"][n]) for n in ("DIGing-SGLD", "DE-SGLD"))
    assert sweep["diging_ahead"] == int(np.sum(dig < de))
    assert (tmp_path / "sweep_fig2a.md").read_text().count("| fig2a |") == 1
