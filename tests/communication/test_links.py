"""Links: probabilistic rounds and per-link drops, the used matrices of dropped links and
stragglers step by step, draws independent of how chains are batched, DIGing's stationary mean
kept under drops and gossip, and randomized gossip's matrices, rounds and law."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _channels import _PATTERN, N, _round_keys, _run, _same, _states, _with
from _problems import complete_graph, linear_regression, permuted_rings, ring

import dgsgld
from dgsgld import communication as C


@pytest.mark.slow  # fast twins: test_links_and_stragglers_step_by_step, test_neutral_settings_...
def test_probabilistic_rounds_and_links(key):
    """DIGing-SGLD, 4 agents, 6 steps, one compiled program. (1) probability=1 (per link) is
    no channel bit for bit. (2) per_link=True, p = 0.5 on the complete graph equals no
    channel on the stack of the used matrices W'ₖ = drop_links(W, link_mask(round key of step
    k)) (recomputed here from the run's keys), each symmetric, nonnegative and doubly
    stochastic, with some of the 36 link draws up and some down; x and y go over the same
    links, and each agent's count is Σₖ out-degree(W'ₖ). (3) per round, p = 0.5: no channel
    on the stack (W or I at step k as the round's draw says), 3 messages per agent and
    message at each round only."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, W, T = dgsgld.DIGingSGLD(0.05), complete_graph(N), 6
    keys = _round_keys(key, T)
    assert C.Channel(probability=1.0) == C.Channel()

    @jax.jit
    def runs(key):
        one = (_run(alg, problem, W[None], T, key),
               _run(_with(alg, C.Channel(probability=1.0, per_link=True)), problem, W[None],
                    T, key))
        used = jnp.stack([C.drop_links(jnp.asarray(W, jnp.float32), C.link_mask(k, N, 0.5))
                          for k in keys])
        talk = jnp.stack([jax.random.uniform(k) < 0.5 for k in keys])
        rounds = jnp.where(talk[:, None, None], jnp.asarray(W, jnp.float32), jnp.eye(N))
        refs = jax.vmap(lambda stack: _run(alg, problem, stack, T, key))(jnp.stack([used,
                                                                                   rounds]))
        link = _run(_with(alg, C.Channel(probability=0.5, per_link=True)), problem, W[None],
                    T, key)
        rnd = _run(_with(alg, C.Channel(probability=0.5)), problem, W[None], T, key)
        return one, used, talk, refs, link, rnd

    (base, one), used, talk, refs, link, rnd = runs(key)
    link_ref, rnd_ref = jax.tree.map(lambda a: a[0], refs), jax.tree.map(lambda a: a[1], refs)
    _same(base, one)
    for state in one.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.full(N, 3 * T))
    used = np.asarray(used, np.float64)
    np.testing.assert_allclose(used, used.transpose(0, 2, 1), atol=0)
    np.testing.assert_allclose(used.sum(2), 1.0, atol=1e-6)
    assert (used >= 0).all()
    up = (used != 0)[:, ~np.eye(N, dtype=bool)]
    assert 0 < up.sum() < up.size, up.sum()
    _close(link, link_ref)
    degrees = (used != 0).sum(1) - 1                      # out-degree of each W'ₖ, (T, N)
    for state in link.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), degrees.sum(0))
    talk = np.asarray(talk)
    assert 0 < talk.sum() < T, talk
    _close(rnd, rnd_ref)
    for state in rnd.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.full(N, 3 * talk.sum()))


def _close(a, b):
    """Equal up to float32 rounding (the reference is batched, which may sum differently)."""
    for u, v in zip(jax.tree.leaves(a._replace(channel=())),
                    jax.tree.leaves(b._replace(channel=()))):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # fast twin: test_links_and_stragglers_step_by_step (W'ₖ exactly)
def test_link_drops_keep_diging_stationary_mean(key):
    """Per-link drops (p = 0.5, ring) and DIGing-SGLD with full batches on the Gaussian
    problem: the recursion is linear given the link masks, and W'ₖ is drawn independently of
    the state, so the means follow m_x⁺ = W̄ m_x − η m_y, m_y⁺ = W̄ m_y + H m_x⁺ − H m_x (b
    cancels) with W̄ = E[W'] symmetric doubly stochastic. At the fixed point m_y = W̄ m_y is a
    consensus 1 ⊗ c, summing the first equation over agents gives c = 0, so m_x = W̄ m_x is a
    consensus 1 ⊗ μ with Σ_i ∇f_i(μ) = Σ_i m_y,i = 0 (the tracking invariant in mean): μ is
    the posterior mean at any step size, for every agent and the network average.

    2000 chains from x⁽⁰⁾ = 0, 400 steps: the network average's mean mode contracts by
    1 − η λ_min(A)/N = 0.969 a step, so the start's bias is 0.969⁴⁰⁰ |μ| < 1e-5. Its
    standard error is estimated from the chains (≈ 0.5 / √2000 = 0.011, against |μ| = (0.73,
    0.16)); each coordinate is within 5 standard errors (2 coordinates: a false failure has
    probability < 2e-6). Weights dropped without moving them to the diagonal would pull the
    average towards 0 (W' substochastic) and fail."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    chains, steps = 2000, 400
    channel = C.Channel(probability=0.5, per_link=True)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, ring(N),
                          jnp.zeros((chains, N, 2)), key, steps, channel=channel,
                          output=dgsgld.Output(thin=steps))
    average = np.asarray(trace.state.position, np.float64).mean(1)        # (chains, d)
    se = average.std(0, ddof=1) / np.sqrt(chains)
    assert (np.abs(average.mean(0) - problem.mean) <= 5 * se).all(), (average.mean(0),
                                                                      problem.mean, se)
    sent = np.asarray(C.messages_sent(trace.state), np.float64)          # (chains, N)
    # 2 messages a step over each of an agent's 2 ring links, each up w.p. 1/2: mean 2 a step.
    # The network sends 4 · Bin(4, 1/2) a step (variance 16), so the mean per agent and step
    # over 2000 · 400 such draws has standard error √(16 / 800000) / 4 = 0.0011; 5 of them.
    np.testing.assert_allclose(sent.mean() / steps, 2.0, atol=0.0056)


@pytest.mark.slow  # fast twin: test_links_and_stragglers_step_by_step
def test_round_draws_do_not_depend_on_chain_batching(key):
    """Chain 2 of a 3-chain run equals the 1-chain run at chain_offset=2, bit for bit and
    bytes included, with rounds and links drawn at random, an event trigger and stragglers."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    stack, init = permuted_rings(N, 3), jnp.zeros((3, N, 2))
    for channel in (C.Channel(probability=0.5, per_link=True), C.Channel(probability=0.3),
                    C.Channel(C.random_k(0.5), error_feedback=True, threshold=0.05),
                    C.Channel(C.top_k(0.5), error_feedback=True, activity=0.5)):
        alg = dgsgld.DIGingSGLD(0.05)
        all3 = dgsgld.sample(alg, problem.potential, stack, init, key, 6, channel=channel)
        one = dgsgld.sample(alg, problem.potential, stack, init[2:], key, 6, channel=channel,
                            chain_offset=2)
        np.testing.assert_array_equal(np.asarray(all3.positions[2:]), np.asarray(one.positions))
        np.testing.assert_array_equal(channel.bytes_sent(all3.state)[2:],
                                      channel.bytes_sent(one.state))


@pytest.mark.slow  # fast twin:
# tests/communication/test_channel.py::test_diging_exact_channel_and_tracking_invariant
def test_links_and_stragglers_step_by_step(key):
    """DIGing-SGLD with mini-batches on the complete graph, links up w.p. 1/2 and the
    activity pattern (all, all but 1, only 1 and 2), 6 steps, one compiled program. The used
    matrices W'ₖ, recomputed from the run's keys (links dropped by link_mask(round key of
    step k) onto the diagonals, then the inactive agents' links, their rows e_i), are
    symmetric, nonnegative and doubly stochastic, with some of the 36 link draws up and some
    down. At every step: an inactive agent's x, y and gradient are kept exactly; every active
    agent's row equals (to float32 rounding: the reference is batched over steps) a step of
    DIGing-SGLD without channel from the same state and key over W'ₖ, so x and y go over the
    same links; an agent counts, per message at the steps it is active, its up links (to
    active and inactive neighbours); Σ y = Σ ∇̃f holds to rounding."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, W, T = dgsgld.DIGingSGLD(0.05), jnp.asarray(complete_graph(N), jnp.float32), 6
    active = _PATTERN[np.arange(T) % 3]                                 # (T, N)
    channel = C.Channel(probability=0.5, per_link=True, activity=_PATTERN)
    rounds = _round_keys(key, T)

    @jax.jit
    def runs(key):
        first, states, keys = _states(_with(alg, channel), problem, W[None], T, key)
        before = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b[:-1]]), first, states)
        up = jnp.stack([C.drop_links(W, C.link_mask(r, N, 0.5)) for r in rounds])
        used = jax.vmap(C.without_inactive)(up, jnp.asarray(active))
        plain = jax.vmap(lambda k, s, w: alg.step(k, s._replace(channel=()), problem.potential,
                                                  w))(keys, before, used)
        return before, states, plain, up, used

    before, states, plain, up, used = runs(key)
    used = np.asarray(used, np.float64)
    np.testing.assert_allclose(used, used.transpose(0, 2, 1), atol=0)
    np.testing.assert_allclose(used.sum(2), 1.0, atol=1e-6)
    assert (used >= 0).all()
    links = (used != 0)[:, ~np.eye(N, dtype=bool)]
    assert 0 < links.sum() < links.size, links.sum()
    for name in ("position", "tracker", "grad"):
        old, new, ref = (np.asarray(getattr(s, name)) for s in (before, states, plain))
        np.testing.assert_array_equal(new[~active], old[~active], err_msg=name)
        np.testing.assert_allclose(new[active], ref[active], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    # An active agent sends to every neighbour its link is up to, inactive ones included
    # (they receive); an inactive one sends nothing.
    degrees = active * ((np.asarray(up) != 0).sum(2) - 1)
    for state in states.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.cumsum(degrees, 0))
    gap = np.abs(np.asarray(states.tracker).sum(1) - np.asarray(states.grad).sum(1)).max()
    assert gap < 1e-5 * np.abs(np.asarray(states.grad)).sum(), gap


# -- randomized gossip --------------------------------------------------------------------------


def test_gossip_matrices_pick_uniform_links_and_stay_stochastic():
    """gossip_matrix over 4000 keys on the ring of 5 (5 links, every agent 2 neighbours):
    ``"edge"`` gives one pair of neighbours averaging (symmetric, doubly stochastic), each of
    the 5 links with probability 1/5; ``"matching"`` gives disjoint pairs of neighbours, each
    link matched when both ends propose it, probability (1/2)² = 1/4. On the directed ring
    (agent j sends to j + 1 and j + 2) ``"matching"`` has every agent push half its value to
    one of its 2 out-neighbours (column stochastic), each with probability 1/2, and ``"edge"``
    moves one of the 10 one-way links. Frequencies are binomial: with standard error
    √(p(1 − p)/4000) ≤ 0.0079 each, all within 5 of them (at most 15 counts per mode: a false
    failure has probability < 1e-5)."""
    n, draws = 5, 4000
    W = jnp.asarray(ring(n), jnp.float32)
    keys = jax.random.split(jax.random.key(7), draws)
    eye = np.eye(n, dtype=bool)
    neighbours = np.asarray(W != 0) & ~eye
    out = np.zeros((n, n), np.float32)                 # directed: j -> j + 1, j + 2
    for hop in (1, 2):
        out[(np.arange(n) + hop) % n, np.arange(n)] = 1 / 3
    out[np.diag_indices(n)] = 1 / 3
    directed_links = (out != 0) & ~eye
    modes = (("edge", 1 / 5), ("matching", 1 / 4))
    drawn = jax.jit(lambda keys: [                                  # one program, not op by op
        (jax.vmap(lambda k: C.gossip_matrix(k, W, mode))(keys),                 # noqa: B023
         jax.vmap(lambda k: C.gossip_matrix(k, out, mode, directed=True))(keys))  # noqa: B023
        for mode, _ in modes])(keys)
    for (mode, probability), (m, d) in zip(modes, drawn):
        m, d = np.asarray(m), np.asarray(d)
        np.testing.assert_array_equal(m, m.transpose(0, 2, 1))
        np.testing.assert_allclose(m.sum(1), 1.0, atol=0)
        picked = (m != 0) & ~eye
        assert not (picked & ~neighbours).any()
        assert (picked.sum(1) <= 1).all()                              # one partner at most
        if mode == "edge":
            assert (picked.sum((1, 2)) == 2).all()
        assert set(np.unique(m)) <= {0.0, 0.5, 1.0}
        freq = picked[:, neighbours].mean(0)
        assert np.all(np.abs(freq - probability) <= 5 * np.sqrt(probability * (1 - probability)
                                                                 / draws)), (mode, freq)
        np.testing.assert_allclose(d.sum(1), 1.0, atol=0)
        pushed = (d != 0) & ~eye
        assert not (pushed & ~directed_links).any()
        p_dir = 1 / 10 if mode == "edge" else 1 / 2
        if mode == "matching":
            assert (pushed.sum(1) == 1).all()                          # one push per agent
        else:
            assert (pushed.sum((1, 2)) == 1).all()
        freq = pushed[:, directed_links].mean(0)
        assert np.all(np.abs(freq - p_dir) <= 5 * np.sqrt(p_dir * (1 - p_dir) / draws)), freq


@pytest.mark.slow  # fast twin: test_gossip_matrices_pick_uniform_links_and_stay_stochastic (the
# matrices a round mixes with)
def test_gossip_rounds_step_by_step(key):
    """DIGing-SGLD with ``Channel(gossip="matching")`` on the complete graph of 4, 6 steps, one
    compiled program, equals (to float32 rounding: the programs differ) DIGing-SGLD without
    channel on the stack of the round matrices W'ₖ recomputed from the run's round keys; each
    agent counts one message per matched step and message; Σ y = Σ ∇̃f to rounding."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, W, T = dgsgld.DIGingSGLD(0.05), jnp.asarray(complete_graph(N), jnp.float32), 6
    rounds = _round_keys(key, T)
    used = jnp.stack([C.gossip_matrix(jax.random.fold_in(r, C.channel._GOSSIP_TAG), W,
                                      "matching") for r in rounds])

    @jax.jit
    def runs(key):
        return (_run(_with(alg, C.Channel(gossip="matching")), problem, W[None], T, key),
                _run(alg, problem, used, T, key))

    gossip, plain = runs(key)
    for a, b in zip(jax.tree.leaves(gossip._replace(channel=())), jax.tree.leaves(plain)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    matched = ((np.asarray(used) != 0) & ~np.eye(N, dtype=bool)).sum(1)        # (T, N)
    assert 0 < matched.sum() < T * N
    for state in gossip.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), matched.sum(0))
    gap = np.abs(np.asarray(gossip.tracker).sum(0) - np.asarray(gossip.grad).sum(0)).max()
    assert gap < 1e-5 * np.abs(np.asarray(gossip.grad)).sum(), gap


@pytest.mark.slow  # fast twin: test_gossip_matrices_pick_uniform_links_and_stay_stochastic
def test_gossip_keeps_diging_stationary_mean(key):
    """Randomized gossip (a random matching of the ring at each step) and DIGing-SGLD with full
    batches on the Gaussian problem: W'ₖ is drawn independently of the state and E[W'] is
    symmetric doubly stochastic, so the argument of
    test_link_drops_keep_diging_stationary_mean applies: every agent's mean is the posterior
    mean. 2000 chains, 600 steps from 0 (a quarter of the links carry a round, so mixing is
    slower than with drops: the average's mean mode still contracts by 0.969 a step); each
    agent's coordinates within 5 standard errors estimated from the chains (8 z-scores: a
    false failure has probability < 5e-6)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    chains, steps = 2000, 600
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, ring(N),
                          jnp.zeros((chains, N, 2)), key, steps,
                          channel=C.Channel(gossip="matching"), output=dgsgld.Output(thin=steps))
    x = np.asarray(trace.state.position, np.float64)
    se = x.std(0, ddof=1) / np.sqrt(chains)
    assert (np.abs(x.mean(0) - problem.mean) <= 5 * se).all(), (x.mean(0), problem.mean, se)


@pytest.mark.slow  # fast twin: test_gossip_matrices_pick_uniform_links_and_stay_stochastic
def test_gossip_outcomes_are_the_law_of_gossip_matrix():
    """:func:`C.gossip_outcomes` (what ``exact_moments`` enumerates) against
    :func:`C.gossip_matrix`, 4000 draws each, on the ring of 5 (``"edge"``, ``"matching"``)
    and the complete graph of 4 (``"matching"``): every draw is one of the outcomes, and each
    outcome's frequency is within 5 binomial standard errors ``√(π(1 − π)/4000)`` of its
    probability π (26 outcomes: a false failure has probability < 2e-5). Exact values: on the
    ring of 5 a link is matched iff both ends propose it, ``(1/2)² = 1/4``; on the complete
    graph of 4, ``(1/3)² = 1/9``; ``"edge"`` picks each link w.p. 1/5. A matching on the
    complete graph of 7 (``6⁷`` proposal profiles) is refused, naming ``mode``."""
    draws = 4000
    keys = jax.random.split(jax.random.key(5), draws)
    cases = ((ring(5), "edge", 1 / 5), (ring(5), "matching", 1 / 4),
             (complete_graph(4), "matching", 1 / 9))
    every_drawn = jax.jit(lambda keys: [                            # one program, not op by op
        jax.vmap(lambda k, W=W, mode=mode: C.gossip_matrix(k, jnp.asarray(W, jnp.float32),
                                                            mode))(keys)
        for W, mode, _ in cases])(keys)
    for (W, mode, link), drawn in zip(cases, every_drawn):
        matrices, probs = C.gossip_outcomes(np.asarray(W), mode)
        n = matrices.shape[-1]
        neighbours = (np.asarray(W) != 0) & ~np.eye(n, dtype=bool)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(np.einsum("k,kij->ij", probs, matrices != 0)[neighbours],
                                   link, rtol=1e-12)
        drawn = np.asarray(drawn)
        which = (drawn[:, None] == matrices[None].astype(np.float32)).all((2, 3))   # (draws, K)
        assert (which.sum(1) == 1).all(), mode
        freq = which.mean(0)
        assert (np.abs(freq - probs) <= 5 * np.sqrt(probs * (1 - probs) / draws)).all(), (
            mode, freq, probs)
    with pytest.raises(ValueError, match="`mode`: a random matching is enumerated over its "
                                         "279936 proposal profiles"):
        C.gossip_outcomes(complete_graph(7), "matching")
