"""The personalization experiment (experiments/personalized.py): its masks, bytes and scores."""

import jax
import numpy as np
import pytest

import dgsgld
from experiments import personalized


@pytest.mark.slow  # fast twin:
# tests/model/test_private.py::test_channel_counts_only_the_shared_leaves
def test_digits_masks_mark_the_named_layer_and_the_bytes_follow():
    """The MLP 64-64-10: a private output layer holds 64·10 + 10 = 650 numbers, a private
    hidden layer 64·64 + 64 = 4160; DIGing-SGLD sends the rest, twice (x and y) to each of a
    ring's 2 neighbours, 4 bytes each: 16·(4810 − private) bytes per agent and step."""
    pytest.importorskip("sklearn")
    from experiments import digits

    task = digits.digits_task()
    template = task.init(jax.random.key(0))
    sizes = [leaf.size for leaf in jax.tree.leaves(template)]
    for which, private in (("none", 0), ("output", 650), ("hidden", 4160), ("all", 4810)):
        flags = jax.tree.leaves(personalized._head_mask(template, which))
        assert sum(s for s, f in zip(sizes, flags) if f) == private, which
    x, y = task.train
    data = (x[: 10 * 8].reshape(10, 8, -1), y[: 10 * 8].reshape(10, 8))
    mask = personalized._head_mask(template, "output")
    shared_prior, agent_prior = personalized._split_prior(mask, 1.0)
    pot = dgsgld.Potential(task.log_likelihood, shared_prior, data, 4, private=mask,
                           log_agent_prior=agent_prior)
    init = jax.vmap(jax.vmap(task.init))(jax.random.split(jax.random.key(1), 10).reshape(1, 10))
    channel = dgsgld.communication.Channel()
    ring = np.asarray(dgsgld.networks.ring(10).matrices[0])
    trace = dgsgld.sample(dgsgld.DIGingSGLD(1e-3), pot, ring, init, jax.random.key(2), 3,
                          channel=channel, output=dgsgld.Output(positions=False))
    np.testing.assert_array_equal(channel.bytes_sent(trace.state, pot), 3 * 16 * (4810 - 650))
    # The prior split: shared leaves' and private leaves' terms add up to the whole prior.
    one = jax.tree.map(lambda v: v[0, 0], init)
    np.testing.assert_allclose(shared_prior(one) + agent_prior(one), task.log_prior(one),
                               rtol=1e-6)


@pytest.mark.slow  # fast twins: tests/model/test_private.py (exact laws of every sampler)
def test_hierarchical_part_scores_every_sampler_against_nuts_and_counts_bytes():
    """``--small``: every sampler's (and every adapted row's) private (a_g, b_g) means within
    0.35 posterior sds of the NUTS reference (the constant step's bias) plus 3 Monte Carlo
    standard errors (the row's MCSE, 1/√ESS: about 0.07 for the fixed steps, 0.2-0.3 for the
    adapted rows, whose private blocks relax in hundreds of steps), and sds within 25 % plus
    3 standard errors of a log sd, 1/√(2 ESS) = MCSE/√2 (8 chains of 3 000 steps leave an
    adapted row an ESS of about 12: at 25 % alone its worst of 32 private sds, 0.79, was
    outside by chance; at full size it is 0.95); bytes: 5 shared numbers of 4 bytes per
    message against 21 when everything is shared (DIGing-SGLD: 2 messages to 2 ring
    neighbours)."""
    out = personalized.hierarchical_scores(small=True, logger=None)["scores"]
    adapted = {f"{name} (adapted)" for name in personalized.ADAPTED}
    assert set(out) == ({cls.name for cls in dgsgld.samplers.ALL} | {"DIGing-SGLD, all shared"}
                        | adapted)
    for name, row in out.items():
        if name != "DIGing-SGLD, all shared":
            mcse = row["private"]["mcse"]
            assert row["private"]["mean_error"] < 0.35 + 3 * mcse, name
            assert abs(np.log(row["private"]["sd_ratio"])) < np.log(1.25) + 3 * mcse / np.sqrt(2), \
                name
    assert out["DIGing-SGLD"]["bytes_per_step"] == 5 * 4 * 2 * 2
    assert out["DE-SGLD"]["bytes_per_step"] == 5 * 4 * 2
    assert out["DIGing-SGLD, all shared"]["bytes_per_step"] == 21 * 4 * 2 * 2
    assert out["SGLD"]["bytes_per_step"] is None
    # after the warm-up the same messages: its M and step change what is sent, not its size
    assert out["DIGing-SGLD (adapted)"]["bytes_per_step"] == 5 * 4 * 2 * 2
    assert all(out[name]["warmup_bytes"] > 0 for name in adapted)
