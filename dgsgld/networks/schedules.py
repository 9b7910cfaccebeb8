"""Mixing-matrix schedules: the paper's time-varying barbell and lollipop, static and user graphs.

A schedule is a stack of ``P`` symmetric doubly stochastic matrices used cyclically,
``W⁽ᵏ⁾ = matrices[k % P]``, with the mixing convention ``x⁺ = W @ x`` (``W[i, j]`` is the weight
agent ``i`` puts on agent ``j``). Every generator builds its graphs with NumPy on the host (networkx
only for static families and user graphs), is reproducible from ``seed`` (an int, a
``numpy.random.Generator`` or a JAX key), and validates what it builds against Assumption 3.2
(i)–(ii).

Weight rules: the paper's schedules (:func:`barbell`, :func:`lollipop`) use eq. (4.1) with
``eps = 1e-6`` as in its experiments. Every other generator defaults to Metropolis–Hastings weights
``1/(1 + max(deg_i, deg_j))``, because eq. (4.1) with a tiny ``eps`` leaves an eigenvalue within
``~eps`` of ``−1`` on bipartite graphs (even rings, stars, grids), i.e. almost no mixing. Any
generator takes ``weights=`` (``"metropolis"``, ``"metropolis_hastings"``, ``"max_degree"`` or a
callable ``(N, N) bool adjacency -> (N, N) weights``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._mixing import MixingStack
from ._util import _positive_int, _rng
from .validation import DEFAULT_TOL, validate_schedule
from .weights import _is_graph, as_adjacency, get_weight_rule

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "Schedule",
    "as_schedule",
    "barbell",
    "lollipop",
    "ring",
    "complete",
    "star",
    "grid",
    "random_regular",
    "erdos_renyi",
    "from_graph",
    "from_graphs",
    "from_matrices",
    "link_failures",
    "one_peer_exponential",
]

WeightRule = str | Callable[[np.ndarray], np.ndarray]


class Schedule(MixingStack):
    """A periodic schedule of mixing matrices, ``W⁽ᵏ⁾ = matrices[k % P]``.

    A pytree (``eqx.Module``): ``matrices`` and ``adjacency`` are leaves, ``name`` is static.
    ``dgsgld.sample`` accepts it wherever it accepts a raw ``(P, N, N)`` array.

    Attributes:
        matrices: ``(P, N, N)`` float array; symmetric, nonnegative, doubly stochastic.
            ``W[i, j]`` is the weight agent ``i`` puts on agent ``j`` (``x⁺ = W @ x``).
        adjacency: ``(P, N, N)`` bool array of the communication graphs (no self-loops), or ``None``
            when only the matrices are known.
        name: a human-readable description (static).
    """

    adjacency: jax.Array | None
    name: str = eqx.field(static=True)

    def __init__(
        self,
        matrices: Any,
        adjacency: Any = None,
        name: str = "schedule",
        *,
        dtype: Any = jnp.float32,
        validate: bool = True,
        tol: float = DEFAULT_TOL,
    ):
        """Wrap (and by default validate) a stack of mixing matrices.

        Args:
            matrices: ``(P, N, N)`` or ``(N, N)`` (one snapshot) array.
            adjacency: ``None``, or bool graphs of shape ``(P, N, N)`` or ``(N, N)`` (shared).
            name: description used in messages and plots.
            dtype: storage dtype of ``matrices`` (float32 by default; float64 needs
                ``jax_enable_x64``).
            validate: check Assumption 3.2 (i)–(ii) with :func:`validate_schedule` (shape only
                under ``jit``).
            tol: tolerance for symmetry and double stochasticity.

        Raises:
            ValueError: if a matrix fails a check (naming the matrix, property and worst entry).
        """
        matrices = jnp.asarray(matrices, dtype=dtype)
        if matrices.ndim == 2:
            matrices = matrices[None]
        if adjacency is not None:
            if isinstance(adjacency, np.ndarray):
                # Host graphs stay NumPy until transferred: no eager program per shape.
                adjacency = jax.device_put(np.broadcast_to(adjacency != 0, matrices.shape))
            else:
                adjacency = jnp.asarray(adjacency) != 0
                if adjacency.ndim == 2:
                    adjacency = jnp.broadcast_to(adjacency, matrices.shape)
        if validate:
            validate_schedule(matrices, adjacency, tol=tol, name=name)
        self.matrices = matrices
        self.adjacency = adjacency
        self.name = name

    def graph(self, k: int = 0) -> nx.Graph:
        """The communication graph of snapshot ``k % P`` as a networkx graph (host only, no jit).

        Edges come from ``adjacency`` when known, else from the nonzero off-diagonal weights.
        """
        p = k % self.period
        if self.adjacency is not None:
            adj = np.asarray(self.adjacency[p])
        else:
            adj = np.asarray(self.matrices[p]) != 0
        import networkx as nx

        return nx.from_numpy_array(as_adjacency(adj).astype(int))


# ---------------------------------------------------------------- helpers


def _build(adj: np.ndarray, weights: WeightRule, eps: float, name: str, dtype: Any) -> Schedule:
    """Weights snapshot by snapshot (bounded memory at N = 1000), then wrap and validate."""
    rule = get_weight_rule(weights, eps)
    out = np.empty(adj.shape, dtype=np.dtype(jnp.dtype(dtype)))
    for p in range(adj.shape[0]):
        out[p] = rule(adj[p])
    return Schedule(out, adj, name, dtype=dtype)


def _clique(n: int) -> np.ndarray:
    return ~np.eye(n, dtype=bool)


def _is_connected(adj: np.ndarray) -> bool:
    import networkx as nx

    return adj.shape[0] <= 1 or nx.is_connected(nx.from_numpy_array(adj.astype(np.int8)))


# ---------------------------------------------------------------- the paper's schedules


def barbell(
    num_agents: int,
    period: int = 50,
    seed: Any = 0,
    *,
    weights: WeightRule = "metropolis",
    eps: float = 1e-6,
    dtype: Any = jnp.float32,
) -> Schedule:
    """The paper's time-varying barbell (§4): two cliques joined by one random bridge per iteration.

    Agents ``0..⌈N/2⌉−1`` form one complete graph and ``⌈N/2⌉..N−1`` the other. For each of the
    ``P`` snapshots one agent of each clique is drawn uniformly and the two are linked, so every
    snapshot is one connected graph. Weights: eq. (4.1) with ``eps``.

    Args:
        num_agents: ``N >= 2``.
        period: ``P``, number of snapshots before the schedule repeats (50 in the paper).
        seed: int, ``numpy.random.Generator`` or JAX key.
        weights: weight rule (see module docstring).
        eps: ``ε̂`` of eq. (4.1).
        dtype: storage dtype of the matrices.

    Returns:
        :class:`Schedule` with ``matrices`` and ``adjacency`` of shape ``(P, N, N)``.

    Example:
        >>> s = barbell(10, period=5, seed=0)
        >>> s.matrices.shape, int(s.adjacency[0].sum()) // 2   # 2 * C(5, 2) clique edges + 1 bridge
        ((5, 10, 10), 21)
    """
    n = _positive_int(num_agents, "num_agents", 2)
    p = _positive_int(period, "period")
    rng = _rng(seed)
    half = (n + 1) // 2
    base = np.zeros((n, n), dtype=bool)
    base[:half, :half] = _clique(half)
    base[half:, half:] = _clique(n - half)
    left = rng.integers(0, half, size=p)
    right = rng.integers(half, n, size=p)
    adj = np.repeat(base[None], p, axis=0)
    adj[np.arange(p), left, right] = True
    adj[np.arange(p), right, left] = True
    return _build(adj, weights, eps, f"barbell(N={n}, P={p})", dtype)


def lollipop(
    num_agents: int,
    period: int = 50,
    seed: Any = 0,
    *,
    branch_lengths: tuple[int, int] = (3, 4),
    num_links: int = 3,
    weights: WeightRule = "metropolis",
    eps: float = 1e-6,
    dtype: Any = jnp.float32,
) -> Schedule:
    """The paper's time-varying generalized lollipop ``L^s_{m,r}`` (§4).

    For each snapshot the branch length ``r ~ U{r_min, …, r_max}`` (``branch_lengths``, inclusive;
    ``{3, 4}`` in the paper) is drawn; agents ``0..m−1`` (``m = N − r``) form a clique, agents
    ``m..N−1`` form the branch, a path in index order, and ``s = num_links`` distinct clique agents,
    drawn uniformly, are joined to the branch's terminal node, its smallest-index agent ``m``.
    Weights: eq. (4.1) with ``eps``.

    Args:
        num_agents: ``N``; needs ``N − r_max >= num_links``.
        period: ``P`` (50 in the paper).
        seed: int, ``numpy.random.Generator`` or JAX key.
        branch_lengths: ``(r_min, r_max)``, ``1 <= r_min <= r_max``.
        num_links: ``s >= 1``, links from the clique to the terminal node.
        weights: weight rule (see module docstring).
        eps: ``ε̂`` of eq. (4.1).
        dtype: storage dtype of the matrices.

    Returns:
        :class:`Schedule` with ``matrices`` and ``adjacency`` of shape ``(P, N, N)``.

    Example:
        >>> s = lollipop(8, period=4, seed=1)
        >>> s.matrices.shape
        (4, 8, 8)
    """
    n = _positive_int(num_agents, "num_agents", 2)
    p = _positive_int(period, "period")
    r_min, r_max = (int(r) for r in branch_lengths)
    s = _positive_int(num_links, "num_links")
    if not 1 <= r_min <= r_max:
        raise ValueError(
            f"`branch_lengths` must satisfy 1 <= r_min <= r_max; got {branch_lengths!r}."
        )
    if n - r_max < s:
        raise ValueError(
            f"lollipop: the clique (N - r_max = {n - r_max} agents) is smaller than "
            f"num_links = {s}."
        )
    rng = _rng(seed)
    lengths = rng.integers(r_min, r_max + 1, size=p)
    adj = np.zeros((p, n, n), dtype=bool)
    for k, r in enumerate(lengths):
        m = n - int(r)
        adj[k, :m, :m] = _clique(m)
        path = np.arange(m, n - 1)
        adj[k, path, path + 1] = adj[k, path + 1, path] = True
        links = rng.choice(m, size=s, replace=False)
        adj[k, links, m] = adj[k, m, links] = True
    return _build(adj, weights, eps, f"lollipop(N={n}, P={p}, r∈[{r_min},{r_max}], s={s})", dtype)


# ---------------------------------------------------------------- static graphs (P = 1)


def from_graph(
    graph: Any,
    *,
    weights: WeightRule = "metropolis_hastings",
    eps: float = 1e-6,
    name: str | None = None,
    dtype: Any = jnp.float32,
) -> Schedule:
    """A static one-matrix schedule from a networkx graph or an ``(N, N)`` adjacency.

    Node order: ``graph.nodes`` (integer labels ``0..N−1`` in label order).

    Example:
        >>> import networkx as nx
        >>> from_graph(nx.path_graph(4)).period
        1
    """
    adj = as_adjacency(graph)
    if adj.ndim != 2:
        raise ValueError(
            f"from_graph: expected one (N, N) graph; got shape {adj.shape}. Use from_graphs."
        )
    return _build(adj[None], weights, eps, name or f"graph(N={adj.shape[0]})", dtype)


def ring(
    num_agents: int, *, weights: WeightRule = "metropolis_hastings", dtype: Any = jnp.float32
) -> Schedule:
    """Static cycle ``0 − 1 − … − (N−1) − 0`` (a single edge for ``N = 2``)."""
    n = _positive_int(num_agents, "num_agents")
    adj = np.zeros((n, n), dtype=bool)
    if n > 1:
        i = np.arange(n)
        adj[i, (i + 1) % n] = adj[(i + 1) % n, i] = True
    return _build(adj[None], weights, 0.0, f"ring(N={n})", dtype)


def complete(
    num_agents: int, *, weights: WeightRule = "metropolis_hastings", dtype: Any = jnp.float32
) -> Schedule:
    """Static complete graph; with the default weights ``W = 11ᵀ/N`` (exact averaging)."""
    n = _positive_int(num_agents, "num_agents")
    return _build(_clique(n)[None], weights, 0.0, f"complete(N={n})", dtype)


def star(
    num_agents: int, *, weights: WeightRule = "metropolis_hastings", dtype: Any = jnp.float32
) -> Schedule:
    """Static star with agent 0 at the centre."""
    n = _positive_int(num_agents, "num_agents")
    adj = np.zeros((n, n), dtype=bool)
    adj[0, 1:] = adj[1:, 0] = True
    return _build(adj[None], weights, 0.0, f"star(N={n})", dtype)


def grid(
    rows: int,
    cols: int | None = None,
    *,
    periodic: bool = False,
    weights: WeightRule = "metropolis_hastings",
    dtype: Any = jnp.float32,
) -> Schedule:
    """Static 2-D grid of ``rows × cols`` agents (square if ``cols`` is omitted), row-major.

    ``periodic=True`` gives the torus.
    """
    r = _positive_int(rows, "rows")
    c = r if cols is None else _positive_int(cols, "cols")
    import networkx as nx

    g = nx.grid_2d_graph(r, c, periodic=periodic)
    nodes = [(i, j) for i in range(r) for j in range(c)]
    adj = nx.to_numpy_array(g, nodelist=nodes, weight=None) != 0
    return _build(
        as_adjacency(adj)[None],
        weights,
        0.0,
        f"grid({r}x{c}{', periodic' if periodic else ''})",
        dtype,
    )


def random_regular(
    num_agents: int,
    degree: int,
    seed: Any = 0,
    *,
    max_tries: int = 1000,
    weights: WeightRule = "metropolis_hastings",
    dtype: Any = jnp.float32,
) -> Schedule:
    """Static random ``degree``-regular graph, redrawn until connected (``N · degree`` even)."""
    n = _positive_int(num_agents, "num_agents", 2)
    d = _positive_int(degree, "degree")
    if d >= n or (n * d) % 2:
        raise ValueError(
            f"random_regular: need degree < N and N * degree even; got N={n}, degree={d}."
        )
    import networkx as nx

    rng = _rng(seed)
    for _ in range(max_tries):
        g = nx.random_regular_graph(d, n, seed=int(rng.integers(2**31)))
        if nx.is_connected(g):
            return _build(
                as_adjacency(g)[None], weights, 0.0, f"random_regular(N={n}, d={d})", dtype
            )
    raise ValueError(
        f"random_regular: no connected {d}-regular graph on {n} agents in {max_tries} draws."
    )


def erdos_renyi(
    num_agents: int,
    p: float,
    seed: Any = 0,
    *,
    max_tries: int = 1000,
    weights: WeightRule = "metropolis_hastings",
    dtype: Any = jnp.float32,
) -> Schedule:
    """Static connected Erdős–Rényi graph: ``G(N, p)`` conditioned on connectivity.

    Each edge is present independently w.p. ``p``; the graph is redrawn until connected.
    """
    n = _positive_int(num_agents, "num_agents")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"erdos_renyi: p must lie in [0, 1]; got {p!r}.")
    rng = _rng(seed)
    iu, ju = np.triu_indices(n, k=1)
    for _ in range(max_tries):
        adj = np.zeros((n, n), dtype=bool)
        on = rng.random(iu.size) < p
        adj[iu[on], ju[on]] = adj[ju[on], iu[on]] = True
        if _is_connected(adj):
            return _build(adj[None], weights, 0.0, f"erdos_renyi(N={n}, p={p:g})", dtype)
    raise ValueError(f"erdos_renyi: no connected G({n}, {p:g}) in {max_tries} draws; increase p.")


# ---------------------------------------------------------------- time-varying and user schedules


def from_graphs(
    graphs: Sequence[Any] | np.ndarray,
    *,
    weights: WeightRule = "metropolis_hastings",
    eps: float = 1e-6,
    name: str = "from_graphs",
    dtype: Any = jnp.float32,
) -> Schedule:
    """A schedule from a sequence of graphs (networkx graphs or ``(N, N)`` adjacencies, or one
    ``(P, N, N)`` array), used cyclically in the given order. All graphs must have the same ``N``.

    Example:
        >>> import networkx as nx
        >>> s = from_graphs([nx.path_graph(4), nx.cycle_graph(4)], weights="metropolis", eps=1e-6)
        >>> s.period, s.num_agents
        (2, 4)
    """
    if _is_graph(graphs):
        raise TypeError("from_graphs: expected a sequence of graphs; use from_graph for one graph.")
    adjs = (
        [as_adjacency(g) for g in graphs]
        if not hasattr(graphs, "ndim")
        else list(as_adjacency(graphs))
    )
    if not adjs:
        raise ValueError("from_graphs: the sequence of graphs is empty.")
    sizes = {a.shape for a in adjs}
    if len(sizes) != 1 or any(len(s) != 2 for s in sizes):
        raise ValueError(
            f"from_graphs: all graphs must be (N, N) with the same N; got shapes {sorted(sizes)}."
        )
    return _build(np.stack(adjs), weights, eps, name, dtype)


def from_matrices(
    stack: Any,
    *,
    adjacency: Any = None,
    name: str = "from_matrices",
    tol: float = DEFAULT_TOL,
    dtype: Any = jnp.float32,
) -> Schedule:
    """Wrap user mixing matrices ``(P, N, N)`` (or one ``(N, N)``) as a validated :class:`Schedule`.

    Args:
        stack: the matrices; symmetric, nonnegative and doubly stochastic within ``tol``.
        adjacency: optional graphs (``(P, N, N)`` or ``(N, N)``); weights off them must be 0.
        name: description used in error messages.
        tol: tolerance for symmetry and row/column sums.
        dtype: storage dtype.

    Raises:
        ValueError: naming the matrix index, the violated property and the worst entry.

    Example:
        >>> import numpy as np
        >>> from_matrices(np.full((3, 3), 1 / 3)).period
        1
    """
    return Schedule(np.asarray(stack), adjacency, name, dtype=dtype, tol=tol)


def as_schedule(x: Any, *, name: str = "mixing") -> Schedule:
    """A :class:`Schedule` as is; an array or a ``.matrices`` holder via :func:`from_matrices`."""
    if isinstance(x, Schedule):
        return x
    if hasattr(x, "matrices"):
        return from_matrices(x.matrices, adjacency=getattr(x, "adjacency", None), name=name)
    return from_matrices(x, name=name)


def link_failures(
    base_graph: Any,
    p: float,
    period: int = 50,
    seed: Any = 0,
    *,
    weights: WeightRule = "metropolis_hastings",
    eps: float = 1e-6,
    dtype: Any = jnp.float32,
) -> Schedule:
    """Random link failures: each edge of ``base_graph`` is down w.p. ``p``, independently per step.

    Weights are recomputed on the surviving graph of each snapshot. A single snapshot may be
    disconnected (an isolated agent gets ``W_ii = 1``); Assumption 3.2(iii) asks only that windows
    of ``B`` snapshots mix jointly: check with
    :func:`dgsgld.networks.smallest_joint_connectivity_window`.

    Args:
        base_graph: networkx graph, ``(N, N)`` adjacency, or a :class:`Schedule` (first graph).
        p: failure probability in ``[0, 1]``.
        period: ``P``, number of independent failure patterns before the schedule repeats.
        seed: int, ``numpy.random.Generator`` or JAX key.
        weights, eps, dtype: as in the other generators.

    Example:
        >>> s = link_failures(ring(6).adjacency[0], p=0.5, period=10, seed=0)
        >>> s.matrices.shape
        (10, 6, 6)
    """
    if isinstance(base_graph, Schedule):
        base_graph = base_graph.graph(0)
    base = as_adjacency(base_graph)
    if base.ndim != 2:
        raise ValueError(f"link_failures: expected one (N, N) base graph; got shape {base.shape}.")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"link_failures: p must lie in [0, 1]; got {p!r}.")
    n_steps = _positive_int(period, "period")
    rng = _rng(seed)
    iu, ju = np.nonzero(np.triu(base, k=1))
    up = rng.random((n_steps, iu.size)) >= p
    k, e = np.nonzero(up)
    adj = np.zeros((n_steps, *base.shape), dtype=bool)
    adj[k, iu[e], ju[e]] = adj[k, ju[e], iu[e]] = True
    return _build(
        adj, weights, eps, f"link_failures(N={base.shape[0]}, p={p:g}, P={n_steps})", dtype
    )


def one_peer_exponential(
    num_agents: int,
    period: int | None = None,
    *,
    dtype: Any = jnp.float32,
) -> Schedule:
    """Time-varying one-peer exponential graph (symmetric version).

    ``N`` must be a power of two, ``L = log₂ N``. At step ``k``, with ``τ = k mod L``, agent ``i``
    is linked to ``(i ± 2^τ) mod N``. Weights are Metropolis–Hastings, which here means ``1/3`` on
    each of the two peers and on oneself, or ``1/2``–``1/2`` when the peers coincide
    (``2^τ = N/2``). Each snapshot is a union of cycles (disconnected for ``τ ≥ 1``), but any
    ``L`` consecutive snapshots jointly connect all agents.

    Args:
        num_agents: ``N``, a power of two ``>= 2``.
        period: ``P``, a positive multiple of ``L`` (default ``L``), so that ``matrices[k % P]``
            uses ``τ = k mod L`` for every ``k``.
        dtype: storage dtype.

    Example:
        >>> s = one_peer_exponential(8)
        >>> s.period, float(s.matrices[0, 0, 1])
        (3, 0.3333333432674408)
    """
    n = _positive_int(num_agents, "num_agents", 2)
    if n & (n - 1):
        raise ValueError(f"one_peer_exponential: num_agents must be a power of two; got {n}.")
    levels = int(math.log2(n))
    n_steps = levels if period is None else _positive_int(period, "period")
    if n_steps % levels:
        raise ValueError(
            f"one_peer_exponential: period must be a multiple of log2(N) = {levels}; got {n_steps}."
        )
    i = np.arange(n)
    adj = np.zeros((n_steps, n, n), dtype=bool)
    for k in range(n_steps):
        hop = 2 ** (k % levels)
        adj[k, i, (i + hop) % n] = adj[k, i, (i - hop) % n] = True
    return _build(
        adj, "metropolis_hastings", 0.0, f"one_peer_exponential(N={n}, P={n_steps})", dtype
    )
