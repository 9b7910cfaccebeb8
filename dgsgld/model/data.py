"""Splitting one labelled data set across ``N`` agents: IID, by label, and Dirichlet label skew.

Every splitter partitions the indices ``0..n-1`` (each datum goes to exactly one agent; none is
lost or duplicated) and returns an :class:`AgentSplit` holding the padded per-agent arrays and
mask that :class:`dgsgld.Potential` takes (built by :func:`dgsgld.pad_agent_data`), the
per-agent index arrays, and the seed that reproduces it.

* :func:`split_iid`: a random permutation cut into ``N`` near-equal parts (sizes differ by at
  most one).
* :func:`split_by_label`: agent ``i`` holds the classes ``(i k + j) mod K`` for ``j < k``
  (``k = classes_per_agent``, ``K`` classes); each class is shared evenly between its holders.
* :func:`split_dirichlet`: for each class ``c`` the shares of the agents are drawn from
  ``Dirichlet(α 1_N)`` and the class's data are dealt out in those proportions (Hsu et al.,
  2019). Small ``α`` gives each agent few classes; ``α → ∞`` tends to IID. Rule for small
  agents: the whole draw is repeated until every agent holds at least ``min_size`` data, and
  after ``max_tries`` failed draws a ``ValueError`` is raised (the number of draws is recorded).

For regression, :func:`quantile_bins` turns a continuous target into labels (its quantile bin),
so that "label skew" means skew in the target's range.
"""

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._util import validation as _validation
from .._util.types import Array, PyTree
from .potential import pad_agent_data

__all__ = [
    "AgentSplit",
    "quantile_bins",
    "split_by_label",
    "split_dirichlet",
    "split_iid",
]


class AgentSplit(NamedTuple):
    """A data set split across agents.

    Attributes:
        data: the data pytree with leaves ``(N, n_max, ...)`` (padding repeats an agent's first
            datum), ready for ``dgsgld.Potential(..., data, mask=mask)``.
        mask: ``(N, n_max)`` bool, row ``i`` is ``n_i`` ones then zeros.
        indices: ``N`` int arrays; agent ``i`` holds the input's data ``indices[i]`` (sorted).
        seed: the seed the split was drawn with.
        draws: how many random draws the splitter made (``> 1`` only when Dirichlet draws
            were repeated to give every agent ``min_size`` data).
    """

    data: PyTree
    mask: Array
    indices: tuple
    seed: int
    draws: int = 1

    @property
    def sizes(self) -> np.ndarray:
        """``(N,)`` local data sizes ``n_i``."""
        return np.array([len(i) for i in self.indices])


def _num_data(data: PyTree) -> int:
    leaves = jax.tree.leaves(data)
    if not leaves:
        raise ValueError("`data` must be a pytree with at least one array leaf.")
    lens = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
    if len(lens) != 1 or None in lens:
        raise ValueError(f"`data` leaves need one common leading (datum) size; got {lens}.")
    return lens.pop()


def _check_agents(num_agents, n: int, min_size: int = 1) -> int:
    if isinstance(num_agents, bool) or not isinstance(num_agents, (int, np.integer)):
        raise ValueError(f"`num_agents` must be a positive int; got {num_agents!r}.")
    if num_agents < 1:
        raise ValueError(f"`num_agents` must be a positive int; got {num_agents}.")
    if num_agents * min_size > n:
        raise ValueError(
            f"`num_agents` = {num_agents} agents with at least {min_size} datum each need "
            f"{num_agents * min_size} data; the data set holds {n}."
        )
    return int(num_agents)


#: Largest label accepted: class arithmetic (``i k + j``) stays exact in int64 below it.
MAX_LABEL = 2**31 - 1


def _check_labels(labels, n: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"`labels` must have shape ({n},) like the data; got {labels.shape}.")
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.number):
        raise ValueError(f"`labels` must be integer class labels; got dtype {labels.dtype}.")
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
            raise ValueError("`labels` must be integer class labels (see quantile_bins).")
    if n and labels.min() < 0:
        raise ValueError(f"`labels` must be non-negative; got minimum {labels.min()}.")
    if n and labels.max() > MAX_LABEL:
        raise ValueError(f"`labels` must be at most {MAX_LABEL}; got maximum {labels.max()}.")
    return labels.astype(np.int64)


def _classes(labels: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The classes present (ascending) and each one's members (ascending indices).

    ``O(n log n)`` time and ``O(n)`` memory whatever the label values: nothing is allocated per
    possible class, so a label of 10⁹ costs what a label of 9 does.
    """
    order = np.argsort(labels, kind="stable")
    values, starts = np.unique(labels[order], return_index=True)
    return values, np.split(order, starts[1:])


def _holders(present: np.ndarray, num_classes: int, num_agents: int, k: int) -> list[np.ndarray]:
    """Per class of ``present``, the agents ``i`` (ascending) holding it: ``c = (i k + j) mod K``
    for some ``j < k``, i.e. ``i k mod K`` in the circular interval ``[c - k + 1, c]``."""
    agents = np.arange(num_agents, dtype=np.int64)
    offsets = (agents * k) % num_classes  # exact in int64: k <= K <= 2**31 and N <= n < 2**32
    order = np.argsort(offsets, kind="stable")
    ordered = offsets[order]
    out = []
    for c in present.tolist():
        if k >= num_classes:
            out.append(agents)
            continue
        lo, hi = c - k + 1, c
        ranges = [(lo, hi)] if lo >= 0 else [(0, hi), (lo + num_classes, num_classes - 1)]
        found = [order[np.searchsorted(ordered, a, "left"):np.searchsorted(ordered, b, "right")]
                 for a, b in ranges]
        out.append(np.sort(np.concatenate(found)))
    return out


def _pad(data: PyTree, indices: Sequence[np.ndarray], local_size: int | None):
    """``pad_agent_data`` of the agents' subsets, padded further to ``local_size`` if given."""
    agent_data, mask = pad_agent_data(
        [jax.tree.map(lambda leaf: np.asarray(leaf)[idx], data) for idx in indices]
    )
    if local_size is None:
        return agent_data, mask
    n_max = mask.shape[1]
    if isinstance(local_size, bool) or not isinstance(local_size, (int, np.integer)):
        raise ValueError(f"`local_size` must be an int or None; got {local_size!r}.")
    if local_size < n_max:
        raise ValueError(f"`local_size` = {local_size} is below the largest agent's {n_max} data.")
    row_bytes = sum(np.asarray(leaf)[0].nbytes for leaf in jax.tree.leaves(data)) + 1
    _validation.check_memory(len(indices) * int(local_size) * row_bytes,
                             f"`local_size` = {local_size} (x {len(indices)} agents)")
    extra = local_size - n_max
    # Same convention as pad_agent_data: padding repeats the agent's first datum.
    grow = lambda leaf: jnp.concatenate(  # noqa: E731
        [leaf, jnp.repeat(leaf[:, :1], extra, axis=1)], axis=1
    )
    mask = jnp.concatenate([mask, jnp.zeros((mask.shape[0], extra), bool)], axis=1)
    return jax.tree.map(grow, agent_data), mask


def _result(data, indices, seed, local_size, draws=1) -> AgentSplit:
    indices = tuple(np.sort(np.asarray(i, dtype=np.int64)) for i in indices)
    agent_data, mask = _pad(data, indices, local_size)
    return AgentSplit(agent_data, mask, indices, int(seed), int(draws))


def split_iid(
    data: PyTree, num_agents: int, *, seed: int = 0, local_size: int | None = None
) -> AgentSplit:
    """Deal a random permutation of the data out in ``N`` near-equal parts.

    Args:
        data: pytree whose leaves are ``(n, ...)``.
        num_agents: ``N``, at most ``n``.
        seed: NumPy seed of the permutation.
        local_size: pad every agent to this many rows (default: the largest agent's), so that
            different splits of one data set share shapes (and compiled runs).

    Returns:
        An :class:`AgentSplit`; sizes ``floor(n / N)`` or ``ceil(n / N)``.
    """
    n = _num_data(data)
    num_agents = _check_agents(num_agents, n)
    perm = np.random.default_rng(seed).permutation(n)
    return _result(data, np.array_split(perm, num_agents), seed, local_size)


def split_by_label(
    data: PyTree,
    labels: Array,
    num_agents: int,
    classes_per_agent: int,
    *,
    seed: int = 0,
    local_size: int | None = None,
) -> AgentSplit:
    """Give agent ``i`` only the classes ``(i k + j) mod K``, ``j = 0..k-1``.

    Each class's data, in random order, are cut into near-equal parts among the agents holding
    it. Every class must be held by some agent (``N k >= K``, counting only classes present).

    Args:
        data: pytree whose leaves are ``(n, ...)``.
        labels: ``(n,)`` integer classes ``0..K-1``.
        num_agents: ``N``.
        classes_per_agent: ``k``, between 1 and ``K``.
        seed: NumPy seed of the order within each class.
        local_size: as in :func:`split_iid`.
    """
    n = _num_data(data)
    labels = _check_labels(labels, n)
    num_agents = _check_agents(num_agents, n)
    num_classes = int(labels.max()) + 1
    k = classes_per_agent
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= num_classes:
        raise ValueError(
            f"`classes_per_agent` must be an int between 1 and the {num_classes} classes; "
            f"got {k!r}."
        )
    present, members_of = _classes(labels)
    rng = np.random.default_rng(seed)
    parts = [[] for _ in range(num_agents)]
    for c, members, holders in zip(present.tolist(), members_of,
                                   _holders(present, num_classes, num_agents, int(k))):
        if not holders.size:
            raise ValueError(
                f"class {c} would be held by no agent: `num_agents` * `classes_per_agent` = "
                f"{num_agents * k} must be at least the {num_classes} classes."
            )
        parts_c = np.array_split(rng.permutation(members), holders.size)
        for agent, part in zip(holders.tolist(), parts_c):
            parts[agent].append(part)
    indices = [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]
    empty = [i for i, idx in enumerate(indices) if idx.size == 0]
    if empty:
        raise ValueError(
            f"agents {empty} would hold no data (their classes have too few members); use "
            "fewer agents or more classes per agent."
        )
    return _result(data, indices, seed, local_size)


def split_dirichlet(
    data: PyTree,
    labels: Array,
    num_agents: int,
    alpha: float,
    *,
    seed: int = 0,
    min_size: int = 1,
    max_tries: int = 1000,
    local_size: int | None = None,
) -> AgentSplit:
    """Dirichlet label skew: class ``c``'s data go to the agents in ``Dirichlet(α 1_N)`` shares.

    Shares ``p_c ~ Dirichlet(α, ..., α)`` are drawn per class; the class's data, in random order,
    are cut at the cumulative shares ``floor(n_c cumsum(p_c))``. The whole draw (every class) is
    repeated until every agent holds at least ``min_size`` data.

    Args:
        data: pytree whose leaves are ``(n, ...)``.
        labels: ``(n,)`` integer classes.
        num_agents: ``N``.
        alpha: concentration ``α > 0``.
        seed: NumPy seed; the draws are a function of it alone.
        min_size: smallest local data set accepted (e.g. the mini-batch size), ``>= 1``.
        max_tries: draws before giving up with a ``ValueError``.
        local_size: as in :func:`split_iid`.

    Returns:
        An :class:`AgentSplit` whose ``draws`` is the number of draws made.
    """
    n = _num_data(data)
    labels = _check_labels(labels, n)
    if (isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.number))
            or not (np.isfinite(alpha) and alpha > 0)):
        raise ValueError(f"`alpha` must be a positive finite number; got {alpha!r}.")
    if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 1:
        raise ValueError(f"`min_size` must be a positive int; got {min_size!r}.")
    if isinstance(max_tries, bool) or not isinstance(max_tries, (int, np.integer)) or max_tries < 1:
        raise ValueError(f"`max_tries` must be a positive int; got {max_tries!r}.")
    num_agents = _check_agents(num_agents, n, min_size)
    rng = np.random.default_rng(seed)
    _, classes = _classes(labels)
    for draw in range(1, max_tries + 1):
        parts = [[] for _ in range(num_agents)]
        for members in classes:
            if members.size == 0:
                continue
            shares = rng.dirichlet(np.full(num_agents, float(alpha)))
            cuts = np.floor(members.size * np.cumsum(shares)[:-1]).astype(int)
            for agent, part in enumerate(np.split(rng.permutation(members), cuts)):
                parts[agent].append(part)
        indices = [np.concatenate(p) for p in parts]
        if min(idx.size for idx in indices) >= min_size:
            return _result(data, indices, seed, local_size, draw)
    raise ValueError(
        f"no Dirichlet(alpha={alpha}) draw in `max_tries` = {max_tries} gave every one of "
        f"{num_agents} agents at least `min_size` = {min_size} data; raise alpha or max_tries, "
        "or lower min_size."
    )


def quantile_bins(target: Array, num_bins: int) -> np.ndarray:
    """Labels ``0..num_bins-1``: the target's quantile bin (near-equal counts per bin).

    Args:
        target: ``(n,)`` real values.
        num_bins: number of bins, ``>= 1``.

    Returns:
        ``(n,)`` int labels; ties share a bin, ranks break none.
    """
    target = np.asarray(target, dtype=np.float64)
    if target.ndim != 1 or target.size == 0:
        raise ValueError(f"`target` must be a non-empty 1-D array; got shape {target.shape}.")
    if not np.all(np.isfinite(target)):
        raise ValueError("`target` holds non-finite values.")
    if isinstance(num_bins, bool) or not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
        raise ValueError(f"`num_bins` must be a positive int; got {num_bins!r}.")
    if num_bins > target.size:
        raise ValueError(
            f"`num_bins` = {num_bins} exceeds the {target.size} values of `target` (every bin "
            "beyond one value each would be empty)."
        )
    edges = np.quantile(target, np.linspace(0, 1, num_bins + 1)[1:-1])
    return np.searchsorted(edges, target, side="right").astype(np.int64)
