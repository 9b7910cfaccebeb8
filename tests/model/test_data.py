"""Splitters of dgsgld.model.data: partitions (nothing lost or duplicated), sizes, class
proportions."""

import numpy as np
import pytest

import dgsgld
from dgsgld.model import data as dd

K, PER_CLASS, N = 10, 120, 10


def _labelled(seed=0):
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(K), PER_CLASS))
    x = np.stack([np.arange(labels.size), labels], axis=1).astype(np.float32)
    return (x, labels), labels


def _assert_partition(split, n):
    everything = np.concatenate(split.indices)
    assert np.array_equal(np.sort(everything), np.arange(n))  # none lost, none duplicated


def _assert_padded(split, data):
    # On host copies: slicing the device arrays agent by agent would compile a program per size.
    x, y = (np.asarray(leaf) for leaf in split.data)
    mask = np.asarray(split.mask)
    for i, idx in enumerate(split.indices):
        assert mask[i].sum() == idx.size and mask[i, : idx.size].all()
        assert np.array_equal(np.asarray(x[i, : idx.size]), data[0][idx])
        assert np.array_equal(np.asarray(y[i, : idx.size]), data[1][idx])
        # padding repeats the agent's first datum (pad_agent_data's convention)
        fill = np.repeat(data[0][idx[:1]], mask.shape[1] - idx.size, 0)
        assert np.array_equal(np.asarray(x[i, idx.size:]), fill)


def _label_entropy(split, labels):
    """Mean over agents of the entropy (nats) of the agent's label distribution."""
    out = []
    for idx in split.indices:
        p = np.bincount(labels[idx], minlength=K) / idx.size
        out.append(-np.sum(p[p > 0] * np.log(p[p > 0])))
    return float(np.mean(out))


def test_iid_sizes_partition_and_proportions():
    data, labels = _labelled()
    split = dd.split_iid(data, N, seed=3)
    n = labels.size
    _assert_partition(split, n)
    _assert_padded(split, data)
    assert split.sizes.max() - split.sizes.min() <= 1 and split.seed == 3
    # Agent i's count of class c is hypergeometric (n_i draws without replacement from n with
    # PER_CLASS of class c): mean n_i/K, variance <= n_i (1/K)(1 - 1/K). 100 (agent, class)
    # cells at 4.5 standard deviations: a correct splitter fails with probability < 100 * 7e-6.
    for idx in split.indices:
        counts = np.bincount(labels[idx], minlength=K)
        sd = np.sqrt(idx.size * (1 / K) * (1 - 1 / K))
        assert np.all(np.abs(counts - idx.size / K) <= 4.5 * sd)


def test_iid_deterministic_and_seeded():
    data, _ = _labelled()
    a, b, c = (dd.split_iid(data, N, seed=s) for s in (1, 1, 2))
    assert all(np.array_equal(i, j) for i, j in zip(a.indices, b.indices))
    assert not all(np.array_equal(i, j) for i, j in zip(a.indices, c.indices))


def test_by_label_each_agent_only_its_classes():
    data, labels = _labelled()
    split = dd.split_by_label(data, labels, N, 2, seed=0)
    _assert_partition(split, labels.size)
    _assert_padded(split, data)
    for i, idx in enumerate(split.indices):
        assert set(labels[idx]) == {(2 * i) % K, (2 * i + 1) % K}
    # each class is shared by N*2/K = 2 agents, evenly: PER_CLASS / 2 per holder
    assert set(split.sizes) == {PER_CLASS}


def test_dirichlet_skew_grows_as_alpha_shrinks():
    data, labels = _labelled()
    entropy = {
        a: np.mean([_label_entropy(dd.split_dirichlet(data, labels, N, a, seed=s), labels)
                    for s in range(5)])
        for a in (0.1, 0.5, 1000.0)
    }
    assert entropy[0.1] < entropy[0.5] < entropy[1000.0]
    # alpha -> infinity gives equal shares: each agent's labels are near uniform, entropy
    # near log K = 2.303 (finite-sample shortfall ~ (K-1)/(2 n_i) = 0.04 for n_i = 120).
    assert entropy[1000.0] > np.log(K) - 0.1
    # alpha = 0.1: most of an agent's data come from one or two classes.
    assert entropy[0.1] < 1.0


def test_dirichlet_partition_min_size_and_draws():
    data, labels = _labelled()
    split = dd.split_dirichlet(data, labels, N, 0.1, seed=4, min_size=30, local_size=700)
    _assert_partition(split, labels.size)
    _assert_padded(split, data)
    assert split.sizes.min() >= 30 and split.draws >= 1
    assert split.mask.shape == (N, 700) and split.data[0].shape == (N, 700, 2)
    # the split feeds a Potential with mini-batches up to min_size
    ll = lambda p, d: -0.5 * (d[0] @ p) ** 2  # noqa: E731
    pot = dgsgld.Potential(ll, None, split.data, 30, mask=split.mask)
    assert pot.num_agents == N


def test_quantile_bins_near_equal_counts():
    y = np.random.default_rng(0).normal(size=1000)
    bins = dd.quantile_bins(y, 5)
    assert set(bins) == set(range(5)) and np.all(np.abs(np.bincount(bins) - 200) <= 1)
    # monotone: a larger target never falls in a lower bin
    order = np.argsort(y)
    assert np.all(np.diff(bins[order]) >= 0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda d, l: dd.split_dirichlet(d, l, N, 0.0), "alpha"),
        (lambda d, l: dd.split_dirichlet(d, l, N, -1.0), "alpha"),
        (lambda d, l: dd.split_iid(d, 5000), "num_agents"),
        (lambda d, l: dd.split_iid(d, 0), "num_agents"),
        (lambda d, l: dd.split_by_label(d, l, 3, 2), "held by no agent"),
        (lambda d, l: dd.split_by_label(d, l, N, 11), "classes_per_agent"),
        (lambda d, l: dd.split_by_label(d, l[:-1], N, 2), "labels"),
        (lambda d, l: dd.split_dirichlet(d, l, N, 0.01, min_size=100, max_tries=3), "max_tries"),
        (lambda d, l: dd.split_iid(d, N, local_size=5), "local_size"),
    ],
)
def test_bad_input_raises(call, match):
    data, labels = _labelled()
    with pytest.raises(ValueError, match=match):
        call(data, labels)


def test_by_label_empty_agent_raises():
    # 20 agents, 1 class each: agents c and c + 10 share class c; class 1 has one datum only
    labels = np.r_[np.zeros(11, int), np.arange(1, 10)]
    with pytest.raises(ValueError, match="no data"):
        dd.split_by_label(np.zeros((20, 1)), labels, 20, 1)
