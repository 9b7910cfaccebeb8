"""Directed time-varying networks: column-stochastic weight stacks for the push-sum samplers.

Mixing convention as everywhere in dgsgld: ``x⁺ = W @ x``, ``W[i, j]`` is the weight agent ``i``
puts on agent ``j``, i.e. what ``j`` sends to ``i``. A link is one way: ``j → i`` lets ``i`` hear
``j`` and nothing else, so ``W[i, j] > 0`` while ``W[j, i]`` may be 0. Push-sum needs the
*columns* to sum to 1 (each agent splits what it holds among itself and the agents it sends to:
column ``j`` holds what agent ``j`` sends out); rows need not. The default rule is out-degree
weights ``W[i, j] = 1 / (1 + outdeg_j)`` for ``i = j`` and every out-neighbour ``i`` of ``j``,
which agent ``j`` computes knowing only its own out-degree.

Adjacency convention (matrix form, like ``W``): ``adjacency[p, i, j]`` is ``True`` when ``j``
sends to ``i`` in snapshot ``p`` (the networkx ``DiGraph`` edge ``(j, i)``).

Assumptions checked (the directed analogue of Assumption 3.2): every matrix finite, nonnegative,
zero off the graph and column stochastic; the union of the directed graphs over the period
*strongly* connected (every agent reaches every other along directed links), otherwise some
agents never hear others and push-sum cannot reach consensus. A network connected only as an
undirected graph is refused with its strongly connected components named.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._mixing import COLUMN_STOCHASTIC, MixingStack, is_directed_network
from ._util import _positive_int, _rng
from .spectral import Delta
from .validation import DEFAULT_TOL, validate_schedule
from .weights import _is_graph, as_adjacency

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "COLUMN_STOCHASTIC",
    "DirectedSchedule",
    "as_directed",
    "directed_barbell",
    "directed_delta",
    "directed_lollipop",
    "directed_one_peer_exponential",
    "from_digraph",
    "from_digraphs",
    "is_directed_network",
    "network_for",
    "one_way_link_failures",
    "out_degree_weights",
    "push_sum_weights",
    "validate_directed_schedule",
]


# ---------------------------------------------------------------- validation


def validate_directed_schedule(stack: Any, adjacency: Any = None, *, tol: float = DEFAULT_TOL,
                               name: str = "schedule") -> None:
    """Check every matrix of a directed schedule: ``(P, N, N)``, finite, nonnegative, column
    stochastic within ``tol`` and, when ``adjacency`` is given, zero off the graph
    (:func:`dgsgld.networks.validate_schedule` with ``sums="columns"``).

    Raises:
        ValueError: ``"`<name>`[k] is not <property>: ..."`` naming the matrix, the property
            (``finite``, ``nonnegative``, ``column stochastic``, ``zero off the graph``) and
            the worst entry or column.
    """
    validate_schedule(stack, adjacency, tol=tol, name=name, sums="columns")


# ---------------------------------------------------------------- the schedule


class DirectedSchedule(eqx.Module):
    """A periodic schedule of column-stochastic matrices, ``W⁽ᵏ⁾ = matrices[k % P]``.

    Accepted by ``dgsgld.sample`` for the push-sum samplers (``network_kind`` is
    ``"column_stochastic"``); the samplers that need doubly stochastic symmetric matrices refuse
    it.

    Attributes:
        matrices: ``(P, N, N)``, nonnegative, columns summing to 1; ``W[i, j]`` is what agent
            ``j`` sends to agent ``i`` (``x⁺ = W @ x``).
        adjacency: ``(P, N, N)`` bool, ``adjacency[p, i, j]`` when ``j → i`` in snapshot ``p``
            (no self-loops), or ``None``.
        name: description (static).
    """

    matrices: jax.Array
    adjacency: jax.Array | None
    name: str = eqx.field(static=True)
    network_kind: ClassVar[str] = COLUMN_STOCHASTIC

    def __init__(self, matrices: Any, adjacency: Any = None, name: str = "directed", *,
                 dtype: Any = jnp.float32, validate: bool = True, tol: float = DEFAULT_TOL):
        """Wrap (and by default validate with :func:`validate_directed_schedule`) a stack."""
        if isinstance(matrices, jax.Array):
            stack = jnp.asarray(matrices, dtype=dtype)
        else:
            stack = jax.device_put(np.asarray(matrices, dtype=np.dtype(jnp.dtype(dtype))))
        if stack.ndim == 2:
            stack = stack[None]
        if adjacency is not None:
            adjacency = jax.device_put(np.broadcast_to(np.asarray(adjacency) != 0, stack.shape))
        if validate:
            validate_directed_schedule(stack, adjacency, tol=tol, name=name)
        self.matrices = stack
        self.adjacency = adjacency
        self.name = name

    # A dense stack's protocol (``N``, ``P``, ``matrix_at(k) = matrices[k % P]``) is
    # MixingStack's, borrowed rather than inherited: the runner takes a MixingStack to be
    # doubly stochastic and checks it as a bare array, which a column-stochastic stack is not.
    num_agents = MixingStack.num_agents
    period = MixingStack.period
    matrix_at = MixingStack.matrix_at

    def graph(self, k: int = 0) -> nx.DiGraph:
        """Snapshot ``k % P`` as a networkx ``DiGraph`` (edge ``(j, i)`` when ``j → i``)."""
        import networkx as nx

        p = k % self.period
        adj = (np.asarray(self.adjacency[p]) if self.adjacency is not None
               else np.asarray(self.matrices[p]) != 0)
        adj = adj & ~np.eye(adj.shape[0], dtype=bool)
        return nx.from_numpy_array(adj.T.astype(np.int8), create_using=nx.DiGraph)


def as_directed(mixing: Any, *, name: str = "mixing") -> Any:
    """A network the push-sum samplers take: a :class:`DirectedSchedule` or any schedule with
    ``matrix_at`` as it is (doubly stochastic ones are column stochastic too); an array, or a
    holder of ``.matrices`` without ``matrix_at``, wrapped and validated as a
    :class:`DirectedSchedule`."""
    if mixing is None or callable(getattr(mixing, "matrix_at", None)):
        return mixing
    stack = getattr(mixing, "matrices", mixing)
    dtype = getattr(stack, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.float32
    return DirectedSchedule(stack, name=name, dtype=dtype)


def network_for(algorithm: Any, mixing: Any) -> Any:
    """``mixing`` as ``algorithm`` takes it, refusing a directed network for a sampler that
    needs symmetric doubly stochastic matrices.

    A push-sum sampler (``algorithm.network_kind == "column_stochastic"``) gets arrays wrapped by
    :func:`as_directed`; any other decentralized sampler given a :class:`DirectedSchedule` is
    refused with a ``ValueError`` that points to the push-sum samplers.
    """
    if mixing is None:
        return None
    if getattr(algorithm, "network_kind", None) == COLUMN_STOCHASTIC:
        return as_directed(mixing)
    if is_directed_network(mixing) or is_directed_network(getattr(mixing, "mixing", None)):
        raise ValueError(
            f"`mixing` is a directed (column-stochastic) network, but {type(algorithm).__name__} "
            "needs symmetric, doubly stochastic mixing matrices. Use a push-sum sampler, "
            "dgsgld.PushDIGingSGLD or dgsgld.PushSumSGLD, or symmetrize the graph."
        )
    return mixing


# ---------------------------------------------------------------- weights and builders


def _directed_adjacency(graph: Any) -> np.ndarray:
    """Bool ``(N, N)`` or ``(P, N, N)`` with ``[i, j]`` for the link ``j → i``, no self-loops.

    A networkx ``DiGraph`` (nodes in label order for labels ``0..N−1``, else ``graph.nodes``)
    or an array in the matrix convention; an undirected networkx graph gives both directions.
    """
    if _is_graph(graph):
        import networkx as nx

        nodes = list(graph.nodes)
        if all(isinstance(v, int) for v in nodes) and set(nodes) == set(range(len(nodes))):
            nodes = list(range(len(nodes)))
        adj = nx.to_numpy_array(graph, nodelist=nodes, weight=None).T != 0
    else:
        adj = np.asarray(graph) != 0
    if adj.ndim not in (2, 3) or adj.shape[-1] != adj.shape[-2]:
        raise ValueError(f"adjacency: expected shape (N, N) or (P, N, N), got {adj.shape}")
    adj = adj.copy()
    n = adj.shape[-1]
    adj[..., np.arange(n), np.arange(n)] = False
    return adj


def out_degree_weights(adjacency: Any) -> np.ndarray:
    """Column-stochastic out-degree weights ``W[i, j] = 1 / (1 + outdeg_j)`` for ``i = j`` and
    every ``i`` with ``j → i``, 0 elsewhere (float64, same shape as the adjacency).

    Example:
        >>> import numpy as np
        >>> path = np.array([[0, 0], [1, 0]])   # 0 → 1
        >>> out_degree_weights(path)
        array([[0.5, 0. ],
               [0.5, 1. ]])
    """
    adj = _directed_adjacency(adjacency)
    n = adj.shape[-1]
    out_deg = adj.sum(axis=-2, keepdims=True).astype(np.float64)  # column sums: out-degrees
    w = (adj | np.eye(n, dtype=bool)) / (1.0 + out_deg)
    return w


def _build(adj: np.ndarray, name: str, dtype: Any) -> DirectedSchedule:
    return DirectedSchedule(out_degree_weights(adj), adj, name, dtype=dtype)


def from_digraph(graph: Any, *, name: str | None = None, dtype: Any = jnp.float32
                 ) -> DirectedSchedule:
    """A static directed schedule (``P = 1``) with out-degree weights from a networkx
    ``DiGraph`` or an ``(N, N)`` adjacency (``[i, j]`` for ``j → i``).

    Example:
        >>> import networkx as nx
        >>> s = from_digraph(nx.DiGraph([(0, 1), (1, 2), (2, 0)]))
        >>> s.matrices[0].sum(axis=0).tolist()
        [1.0, 1.0, 1.0]
    """
    adj = _directed_adjacency(graph)
    if adj.ndim != 2:
        raise ValueError(f"from_digraph: expected one (N, N) graph; got shape {adj.shape}.")
    return _build(adj[None], name or f"digraph(N={adj.shape[0]})", dtype)


def from_digraphs(graphs: Sequence[Any] | np.ndarray, *, name: str = "from_digraphs",
                  dtype: Any = jnp.float32) -> DirectedSchedule:
    """A directed schedule from a sequence of ``DiGraph``s or adjacencies, used cyclically."""
    if _is_graph(graphs):
        raise TypeError("from_digraphs: expected a sequence of graphs; use from_digraph.")
    adjs = ([_directed_adjacency(g) for g in graphs] if not hasattr(graphs, "ndim")
            else list(_directed_adjacency(graphs)))
    if not adjs or len({a.shape for a in adjs}) != 1 or adjs[0].ndim != 2:
        raise ValueError(
            f"from_digraphs: need a non-empty sequence of (N, N) graphs with one N; got shapes "
            f"{sorted({a.shape for a in adjs})}."
        )
    return _build(np.stack(adjs), name, dtype)


def directed_one_peer_exponential(num_agents: int, period: int | None = None, *,
                                  dtype: Any = jnp.float32) -> DirectedSchedule:
    """The directed one-peer exponential graph: at step ``k``, with ``τ = k mod log₂ N``, agent
    ``i`` sends to ``(i + 2^τ) mod N`` only (weights ``1/2``, ``1/2``).

    Every agent also hears exactly one, so each matrix is doubly stochastic (``v ≡ 1`` in
    push-sum) but not symmetric; ``log₂ N`` consecutive snapshots average exactly.

    Args:
        num_agents: ``N``, a power of two ``>= 2``.
        period: a positive multiple of ``log₂ N`` (default ``log₂ N``).
    """
    n = _positive_int(num_agents, "num_agents", 2)
    if n & (n - 1):
        raise ValueError(
            f"directed_one_peer_exponential: num_agents must be a power of two; got {n}."
        )
    levels = int(math.log2(n))
    steps = levels if period is None else _positive_int(period, "period")
    if steps % levels:
        raise ValueError(
            f"directed_one_peer_exponential: period must be a multiple of log2(N) = {levels}; "
            f"got {steps}."
        )
    i = np.arange(n)
    adj = np.zeros((steps, n, n), dtype=bool)
    for k in range(steps):
        adj[k, (i + 2 ** (k % levels)) % n, i] = True
    return _build(adj, f"directed_one_peer_exponential(N={n}, P={steps})", dtype)


def one_way_link_failures(base_graph: Any, p: float, period: int = 50, seed: Any = 0, *,
                          dtype: Any = jnp.float32) -> DirectedSchedule:
    """Each direction of each link of an undirected graph fails independently w.p. ``p`` per
    snapshot (``j → i`` may be up while ``i → j`` is down); out-degree weights.

    Args:
        base_graph: networkx graph, ``(N, N)`` symmetric adjacency or a ``Schedule`` (its first
            graph).
        p: one-way failure probability in ``[0, 1)``.
        period: ``P`` independent failure patterns before the schedule repeats.
        seed: int, ``numpy.random.Generator`` or JAX key.
    """
    if hasattr(base_graph, "graph") and hasattr(base_graph, "matrices"):
        base_graph = base_graph.graph(0)
    base = as_adjacency(base_graph)
    if base.ndim != 2:
        raise ValueError(
            f"one_way_link_failures: expected one (N, N) base graph; got shape {base.shape}."
        )
    if not 0.0 <= p < 1.0:
        raise ValueError(f"one_way_link_failures: p must lie in [0, 1); got {p!r}.")
    steps = _positive_int(period, "period")
    rng = _rng(seed)
    up = rng.random((steps, *base.shape)) >= p
    adj = up & base[None]
    return _build(adj, f"one_way_link_failures(N={base.shape[0]}, p={p:g}, P={steps})", dtype)


def directed_barbell(num_agents: int, period: int = 50, seed: Any = 0, *,
                     dtype: Any = jnp.float32) -> DirectedSchedule:
    """Two complete cliques (links both ways) joined at each snapshot by one random one-way
    bridge, left → right at even snapshots and right → left at odd ones (``P`` even, so that
    the period is strongly connected; no single snapshot is). Out-degree weights.
    """
    n = _positive_int(num_agents, "num_agents", 2)
    steps = _positive_int(period, "period", 2)
    if steps % 2:
        raise ValueError(f"directed_barbell: period must be even; got {steps}.")
    rng = _rng(seed)
    half = (n + 1) // 2
    base = np.zeros((n, n), dtype=bool)
    base[:half, :half] = ~np.eye(half, dtype=bool)
    base[half:, half:] = ~np.eye(n - half, dtype=bool)
    left = rng.integers(0, half, size=steps)
    right = rng.integers(half, n, size=steps)
    adj = np.repeat(base[None], steps, axis=0)
    k = np.arange(steps)
    even = k % 2 == 0
    adj[k[even], right[even], left[even]] = True     # left sends to right
    adj[k[~even], left[~even], right[~even]] = True  # right sends to left
    return _build(adj, f"directed_barbell(N={n}, P={steps})", dtype)


def directed_lollipop(num_agents: int, period: int = 50, seed: Any = 0, *,
                      branch_lengths: tuple[int, int] = (3, 4), num_links: int = 3,
                      dtype: Any = jnp.float32) -> DirectedSchedule:
    """The paper's time-varying lollipop made one way: a clique ``0..m−1`` (both ways),
    ``num_links`` random clique agents sending to the branch's terminal node ``m``, the branch a
    directed path ``m → m+1 → … → N−1``, and its tip ``N−1`` sending back to one random clique
    agent (every snapshot strongly connected). ``r ~ U{branch_lengths}``, ``m = N − r``.
    """
    n = _positive_int(num_agents, "num_agents", 2)
    steps = _positive_int(period, "period")
    r_min, r_max = (int(r) for r in branch_lengths)
    s = _positive_int(num_links, "num_links")
    if not 1 <= r_min <= r_max or n - r_max < s:
        raise ValueError(
            f"directed_lollipop: need 1 <= r_min <= r_max and N - r_max >= num_links; got "
            f"N={n}, branch_lengths={branch_lengths!r}, num_links={s}."
        )
    rng = _rng(seed)
    adj = np.zeros((steps, n, n), dtype=bool)
    for k, r in enumerate(rng.integers(r_min, r_max + 1, size=steps)):
        m = n - int(r)
        adj[k, :m, :m] = ~np.eye(m, dtype=bool)
        path = np.arange(m, n - 1)
        adj[k, path + 1, path] = True
        adj[k, m, rng.choice(m, size=s, replace=False)] = True
        adj[k, rng.integers(m), n - 1] = True
    return _build(adj, f"directed_lollipop(N={n}, P={steps}, r∈[{r_min},{r_max}], s={s})", dtype)


# ---------------------------------------------------------------- diagnostics


def push_sum_weights(schedule: Any, num_steps: int) -> np.ndarray:
    """The push-sum weights ``v⁽ᵏ⁾ = W⁽ᵏ⁻¹⁾ ⋯ W⁽⁰⁾ 1`` for ``k = 0..num_steps`` (float64,
    ``(num_steps + 1, N)``). They sum to ``N``; ``1 / min v`` is how much push-sum amplifies an
    agent's local noise and drift in ``x = u / v``."""
    w = np.asarray(getattr(schedule, "matrices", schedule), np.float64)
    w = w[None] if w.ndim == 2 else w
    v = np.ones(w.shape[-1])
    out = [v]
    for k in range(int(num_steps)):
        v = w[k % w.shape[0]] @ v
        out.append(v)
    return np.stack(out)


def directed_delta(schedule: Any, window: int) -> Delta:
    """Contraction of a column-stochastic schedule over windows of ``B`` snapshots:
    ``δ(k) = σ_max(W_B⁽ᵏ⁾ (I − 11ᵀ/N))``, ``W_B⁽ᵏ⁾ = W⁽ᵏ⁾ ⋯ W⁽ᵏ⁻ᴮ⁺¹⁾``.

    Column stochastic ``W`` keep the sum-zero vectors (the disagreement of ``u`` from the mass
    it should be proportional to) sum-zero; ``δ(k)`` is the worst factor by which ``B`` steps
    shrink them. A product tends to ``φ1ᵀ``, which kills sum-zero vectors, so ``δ → 0`` for a
    jointly strongly connected schedule as ``B`` grows; for symmetric doubly stochastic ``W`` it
    equals the paper's ``δ`` of Assumption 3.2(iii) (``W_B(I − J) = W_B − J``). Unlike there,
    ``δ(k) < 1`` is not implied for every ``B`` beyond the period: check it at your ``B``.

    Returns:
        :class:`dgsgld.networks.Delta` ``(per_k (P,), sup)``.
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"`window` must be an integer >= 1; got {window!r}.")
    w = np.asarray(getattr(schedule, "matrices", schedule), np.float64)
    w = w[None] if w.ndim == 2 else w
    period, n = w.shape[0], w.shape[-1]
    centre = np.eye(n) - 1.0 / n
    per_k = np.empty(period)
    for k in range(period):
        prod = np.eye(n)
        for b in range(int(window)):
            prod = prod @ w[(k - b) % period]
        per_k[k] = np.linalg.svd(prod @ centre, compute_uv=False)[0]
    return Delta(per_k, float(per_k.max()))
