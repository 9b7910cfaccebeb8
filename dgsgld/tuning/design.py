"""Network design: mixing weights learned by differentiating the sampler's exact law.

Every matrix is built as ``W = I − B diag(w) Bᵀ`` over the oriented edge incidence matrix
``B (N, E)`` of the graph (column ``e = (i, j)`` has ``+1`` at ``i`` and ``−1`` at ``j``), so
``W[i, j] = w_e`` on an edge, ``0`` off the graph and ``W[i, i] = 1 − Σ_{e ∋ i} w_e``:
symmetric with unit row and column sums for any ``w``. :class:`EdgeParametrization` maps
unconstrained numbers ``θ`` to valid ``w`` (``W`` nonnegative):

    u = softplus(θ) · mask,      w_e = u_e / max(1, s_i, s_j),      s_i = Σ_{e ∋ i} u_e,

so every node's incident weights sum to at most 1 (each ``w_e ≤ u_e / s_i``), and every valid
``w > 0`` is reached (where all ``s ≤ 1`` the map is the identity on ``u``). ``mask (P, E)``
switches off, per snapshot, the edges of the union graph that snapshot lacks, so snapshot ``p``
is zero off its own graph. Weights are either one set per snapshot or one set shared by all.

:func:`learn_weights` minimizes the exact per-agent W2 of :mod:`dgsgld.theory.exact` at an
iteration ``T`` (or its mean over several iterations) over ``θ`` (and optionally ``log η``)
with optax, and returns a validated
:class:`~dgsgld.networks.Schedule`. Built with networkx and NumPy on the host; the matrices
themselves are a jittable function of ``θ``. :func:`learn_weights_by_sampling` does the same
for any model, on a function of the samples of :func:`dgsgld.sample` (common random numbers).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..networks.spectral import spectral_gap
from ..networks.weights import as_adjacency

__all__ = ["EdgeParametrization", "WeightDesign", "edge_parametrization", "learn_weights",
           "learn_weights_by_sampling"]


def _graphs(network: Any) -> np.ndarray:
    """Bool ``(P, N, N)`` graphs of a schedule (its ``adjacency``, else its nonzero weights),
    a stack or one matrix, or a networkx graph (one snapshot)."""
    adjacency = getattr(network, "adjacency", None)
    if adjacency is None:
        adjacency = getattr(network, "matrices", network)
    if not hasattr(adjacency, "nodes"):  # not a networkx graph
        adjacency = np.asarray(adjacency)
    adj = as_adjacency(adjacency)
    return adj[None] if adj.ndim == 2 else adj


class EdgeParametrization(eqx.Module):
    """Valid mixing matrices ``W⁽ᵖ⁾ = I − B diag(w⁽ᵖ⁾) Bᵀ`` as a function of free numbers ``θ``.

    Attributes:
        incidence: ``(N, E)`` oriented incidence matrix ``B`` of the union graph.
        mask: ``(P, E)`` 1 where edge ``e`` is in snapshot ``p``'s graph, else 0.
        edges: the ``E`` edges ``(i, j)``, ``i < j`` (static).
        shared: one weight per edge for all snapshots (``θ (E,)``) instead of one per snapshot
            and edge (``θ (P, E)``) (static).
    """

    incidence: jax.Array
    mask: jax.Array
    edges: tuple = eqx.field(static=True)
    shared: bool = eqx.field(static=True)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of ``θ``: ``(E,)`` shared, else ``(P, E)``."""
        return self.mask.shape[1:] if self.shared else self.mask.shape

    @property
    def adjacency(self) -> np.ndarray:
        """Bool ``(P, N, N)`` graphs of the snapshots."""
        mask = np.asarray(self.mask) != 0
        n = self.incidence.shape[0]
        adj = np.zeros((mask.shape[0], n, n), bool)
        for e, (i, j) in enumerate(self.edges):
            adj[:, i, j] = adj[:, j, i] = mask[:, e]
        return adj

    def edge_weights(self, theta) -> jax.Array:
        """``(P, E)`` edge weights ``w`` (zero on edges a snapshot lacks) from ``θ``."""
        theta = jnp.asarray(theta)
        if theta.shape != self.shape:
            raise ValueError(f"`theta` must have shape {self.shape}; got {theta.shape}.")
        mask = self.mask.astype(theta.dtype)
        u = jax.nn.softplus(jnp.broadcast_to(theta, mask.shape)) * mask
        absolute = jnp.abs(self.incidence).astype(theta.dtype)    # (N, E)
        node_sums = u @ absolute.T                                # (P, N)
        ends = jnp.maximum(node_sums @ (absolute * (self.incidence > 0)),
                           node_sums @ (absolute * (self.incidence < 0)))  # (P, E): max(s_i, s_j)
        return u / jnp.maximum(1.0, ends)

    def matrices(self, theta) -> jax.Array:
        """``(P, N, N)`` symmetric, nonnegative, doubly stochastic ``W`` from ``θ``."""
        w = self.edge_weights(theta)
        B = self.incidence.astype(w.dtype)
        laplacian = jnp.einsum("ie,pe,je->pij", B, w, B)
        return jnp.eye(B.shape[0], dtype=w.dtype)[None] - laplacian

    def theta_from(self, matrices) -> np.ndarray:
        """``θ`` reproducing ``matrices`` (``(P, N, N)`` valid weights on these graphs) exactly
        where every node's weights sum to less than 1 (Metropolis, max-degree); shared: the
        mean over the snapshots that hold each edge. Float64 NumPy."""
        w = np.asarray(getattr(matrices, "matrices", matrices), np.float64)
        w = w[None] if w.ndim == 2 else w
        mask = np.asarray(self.mask) != 0
        if w.shape != (mask.shape[0], self.incidence.shape[0], self.incidence.shape[0]):
            raise ValueError(
                f"`matrices` must be (P, N, N) = {(mask.shape[0],) + self.incidence.shape[:1] * 2}"
                f"; got {w.shape}.")
        i, j = np.asarray(self.edges, int).reshape(-1, 2).T
        values = np.clip(w[:, i, j], 1e-12, None)
        if self.shared:
            values = np.sum(np.where(mask, values, 0.0), 0) / np.maximum(mask.sum(0), 1)
        theta = values + np.log(-np.expm1(-values))  # softplus⁻¹
        return theta if self.shared else np.where(mask, theta, 0.0)


def edge_parametrization(network: Any, *, shared: bool = False) -> EdgeParametrization:
    """The :class:`EdgeParametrization` of a schedule's graphs.

    Args:
        network: a :class:`~dgsgld.networks.Schedule` (its ``adjacency``, else the nonzero
            weights), a ``(P, N, N)`` / ``(N, N)`` array or a networkx graph.
        shared: one weight per edge of the union graph for every snapshot.

    Returns:
        :class:`EdgeParametrization` over the union graph's edges (``networkx`` order of
        ``sorted`` pairs).

    Example:
        >>> import numpy as np
        >>> par = edge_parametrization(np.array([[0, 1], [1, 0]]))
        >>> np.round(np.asarray(par.matrices(np.zeros(par.shape)), np.float64), 3)
        array([[[0.307, 0.693],
                [0.693, 0.307]]])
    """
    import networkx as nx

    if not isinstance(shared, bool):
        raise TypeError(f"`shared` must be True or False; got {shared!r}.")
    adj = _graphs(network)
    n = adj.shape[-1]
    union = nx.Graph()
    union.add_nodes_from(range(n))
    union.add_edges_from(zip(*np.nonzero(np.triu(adj.any(axis=0), 1))))
    edges = tuple(sorted((int(min(e)), int(max(e))) for e in union.edges))
    if not edges:
        raise ValueError("`network` has no edges: there are no weights to design.")
    incidence = -nx.incidence_matrix(union, nodelist=range(n), edgelist=edges,
                                     oriented=True).toarray()  # +1 at i, −1 at j
    i, j = np.asarray(edges).T
    mask = adj[:, i, j].astype(np.float32)
    return EdgeParametrization(jnp.asarray(incidence, jnp.float32), jnp.asarray(mask), edges,
                               shared)


class WeightDesign(NamedTuple):
    """What :func:`learn_weights` did.

    Attributes:
        objective_before, objective_after: the objective at the starting weights and step and at
            the returned ones (the best iterate).
        spectral_gap_before, spectral_gap_after: ``(P,)`` per-snapshot spectral gaps
            (:func:`dgsgld.networks.spectral_gap`).
        step_size_before, step_size_after: ``η`` (equal unless ``learn_step_size``).
        edges: ``(E, 2)`` the union graph's edges.
        weights: ``(P, E)`` the learned edge weights (0 where a snapshot lacks the edge).
        history: ``(num_iterations,)`` the objective at each optimizer iteration.
        theta: the optimizer's free parameters at the returned weights (``(P, E)`` or ``(E,)``).
    """

    objective_before: float
    objective_after: float
    spectral_gap_before: np.ndarray
    spectral_gap_after: np.ndarray
    step_size_before: float
    step_size_after: float
    edges: np.ndarray
    weights: np.ndarray
    history: np.ndarray
    theta: np.ndarray


_REDUCE = {"mean": jnp.mean, "max": jnp.max}


def _iterations(num_steps) -> tuple[int, ...]:
    """The scored iterations of :func:`learn_weights`: ``(T,)`` for an integer ``T``, else the
    sequence itself (non-empty, strictly increasing integers ``>= 1``)."""
    expected = ("`num_steps` must be an integer >= 1 or a non-empty, strictly increasing "
                "sequence of them")
    if isinstance(num_steps, (int, np.integer)) and not isinstance(num_steps, bool):
        steps = (num_steps,)
    elif isinstance(num_steps, (str, bytes)) or not hasattr(num_steps, "__iter__"):
        raise ValueError(f"{expected}; got {num_steps!r}.")
    else:
        steps = tuple(num_steps)
    if not steps:
        raise ValueError(f"{expected}; got an empty sequence.")
    for t in steps:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            raise ValueError(f"{expected}; got the non-integer {t!r}.")
        if t < 1:
            raise ValueError(f"{expected}; got {t!r} < 1.")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"{expected}; got {list(steps)!r}, not strictly increasing.")
    return tuple(int(t) for t in steps)


def _exact_objective(algorithm, quadratics, init_mean, init_cov, iterations, reduce):
    """``(W (P, N, N), η) -> mean over the quadratics and over the ``iterations`` ``k`` of
    reduce_i W2(law of x_i⁽ᵏ⁾, target)`` (jittable; one ``vmap`` over the quadratics, one
    recursion up to the last iteration)."""
    from ..theory import exact

    shapes = {(np.shape(q.hessians), np.shape(q.shifts)) for q in quadratics}
    if len(shapes) != 1:
        raise ValueError(f"Every quadratic must have the same (N, d); got shapes {sorted(shapes)}.")
    A = jnp.stack([jnp.asarray(q.hessians) for q in quadratics])
    b = jnp.stack([jnp.asarray(q.shifts, A.dtype) for q in quadratics])
    targets = [q.target() for q in quadratics]
    means = jnp.asarray(np.stack([t[0] for t in targets]), A.dtype)
    covs = jnp.asarray(np.stack([t[1] for t in targets]), A.dtype)

    index = np.asarray(iterations)

    def one(stack, eta, A, b, mean, cov):
        moments = exact.exact_moments(algorithm, exact.Quadratic(A, b), stack, init_mean,
                                      init_cov, iterations[-1], step_size=eta)
        scored = exact.ExactMoments(*(a[index] for a in moments))   # (K, N, ...)
        return jnp.mean(_REDUCE[reduce](exact.exact_w2(scored, mean, cov), axis=-1))

    def objective(stack, eta):
        values = jax.vmap(one, in_axes=(None, None, 0, 0, 0, 0))(stack, eta, A, b, means, covs)
        return jnp.mean(values)

    return objective


def learn_weights(
    algorithm,
    quadratic,
    network: Any,
    init_mean,
    init_cov,
    num_steps,
    *,
    step_size=None,
    learn_step_size: bool = False,
    shared: bool = False,
    init: Any = None,
    num_iterations: int = 200,
    learning_rate: float = 0.05,
    optimizer=None,
    reduce: str = "mean",
    name: str | None = None,
):
    """Mixing weights (and optionally ``η``) minimizing the exact per-agent W2 at iteration ``T``
    (or its mean over several iterations).

    The objective is ``reduce_i W2(law of x_i⁽ᵀ⁾, π)`` (averaged over the quadratics if several,
    and over the iterations ``T`` if ``num_steps`` is a sequence of them),
    the Gaussian law of each agent's iterate propagated exactly by
    :func:`dgsgld.theory.exact.exact_moments` (quadratic potentials, full-batch gradients;
    :func:`dgsgld.theory.quadratic_from_potential` reads them off a :class:`dgsgld.Potential`),
    differentiated through the recursion with respect to
    ``θ`` of :class:`EdgeParametrization` (and ``log η``: the step stays positive). Every
    iterate is a valid schedule on the same graphs; the best one seen is returned.

    Args:
        algorithm: a dgsgld sampler for undirected networks (DIGing-SGLD, DE-SGLD,
            EXTRA-SGLD, ...; its friction, consensus weight and preconditioner enter the law).
        quadratic: :class:`dgsgld.theory.Quadratic` of the agents' potentials, or a sequence
            of them (same ``N`` and ``d``; e.g. several data draws): then the objective is the
            mean over them, weights designed for a family of problems rather than one.
        network: the schedule whose graphs are kept (:class:`~dgsgld.networks.Schedule` or a
            ``(P, N, N)`` stack); its weights are the start unless ``init`` is given.
        init_mean, init_cov: law of ``x⁽⁰⁾`` as for :func:`~dgsgld.theory.exact_moments`.
        num_steps: ``T``, the iteration whose law is scored, or a strictly increasing sequence
            of iterations whose scores are averaged (one recursion up to the last), e.g. the
            last period ``range(T − P + 1, T + 1)``: a differentiable stand-in for the
            periodic-stationary law, which :func:`dgsgld.theory.stationary_moments` gives
            without gradients.
        step_size: constant ``η`` (default: the sampler's).
        learn_step_size: optimize ``log η`` too.
        shared: one weight per edge for all snapshots (else one per snapshot and edge).
        init: starting ``(P, N, N)`` weights on the same graphs (default: ``network``'s).
        num_iterations: optimizer iterations.
        learning_rate: Adam's learning rate (on ``θ`` and ``log η``) when ``optimizer`` is None.
        optimizer: an ``optax.GradientTransformation`` to use instead.
        reduce: ``"mean"`` or ``"max"`` over agents.
        name: name of the returned schedule.

    Returns:
        ``(schedule, report)``: a validated :class:`~dgsgld.networks.Schedule` (dtype of the
        computation) the runners accept, and a :class:`WeightDesign`.

    Raises:
        ValueError: for a non-positive ``num_iterations``/``learning_rate``, a ``num_steps``
            that is not an integer ``>= 1`` or a non-empty, strictly increasing sequence of
            them, an unknown ``reduce``, a step-size schedule, a directed or centralized
            sampler, or a non-finite objective at the start (an unstable step size).
    """
    import optax

    from ..theory import exact, recursions

    recursions.recursion_of(algorithm)
    sampler_name = recursions.label(algorithm)
    if recursions.is_directed(algorithm) or not algorithm.decentralized:
        raise ValueError(f"`algorithm` {sampler_name} has no symmetric mixing weights to learn.")
    sampler_step = algorithm.step_size
    _check_count("num_iterations", num_iterations)
    iterations = _iterations(num_steps)
    if optimizer is None and not (np.isscalar(learning_rate) and learning_rate > 0):
        raise ValueError(f"`learning_rate` must be a positive number; got {learning_rate!r}.")
    if reduce not in _REDUCE:
        raise ValueError(f"`reduce` must be one of {tuple(_REDUCE)}; got {reduce!r}.")
    eta0 = step_size if step_size is not None else sampler_step
    if eta0 is None or callable(eta0) or not np.isfinite(eta0) or not eta0 > 0:
        raise ValueError(f"`step_size` must be one positive constant; got {eta0!r}.")

    par = edge_parametrization(network, shared=shared)
    start = np.asarray(getattr(init if init is not None else network, "matrices",
                               init if init is not None else network))
    dtype = jnp.result_type(float)
    params = {"theta": jnp.asarray(par.theta_from(start), dtype)}
    if learn_step_size:
        params["log_step"] = jnp.asarray(np.log(float(eta0)), dtype)
    quadratics = [quadratic] if isinstance(quadratic, exact.Quadratic) else list(quadratic)
    if not quadratics or not all(isinstance(q, exact.Quadratic) for q in quadratics):
        raise TypeError("`quadratic` must be a dgsgld.theory.Quadratic or a non-empty sequence "
                        "of them.")
    objective = _exact_objective(algorithm, quadratics, init_mean, init_cov, iterations,
                                 reduce)

    def loss(p):
        eta = jnp.exp(p["log_step"]) if learn_step_size else jnp.asarray(eta0, dtype)
        return objective(par.matrices(p["theta"]), eta)

    opt = optimizer if optimizer is not None else optax.adam(learning_rate)
    first, best, best_value, history = _optimize(lambda p, key: loss(p), params, opt,
                                                 num_iterations, None, None)
    if not np.isfinite(first):
        raise ValueError(f"The objective is {first} at the start: is η = {eta0!r} stable?")
    eta = float(np.exp(best["log_step"])) if learn_step_size else float(eta0)
    return _result(par, start, best, first, best_value, history, float(eta0), eta,
                   name or f"learned weights ({sampler_name}, T={_label(iterations)})")


def learn_weights_by_sampling(
    algorithm,
    potential,
    network: Any,
    init,
    key,
    num_steps: int,
    criterion,
    *,
    shared: bool = False,
    num_iterations: int = 50,
    learning_rate: float = 0.05,
    optimizer=None,
    resample_every: int | None = None,
    name: str | None = None,
):
    """Mixing weights minimizing a function of the final samples of :func:`dgsgld.sample`.

    For any model: ``criterion(final positions)`` of chains run by :func:`dgsgld.sample` with
    ``W = EdgeParametrization.matrices(θ)``, differentiated through the run. The gradient's
    variance is handled with common random numbers: every iteration runs the same ``key`` and
    ``init``, so the objective is a deterministic, smooth function of ``θ`` (the sampler's
    noise fixed) and the best iterate is kept; ``resample_every = m`` draws fresh noise
    (``fold_in(key, iteration // m)``) every ``m`` iterations, so that the weights do not fit
    one noise draw (then the last iterate is returned, scored at ``key``).

    Args:
        algorithm: a dgsgld sampler with symmetric mixing (its step size is kept).
        potential, network, init, key, num_steps: as in :func:`dgsgld.sample`; ``network``'s
            graphs are kept and its weights are the start.
        criterion: ``positions (num_chains, N, ...) -> scalar`` to minimize (a kernel Stein
            discrepancy, a consensus error, a W2 of the chains' Gaussian fit, ...).
        shared, num_iterations, learning_rate, optimizer, name: as in :func:`learn_weights`.
        resample_every: iterations between fresh noise draws (``None``: never).

    Returns:
        ``(schedule, report)`` as :func:`learn_weights` (``step_size_*`` is the sampler's).

    Raises:
        ValueError: for bad ``num_iterations``/``learning_rate``/``resample_every`` or a
            non-finite criterion at the start.
    """
    import optax

    from ..runner import loop as run

    _check_count("num_iterations", num_iterations)
    _check_count("num_steps", num_steps)
    if resample_every is not None and (isinstance(resample_every, bool) or not isinstance(
            resample_every, (int, np.integer)) or resample_every < 1):
        raise ValueError(f"`resample_every` must be None or an integer >= 1; got "
                         f"{resample_every!r}.")
    if optimizer is None and not (np.isscalar(learning_rate) and learning_rate > 0):
        raise ValueError(f"`learning_rate` must be a positive number; got {learning_rate!r}.")
    if not callable(criterion):
        raise TypeError(f"`criterion` must be a function of the final positions; got "
                        f"{type(criterion).__name__}.")
    par = edge_parametrization(network, shared=shared)
    start = np.asarray(getattr(network, "matrices", network))
    params = {"theta": jnp.asarray(par.theta_from(start), jnp.result_type(float))}

    def loss(p, k):
        trace = run.sample(algorithm, potential, par.matrices(p["theta"]), init, k,
                           int(num_steps), output=run.Output(positions=False),
                           on_divergence="flag")
        return criterion(trace.state.position)

    opt = optimizer if optimizer is not None else optax.adam(learning_rate)
    first, best, best_value, history = _optimize(loss, params, opt, num_iterations, key,
                                                 resample_every)
    if not np.isfinite(first):
        raise ValueError(f"The criterion is {first} at the start weights.")
    eta = getattr(algorithm, "step_size", None)
    eta = float(eta) if eta is not None and not callable(eta) else float("nan")
    return _result(par, start, best, first, best_value, history, eta, eta,
                   name or f"learned weights (sampled, T={num_steps})")


def _check_count(label, value):
    """Raise unless ``value`` is an integer ``>= 1``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{label}` must be an integer >= 1; got {value!r}.")


def _label(iterations) -> str:
    """``T``, ``first..last`` for consecutive iterations, else the iterations."""
    if len(iterations) == 1:
        return str(iterations[0])
    if iterations[-1] - iterations[0] == len(iterations) - 1:
        return f"{iterations[0]}..{iterations[-1]}"
    return ",".join(map(str, iterations))


def _optimize(loss, params, opt, num_iterations, key, resample_every):
    """Optax iterations on ``loss(params, key)``; ``(first value, best params, best value,
    history)``. With a fixed ``key`` (common random numbers) the loss is deterministic and the
    best iterate is kept; with ``resample_every`` the key changes every that many iterations
    (the first block and the final score use ``key``), values at different keys are not
    comparable, and the last iterate is returned. One
    compiled program: the values are those the update computes anyway."""
    import optax

    @jax.jit
    def update(p, state, k):
        value, grads = jax.value_and_grad(loss)(p, k)
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, value

    state = opt.init(params)
    history = []
    best, best_value = params, np.inf
    for it in range(int(num_iterations) + 1):  # the last pass only scores the last iterate
        block = 0 if resample_every is None or it == num_iterations else it // resample_every
        k = key if block == 0 else jax.random.fold_in(key, block)  # start and end scored at key
        new, new_state, value = update(params, state, k)
        value = float(value)  # the objective at `params`, before this update
        if it == 0 and not np.isfinite(value):
            return value, params, value, np.zeros(0)
        if it < num_iterations:
            history.append(value)
        if resample_every is None and np.isfinite(value) and value < best_value:
            best, best_value = params, value
        if it == num_iterations:
            break
        params, state = new, new_state
    if resample_every is not None:
        best, best_value = params, value
    return history[0], best, best_value, np.asarray(history)


def _result(par, start, best, first, best_value, history, eta_before, eta_after, name):
    """The validated schedule and the :class:`WeightDesign` of the parameters ``best``."""
    from ..networks.schedules import Schedule

    matrices, weights = jax.jit(lambda t: (par.matrices(t), par.edge_weights(t)))(best["theta"])
    host = np.asarray(matrices)
    schedule = Schedule(host, par.adjacency, name, dtype=host.dtype)
    report = WeightDesign(
        objective_before=first,
        objective_after=best_value,
        spectral_gap_before=spectral_gap(start if start.ndim == 3 else start[None]),
        spectral_gap_after=spectral_gap(host),
        step_size_before=eta_before,
        step_size_after=eta_after,
        edges=np.asarray(par.edges, int),
        weights=np.asarray(weights, np.float64),
        history=np.asarray(history, np.float64),
        theta=np.asarray(best["theta"]),
    )
    return schedule, report
