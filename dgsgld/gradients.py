"""Gradient estimators: how a decentralized sampler estimates every agent's ``∇f_i(x_i)``.

An estimator is a frozen pytree with two pure functions over its own state::

    state = estimator.init(potential, positions)                       # before the first call
    grad, state = estimator.grad(state, potential, positions, key)     # once per evaluation

``positions`` and ``grad`` have leaves ``(N, *param_shape)``, one row per agent; the state is a
pytree the sampler carries in its own state (field ``estimator``). ``start`` does both for the
first gradient of a run. Three estimators, each unbiased for ``∇f_i(x_i)``:

* :func:`minibatch` — ``potential.grad(x, key)``: the ``Potential``'s own mini-batch (or full
  batch) gradient. Empty state. Gradient evaluations per agent per step: ``b``.
* :func:`svrg` — control variate around a per-agent anchor ``a_i`` (SVRG-LD, Dubey et al.,
  NeurIPS 2016): ``∇̃f_i(x_i) − ∇̃f_i(a_i) + ∇f_i(a_i)``, both mini-batch terms on the SAME
  mini-batch (the same key); the anchor moves to ``x_i`` and its full local gradient is
  recomputed at calls ``0, m, 2m, ...`` (``update_every=m``, or a schedule ``count -> bool``).
  State: anchor and its gradient, 2 × params per agent. Evaluations: ``2b + n_i/m`` on average.
* :func:`saga` — a per-agent table of the last gradient seen for each datum (SAGA-LD, same
  paper): ``(n_i/b) Σ_{j∈S} (∇ℓ_j(x_i) − T_ij) + Σ_j T_ij + ∇(−log p(x_i))/N``, then
  ``T_ij ← ∇ℓ_j(x_i)`` for ``j ∈ S``. The sum ``Σ_j T_ij`` is kept in the state and moved by
  the ``b`` changed rows, so a step costs ``O(b)``. State: the table and its sum,
  ``(n_i + 1)`` × params per agent (the table is what SAGA is). Evaluations: ``b`` (``n_i``
  once, to fill the table).

Clipping (``Potential(..., clip=C)``): every estimator is built from the potential's clipped
per-datum gradients (SAGA's table holds clipped rows), so each is unbiased for the clipped
drift ``Σ_d clip_C(∇ℓ_d) + ∇(−log p)/N``. What a control variate does to privacy: both reuse
gradients of every datum (SVRG's anchor gradient, SAGA's table sum), so one datum moves every
step's estimate by up to ``2C (1 + 2 n_i / b)`` whether or not it is in the mini-batch; the
accountant (:mod:`dgsgld.evaluate.privacy`) takes that sensitivity and no subsampling
amplification for them.

Where the estimator is chosen: on the sampler (``dgsgld.DIGingSGLD(η, estimator=...)``), not
on the :class:`~dgsgld.Potential`. A control variate has per-chain state that must ride in the
loop's carry, and the sampler decides where gradients are evaluated and reused (DIGing-SGLD
subtracts the kept estimate in the tracker, so ``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` keeps holding with
any estimator). The ``Potential`` stays a stateless model: data, mini-batch size, gradients.

Cost under ``vmap`` over chains: the anchor refresh of :func:`svrg` is a ``lax.cond`` whose
predicate is "some chain of the batch refreshes now" (``_vmap.any_in_batch``: under ``vmap`` it
reduces over the mapped axis and comes out unbatched, so the ``cond`` stays a branch instead of
becoming a ``select``); inside the branch each chain keeps its own anchor unless it refreshes.
With an int ``update_every`` (or any schedule that agrees across chains, as in
``dgsgld.sample``, where every chain has the same count) the full local gradient is computed at
refresh steps only. A schedule that differs between the chains of one batch computes it for the
whole batch whenever one chain refreshes (at worst every step, the cost of a ``select``).
"""

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from ._util.types import Array, PRNGKey, PyTree
from ._util.vmap import any_in_batch
from .model.potential import clip_rows, first_occurrences

__all__ = [
    "GradientEstimator",
    "MiniBatch",
    "SAGA",
    "SAGAState",
    "SVRG",
    "SVRGState",
    "evaluations_per_step",
    "minibatch",
    "saga",
    "svrg",
]


class GradientEstimator(eqx.Module):
    """Interface of the estimators (documentation and ``isinstance``)."""

    def init(self, potential, positions: PyTree) -> PyTree:  # pragma: no cover - interface
        raise NotImplementedError

    def grad(self, state: PyTree, potential, positions: PyTree, key: PRNGKey):  # pragma: no cover
        raise NotImplementedError

    def start(self, potential, positions: PyTree, key: PRNGKey) -> tuple[PyTree, PyTree]:
        """``(∇̃F(positions), state)``: the first estimate of a run and the state after it."""
        return self.grad(self.init(potential, positions), potential, positions, key)


class MiniBatch(GradientEstimator):
    """``potential.grad(x, key)``: the potential's mini-batch (or full-batch) gradient."""

    def init(self, potential, positions):
        return ()

    def grad(self, state, potential, positions, key):
        return potential.grad(positions, key), state


def minibatch() -> MiniBatch:
    """The plain estimator (the default of every decentralized sampler)."""
    return MiniBatch()


def _needs_minibatches(potential, what: str) -> None:
    if potential.log_likelihood is None:
        raise ValueError(
            f"The {what} estimator needs a `Potential` with `log_likelihood` (it evaluates full "
            "local gradients); this potential has a `gradient_fn` oracle."
        )
    if potential.batch_size is None:
        raise ValueError(
            f"The {what} estimator needs a `Potential` with a `batch_size`; with full local "
            "batches the plain gradient is already exact."
        )


class SVRGState(NamedTuple):
    """``anchor`` and ``anchor_grad = ∇f_i(anchor_i)`` leaves ``(N, *param_shape)``; ``count``
    the number of gradient calls so far (int32 scalar)."""

    anchor: PyTree
    anchor_grad: PyTree
    count: Array


class SVRG(GradientEstimator):
    """SVRG control variate. Build with :func:`svrg`."""

    update_every: int | Callable = eqx.field(static=True)

    def _refresh(self, count: Array) -> Array:
        if callable(self.update_every):
            return jnp.asarray(self.update_every(count), bool)
        return count % self.update_every == 0

    def init(self, potential, positions):
        _needs_minibatches(potential, "SVRG")
        zeros = jax.tree.map(jnp.zeros_like, positions)
        # Count 0 refreshes at the first call, so the first estimate is the full gradient.
        return SVRGState(zeros, zeros, jnp.zeros((), jnp.int32))

    def grad(self, state, potential, positions, key):
        refresh = self._refresh(state.count)

        def new_anchor():
            keep = lambda new, old: jnp.where(refresh, new, old)  # noqa: E731 - per chain
            return (jax.tree.map(keep, positions, state.anchor),
                    jax.tree.map(keep, potential.full_grad(positions), state.anchor_grad))

        anchor, anchor_grad = jax.lax.cond(
            any_in_batch(refresh), new_anchor, lambda: (state.anchor, state.anchor_grad))
        # One mini-batch per agent (the one potential.grad(positions, key) draws), both points.
        idx = batch_indices(potential, key)
        at_x = potential.grad_on(positions, idx)
        at_anchor = potential.grad_on(anchor, idx)
        grad = jax.tree.map(lambda g, ga, full: full + (g - ga), at_x, at_anchor, anchor_grad)
        return grad, SVRGState(anchor, anchor_grad, state.count + 1)


def svrg(update_every: int | Callable[[Array], Array] = 10) -> SVRG:
    """SVRG control variate around per-agent anchors refreshed every ``update_every`` calls.

    Args:
        update_every: ``m``, a positive int (refresh at calls ``0, m, 2m, ...``; the sampler
            calls once at ``init`` and once per step), or a schedule ``count -> bool`` that
            says when to refresh (it must be true at count 0).
    """
    if not callable(update_every):
        if isinstance(update_every, bool) or not isinstance(update_every, int) or update_every < 1:
            raise ValueError(
                f"`update_every` must be a positive int or a schedule count -> bool; "
                f"got {update_every!r}."
            )
    else:
        out = jax.eval_shape(update_every, jax.ShapeDtypeStruct((), jnp.int32))
        shapes = [leaf.shape for leaf in jax.tree.leaves(out)]
        if shapes != [()]:
            raise ValueError(f"`update_every` schedule must return one scalar (refresh or not) "
                             f"for a count; got shape(s) {shapes}.")
        if not bool(update_every(jnp.int32(0))):
            raise ValueError("`update_every` schedule must be true at count 0 (the first anchor).")
    return SVRG(update_every)


class SAGAState(NamedTuple):
    """``table`` leaves ``(N, n_local, *param_shape)``: the last gradient of ``−log p(d_ij | ·)``
    evaluated for every datum ``j`` of agent ``i``; ``total`` leaves ``(N, *param_shape)``: its
    sum over each agent's real data, ``Σ_j T_ij`` (moved by the changed rows at each step, so it
    equals the sum to float rounding)."""

    table: PyTree
    total: PyTree


def _datum_grads(potential, positions, data):
    """``∇(−log p(d | x_i))`` for agent rows of data ``(N, k, ...)``: leaves ``(N, k, *p)``,
    each clipped to norm ``potential.clip`` when it has one."""
    one = jax.grad(lambda p, d: -potential.log_likelihood(p, d))
    grads = jax.vmap(jax.vmap(one, (None, 0)))(positions, data)
    return grads if potential.clip is None else clip_rows(grads, potential.clip, batch_ndim=2)


def batch_indices(potential, key: PRNGKey) -> Array:
    """``(R, b)`` indices of the mini-batches ``potential.grad(x, key)`` draws (same key) for
    the ``R`` agents whose data ``potential`` holds (all ``N``, or a device's block)."""
    return potential.batch_indices(key)


class SAGA(GradientEstimator):
    """SAGA control variate. Build with :func:`saga`."""

    def init(self, potential, positions):
        _needs_minibatches(potential, "SAGA")
        table = _datum_grads(potential, positions, potential.data)
        dtype = jax.tree.leaves(positions)[0].dtype
        _, weights = potential._counts_weights(jax.tree.leaves(table)[0].shape[0], dtype)
        total = lambda t: jnp.einsum("nj,nj...->n...", weights, t)  # noqa: E731 - real data only
        return SAGAState(table, jax.tree.map(total, table))

    def grad(self, state, potential, positions, key):
        idx = batch_indices(potential, key)  # (R, b): R = N, or a device's agents
        rows = lambda leaf: jnp.take_along_axis(  # noqa: E731 - (R, n, ...) -> (R, b, ...)
            leaf, idx.reshape(idx.shape + (1,) * (leaf.ndim - 2)), axis=1
        )
        fresh = _datum_grads(potential, positions, jax.tree.map(rows, potential.data))
        dtype = jax.tree.leaves(positions)[0].dtype
        counts, _ = potential._counts_weights(idx.shape[0], dtype)
        scale = counts.astype(dtype) / potential.batch_size
        # With replacement a datum may be drawn twice: the sum moves once per distinct datum.
        first = (jax.vmap(first_occurrences)(idx).astype(dtype) if potential.replace
                 else jnp.ones(idx.shape, dtype))

        agents = jnp.arange(idx.shape[0])[:, None]

        def per_leaf(table, total, new):
            expand = lambda a, ndim: a.reshape(a.shape + (1,) * (ndim - a.ndim))  # noqa: E731
            old = rows(table)
            change = new - old
            grad = total + expand(scale, total.ndim) * jnp.sum(change, axis=1)
            moved = jnp.sum(expand(first, change.ndim) * change, axis=1)  # once per datum
            # The written rows are `new` but read `old` (a NaN row stays NaN; the sum is NaN
            # then anyway): XLA then gathers before it writes and updates the table in place.
            # Written independently of `old`, the whole table was copied at every step.
            new = jnp.where(old == old, new, old)
            return grad, total + moved, table.at[agents, idx].set(new)

        out = jax.tree.map(per_leaf, state.table, state.total, fresh)
        grad, total, table = (jax.tree.map(lambda _, o: o[i], fresh, out) for i in (0, 1, 2))
        if potential.log_prior is not None:
            prior = jax.vmap(jax.grad(potential._prior_term))(positions)
            grad = jax.tree.map(jnp.add, grad, prior)
        return grad, SAGAState(table, total)


def saga() -> SAGA:
    """SAGA control variate with a per-agent table of per-datum gradients."""
    return SAGA()


def evaluations_per_step(estimator: GradientEstimator, potential) -> float:
    """Per-datum gradient evaluations per agent per step (averaged over a refresh period for
    SVRG with an int ``update_every``; the algorithm's count, not what ``vmap`` computes)."""
    b = potential.batch_size or potential.local_size
    if isinstance(estimator, SVRG):
        m = estimator.update_every
        return 2 * b + (potential.local_size / m if isinstance(m, int) else float("nan"))
    return float(b)


def as_estimator(estimator, *, name: str = "estimator") -> GradientEstimator:
    """``None`` -> :func:`minibatch`; an estimator unchanged; anything else a ``ValueError``."""
    if estimator is None:
        return MiniBatch()
    if not isinstance(estimator, GradientEstimator):
        raise ValueError(
            f"`{name}` must be a gradient estimator such as dgsgld.gradients.svrg(); "
            f"got {type(estimator).__name__}."
        )
    return estimator
