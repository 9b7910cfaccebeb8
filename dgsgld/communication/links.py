"""Links: which links carry a step's messages, and who listens.

A round's links may be dropped, each undirected link (or, on a directed network, each one-way
link) up with a probability (:func:`link_mask`), the used matrix keeping the dropped weights on
a diagonal (:func:`drop_links`: row sums kept, a symmetric doubly stochastic ``W`` stays so;
with ``keep="columns"`` column sums, for push-sum); every link of an inactive agent is dropped
alike (:func:`without_inactive`). A gossip round carries one random link or a random matching
(:func:`gossip_matrix`; :func:`gossip_outcomes` lists its outcomes with their probabilities).
Bytes are counted over out-degrees (:func:`out_degrees`), and a message with public copies over
the agents that ever listen (:func:`listener_counts`).

Each function takes a whole snapshot (dense ``(N, N)``, or sparse, made dense) or a device's
rows that answer the question (:mod:`~dgsgld.communication.operand`).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PRNGKey
from ..networks._mixing import as_mixing
from . import operand

__all__ = ["MAX_GOSSIP_PROFILES", "cut_links", "drop_links", "gossip_matrix", "gossip_outcomes",
           "link_mask", "listener_counts", "out_degrees", "without_inactive"]


def link_mask(key: PRNGKey, num_agents: int, probability: float,
              directed: bool = False) -> Array:
    """``(N, N)`` bool, ``u = uniform(key, (N, N)) < probability``; the diagonal is up.
    Undirected (default): symmetric, link ``{i, j}`` (``i < j``) up iff ``u[i, j]`` (upper
    triangle). ``directed``: each one-way link ``j → i`` up iff ``u[i, j]``, independently."""
    up = jax.random.uniform(key, (num_agents, num_agents)) < probability
    eye = jnp.eye(num_agents, dtype=bool)
    if directed:
        return up | eye
    up = jnp.triu(up, 1)
    return up | up.T | eye


def gossip_matrix(key: PRNGKey, matrix, mode: str = "matching",
                  directed: bool = False) -> Array:
    """The ``(N, N)`` matrix of one gossip round on the links of ``matrix`` (``W[i, j] ≠ 0``,
    ``i ≠ j``: a link ``j → i``; undirected: either direction). Each picked link carries half
    of its sender's value, the rest stays on the diagonal.

    ``mode="edge"``: one link drawn uniformly (undirected: one pair ``{i, j}``, both ways).
    ``mode="matching"``, undirected: every agent ``j`` proposes to one neighbour drawn
    uniformly (``argmax`` of uniforms over its column), and mutual proposals are matched;
    directed: every agent pushes to the out-neighbour it draws. Undirected results are
    symmetric doubly stochastic, directed ones column stochastic. An agent without links keeps
    its value (``e_j``). ``matrix`` may be rows that answer ``gossip`` (a device's rows of a
    neighbour exchange, :mod:`~dgsgld.communication.operand`), which give their rows of the
    round drawn for all ``N`` agents."""
    def choose(links):
        return _gossip_pick(key, links, mode, directed)

    gossip = getattr(matrix, "gossip", None)
    if gossip is not None:
        return gossip(choose)
    dense = operand.dense(matrix)
    return _halves(jnp, choose(dense != 0), dense.dtype)


def _gossip_pick(key: PRNGKey, links: Array, mode: str, directed: bool) -> Array:
    """``(N, N)`` bool, the links of one gossip round (:func:`gossip_matrix`) among ``links``
    (``(N, N)`` bool, ``links[i, j]``: ``j → i``; the diagonal is ignored)."""
    n = links.shape[0]
    links = links & ~jnp.eye(n, dtype=bool)
    if not directed:
        links = links | links.T
    score = jax.random.uniform(key, (n, n))
    if mode == "edge":
        candidates = links if directed else jnp.triu(links, 1)
        flat = jnp.argmax(jnp.where(candidates, score, -1.0))
        pick = (jnp.arange(n * n) == flat).reshape(n, n) & candidates
        if not directed:
            pick = pick | pick.T
    elif mode == "matching":
        choice = jnp.argmax(jnp.where(links, score, -1.0), axis=0)      # j's pick, by column
        pick = (jnp.arange(n)[:, None] == choice[None, :]) & links
        if not directed:
            pick = pick & pick.T                                        # mutual proposals
    else:
        raise ValueError(f"`mode` must be 'edge' or 'matching'; got {mode!r}.")
    return pick


def _halves(xp, pick, dtype):
    """The gossip matrix of the picked links ``pick`` (``(..., N, N)`` bool, ``pick[i, j]``:
    ``j`` sends half its value to ``i``): ``½`` on them, the rest of each column on its
    diagonal. ``xp``: ``jax.numpy`` or ``numpy``."""
    half = xp.where(pick, xp.asarray(0.5, dtype), xp.zeros((), dtype))
    eye = xp.eye(pick.shape[-1], dtype=dtype)
    return half + eye * (1 - xp.sum(half, axis=-2))[..., None, :]


#: Most proposal profiles (``Π_j deg_j``) :func:`gossip_outcomes` enumerates for a matching.
MAX_GOSSIP_PROFILES = 4096


def gossip_outcomes(matrix, mode: str = "matching") -> tuple[np.ndarray, np.ndarray]:
    """Every gossip matrix :func:`gossip_matrix` can draw on the undirected links of
    ``matrix`` (a concrete ``(N, N)``), with its probability: ``(matrices (K, N, N) float64,
    probabilities (K,))``, distinct matrices, probabilities summing to 1.

    ``"edge"``: the ``L`` links, each ``1 / L``. ``"matching"``: the ``Π_j deg_j`` proposal
    profiles (agent ``j`` proposes to each of its ``deg_j`` neighbours with probability
    ``1 / deg_j``, independently) are enumerated, at most :data:`MAX_GOSSIP_PROFILES`, and
    profiles giving the same matching are merged. No links: ``I`` with probability 1."""
    dense = np.asarray(operand.dense(matrix))
    n = dense.shape[0]
    links = (dense != 0) & ~np.eye(n, dtype=bool)
    links = links | links.T
    if mode == "edge":
        i, j = np.nonzero(np.triu(links, 1))
        pick = np.zeros((len(i), n, n), bool)
        pick[np.arange(len(i)), i, j] = pick[np.arange(len(i)), j, i] = True
    elif mode == "matching":
        options = [np.flatnonzero(links[:, j]) for j in range(n)]
        profiles = math.prod(max(len(o), 1) for o in options)
        if profiles > MAX_GOSSIP_PROFILES:
            raise ValueError(
                f"`mode`: a random matching is enumerated over its {profiles} proposal "
                f"profiles (Π_j deg_j), more than {MAX_GOSSIP_PROFILES}; use mode='edge' or "
                "a sparser network.")
        grids = np.meshgrid(*[o if len(o) else np.array([-1]) for o in options],
                            indexing="ij")
        choice = np.stack([g.ravel() for g in grids], axis=1)              # (profiles, N)
        pick = choice[:, None, :] == np.arange(n)[None, :, None]           # [i, j]: j → i
        pick = pick & pick.transpose(0, 2, 1)
    else:
        raise ValueError(f"`mode` must be 'edge' or 'matching'; got {mode!r}.")
    if len(pick) == 0:
        pick = np.zeros((1, n, n), bool)
    unique, counts = np.unique(pick.reshape(len(pick), -1), axis=0, return_counts=True)
    return (_halves(np, unique.reshape(-1, n, n), np.float64),
            counts / counts.sum())


def drop_links(matrix, up: Array, keep: str = "rows"):
    """``matrix`` (dense ``(N, N)``) with the links where ``up`` (``(N, N)`` bool) is False
    removed and their weight moved to a diagonal. ``keep="rows"``: to the receiver's,
    ``W'[i, i] = W[i, i] + Σ_{j: ¬up[i, j]} W[i, j]``, so row sums are kept; with ``W`` and
    ``up`` symmetric ``W'`` is symmetric, hence doubly stochastic when ``W`` is.
    ``keep="columns"``: to the sender's, ``C'[j, j] = C[j, j] + Σ_{i: ¬up[i, j]} C[i, j]``
    (what is not delivered stays where it was), so column sums are kept and a column-stochastic
    ``C`` stays column stochastic. The two agree when ``W`` and ``up`` are symmetric.
    ``matrix`` may be a sparse snapshot (made dense), or rows that answer ``without`` (a device's
    rows of a neighbour exchange, :mod:`~dgsgld.communication.operand`), rewritten alike."""
    return _cut(matrix, lambda i, j: up[i, j], None, keep)


def without_inactive(matrix, active: Array, keep: str = "rows"):
    """``matrix`` (as :func:`drop_links` takes it) with every link of an inactive agent
    dropped (:func:`drop_links`; ``active``: ``(N,)`` bool) and an inactive agent's row and
    column exactly ``e_i``: it neither mixes nor sends, and with ``keep="columns"`` nothing is
    pushed to it (its state is held, so a mass it received would be lost). The used matrix of a
    step with stragglers."""
    return _cut(matrix, lambda i, j: active[i] & active[j], ~active, keep)


def _cut(matrix, link_up, held, keep: str):
    """The links ``j → i`` of ``matrix`` where ``link_up(i, j)`` is False dropped and the
    agents of ``held`` (``(N,)`` bool or ``None``) made ``e_i`` by :func:`cut_links`: on a
    whole snapshot, dense ``(N, N)``, its rows (``keep="rows"``) or, transposed, its columns
    (``"columns"``); on rows that answer ``without`` (a device's rows of a neighbour exchange)
    those rows, by the operand (with ``"columns"`` a held sender's links are dropped, as a held
    column is ``e_j`` on a dense matrix)."""
    if keep not in ("rows", "columns"):
        raise ValueError(f"`keep` must be 'rows' or 'columns'; got {keep!r}.")
    without = getattr(matrix, "without", None)
    if without is not None:
        if keep == "columns" and held is not None:      # a held sender gives nothing out
            def link_up(i, j, up=link_up):
                return up(i, j) & ~held[j]
        return without(link_up, None if held is None else operand.local(matrix, held), keep)
    # keep="columns": the rows of the transpose, entry (j, i) the link j → i.
    matrix = operand.dense(matrix)
    dense = matrix if keep == "rows" else matrix.T
    agents = jnp.arange(dense.shape[0])
    receivers, senders = agents[:, None], agents[None, :]
    if keep == "columns":
        receivers, senders = senders, receivers
    eye = jnp.eye(dense.shape[0], dtype=bool)
    weights, diagonal = cut_links(jnp.where(eye, jnp.zeros_like(dense), dense),
                                  jnp.diagonal(dense), link_up(receivers, senders), held)
    used = weights + jnp.diag(diagonal)
    return used if keep == "rows" else used.T


def cut_links(weights: Array, diagonal: Array, kept: Array,
              held: Array | None = None) -> tuple[Array, Array]:
    """The re-weighting of dropped links and inactive agents, row by row (the one rule of
    :func:`drop_links` on a dense matrix and of a device's rows of a neighbour exchange):
    ``(weights', diagonal')`` with a term's weight zeroed where ``kept`` is False and moved to
    its row's diagonal, ``diagonal'_i = diagonal_i + Σ_{dropped k} weights[i, k]`` (row sums
    kept), and a ``held`` row exactly ``e_i`` (weights 0, diagonal 1).

    Args:
        weights: ``(R, K)`` a row's off-diagonal terms; ``diagonal``: ``(R,)``.
        kept: ``(R, K)`` bool, the terms whose link is up.
        held: ``(R,)`` bool or ``None`` (none).
    """
    if held is not None:
        kept = kept & ~held[:, None]
    cut = jnp.where(kept, weights, jnp.zeros_like(weights))
    diagonal = diagonal + jnp.sum(weights - cut, axis=-1)
    if held is not None:
        diagonal = jnp.where(held, jnp.ones_like(diagonal), diagonal)
    return cut, diagonal


def out_degrees(matrix) -> Array:
    """``(N,)`` int32: agent ``j``'s out-neighbours ``#{i ≠ j : W[i, j] ≠ 0}`` in ``matrix``
    (rows that answer ``out_degrees``, a device's rows of a neighbour exchange: its agents'
    ``(R,)``)."""
    degrees = getattr(matrix, "out_degrees", None)
    if degrees is not None:
        return degrees()
    links = operand.dense(matrix) != 0
    return (jnp.sum(links, axis=0) - jnp.diagonal(links)).astype(jnp.int32)


def listener_counts(mixing) -> tuple[int, ...]:
    """Per agent ``j``, the agents that ever listen to it: ``#{i ≠ j : W⁽ᵏ⁾[i, j] ≠ 0 for
    some k}`` over one period of ``mixing`` (any network :func:`dgsgld.sample` takes; a
    static one: its out-degrees), or ``N − 1`` for every agent when the schedule never
    repeats (``period=None``: any agent may listen). The
    :attr:`~dgsgld.communication.Channel.listeners` of a run
    with public copies."""
    mixing = as_mixing(mixing)
    if getattr(mixing, "period", None) is None:
        n = operand.dense(mixing.matrix_at(0)).shape[-1]
        return (n - 1,) * n
    links = np.asarray(_ever_linked(mixing))
    return tuple(int(c) for c in (links & ~np.eye(links.shape[0], dtype=bool)).sum(axis=0))


@eqx.filter_jit
def _ever_linked(mixing) -> Array:
    """``(N, N)`` bool: ``W⁽ᵏ⁾[i, j] ≠ 0`` at some ``k`` of the period (compiled once per
    network structure, as ``sample`` calls it for every run with public copies)."""
    return jax.lax.fori_loop(1, mixing.period,
                             lambda k, links: links | (operand.dense(mixing.matrix_at(k)) != 0),
                             operand.dense(mixing.matrix_at(0)) != 0)

