"""Benchmark targets, their stored references, and the scores against them (dgsgld.posteriors)."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgsgld.posteriors import (
    available,
    get_target,
    load_reference,
    moment_errors,
    predictive_scores,
    references,
)
from dgsgld.posteriors.targets import LARGE_TARGETS, exact_gaussian_posterior

pytest.importorskip("sklearn")


def test_split_potentials_sum_to_the_log_posterior():
    # Splitting only deals data out: sum_i f_i = -log posterior (float32: relative rounding
    # ~1e-6 of the ~1e2 magnitudes). Wine's labels stay integers.
    target = get_target("multinomial_wine")
    x = target.init(jax.random.key(1), 1)[0]
    potential = target.potential(4, "skew")
    assert (jnp.issubdtype(potential.data[-1].dtype, jnp.integer)
            == np.issubdtype(target.data[-1].dtype, np.integer))
    value = eqx.filter_jit(lambda p, x: p.value(x))(potential, x)
    assert float(value) == pytest.approx(-float(target.log_density(x)), rel=1e-5)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE_TARGETS
                                  else n for n in available()])
def test_stored_references_pass_their_checks(name):
    # The large targets' data take seconds to build: slow (their fast checks are in
    # test_large_target.py).
    target = get_target(name)
    ref = load_reference(name, fingerprint=target.fingerprint)
    q = len(target.names)
    assert ref.names == target.names
    assert ref.draws.shape == (references.NUM_DRAWS, q)
    assert ref.quantiles.shape == (len(references.QUANTILES), q)
    settings = json.loads(ref.settings)
    assert settings["passed"] and settings["divergent"] == 0
    assert (ref.rhat < 1.01).all() and (ref.ess_bulk >= 2000).all()
    # The kept draws are a thinning of the summarized ones (or i.i.d. exact draws): their mean
    # lies within 5 standard errors sd / sqrt(ess) of the summary mean; the thinned draws are
    # at least as independent as the chains, so ess >= min(2000, ess_bulk) is conservative
    # except for antithetic chains, hence 5 and not 4.
    se = ref.sd / np.sqrt(np.minimum(references.NUM_DRAWS, ref.ess_bulk))
    assert (np.abs(ref.draws.mean(0) - ref.mean) < 5 * se).all()
    assert (np.diff(ref.quantiles, axis=0) > 0).all()


def test_reference_of_other_data_is_refused():
    with pytest.raises(ValueError, match="the target's data have 0000"):
        load_reference(available()[0], fingerprint="0000")
    with pytest.raises(ValueError, match="no stored reference for target 'nope'"):
        load_reference("nope")
    with pytest.raises(ValueError, match="unknown target 'nope'"):
        get_target("nope")


@pytest.mark.reliability
def test_split_refuses_bad_arguments():
    target = get_target("multinomial_wine")
    with pytest.raises(ValueError, match=r"`split` must be one of \('iid', 'skew'\); got 'x'"):
        target.split(4, "x")
    with pytest.raises(ValueError, match="needs `num_agents` >= its 3 groups"):
        target.split(2, "skew")
    # The skew split gives each agent one class.
    split = target.split(3, "skew")
    assert [len(set(target.groups[i])) for i in split.indices] == [1, 1, 1]


def _reference_like(mean, sd):
    z = np.zeros_like(mean)
    return references.Reference("t", (), None, mean, sd, None, z, z, None, z, z, "", "", "")


def test_moment_errors_known_answer():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(400, 3))
    z = (z - z.mean(0)) / z.std(0, ddof=1)  # exactly mean 0, sd 1
    mean, sd = np.array([1.0, -2.0, 3.0]), np.array([0.5, 2.0, 1.0])
    draws = mean + 0.5 * sd * np.array([1, 1, 1]) + sd * z * np.array([1.0, 2.0, 0.8])
    out = moment_errors(draws, _reference_like(mean, sd))
    np.testing.assert_allclose(out["mean_error"], 0.5)
    np.testing.assert_allclose(out["sd_ratio"], [1.0, 2.0, 0.8])
    assert out["sd_ratio_worst"] == pytest.approx(2.0)
    assert out["sd_ratio_median"] == pytest.approx(1.0)


def test_predictive_scores_known_answer():
    # Input 0: (1, 0) vs (0.5, 0.5): TV 0.5, argmax agrees (ties go to the first class);
    # input 1: (0.2, 0.8) vs (0.9, 0.1): TV 0.7, disagree. Means 0.6 and 0.5.
    p = np.array([[1.0, 0.0], [0.2, 0.8]])
    r = np.array([[0.5, 0.5], [0.9, 0.1]])
    assert predictive_scores(p, r) == pytest.approx(
        {"predictive_tv": 0.6, "predictive_agreement": 0.5})
    assert predictive_scores(p, p) == {"predictive_tv": 0.0, "predictive_agreement": 1.0}


@pytest.mark.slow  # fast twin: test_stored_references_pass_their_checks
def test_fresh_nuts_agrees_with_the_stored_reference():
    # A new NUTS run (other seed) on poisson_linnerud: each mean within 4 combined MCSEs of
    # the stored one, each sd within 4 combined MCSEs.
    numpyro = pytest.importorskip("numpyro")
    from numpyro.infer import MCMC, NUTS

    target = get_target("poisson_linnerud")
    ref = load_reference(target.name, fingerprint=target.fingerprint)
    mcmc = MCMC(NUTS(potential_fn=lambda x: -target.log_density(x)), num_warmup=500,
                num_samples=1000, num_chains=4, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(123), init_params=jnp.zeros((4, target.dim)))
    x = np.asarray(mcmc.get_samples(group_by_chain=True), np.float64)
    ess = np.asarray(numpyro.diagnostics.effective_sample_size(x))
    flat = x.reshape(-1, target.dim)
    mcse_mean = flat.std(0) / np.sqrt(ess)
    assert (np.abs(flat.mean(0) - ref.mean) < 4 * np.hypot(mcse_mean, ref.mcse_mean)).all()
    # sd's MCSE ~ sd / sqrt(2 ess) for near-Gaussian marginals.
    mcse_sd = flat.std(0) / np.sqrt(2 * ess)
    assert (np.abs(flat.std(0) - ref.sd) < 4 * np.hypot(mcse_sd, ref.mcse_sd)).all()


@pytest.mark.slow  # fast twins: the score and reference tests above
def test_bench_small_runs_without_numpyro(tmp_path):
    # The command reads only the stored references: numpyro and arviz are blocked. Its
    # centralized SGLD on the Gaussian anchor must land near the exact posterior: each
    # seed's mean error is over 8 chains x 100 draws of a chain with autocorrelation time
    # well below 100 steps, so a standardized mean error above 1 would be a real bias.
    import subprocess
    import sys

    code = ("import sys; sys.modules['numpyro'] = None; sys.modules['arviz'] = None; "
            "from experiments.__main__ import main; "
            f"sys.exit(main(['bench', 'posteriors', '--small', '--out', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "leaderboard.json").read_text())
    rows = {(r["target"], r["sampler"]): r for r in result["rows"]}
    assert set(rows) == {(t, s) for t in ("gaussian_linear", "eight_schools",
                                          "logistic_breast_cancer")
                         for s in ("reference", "DIGing-SGLD", "SGLD (centralized)",
                                   "DIGing-SGHMC", "D-ULA", "DIGing-SGLD+SVRG",
                                   "DIGing-SGLD (adapted)", "DIGing-SGHMC (adapted)",
                                   "D-ULA (adapted)")}
    adapted = rows[("gaussian_linear", "DIGing-SGLD (adapted)")]
    assert len(adapted["warmup"]) == 2 and adapted["seeds_finite"] == 2
    sgld_row = rows[("gaussian_linear", "SGLD (centralized)")]
    assert sgld_row["seeds_finite"] == 2 and sgld_row["mean_error_max"][0] < 1.0
    assert all(k in sgld_row for k in ("sd_ratio_worst", "sd_ratio_median", "w2", "ksd"))
    # SVRG draws one datum per step where the others use full local batches.
    assert rows[("gaussian_linear", "DIGing-SGLD+SVRG")]["batch_size"] == 1
    assert rows[("gaussian_linear", "DIGing-SGLD")]["batch_size"] is None
    assert (tmp_path / "leaderboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| gaussian_linear | ring | DIGing-SGLD |" in (tmp_path / "leaderboard.md").read_text()
    # SBC of the three simulated targets: the exact draws and the two samplers on each.
    cells = {(c["target"], c["sampler"]) for c in result["sbc"]}
    assert cells == {("gaussian_linear", "exact")} | {
        (t, s) for t in ("gaussian_linear", "poisson_linnerud", "logistic_breast_cancer")
        for s in ("DIGing-SGLD", "DE-SGLD")}
    assert (tmp_path / "sbc_ranks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


#: Messages each agent sends each out-neighbour per step, from the samplers' update rules
#: (DIGing: position and tracker; EXTRA: the position before and after the step; DE, D-ULA,
#: DE-SGHMC: the position): the independent count the bench's accounting is checked against.
MESSAGES_PER_STEP = {"DIGing-SGLD": 2, "DE-SGLD": 1, "EXTRA-SGLD": 2, "DIGing-SGHMC": 2,
                     "DE-SGHMC": 1, "D-ULA": 1, "DIGing-SGLD+SVRG": 2, "DIGing-SGLD+SAGA": 2,
                     "SGLD (centralized)": 0}


# One compile per sampler (~2 s each): DE-SGHMC in the default run; the other samplers (the
# centralized sampler's zero bytes among them) in the slow set.
@pytest.mark.parametrize("name", [n if n == "DE-SGHMC" else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in MESSAGES_PER_STEP])
def test_bench_bytes_are_the_messages_the_samplers_send(name):
    # The bench's bytes come from the channel's own accounting; they must equal messages per
    # step x 4 d bytes (float32) x out-neighbours (ring of 4: 2 each, 8 in all) x steps x
    # chains of one seed, and 0 for the centralized sampler. Exact integers: no tolerance.
    import dataclasses

    import dgsgld
    from dgsgld import networks
    from experiments.bench import SAMPLERS, BenchSettings, run_chains

    assert set(SAMPLERS) == set(MESSAGES_PER_STEP)
    method = SAMPLERS[name]
    d, steps = 2, 3
    settings = dataclasses.replace(BenchSettings.small(), seeds=2, chains=2, num_steps=steps,
                                   thin=1)
    data = (jnp.ones((4, 3, d)), jnp.ones((4, 3)))
    potential = dgsgld.Potential(lambda t, x: -0.5 * (x[0] @ t - x[1]) ** 2,
                                 lambda t: -0.5 * t @ t, data, 1)
    algorithm = method.builder(4)(0.01)
    total = settings.seeds * settings.chains
    if method.centralized:
        init, mixing = jnp.zeros((total, d)), None
    else:
        init, mixing = jnp.zeros((total, 4, d)), networks.ring(4)
    _, sent = run_chains(algorithm, potential, mixing, init, jax.random.key(0), settings)
    assert sent == MESSAGES_PER_STEP[name] * 4 * d * 8 * steps * settings.chains


def test_leaderboard_figure_has_one_marker_per_method_and_target(tmp_path):
    # A fake result: 2 targets, a reference row each, two samplers; "B" has no finite seed on
    # t2 (no scores), so its marker there is missing.
    pytest.importorskip("matplotlib")
    from matplotlib.container import ErrorbarContainer

    from experiments.bench import FIGURE_SCORES, leaderboard_figure

    def row(target, sampler, network, mean=None, se=0.1):
        r = {"target": target, "sampler": sampler, "network": network}
        if mean is not None:
            r.update(mean_error_max=[mean, se], sd_ratio_worst=[1 + mean, se])
        return r

    result = {"rows": [row("t1", "reference", "-", 0.1, float("nan")),
                       row("t1", "A", "ring", 0.5), row("t1", "B", "-", 0.7),
                       row("t2", "reference", "-", 0.2, float("nan")),
                       row("t2", "A", "ring", 0.9, 0.05), row("t2", "B", "-")]}
    fig = leaderboard_figure(result)
    assert len(fig.axes) == len(FIGURE_SCORES) == 2
    for ax, (key, _, _) in zip(fig.axes, FIGURE_SCORES):
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert [c.get_label() for c in bars] == ["A (ring)", "B"]
        a, b = (np.asarray(c.lines[0].get_ydata(), float) for c in bars)
        want = 0.0 if key == "mean_error_max" else 1.0
        np.testing.assert_allclose(a, np.array([0.5, 0.9]) + want)
        np.testing.assert_allclose(b, [0.7 + want])
        # error bars span mean ± se: the first of A's segments is 0.5 ± 0.1 (+ offset)
        seg = bars[0].lines[2][0].get_segments()[0]
        np.testing.assert_allclose(sorted(seg[:, 1]), [0.4 + want, 0.6 + want])
        assert [t.get_text() for t in ax.get_xticklabels()] == ["t1", "t2"]
    path = tmp_path / "board.png"
    fig.savefig(path, dpi=30)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_full_bench_runs_every_sampler_on_every_target_over_both_networks():
    # The command without --small: every target with a stored reference (all of them), every
    # sampler of SAMPLERS, the ring and the complete graph, SBC on every simulated target.
    from dgsgld.posteriors.sbc import SIMULATED
    from dgsgld.posteriors.targets import TARGETS
    from dgsgld.samplers import ALL
    from experiments.bench import NETWORKS, SAMPLERS, BenchSettings

    full = BenchSettings.full()
    assert set(available()) == set(TARGETS) and full.targets == tuple(TARGETS)
    assert full.samplers == tuple(SAMPLERS) and len(SAMPLERS) == 9
    # adapted rows for every decentralized sampler of the registry
    assert full.adapted == tuple(c.name for c in ALL if c.decentralized) and \
        len(full.adapted) == 8
    assert full.networks == tuple(NETWORKS) == ("ring", "complete")
    assert full.sbc_targets == SIMULATED and full.seeds >= 3
    # adapted SBC cells (a warm-up per data set) for both SBC samplers on every simulated target
    assert full.sbc_adapted == full.sbc_samplers and full.sbc_adapted_targets == SIMULATED


def test_leaderboard_markdown_has_a_cell_per_score():
    # One row per sampler with mean ± standard error of every score (predictive ones only
    # where present), "-" where a score is absent, the same number of cells as the header.
    from experiments.bench import _KEYS, BenchSettings, markdown

    settings = BenchSettings.small()
    scores = {k: [0.5 + i, 0.01] for i, k in enumerate(_KEYS) if not k.startswith("pred")}
    rows = [{"target": "t", "network": "-", "sampler": "reference", "step_size": None,
             "wall_s": None, "bytes_sent": None, "diverged": 0, "batch_size": None,
             **{k: [v[0], float("nan")] for k, v in scores.items()}},
            {"target": "t", "network": "ring", "sampler": "A", "step_size": 1e-3,
             "wall_s": 2.0, "bytes_sent": 3_000_000, "diverged": 1, "batch_size": 32,
             **scores},
            {"target": "t", "network": "ring", "sampler": "A (adapted)", "step_size": 0.1,
             "wall_s": 2.0, "bytes_sent": 3_000_000, "diverged": 0, "batch_size": 32,
             "estimator": "SVRG/100", **scores}]
    text = markdown({"settings": {k: getattr(settings, k) for k in
                                  settings.__dataclass_fields__}, "wall_s": 5.0, "rows": rows})
    table = text.split("\n\n")[1].splitlines()   # the rows' table (the band table follows)
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert "median sd ratio" in header and "worst sd ratio" in header
    assert all(line.count("|") == table[0].count("|") for line in table)
    cells = dict(zip(header, (c.strip() for c in table[3].strip("|").split("|"))))
    assert cells["sampler"] == "A (1 diverged)" and cells["batch"] == "32"
    assert cells["median sd ratio"] == "%.3f ± 0.010" % scores["sd_ratio_median"][0]
    assert cells["pred. TV"] == "-" and cells["MB sent"] == "3.00"
    adapted = dict(zip(header, (c.strip() for c in table[4].strip("|").split("|"))))
    assert adapted["batch"] == "32, SVRG/100"   # a control variate is named with the batch
    reference = dict(zip(header, (c.strip() for c in table[2].strip("|").split("|"))))
    assert reference["median sd ratio"] == "%.3f" % scores["sd_ratio_median"][0]


def test_sbc_markdown_shows_an_adapted_cells_warmup_and_sampling_steps():
    # An adapted SBC cell's steps column is "warm-up + sampling", and the table's note says
    # what the adapted cells are; a table without adapted cells has no such note.
    from experiments.bench import BenchSettings, markdown

    settings = BenchSettings.small()
    base = {"target": "t", "network": "ring", "num_datasets": 4, "num_draws": 3,
            "num_steps": 10, "h_min": 1e-3, "h_max": 2e-3, "min_p": 0.5, "rejected": 0,
            "tests": 24, "wall_s": 1.0}
    plain = base | {"sampler": "A"}
    adapted = base | {"sampler": "A (adapted)", "warmup_steps": 60, "budget_ok": 4}
    result = {"settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
              "wall_s": 1.0, "rows": [], "sbc": [plain, adapted]}
    text = markdown(result)
    assert "| t | ring | A | 4 x 3 | 10 | 0.001-0.002 | 0.5 | 0 of 24 | 1.0 |" in text
    assert "| t | ring | A (adapted) | 4 x 3 | 60 + 10 | 0.001-0.002 | 0.5 | 0 of 24 | 1.0 |" \
        in text
    assert "Adapted cells:" in text
    assert "Adapted cells:" not in markdown(result | {"sbc": [plain]})


def test_shipped_leaderboard_is_one_full_run_and_the_guide_quotes_it():
    # benchmarks/references/leaderboard.{json,md} are the output of one `python -m experiments
    # bench posteriors` run with the full settings it records: a row for every (target,
    # network, sampler), the centralized sampler once per target, an adapted row per network
    # for each of its adapted samplers, SBC cells for every simulated target; the Markdown is
    # the JSON's table, and docs/results/posteriors.md quotes every line of it verbatim. The
    # recorded settings are today's full settings except for targets, adapted rows and the
    # adapted SBC cells (sbc_adapted, sbc_warmup_steps, sbc_adapted_targets) and the adapted
    # rows' curvature subsample (curvature_batch) added since;
    # docs/known-issues.md names each of them until the leaderboard is rerun. A leaderboard
    # merged from the parts run so far (`merge(partial=True)`) names the targets it lacks
    # ("missing"), and so must docs/known-issues.md.
    import dataclasses
    import pathlib

    from experiments.bench import ADAPTED_SUFFIX, SAMPLERS, BenchSettings, markdown

    root = pathlib.Path(__file__).resolve().parents[2]
    shipped = root / "benchmarks" / "references"
    result = json.loads((shipped / "leaderboard.json").read_text())
    recorded = result["settings"]
    full = json.loads(json.dumps(dataclasses.asdict(BenchSettings.full())))
    growing = ("targets", "adapted", "sbc_adapted", "sbc_warmup_steps", "sbc_adapted_targets",
               "curvature_batch")
    assert {k: v for k, v in recorded.items() if k not in growing} == {
        k: v for k, v in full.items() if k not in growing}
    sbc_adapted = recorded.get("sbc_adapted", [])
    assert set(sbc_adapted) <= set(full["sbc_adapted"])
    assert full["targets"][:len(recorded["targets"])] == recorded["targets"]
    adapted = recorded.get("adapted", [])
    assert set(adapted) <= set(full["adapted"])
    newer = full["targets"][len(recorded["targets"]):] + [
        s + ADAPTED_SUFFIX for s in full["adapted"] if s not in adapted]
    known = (root / "docs" / "known-issues.md").read_text()
    assert all(f"`{name}`" in known for name in newer), newer
    if set(full["sbc_adapted"]) - set(sbc_adapted):
        assert "adapted SBC cells" in known
    missing = result.get("missing", {"targets": [], "sbc_targets": []})
    assert all(f"`{name}`" in known for name in missing["targets"] + missing["sbc_targets"])
    ran = [t for t in recorded["targets"] if t not in missing["targets"]]
    rows = [(r["target"], r["network"], r["sampler"]) for r in result["rows"]]
    want = []
    for t in ran:
        want.append((t, "-", "reference"))
        for network in recorded["networks"]:
            want += [(t, "-" if SAMPLERS[s].centralized else network, s)
                     for s in recorded["samplers"]
                     if not (SAMPLERS[s].centralized and network != recorded["networks"][0])]
            want += [(t, network, s + ADAPTED_SUFFIX) for s in adapted]
    assert rows == want and len(rows) == len(ran) * (1 + 2 * 8 + 1 + 2 * len(adapted))
    sbc_ran = [t for t in recorded["sbc_targets"] if t not in missing["sbc_targets"]]
    assert {(c["target"], c["sampler"]) for c in result["sbc"]} == {
        ("gaussian_linear", "exact")} | {(t, s) for t in sbc_ran
                                         for s in recorded["sbc_samplers"]} | {
        (t, s + ADAPTED_SUFFIX) for t in sbc_ran for s in sbc_adapted
        if t in recorded.get("sbc_adapted_targets", [])}
    table = (shipped / "leaderboard.md").read_text()
    assert markdown(result) == table
    guide = (root / "docs" / "results" / "posteriors.md").read_text()
    missing = [line for line in table.splitlines() if line and line not in guide]
    assert not missing, missing[:3]


def test_sbc_ranks_count_draws_below_the_truth():
    from dgsgld.posteriors.sbc import sbc_ranks

    draws = np.array([[[0.0, 5.0], [2.0, -1.0], [1.0, 0.5]]])  # S = 1, L = 3, q = 2
    assert sbc_ranks(draws, np.array([[1.5, 0.0]])).tolist() == [[2, 1]]
    per_agent = np.stack([draws, draws + 10], axis=2)  # (S, L, N = 2, q)
    assert sbc_ranks(per_agent, np.array([[1.5, 0.0]])).tolist() == [[[2, 1], [0, 0]]]


def test_sbc_of_the_exact_posterior_is_uniform_and_miscalibration_is_rejected():
    # Exact posterior draws given simulated data: ranks uniform on {0..15}, so each of the 6
    # chi-square p-values is uniform; all above 1e-3 fails with probability <= 6e-3 (fixed
    # seeds: the outcome is fixed, the bound says why the threshold is safe). Draws spread
    # 1.5 or 0.67 times around their posterior mean move ~20 % of ranks between the 4 bins'
    # expected 100 each (S = 400): chi-square ~ 40 on 3 degrees of freedom, p ~ 1e-8.
    from dgsgld.posteriors.sbc import (
        exact_draws,
        rank_uniformity,
        sbc_ranks,
        simulate,
    )

    theta, y = simulate("gaussian_linear", 0, 400)
    draws = exact_draws(y, 15, seed=1)
    ranks = sbc_ranks(draws, theta)
    assert ranks.shape == (400, 6) and ranks.min() >= 0 and ranks.max() <= 15
    assert (rank_uniformity(ranks, 15) > 1e-3).all()
    assert (rank_uniformity(ranks, 15, num_bins=4) > 1e-3).all()
    centre = draws.mean(1, keepdims=True)
    for factor in (1.5, 0.67):
        wrong = sbc_ranks(centre + factor * (draws - centre), theta)
        assert (rank_uniformity(wrong, 15, num_bins=4) < 1e-4).all(), factor


def test_rank_dispersion_known_answers_and_direction():
    from dgsgld.posteriors.sbc import exact_draws, rank_dispersion, sbc_ranks, simulate

    # Known answers, L = 3 (uniform variance (4^2 - 1) / 12 = 1.25): constant ranks give 0;
    # S = 4 ranks 0, 3, 0, 3 have sample variance 3 (ddof=1), ratio 2.4.
    assert rank_dispersion(np.full((5, 2), 2), 3).tolist() == [0.0, 0.0]
    assert rank_dispersion(np.array([0, 3, 0, 3]), 3) == pytest.approx(2.4, rel=1e-12)
    # Uniform ranks: the ratio is unbiased for 1 with standard error sqrt(0.7906 / S) for
    # L = 15 (module doc). 2000 coordinates of S = 50: their mean is within 4 standard errors
    # sqrt(0.7906 / 50 / 2000) of 1, and their sd within 10 % of sqrt(0.7906 / 50) (the
    # first-order value; the sd of 2000 sample sds is ~2 % of it).
    rng = np.random.default_rng(2)
    v = rank_dispersion(rng.integers(0, 16, size=(50, 2000)), 15)
    assert abs(v.mean() - 1) < 4 * np.sqrt(0.7906 / 50 / 2000)
    assert v.std(ddof=1) == pytest.approx(np.sqrt(0.7906 / 50), rel=0.1)
    # Exact posterior draws (S = 400): within 4 standard errors (0.89 / 20 = 0.044) of 1;
    # draws spread 1.5 times around their mean pile ranks in the middle (below 1), 0.67 times
    # at the ends (above 1), each beyond 4 standard errors.
    theta, y = simulate("gaussian_linear", 0, 400)
    draws = exact_draws(y, 15, seed=1)
    se = 0.89 / np.sqrt(400)
    assert np.all(np.abs(rank_dispersion(sbc_ranks(draws, theta), 15) - 1) < 4 * se)
    centre = draws.mean(1, keepdims=True)
    wide = rank_dispersion(sbc_ranks(centre + 1.5 * (draws - centre), theta), 15)
    narrow = rank_dispersion(sbc_ranks(centre + 0.67 * (draws - centre), theta), 15)
    assert np.all(wide < 1 - 4 * se) and np.all(narrow > 1 + 4 * se)
    with pytest.raises(ValueError, match="must lie in"):
        rank_dispersion(np.array([0, 16]), 15)


def test_sbc_simulators_draw_from_the_models():
    # theta ~ N(0, I / precision); given theta, Pearson residuals (y - E y) / sd(y) have mean 0
    # and variance 1 for all three models. Over S = 200 data sets x n data, their mean is within
    # 4 / sqrt(S n) of 0 and their variance within 0.1 of 1. Poisson residuals at small rates
    # are skewed, excess kurtosis 1/rate, and Bernoulli ones at p near 0 or 1 heavy-tailed,
    # E r^4 = 1 / (p (1 - p)) - 3: data at rates below 0.05, or with p outside (0.05, 0.95),
    # are left out, so E r^4 <= 18 and the variance's standard error sqrt((E r^4 - 1) / m)
    # stays below 0.03 for the m >= 20 000 residuals kept (about 0.02 at the logistic's 55 000).
    from dgsgld.posteriors.sbc import simulate

    for name in ("gaussian_linear", "poisson_linnerud", "logistic_breast_cancer"):
        target = get_target(name)
        theta, y = simulate(name, 1, 200)
        assert theta.shape == (200, target.dim) and y.shape == (200, target.num_data)
        prior_sd = theta.std(0, ddof=1) * np.sqrt(target.log_prior.precision)
        assert np.all(np.abs(prior_sd - 1) < 4 / np.sqrt(2 * 200)), name
        eta = theta @ np.asarray(target.data[0], np.float64).T
        if name == "gaussian_linear":
            resid = y - eta
        elif name == "poisson_linnerud":
            assert np.all(y == np.round(y)) and y.min() >= 0
            keep = np.exp(eta) > 0.05
            resid = ((y - np.exp(eta)) / np.exp(eta / 2))[keep]
        else:
            assert set(np.unique(y)) == {0.0, 1.0}
            p = 1 / (1 + np.exp(-eta))
            keep = (p > 0.05) & (p < 0.95)
            resid = (y - p)[keep] / np.sqrt(p * (1 - p))[keep]
        assert abs(resid.mean()) < 4 / np.sqrt(resid.size), name
        assert abs(resid.var() - 1) < 0.1, name


def test_sbc_curvature_scales():
    # Gaussian anchor: exactly 1 / lambda_min of the closed-form posterior covariance. Logistic:
    # an upper bound of the Hessian's largest eigenvalue at any theta (checked at prior draws),
    # attained at theta = 0 where every sigma' = 1/4. Poisson: the Hessian at a point whose
    # rates are the counts y, an upper bound of it when some rates are below 1. No sampling:
    # the comparisons allow float64 rounding only (relative 1e-12, or 1e-10 through an inverse).
    from dgsgld.posteriors.sbc import curvature_scale, simulate

    target = get_target("gaussian_linear")
    _, cov = exact_gaussian_posterior(target)
    _, y = simulate("gaussian_linear", 0, 3)
    np.testing.assert_allclose(curvature_scale("gaussian_linear", y),
                               1 / np.linalg.eigvalsh(cov)[0], rtol=1e-10)
    z = np.asarray(get_target("logistic_breast_cancer").data[0], np.float64)
    theta, y = simulate("logistic_breast_cancer", 0, 5)
    bound = curvature_scale("logistic_breast_cancer", y)
    for t in np.concatenate([theta, np.zeros((1, z.shape[1]))]):
        p = 1 / (1 + np.exp(-z @ t))
        top = np.linalg.eigvalsh((z * (p * (1 - p))[:, None]).T @ z)[-1] + 1
        assert top <= bound[0] * (1 + 1e-12)
    assert top == pytest.approx(bound[0], rel=1e-12)  # theta = 0, the last one
    z = np.asarray(get_target("poisson_linnerud").data[0], np.float64)
    for theta in (np.array([0.3, -0.2, 0.1, 0.5]), np.array([0.0, 0.0, 0.0, 1.0])):
        rates = np.exp(z @ theta)                      # counts y = the rates at theta
        hessian = np.linalg.eigvalsh((z * rates[:, None]).T @ z)[-1] + 1
        scale = curvature_scale("poisson_linnerud", rates[None])[0]
        assert hessian <= scale * (1 + 1e-12)
        if rates.min() >= 1:                           # the second: all rates e > 1
            assert hessian == pytest.approx(scale, rel=1e-12)


def _logistic_imh_draws(y, num_draws, seed, burn=100, thin=10, df=8.0):
    """``(S, L, d)`` posterior draws of the logistic target (prior N(0, I)) given each
    simulated ``y (S, n)``: independence Metropolis-Hastings (exact in the limit) with a
    multivariate-t proposal (``df``) at each data set's Laplace approximation (Newton's mode,
    the Hessian there), from a proposal draw, ``burn`` steps of burn-in, every ``thin``-th
    state kept."""
    z = np.asarray(get_target("logistic_breast_cancer").data[0], np.float64)
    rng = np.random.default_rng(seed)
    s, d = y.shape[0], z.shape[1]

    def sigmoid(eta):
        return 0.5 * (1 + np.tanh(0.5 * eta))

    def hessian(p):
        return np.matmul(z.T[None] * (p * (1 - p))[:, None, :], z) + np.eye(d)

    mode = np.zeros((s, d))
    for _ in range(8):  # the log posterior is strongly concave: Newton from 0 converges
        p = sigmoid(mode @ z.T)
        grad = (y - p) @ z - mode
        mode = mode + np.linalg.solve(hessian(p), grad[..., None])[..., 0]
    # The chain is exact whatever the proposal; a close mode only keeps acceptance high.
    assert np.abs((y - sigmoid(mode @ z.T)) @ z - mode).max() < 1e-2
    chol = np.linalg.cholesky(np.linalg.inv(hessian(sigmoid(mode @ z.T))))

    def log_post(x):
        eta = x @ z.T
        return np.sum(y * eta - np.logaddexp(0, eta), -1) - 0.5 * np.sum(x * x, -1)

    def propose():
        r = rng.normal(size=(s, d)) / np.sqrt(rng.chisquare(df, size=(s, 1)) / df)
        log_q = -0.5 * (df + d) * np.log1p(np.sum(r * r, -1) / df)
        x = mode + np.einsum("sij,sj->si", chol, r)
        return x, log_post(x) - log_q

    x, log_w = propose()
    kept = []
    for k in range(burn + thin * num_draws):
        new, new_w = propose()
        accept = np.log(rng.uniform(size=s)) < new_w - log_w
        x, log_w = np.where(accept[:, None], new, x), np.where(accept, new_w, log_w)
        if k >= burn and (k - burn) % thin == thin - 1:
            kept.append(x)
    return np.stack(kept, 1)


@pytest.mark.slow  # fast twin: test_sbc_of_the_exact_posterior_is_uniform_and_... (the same
# rank-uniformity and rejection checks, on exact draws of the Gaussian anchor)
def test_sbc_of_the_logistic_posterior_is_uniform_and_miscalibration_is_rejected():
    # Exact-in-the-limit draws (independence Metropolis-Hastings, about 32 % acceptance, so
    # kept states 10 steps apart have autocorrelation about 0.68^10 = 0.02): each of the 31
    # coordinates' p-values (16 and 4 bins) is uniform, all 62 above 1e-4 fails with
    # probability <= 6.2e-3. Draws spread 1.5 or 0.67 times around their mean move about a
    # fifth of the ranks between the 4 bins (as for the Gaussian anchor: chi-square ~ 40 on 3
    # degrees of freedom at S = 400, p ~ 1e-8 for a Gaussian marginal); the logistic's skewed
    # marginals move fewer in a few coordinates, so: the median p-value below 1e-6 and all
    # but 3 of the 31 below 1e-3.
    from dgsgld.posteriors.sbc import rank_uniformity, sbc_ranks, simulate

    theta, y = simulate("logistic_breast_cancer", 0, 400)
    draws = _logistic_imh_draws(y, 15, seed=1)
    ranks = sbc_ranks(draws, theta)
    assert ranks.shape == (400, 31)
    assert (rank_uniformity(ranks, 15) > 1e-4).all()
    assert (rank_uniformity(ranks, 15, num_bins=4) > 1e-4).all()
    centre = draws.mean(1, keepdims=True)
    for factor in (1.5, 0.67):
        p = rank_uniformity(sbc_ranks(centre + factor * (draws - centre), theta), 15,
                            num_bins=4)
        assert np.median(p) < 1e-6 and np.sum(p >= 1e-3) <= 3, (factor, np.sort(p))


@pytest.mark.reliability
def test_sbc_refuses_bad_input():
    from dgsgld import SGLD, DIGingSGLD, networks
    from dgsgld.posteriors.sbc import rank_uniformity, sbc_ranks, sbc_run

    with pytest.raises(ValueError, match="`algorithm` must be a decentralized sampler"):
        sbc_run("gaussian_linear", SGLD(0.01), networks.ring(4), jax.random.key(0))
    with pytest.raises(ValueError, match="`num_datasets` must be a positive int; got 0"):
        sbc_run("gaussian_linear", DIGingSGLD(0.01), networks.ring(4), jax.random.key(0),
                num_datasets=0)
    with pytest.raises(ValueError, match="`target` must be one of"):
        sbc_run("eight_schools", DIGingSGLD(0.01), networks.ring(4), jax.random.key(0))
    with pytest.raises(ValueError, match="`algorithm` must be a function h -> sampler"):
        sbc_run("gaussian_linear", DIGingSGLD(0.01), networks.ring(4), jax.random.key(0),
                step_sizes=np.ones(100))
    with pytest.raises(ValueError, match="`step_sizes` must be 100 positive finite steps"):
        sbc_run("gaussian_linear", DIGingSGLD, networks.ring(4), jax.random.key(0),
                step_sizes=np.ones(3))
    with pytest.raises(ValueError, match="must be finite"):
        sbc_ranks(np.full((2, 3, 1), np.nan), np.zeros((2, 1)))
    with pytest.raises(ValueError, match=r"`draws` must be \(S, L, ..., q\)"):
        sbc_ranks(np.zeros((2, 3)), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="`num_bins` must divide num_draws"):
        rank_uniformity(np.zeros((5, 2), int), 15, num_bins=5)
    with pytest.raises(ValueError, match=r"`ranks` must lie in \[0, 15\]"):
        rank_uniformity(np.full((5, 2), 16), 15)


@pytest.mark.slow  # fast twin: test_sbc_of_the_exact_posterior_is_uniform_and_...
def test_sbc_shows_the_constant_step_bias_of_diging_sgld():
    # The Gaussian anchor's pooled curvature is at most 153; Langevin's stationary variance
    # along curvature lam is 1 / (lam (1 - h lam / 2)): at h = 5e-4 at most 4 % too wide,
    # below what 200 data sets detect, and every (agent, coordinate) p-value stays above 1e-4
    # (24 tests: a false alarm <= 2.4e-3); at h = 4.5e-3 up to 1.5 times too wide (sd x 1.23,
    # more with the network's disagreement), and some p-value falls below 1e-4.
    from dgsgld import DIGingSGLD, networks
    from dgsgld.posteriors.sbc import sbc_run

    p = {h: sbc_run("gaussian_linear", DIGingSGLD(h), networks.ring(4), jax.random.key(0),
                    num_datasets=200, num_steps=1000)["pvalues"]
         for h in (5e-4, 4.5e-3)}
    assert p[5e-4].shape == (4, 6)
    assert p[5e-4].min() > 1e-4
    assert p[4.5e-3].min() < 1e-4


@pytest.mark.slow  # fast twin: test_sbc_of_the_exact_posterior_is_uniform_and_... (and the
# logistic target's exact-in-the-limit draws: test_sbc_of_the_logistic_posterior_..., slow)
def test_sbc_of_a_well_tuned_diging_sghmc_on_the_logistic_target():
    # The logistic posterior is ill-conditioned: curvature from about 1 (the prior, along
    # directions the standardized, correlated features barely see) to at most
    # lambda_max(Z'Z) / 4 + 1 = 1890 (sbc.curvature_scale). Overdamped Langevin needs about
    # kappa steps to mix; underdamped Langevin about sqrt(kappa): eta = 0.012 puts the
    # stiffest frequency at eta * omega <= 0.012 * sqrt(1890) = 0.52 (the Euler scheme's
    # variance error (eta omega)^2 / 4 <= 7 %, about 2 % at the typical top curvature ~700),
    # and friction 2 damps the softest direction (curvature 1) critically, relaxing in about
    # 1 / eta = 83 steps: 1000 steps are 12 relaxation times from the starts near zero.
    # Not rejected: all 4 agents x 31 coordinates above 1e-4 (124 tests per binning: a false
    # alarm <= 2.5e-2 over both). The same draws spread 1.5 times around each data set's
    # mean are rejected: at S = 100, L = 7 (4 bins of 2 ranks, 25 expected each) about a
    # fifth of the ranks move between bins, chi-square ~ 10-20 on 3 degrees of freedom, so
    # the median (agent, coordinate) p-value falls below 1e-2.
    from dgsgld import DIGingSGHMC, networks
    from dgsgld.posteriors.sbc import rank_uniformity, sbc_ranks, sbc_run

    out = sbc_run("logistic_breast_cancer", DIGingSGHMC(0.012, 2.0), networks.ring(4),
                  jax.random.key(0), num_datasets=100, num_draws=7, num_steps=1000)
    ranks, draws = out["ranks"], out["draws"]
    assert ranks.shape == (100, 4, 31) and draws.shape == (100, 7, 4, 31)
    assert out["pvalues"].min() > 1e-4
    assert min(rank_uniformity(ranks[:, i], 7, num_bins=4).min() for i in range(4)) > 1e-4
    centre = draws.mean(1, keepdims=True)
    wide = sbc_ranks(centre + 1.5 * (draws - centre), out["truth"])
    p = np.stack([rank_uniformity(wide[:, i], 7, num_bins=4) for i in range(4)])
    assert np.median(p) < 1e-2, np.sort(p.ravel())


@pytest.mark.slow  # fast twin: test_bench_writes_the_sbc_cells_without_matplotlib (per-data-set
# steps run there)
def test_sbc_run_with_one_step_per_data_set_is_the_run_at_that_step():
    # step_sizes all equal to h: the same chains as the sampler built at h (the same keys; the
    # step a traced leaf instead of a constant, so float32 rounding may differ: rtol 1e-4 on
    # draws of size ~1 after 20 steps).
    from dgsgld import DIGingSGLD, networks
    from dgsgld.posteriors.sbc import sbc_run

    kw = {"num_datasets": 3, "num_draws": 2, "num_steps": 20}
    fixed = sbc_run("gaussian_linear", DIGingSGLD(1e-3), networks.ring(4), jax.random.key(0),
                    **kw)
    per_set = sbc_run("gaussian_linear", DIGingSGLD, networks.ring(4), jax.random.key(0),
                      step_sizes=lambda y: np.full(len(y), 1e-3), **kw)
    np.testing.assert_allclose(per_set["draws"], fixed["draws"], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(per_set["step_sizes"], np.full(3, 1e-3))


def _bench_sbc_cells(out, log, adapted=()):
    """The bench with no leaderboard targets, SBC on the Gaussian anchor only: the exact cell
    and DIGing-SGLD's at h = 0.1 / lambda_max of the posterior precision (and the adapted cells
    of ``adapted``), their p-values in the JSON and the Markdown, the ranks in a file.
    (Calibration itself: the SBC tests above and tests/tuning/test_adapted_sbc.py.)"""
    import dataclasses

    from dgsgld.posteriors.sbc import curvature_scale, simulate
    from experiments.bench import BenchSettings, bench_posteriors

    settings = dataclasses.replace(
        BenchSettings.small(), targets=(), sbc_targets=("gaussian_linear",),
        sbc_samplers=("DIGing-SGLD",), sbc_datasets=12, sbc_draws=3, sbc_steps=10,
        sbc_adapted=adapted, sbc_warmup_steps=60)
    result = bench_posteriors(out, settings, log=log)
    exact, diging, *rest = result["sbc"]
    assert [c["sampler"] for c in rest] == [a + " (adapted)" for a in adapted]
    for cell in rest:  # a warm-up of 60 steps per data set, then 10 steps at its settings
        assert np.asarray(cell["pvalues"]).shape == (4, 6) and cell["tests"] == 24
        assert cell["warmup_steps"] == 60 and 0 < cell["h_min"] <= cell["h_max"]
        assert 0 <= cell["budget_ok"] <= 12 and cell["reruns"] >= 0
        assert f"| gaussian_linear | ring | {cell['sampler']} | 12 x 3 | 60 + 10 |" in (
            out / "leaderboard.md").read_text()
    assert (exact["sampler"], diging["sampler"]) == ("exact", "DIGing-SGLD")
    assert np.asarray(exact["pvalues"]).shape == (1, 6)
    assert np.asarray(diging["pvalues"]).shape == (4, 6) and diging["tests"] == 24
    h = 0.1 / curvature_scale("gaussian_linear", simulate("gaussian_linear", 0, 2)[1])[0]
    assert diging["h_min"] == diging["h_max"] == pytest.approx(h, rel=1e-12)
    assert diging["min_p"] == pytest.approx(min(map(min, diging["pvalues"])))
    assert json.loads((out / "leaderboard.json").read_text())["sbc"] == result["sbc"]
    ranks = json.loads((out / "sbc_ranks.json").read_text())
    assert np.asarray(ranks[1]["ranks"]).shape == (12, 4, 6)
    assert "| gaussian_linear | ring | DIGing-SGLD | 12 x 3 | 10 |" in (
        out / "leaderboard.md").read_text()


@pytest.mark.slow  # fast twin: test_bench_writes_the_sbc_cells_without_matplotlib (all but the
# figures; the figures' contents: test_rank_histograms_... and test_leaderboard_figure_...)
def test_bench_writes_the_sbc_cells(tmp_path):
    # The cells (_bench_sbc_cells, with an adapted cell), and the ranks' histograms in a
    # figure (with matplotlib).
    _bench_sbc_cells(tmp_path, log=lambda *_: None, adapted=("DIGing-SGLD",))
    if (tmp_path / "sbc_ranks.png").exists():  # with matplotlib
        assert (tmp_path / "sbc_ranks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_writes_the_sbc_cells_without_matplotlib(tmp_path, monkeypatch):
    # The same cells (_bench_sbc_cells) where matplotlib (the optional plots extra) is missing:
    # the JSON, Markdown and ranks are written, each figure is skipped with a log line.
    from experiments import bench as bench

    def no_matplotlib(*args, **kwargs):
        raise ImportError("no module named 'matplotlib'")

    monkeypatch.setattr(bench, "leaderboard_figure", no_matplotlib)
    monkeypatch.setattr(bench, "sbc_figure", no_matplotlib)
    lines = []
    _bench_sbc_cells(tmp_path, log=lines.append)
    assert not list(tmp_path.glob("*.png"))
    assert [line for line in lines if line.startswith("no ")] == [
        "no leaderboard.png: no module named 'matplotlib'",
        "no sbc_ranks.png: no module named 'matplotlib'"]


def test_rank_histograms_draw_each_agents_bin_counts():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from dgsgld.posteriors.sbc import rank_histograms

    # S = 8 data sets, 2 agents, 1 coordinate, L = 3 (4 ranks, one per bin).
    ranks = np.array([0, 0, 0, 1, 2, 3, 3, 3] + [1] * 8).reshape(2, 8).T[:, :, None]
    fig = rank_histograms(ranks, 3, num_bins=4)
    (ax,) = fig.axes
    lines = [line for line in ax.get_lines() if line.get_label().startswith("agent")]
    assert [np.asarray(line.get_ydata()).tolist() for line in lines] == [[3, 1, 1, 3],
                                                                          [0, 8, 0, 0]]
    plt.close(fig)


def test_bench_builds_every_target_before_any_run(tmp_path, monkeypatch):
    # A target whose data cannot be loaded (scikit-learn missing) stops the command before
    # the targets listed ahead of it run, and before the output directory is made.
    import dataclasses

    from dgsgld.posteriors import targets
    from experiments.bench import BenchSettings, bench_posteriors

    def missing():
        raise ImportError("this benchmark target uses a data set bundled with scikit-learn")

    monkeypatch.setitem(targets.TARGETS, "needs_sklearn", missing)
    settings = dataclasses.replace(BenchSettings.small(),
                                   targets=("gaussian_linear", "needs_sklearn"), sbc_targets=())
    with pytest.raises(ImportError, match="scikit-learn"):
        bench_posteriors(tmp_path / "out", settings, log=lambda *_: None)
    assert not (tmp_path / "out").exists()


def test_bench_merge_joins_parts_in_the_settings_order(tmp_path):
    # Parts written as bench_posteriors writes them (settings, part, rows, cells, ranks):
    # merge orders rows and cells as the settings list their targets, sums the wall times,
    # copies the ranks, and refuses a missing, doubled or foreign part by name.
    from experiments.bench import merge

    settings = {"targets": ["t1", "t2", "t3"], "sbc_targets": ["t3", "t1"], "sbc_bins": 4,
                "num_agents": 4, "split": "skew", "seeds": 1, "chains": 2, "num_steps": 10,
                "thin": 1, "score_size": 5, "sbc_step": 0.1}

    def row(t, sampler):
        return {"target": t, "network": "-", "sampler": sampler, "step_size": None,
                "wall_s": None, "bytes_sent": None, "diverged": 0, "batch_size": None}

    def cell(t):
        return {"target": t, "sampler": "S", "network": "ring", "num_datasets": 2,
                "num_draws": 3, "num_steps": 5, "min_p": 0.5, "rejected": 0, "tests": 1,
                "wall_s": 1.0, "names": ["a"]}

    def part(name, targets, sbc_targets, seed=0, complete=True, **changes):
        d = tmp_path / name
        d.mkdir()
        result = {"settings": settings | changes, "wall_s": 2.0,
                  "rows": [row(t, s) for t in targets for s in ("reference", "A")],
                  "part": {"targets": targets, "sbc_targets": sbc_targets, "seed": seed}
                  | ({"complete": True} if complete else {})}
        if sbc_targets:
            result["sbc"] = [cell(t) for t in sbc_targets]
            (d / "sbc_ranks.json").write_text(json.dumps(  # a diverged cell has no ranks
                [{"target": t, "sampler": "S", "ranks": [[[0]], [[3]]]} for t in sbc_targets]
                + [{"target": t, "sampler": "D"} for t in sbc_targets]))
        (d / "leaderboard.json").write_text(json.dumps(result))
        return d

    a = part("a", ["t3"], ["t1"])
    b = part("b", ["t1", "t2"], [])
    c = part("c", [], ["t3"])
    joined = merge(tmp_path / "out", [a, b, c])
    assert [(r["target"], r["sampler"]) for r in joined["rows"]] == [
        (t, s) for t in ("t1", "t2", "t3") for s in ("reference", "A")]
    assert [c["target"] for c in joined["sbc"]] == ["t3", "t1"]
    assert joined["wall_s"] == 6.0 and "part" not in joined
    assert [r["target"] for r in json.loads((tmp_path / "out" / "sbc_ranks.json").read_text())
            ] == ["t3", "t3", "t1", "t1"]
    assert (tmp_path / "out" / "leaderboard.md").read_text().count("| t2 | - | A |") == 1
    some = merge(tmp_path / "some", [a, c], partial=True)  # t1 and t2's rows not run
    assert some["missing"] == {"targets": ["t1", "t2"], "sbc_targets": []}
    assert [r["target"] for r in some["rows"]] == ["t3", "t3"]
    assert "Parts of a run: not run targets t1, t2." in (
        tmp_path / "some" / "leaderboard.md").read_text().splitlines()[0]
    with pytest.raises(ValueError, match="calibration targets"):  # doubled, even if partial
        merge(tmp_path / "bad", [a, c, c], partial=True)
    for parts, match in (([a, b], "calibration targets"), ([a, c], "settings' targets"),
                         ([a, b, c, c], "calibration targets"), ([a, b, b, c], "settings' targets"),
                         ([a, b, part("d", [], ["t3"], seed=1)], "seeds"),
                         ([a, b, part("e", [], ["t3"], seeds=3)], "other settings"),
                         ([a, c, part("f", ["t1", "t2"], [], complete=False)], "stopped")):
        with pytest.raises(ValueError, match=match):
            merge(tmp_path / "bad", parts)


@pytest.mark.slow  # fast twin: test_bench_merge_joins_parts_in_the_settings_order
def test_bench_parts_merge_into_the_whole_run(tmp_path):
    # A run split into parts (targets apart, the calibration apart) and joined by `merge` has
    # the whole run's rows and cells: a target's keys come from its place in the settings.
    import dataclasses

    from experiments.bench import BenchSettings, bench_posteriors, merge

    settings = dataclasses.replace(
        BenchSettings.small(), targets=("gaussian_linear", "poisson_linnerud"),
        samplers=("DE-SGLD",), seeds=1, chains=4, num_steps=40, thin=2, pilot_steps=10,
        pilot_grid=2, score_size=20, adapted=(), sbc_targets=("gaussian_linear",),
        sbc_samplers=("DE-SGLD",), sbc_datasets=4, sbc_draws=3, sbc_steps=10, sbc_adapted=())
    quiet = {"log": lambda *_: None}
    whole = bench_posteriors(tmp_path / "whole", settings, **quiet)
    bench_posteriors(tmp_path / "b", settings, only=("poisson_linnerud",), **quiet)
    bench_posteriors(tmp_path / "a", settings, only=("gaussian_linear",), calibration=False,
                     **quiet)
    bench_posteriors(tmp_path / "c", settings, only=("gaussian_linear",), leaderboard=False,
                     **quiet)
    joined = merge(tmp_path / "joined", [tmp_path / "c", tmp_path / "b", tmp_path / "a"])

    def scores(result):
        return json.dumps([{k: v for k, v in r.items() if k != "wall_s"}
                           for r in result["rows"] + result["sbc"]])

    assert "part" not in joined
    assert joined["settings"] == json.loads(json.dumps(whole["settings"]))
    assert [r["target"] for r in joined["rows"]] == [r["target"] for r in whole["rows"]]
    assert scores(joined) == scores(whole)
    assert json.loads((tmp_path / "joined" / "sbc_ranks.json").read_text()) == json.loads(
        (tmp_path / "whole" / "sbc_ranks.json").read_text())
    with pytest.raises(ValueError, match="every one of the settings' targets"):
        merge(tmp_path / "bad", [tmp_path / "a", tmp_path / "c"])
    with pytest.raises(ValueError, match="calibration targets"):  # the Gaussian's cells twice
        merge(tmp_path / "bad", [tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "c"])
    with pytest.raises(ValueError, match="whole run"):
        merge(tmp_path / "bad", [tmp_path / "a", tmp_path / "whole"])
    with pytest.raises(ValueError, match="`only`"):
        bench_posteriors(tmp_path / "bad", settings, only=("eight_schools",), **quiet)


def test_bench_resume_keeps_the_stored_rows_and_runs_the_others(tmp_path, monkeypatch):
    # The bookkeeping of resume, with a stand-in for a row's run whose result is its key: the
    # resumed part runs only the rows missing from the stored file, in the settings' order,
    # with the keys of the uninterrupted part.
    import dataclasses

    import experiments.bench as bench

    calls = []

    def fake_run(target, ref, potential, sampler_name, network_name, settings, key):
        calls.append(sampler_name)
        return {"step_size": float(jax.random.uniform(key)), "wall_s": 0.0, "bytes_sent": 0,
                "diverged": 0, "seeds": [None]}

    monkeypatch.setattr(bench, "_one_run", fake_run)
    monkeypatch.setattr(bench, "_floor", lambda *args: {})
    settings = dataclasses.replace(
        bench.BenchSettings.small(), targets=("gaussian_linear", "poisson_linnerud"),
        samplers=("DE-SGLD", "DIGing-SGLD", "SGLD (centralized)"), networks=("ring", "complete"),
        seeds=1, adapted=(), sbc_targets=())
    quiet = {"log": lambda *_: None}
    whole = bench.bench_posteriors(tmp_path / "p", settings, only=("poisson_linnerud",), **quiet)
    stored = json.loads((tmp_path / "p" / "leaderboard.json").read_text())
    stored["rows"] = [r for r in stored["rows"]
                      if (r["network"], r["sampler"]) != ("ring", "DIGing-SGLD")][:4]
    del stored["part"]["complete"]  # as a part that stopped leaves it
    (tmp_path / "p" / "leaderboard.json").write_text(json.dumps(stored))
    calls.clear()
    resumed = bench.bench_posteriors(tmp_path / "p", settings, only=("poisson_linnerud",),
                                     resume=True, **quiet)
    assert calls == ["DIGing-SGLD", "DIGing-SGLD"]  # ring's (removed) and complete's (not reached)
    assert whole["part"]["complete"] and resumed["part"]["complete"]  # what merge asks for
    assert [(r["network"], r["sampler"], r["step_size"]) for r in resumed["rows"]] == [
        (r["network"], r["sampler"], r["step_size"]) for r in whole["rows"]]
    with pytest.raises(ValueError, match="other settings.*seeds"):
        bench.bench_posteriors(tmp_path / "p", dataclasses.replace(settings, seeds=2),
                               only=("poisson_linnerud",), resume=True, **quiet)
    with pytest.raises(ValueError, match="another part"):
        bench.bench_posteriors(tmp_path / "p", settings, only=("gaussian_linear",), resume=True,
                               **quiet)
    # A resumed run that stops again keeps in its file the stored rows it had not reached.
    stored = {**whole, "rows": [r for r in whole["rows"] if (r["network"], r["sampler"]) not in
                                {("ring", "DIGing-SGLD"), ("complete", "DE-SGLD")}]}
    del stored["part"]["complete"]
    (tmp_path / "p" / "leaderboard.json").write_text(json.dumps(stored))

    class Stopped(Exception):
        pass

    def stop_at_the_second(*args):
        if calls:
            raise Stopped
        return fake_run(*args)

    calls.clear()
    monkeypatch.setattr(bench, "_one_run", stop_at_the_second)
    with pytest.raises(Stopped):
        bench.bench_posteriors(tmp_path / "p", settings, only=("poisson_linnerud",),
                               resume=True, **quiet)
    kept = json.loads((tmp_path / "p" / "leaderboard.json").read_text())
    assert {(r["network"], r["sampler"]) for r in kept["rows"]} == {
        (r["network"], r["sampler"]) for r in whole["rows"]} - {("complete", "DE-SGLD")}
    monkeypatch.setattr(bench, "_one_run", fake_run)
    # A whole run records its seed: resuming it under another seed is refused.
    bench.bench_posteriors(tmp_path / "w", settings, seed=0, **quiet)
    with pytest.raises(ValueError, match="ran seed 0, not 1"):
        bench.bench_posteriors(tmp_path / "w", settings, seed=1, resume=True, **quiet)


@pytest.mark.slow  # fast twin: test_bench_resume_keeps_the_stored_rows_and_runs_the_others
def test_bench_resume_runs_only_the_missing_rows(tmp_path):
    # A part that stopped after some rows: resuming keeps them and runs the rest, and gives
    # the uninterrupted part's rows (a row's key is its place in the settings); a stored run
    # of other settings or another part is refused by name.
    import dataclasses

    from experiments.bench import BenchSettings, bench_posteriors

    settings = dataclasses.replace(
        BenchSettings.small(), targets=("gaussian_linear",), samplers=("DE-SGLD", "DIGing-SGLD"),
        seeds=1, chains=4, num_steps=40, thin=2, pilot_steps=10, pilot_grid=2, score_size=20,
        adapted=(), sbc_targets=())
    ran = []
    whole = bench_posteriors(tmp_path / "p", settings, only=("gaussian_linear",),
                             log=lambda *_: None)
    stored = json.loads((tmp_path / "p" / "leaderboard.json").read_text())
    stored["rows"] = stored["rows"][:2]  # reference and DE-SGLD done, DIGing-SGLD not
    (tmp_path / "p" / "leaderboard.json").write_text(json.dumps(stored))
    resumed = bench_posteriors(tmp_path / "p", settings, only=("gaussian_linear",),
                               resume=True, log=ran.append)
    assert len(ran) == 1 and "DIGing-SGLD" in ran[0]

    def scores(result):
        return json.dumps([{k: v for k, v in r.items() if k != "wall_s"} for r in result["rows"]])

    assert scores(resumed) == scores(whole)
    with pytest.raises(ValueError, match="other settings.*seeds"):
        bench_posteriors(tmp_path / "p", dataclasses.replace(settings, seeds=2),
                         only=("gaussian_linear",), resume=True)
    with pytest.raises(ValueError, match="another part"):
        bench_posteriors(tmp_path / "p", settings, resume=True)


def test_band_table_counts_the_targets_each_row_reaches():
    # A row is within the band when its worst sd ratio is in [0.8, 1.25] and its max mean
    # error at most 0.3 (bounds included); a row without scores (every seed diverged) is not.
    from experiments.bench import band_table, within_band

    def row(target, sampler, network, sd, mean):
        scores = {} if sd is None else {"sd_ratio_worst": [sd, 0.0],
                                        "mean_error_max": [mean, 0.0]}
        return {"target": target, "sampler": sampler, "network": network} | scores

    rows = [row("t1", "reference", "-", 1.0, 0.1),
            row("t1", "A (adapted)", "ring", 1.25, 0.3), row("t2", "A (adapted)", "ring", 0.79, 0.1),
            row("t1", "A (adapted)", "complete", 0.8, 0.31), row("t2", "A (adapted)", "complete",
                                                                  None, None),
            row("t2", "reference", "-", 1.0, 0.1)]
    assert [within_band(r) for r in rows[1:5]] == [True, False, False, False]
    table = band_table({"rows": rows})
    assert table[0].endswith("of 2 targets:")
    assert table[4:] == ["| A (adapted) | ring | 1 | t2 |",
                         "| A (adapted) | complete | 0 | t1, t2 |"]


def test_adapted_rows_draw_through_a_control_variate_where_agents_hold_many_data():
    # The adapted rows' estimator follows the warm-up's curvature subsample: none where every
    # agent's data fit it (the sampler's own batches), SVRG every ADAPTED_SVRG_PERIOD steps
    # where one holds more; the shipped leaderboard's adapted rows name it on exactly the
    # large-data targets, and its plain rows never.
    import pathlib

    from dgsgld.gradients import SVRG
    from experiments.bench import (
        ADAPTED_SUFFIX,
        ADAPTED_SVRG_PERIOD,
        BenchSettings,
        adapted_estimator,
        target_setup,
    )

    assert adapted_estimator(None) is None
    cv = adapted_estimator(2000)
    assert isinstance(cv, SVRG) and cv.update_every == ADAPTED_SVRG_PERIOD
    assert target_setup(get_target("gaussian_linear"), BenchSettings.full())[3] is None
    shipped = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "references"
    rows = json.loads((shipped / "leaderboard.json").read_text())["rows"]
    for r in rows:
        want = (f"SVRG/{ADAPTED_SVRG_PERIOD}" if r["sampler"].endswith(ADAPTED_SUFFIX)
                and r["target"] in LARGE_TARGETS else None)
        assert r.get("estimator") == want, (r["target"], r["sampler"])


def test_shipped_leaderboard_is_the_merge_of_its_stored_parts(tmp_path, monkeypatch):
    # benchmarks/references/leaderboard.json is what `merge --partial` makes of the parts kept
    # in benchmarks/references/parts/: a part edited, added or lost shows here. (No figures:
    # drawn as when matplotlib is missing.)
    import pathlib

    from experiments import bench
    from experiments.bench import merge

    def no_figure(*args, **kwargs):
        raise ImportError("figures are not compared here")

    monkeypatch.setattr(bench, "leaderboard_figure", no_figure)
    monkeypatch.setattr(bench, "sbc_figure", no_figure)

    shipped = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "references"
    parts = sorted(p for p in (shipped / "parts").iterdir() if p.is_dir())
    joined = merge(tmp_path, parts, partial=True)
    assert json.loads(json.dumps(joined)) == json.loads((shipped / "leaderboard.json").read_text())
    assert (tmp_path / "sbc_ranks.json").read_text() == (shipped / "sbc_ranks.json").read_text()
