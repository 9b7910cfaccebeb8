"""Agreement without a server: flooding over a sampler's own mixing schedule, with its bytes.

The warm-up's agents agree on one preconditioner and one step by *flooding*: in round ``k``
agent ``j`` sends to agent ``i`` whenever ``W⁽ᵏ⁾[i, j] ≠ 0`` (``i ≠ j``), the links the sampler
itself uses (directed or not), and forwards every payload it holds and has not yet sent on that
link. Once every agent has heard from every other through chains of links, every agent holds
every payload bit for bit, so a deterministic computation on them gives the same result on
every agent: exact agreement, no averaging error and no coordinator. The rounds are simulated
on the host; a payload of ``p`` float32 numbers costs ``4 p`` bytes per link that carries it.

:func:`all_gather` floods one payload per agent; :func:`all_reduce_cost` is the cost of an
exact network sum of a ``p``-vector done that way.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["GossipCost", "all_gather", "all_reduce_cost", "flood_rounds", "mixing_stack"]

#: Bytes per payload number (float32 messages).
BYTES_PER_NUMBER = 4


class GossipCost(NamedTuple):
    """What an agreement cost.

    Attributes:
        rounds: communication rounds (schedule steps) it took.
        bytes: bytes sent over all links and rounds.
    """

    rounds: int
    bytes: int

    def __add__(self, other):
        return GossipCost(self.rounds + other.rounds, self.bytes + other.bytes)


def mixing_stack(mixing) -> np.ndarray:
    """The schedule's matrices as ``(P, N, N)`` float64 (``W⁽ᵏ⁾ = stack[k % P]``).

    Raises:
        ValueError: naming ``mixing`` when it has no stored matrices.
    """
    m = getattr(mixing, "matrices", mixing)
    if m is None:
        raise ValueError("`mixing` must be a schedule with stored matrices or a (P, N, N) / "
                         "(N, N) array for the warm-up's agreement; got None.")
    stack = np.asarray(m, np.float64)
    stack = stack[None] if stack.ndim == 2 else stack
    if stack.ndim != 3 or stack.shape[1] != stack.shape[2]:
        raise ValueError(f"`mixing` must be (P, N, N) or (N, N); got shape {stack.shape}.")
    return stack


def _links(W: np.ndarray) -> np.ndarray:
    """``(N, N)`` bool, ``[i, j]``: ``j`` sends to ``i`` in this round."""
    links = np.abs(W) > 0
    np.fill_diagonal(links, False)
    return links


def flood_rounds(mixing, start: int = 0, max_rounds: int = 100_000) -> int:
    """Rounds from schedule step ``start`` until every agent has heard from every other.

    Raises:
        ValueError: naming ``mixing`` when that never happens within ``max_rounds``.
    """
    stack = mixing_stack(mixing)
    know = np.eye(stack.shape[-1], dtype=bool)
    for r in range(max_rounds):
        if know.all():
            return r
        know = know | (_links(stack[(start + r) % len(stack)]).astype(int)
                       @ know.astype(int) > 0)
    raise ValueError("`mixing`: flooding never reaches every agent (the schedule is not "
                     "jointly connected).")


def all_gather(sizes, mixing, start: int = 0) -> GossipCost:
    """Flood one payload of ``sizes[i]`` numbers from every agent ``i`` to every agent.

    Each round every link ``j → i`` carries the payloads ``j`` holds that it has not sent to
    ``i`` before (and never ``i``'s own). Stops in the round after which every agent holds
    every payload.

    Args:
        sizes: ``(N,)`` numbers per agent's payload.
        mixing: the sampler's schedule (or its matrices).
        start: the schedule step of the first round.

    Returns:
        :class:`GossipCost`.
    """
    stack = mixing_stack(mixing)
    n = stack.shape[-1]
    size = np.broadcast_to(np.asarray(sizes, np.int64), (n,))
    rounds = flood_rounds(stack, start)
    know = np.eye(n, dtype=bool)
    sent_on = np.zeros((n, n, n), dtype=bool)  # [i, j, a]: j has sent a's payload to i
    sent = 0
    for r in range(rounds):
        links = _links(stack[(start + r) % len(stack)])
        new = know.copy()
        for i, j in zip(*np.nonzero(links)):
            items = know[j] & ~sent_on[i, j] & (np.arange(n) != i)
            sent += BYTES_PER_NUMBER * int(size[items].sum())
            sent_on[i, j] |= items
            new[i] |= know[j]
        know = new
    return GossipCost(rounds, sent)


def all_reduce_cost(size: int, mixing, start: int = 0) -> GossipCost:
    """Cost of an exact network sum of one ``size``-vector per agent (an all-gather of them,
    summed in agent order on every agent)."""
    n = mixing_stack(mixing).shape[-1]
    return all_gather(np.full(n, int(size)), mixing, start)
