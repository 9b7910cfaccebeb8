"""A decentralized warm-up: the agents adapt a preconditioner ``M`` and a step size together.

``sampler, state, report = dgsgld.warmup(DIGingSGLD, potential, mixing, init, key, 2000)``
runs ``num_steps`` steps of the sampler in windows (fractions :data:`WINDOWS` of the budget,
Stan-style: short ones first, the longest last) and returns the adapted sampler (its step,
``preconditioner=M``, and SGHMC's friction or D-ULA's consensus weight), the final state of
the chains (continue it with :func:`dgsgld.sample`) and a :class:`WarmupReport`.

After every window but the last:

1. **Curvature, locally.** Every agent measures the Hessian of its own ``f_i`` at its own
   chains' positions from the window's second half (``curvature_points`` points; dense
   Hessians by forward-mode columns, or Hutchinson diagonals ``E[z ⊙ ∇²f_i z]`` for the
   diagonal and low-rank preconditioners) and its gradient there: a local quadratic
   ``(A_i, g_i, p_i)`` (Hessian, gradient and position averaged over the points).
2. **Agreement.** The agents flood these over the sampler's own mixing schedule
   (:mod:`dgsgld.tuning.gossip`: every agent ends with every agent's payload, bit for bit;
   bytes counted), and every agent computes the same ``M`` from them: the inverse of the pooled
   Hessian ``Σ_i A_i`` with its eigenvalues floored at ``|λ|`` (dense), or of its diagonal
   floored at ``|λ|`` and at the prior's curvature (diagonal: no entry above the prior
   variance, however noisy a flat direction's estimate); the low-rank preconditioner widens
   the diagonal one along the directions in which the window's draws spread wider than ``M``
   says (``M = D + U Uᵀ``, the top
   ``rank`` directions whose variance exceeds the sampling noise edge of a covariance from that
   many draws, from the agents' flooded sketches).
3. **Step.** ``η`` (and the second parameter) is chosen by :mod:`dgsgld.tuning.criterion`:
   the sampler's exact stationary law on the agents' local quadratics in the preconditioned
   coordinates (dense and small, at the adaptation that sets the final step; SGHMC's friction and
   D-ULA's consensus weight chosen on scalar modes first), or on scalar modes at the pooled
   preconditioned curvature's extremes (large ``d``, and the earlier windows), scored by the
   stationary bias against the Monte Carlo error the sampling run (``sampling_steps``) leaves.
   With plain mini-batches the law includes each agent's gradient-error covariance at its
   centre (:data:`NOISE_DRAWS` mini-batch gradients, flooded with the curvature; from the
   first window's draws on, not at the starts): to first order a step ``η`` widens SGLD's
   variance by ``1 + ηκ/2``, ``κ`` the noise's variance over the curvature. A control
   variate's error depends on how far its anchor is: for SVRG refreshed every ``m`` steps and
   SAGA (a datum's table entry ``n_i / b`` steps old on average) it is measured at the last
   draws of :data:`LAG_PAIRS` chains around their own draws that many steps earlier (``m / 2``,
   the anchor's mean age; ``n_i / b``; to the nearest kept draw, at least the one before),
   the mini-batch the same at both points. Chains just moved to the mode (below), or a window
   too short to keep such a pair, have none: there the anchors are one posterior sd away (the
   pooled curvature's inverse; a private block's, its agent's own), the distance of an anchor
   as old as the chains' relaxation. The
   step is then capped so that the stiffest curvature the chains met (the largest eigenvalue of the
   pooled preconditioned Hessian at any of the points: exact from the flooded Hessians, or by power
   iteration on network sums for diagonal ``M``) keeps its stationary sd within 50 %. It grows at
   most ``growth``-fold per window; the first window runs at ``probe`` times the criterion's step
   from the curvature at ``init``. A window with a divergence is run again at a quarter of the step
   (its steps stay spent), and later steps stay below half of the one that diverged. When the
   first window diverges, the chains met curvature far stiffer than at their starts (a flat
   start under a stiff mode): the agents first move every chain's start to the mode, by Newton
   steps on the pooled potential with a backtracking line search (each agent's curvature,
   gradient and potential value at the chain's point flooded per step, bytes counted), and adapt
   ``M`` and the step there (not with private parameters, whose positions are not sent); so
   do they, from the last good window's chains, when every rerun of a later window diverges
   (a chain reached curvature far stiffer than the windows before showed). The
   agents take the same steps when the chains are **out of reach**: after a window, their
   centre's ``gᵀMg`` (``g`` the pooled gradient there, on all data; a draw's is about ``d``)
   exceeds ``FAR · d`` and the windows left, at their planned steps, shrink it by less than
   ``√(gᵀMg / d)`` (the law's contraction ``ρ`` per step) before the last window's second half.

The **last window** restarts every chain over-dispersed, ``x = c + restart · S z`` (``c`` the
agreed centre, ``S Sᵀ = M``, ``z`` standard normal, every agent of a chain at the same point),
and runs at the final ``(M, η)``: the chains must forget the restart, which unmixed chains
cannot fake. Its second half gives the rank-normalized split R-hat of the network average per
preconditioned coordinate. The report says **the budget was too small** when that R-hat exceeds
``rhat_threshold``, when those draws hold fewer than ``min_check_ess`` effective draws (too few
for R-hat to tell), when
the last window is shorter than five relaxation times of the chosen step
(``1 / −log ρ`` steps, ``ρ`` the exact law's spectral radius), or when the sampling run would
give fewer than ``min_ess`` effective draws of the slowest mode (it then says how many
sampling steps would give them at the chosen step). When plain mini-batches'
noise, at least :data:`NOISY` times the curvature, is why, the verdict says so and estimates
the error SVRG refreshed every :data:`HINT_PERIOD` steps would leave at the chosen step.

**Private parameters** (a potential with ``private=`` leaves, decentralized samplers): ``M``
is block-diagonal between the shared coordinates and the private ones, the same on every agent
as every preconditioner. The shared block is adapted as above from the shared blocks of the
agents' curvature, gradients and positions. The private block is the inverse of the network
sum of the agents' private curvatures: a private coordinate moves at the sampler's step on
``f_i`` while the network average moves at ``η/N`` on ``Σ f_i``, and this sum balances the two.
An agent's private positions and gradients never leave it; its curvature does (the private
block and, dense, its coupling to the shared one; flooded with the rest, bytes counted). The
exact law is then the joint model's, each private block at its conditional optimum (its
gradient is not sent), scored agent by agent on ``(φ, θ_i)`` against the posterior's marginal;
the modal law adds every agent's preconditioned private curvature times ``N`` (the shared mode
of the same speed) to the scalar modes, and the stiffness cap's power iteration runs on the
joint Hessian, summing only the shared coordinates over the network. The restart puts each
private block at its agent's own centre, ``√N`` times wider, and the R-hat check takes the
shared network average and every agent's private coordinates. Centralized SGLD (whose
positions hold the pooled joint vector) and models with no shared parameter are refused.

All the agents' arithmetic on the flooded data is deterministic, so every agent holds the same
``M`` and ``η``; the simulation computes them once. The same ``key`` gives the same result.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .. import evaluate
from ..gradients import SAGA, SVRG, MiniBatch
from ..runner import loop as _loop
from ..samplers import registry as _registry
from ..samplers.base import SamplingAlgorithm
from ..samplers.dula import DULA
from ..samplers.precondition import (
    DensePreconditioner,
    DiagonalPreconditioner,
    LowRankPreconditioner,
)
from ..samplers.sghmc import DESGHMC, DIGingSGHMC
from ..theory.constants import estimate_gradient_covariance
from ..theory.recursions import Quadratic
from . import criterion as _criterion
from . import gossip as _gossip

__all__ = ["WINDOWS", "WarmupReport", "WindowReport", "warmup"]

#: Fractions of the budget per window (the last absorbs rounding).
WINDOWS = (0.05, 0.05, 0.1, 0.15, 0.25, 0.4)
#: The preconditioners ``warmup`` can adapt; ``"auto"`` is dense up to :data:`DENSE_MAX_DIM`
#: parameters, diagonal above.
PRECONDITIONERS = ("auto", "dense", "diagonal", "lowrank", None)
DENSE_MAX_DIM = 200
#: Largest ``N · d`` for which the criterion solves the dense exact law (else scalar modes).
EXACT_MAX_SIZE = 256
#: Steps the budget must give every window at least.
MIN_WINDOW_STEPS = 10
#: Newton steps at most when a first window's divergence sends the starts to the mode.
APPROACH_STEPS = 50
#: The Newton steps' eigenvalue floor relative to the largest: the rounding of float32
#: Hessians, not ``M``'s floor (a Newton step must cross directions that ``M`` may flatten).
NEWTON_FLOOR = 1e-6
#: A centre ``gᵀMg`` above this many times ``d`` is far from the mode (a posterior draw's is
#: about ``d``): the warm-up then checks that its windows can cover the distance.
FAR = 16.0
#: Mini-batch gradients per agent that measure the gradient noise at each adaptation.
NOISE_DRAWS = 256
#: A plain mini-batch noise ratio ``κ`` from which a verdict of too few effective draws names
#: the noise (and what lowers it): at ``κ = 10`` the noise alone widens SGLD's variance by
#: 10 % at a step of 0.02 in ``M``'s coordinates.
NOISY = 10.0
#: Chains whose (point, anchor) pairs measure a control variate's error, averaged.
LAG_PAIRS = 4
#: SVRG's refresh period for which a verdict held down by plain mini-batches' noise estimates
#: the error a control variate would leave.
HINT_PERIOD = 10
#: Second parameters searched: SGHMC's friction, D-ULA's consensus weight.
FRICTIONS = (0.25, 0.5, 1.0, 2.0, 4.0)
CONSENSUS = (0.25, 0.5, 1.0)


class WindowReport(NamedTuple):
    """One warm-up window.

    Attributes:
        steps: its steps (retries included).
        step_size: the step it ran at.
        parameter: SGHMC's friction or D-ULA's consensus weight (``None`` otherwise).
        criterion_step: the criterion's step at its start (before the growth cap).
        diverged: whether a chain diverged (the window then ran again).
    """

    steps: int
    step_size: float
    parameter: float | None
    criterion_step: float
    diverged: bool


class WarmupReport(NamedTuple):
    """What :func:`warmup` chose and why.

    Attributes:
        sampler: the sampler's display name.
        preconditioner: ``"dense"``, ``"diagonal"``, ``"lowrank"`` or ``"none"``.
        step_size: the adapted step (the sampler's own ``step_size``).
        parameter: the adapted friction (SGHMC) or consensus weight (D-ULA), else ``None``.
        law: ``"exact"`` (the dense exact law on the agents' quadratics) or ``"modal"``
            (scalar modes at ``curvature_range`` and ``stiffest``).
        stationary_sd_ratio: the exact law's worst sd ratio (pooled draws over the target;
            1 is exact), at the adapted setting on the Gaussian approximation.
        stationary_mean_error: its worst standardized mean error.
        spectral_radius: its per-step contraction ``ρ``.
        relaxation_steps: ``1 / −log ρ``: steps per e-fold of forgetting the start.
        predicted_ess: effective draws of the slowest mode in ``sampling_steps`` steps over all
            chains, ``chains · sampling_steps / τ``.
        curvature_range: ``(min, max)`` eigenvalue of the pooled preconditioned Hessian (1, 1
            for a perfect ``M``).
        stiffest: the largest eigenvalue of the pooled preconditioned Hessian at any
            curvature point (what capped the step, if ``capped``).
        capped: whether the stiffness cap lowered the criterion's step.
        rhat_max: the largest R-hat of the last window's second half, after the
            over-dispersed restart (the network average, per preconditioned coordinate).
        check_ess: the smallest bulk ESS of those draws (R-hat needs enough of them).
        windows: the :class:`WindowReport` of every window.
        retries: windows run again after a divergence.
        bytes_sent: bytes of the agreements (flooding), over all links.
        rounds: communication rounds of the agreements.
        num_steps: sampler steps spent (the budget).
        budget_ok: ``False`` when the budget was too small (``verdict`` says why).
        verdict: ``"ok"`` or ``"budget too small: ..."``.
        private_coordinates: the private coordinates of one agent's vector (module doc:
            adapted on their agent, never sent); 0 for a fully shared model.
        approach_steps: Newton steps that moved the chains to the mode (module doc); 0 when
            none did.
        approach_reason: why they ran: ``"divergence"`` (the first window diverged),
            ``"reruns"`` (every rerun of a later window diverged), ``"distance"`` (the
            chains' centre was further from the mode than the windows left could cover), or
            ``""``.
        approach_trials: the Newton steps' line-search evaluations of the pooled potential,
            each at every chain's trial point (on all data).
        gradient_noise: ``κ``, the largest ratio of the mini-batch gradient error's variance to
            the curvature over the directions, at the last adaptation (module doc); 0 with
            full batches, an SVRG refreshed on a schedule, or ``gradient_noise=False``.
    """

    sampler: str
    preconditioner: str
    step_size: float
    parameter: float | None
    law: str
    stationary_sd_ratio: float
    stationary_mean_error: float
    spectral_radius: float
    relaxation_steps: float
    predicted_ess: float
    curvature_range: tuple[float, float]
    stiffest: float
    capped: bool
    rhat_max: float
    check_ess: float
    windows: tuple
    retries: int
    bytes_sent: int
    rounds: int
    num_steps: int
    budget_ok: bool
    verdict: str
    private_coordinates: int = 0
    approach_steps: int = 0
    gradient_noise: float = 0.0
    approach_reason: str = ""
    approach_trials: int = 0

    def explain(self) -> str:
        """The choices and the checks, in words."""
        par = "" if self.parameter is None else f", {_parameter_name(self.sampler)} " \
            f"{self.parameter:g}"
        lines = [
            (f"{self.sampler}: step {self.step_size:.4g}{par}, {self.preconditioner} "
            f"preconditioner, after {self.num_steps} warm-up steps in {len(self.windows)} "
            f"windows ({self.retries} rerun after a divergence)."
            + (f" The first window diverged: {self.approach_steps} Newton steps moved the "
               "starts to the mode." if self.approach_reason == "divergence" else "")
            + (f" Every rerun of a window diverged: {self.approach_steps} Newton steps moved "
               "the last good window's chains to the mode." if self.approach_reason == "reruns"
               else "")
            + (f" The chains were further from the mode than the windows left could cover: "
               f"{self.approach_steps} Newton steps moved them there."
               if self.approach_reason == "distance" else "")),
            (f"Step criterion ({self.law} stationary law on the preconditioned Gaussian "
            f"approximation): worst sd ratio {self.stationary_sd_ratio:.3f}, worst mean error "
            f"{self.stationary_mean_error:.3g} sd, contraction {self.spectral_radius:.5f} per "
            f"step ({self.relaxation_steps:.3g} steps per e-fold), predicted ESS "
            f"{self.predicted_ess:.0f}."),
            f"Preconditioned curvature: {self.curvature_range[0]:.3g} .. "
            f"{self.curvature_range[1]:.3g}; stiffest met {self.stiffest:.3g}"
            + (" (capped the step)." if self.capped else "."),
            *([f"Mini-batch gradient noise: variance up to {self.gradient_noise:.3g} times the "
               "curvature (in the criterion's law; it widens the stationary variance by about "
               f"{1 + self.step_size * self.gradient_noise / 2:.3g} for SGLD at this step)."]
              if self.gradient_noise else []),
            (f"Over-dispersed restart: largest R-hat {self.rhat_max:.3f} (ESS of the check "
            f"{self.check_ess:.0f})."),
            f"Agreement by flooding: {self.rounds} rounds, {self.bytes_sent / 1e6:.3f} MB"
            + (f" ({self.private_coordinates} private coordinates per agent: their "
               "curvature was sent, never their values or gradients)."
               if self.private_coordinates else "."),
            f"Verdict: {self.verdict}.",
        ]
        return "\n".join(lines)


def _parameter_name(name: str) -> str:
    return "consensus weight" if name == DULA.name else "friction"


# ------------------------------------------------------------------ the sampler family


class _Family(NamedTuple):
    """How to build the sampler at ``(η, parameter, M)``: from a class or an instance."""

    template: Any          # the class, or the user's instance
    cls: type
    estimator: Any

    @property
    def estimator_in_use(self):
        """The estimator the built sampler draws its gradients with (``None``: the
        potential's own mini-batches)."""
        if isinstance(self.template, type):
            return self.estimator
        return getattr(self.template, "estimator", None)

    @property
    def parameters(self) -> tuple:
        if issubclass(self.cls, (DESGHMC, DIGingSGHMC)):
            return FRICTIONS
        if issubclass(self.cls, DULA):
            return CONSENSUS
        return (None,)

    def build(self, eta: float, parameter=None, preconditioner=None, law: bool = False):
        """The sampler at a constant ``eta``; ``law=True``: without channel, estimator and
        preconditioner (what the exact laws take)."""
        eta = float(eta)
        if isinstance(self.template, type):
            args = (eta,) if parameter is None else (eta, float(parameter))
            kw = {} if law or self.estimator is None else {"estimator": self.estimator}
            return self.cls(*args, **kw, preconditioner=None if law else preconditioner)
        out = eqx.tree_at(lambda s: s.step_size, self.template, jnp.asarray(eta, jnp.float32))
        if parameter is not None:
            field = "consensus" if issubclass(self.cls, DULA) else "friction"
            out = eqx.tree_at(lambda s: getattr(s, field), out,
                              jnp.asarray(float(parameter), jnp.float32))
        if law:
            if getattr(out, "channel", None) is not None:
                out = eqx.tree_at(lambda s: s.channel, out, None, is_leaf=lambda x: x is None)
            return eqx.tree_at(lambda s: s.preconditioner, out, None,
                               is_leaf=lambda x: x is None)
        return eqx.tree_at(lambda s: s.preconditioner, out, preconditioner,
                           is_leaf=lambda x: x is None)


def _plain_minibatch(estimator, potential) -> bool:
    """Whether a sampler with ``estimator`` draws ``potential``'s own mini-batch gradients (no
    control variate: SVRG's and SAGA's error shrinks near their anchor) and they carry an error
    (a batch size or a ``gradient_fn``), which :func:`estimate_gradient_covariance`
    measures."""
    return (estimator is None or isinstance(estimator, MiniBatch)) and (
        potential.batch_size is not None or potential.gradient_fn is not None)


def _anchor_age(estimator, potential) -> float | None:
    """The mean age in steps of a control variate's anchor (SVRG: half its refresh period; SAGA:
    a datum's table entry is refreshed when a mini-batch draws it, every ``n_i / b`` steps on
    average), whose error :func:`estimate_gradient_covariance` measures around a point that
    many steps back; ``None`` for other estimators, or without mini-batches to measure."""
    if potential.batch_size is None or potential.log_likelihood is None:
        return None
    if isinstance(estimator, SVRG) and not callable(estimator.update_every):
        return max(1.0, estimator.update_every / 2.0)
    if isinstance(estimator, SAGA):
        sizes = potential.local_size if potential.counts is None else float(
            np.max(np.asarray(potential.counts)))
        return max(1.0, sizes / potential.batch_size)
    return None


def _family(sampler, estimator) -> _Family:
    cls = sampler if isinstance(sampler, type) else type(sampler)
    if not (isinstance(cls, type) and issubclass(cls, SamplingAlgorithm)
            and any(issubclass(cls, c) for c in _registry.ALL)):
        raise ValueError(f"`sampler` must be a sampler class of dgsgld.samplers.ALL or an "
                         f"instance of one; got {sampler!r}.")
    if estimator is not None and not isinstance(sampler, type):
        raise ValueError("`estimator` is for a sampler class; an instance keeps its own.")
    return _Family(sampler, cls, estimator)


# ------------------------------------------------------------------ flat parameters


class _Flat(NamedTuple):
    """Positions as flat ``(..., d)`` arrays and back; ``lead`` axes before the parameters
    (2: chains and agents; 1: chains, for centralized SGLD)."""

    unravel: Any
    static: Any
    lead: int
    dim: int

    def flatten(self, tree, lead: int | None = None) -> np.ndarray:
        arrays = eqx.filter(tree, eqx.is_array)
        fn = lambda t: ravel_pytree(t)[0]
        for _ in range(self.lead if lead is None else lead):
            fn = jax.vmap(fn)
        return np.asarray(fn(arrays), np.float64)

    def tree(self, flat, lead: int | None = None):
        fn = self.unravel
        for _ in range(self.lead if lead is None else lead):
            fn = jax.vmap(fn)
        return eqx.combine(fn(jnp.asarray(flat, jnp.float32)), self.static)


def _flat(init, decentralized: bool) -> _Flat:
    arrays, static = eqx.partition(init, eqx.is_array)
    leaves = jax.tree.leaves(arrays)
    lead = 2 if decentralized else 1
    if not leaves or any(np.ndim(leaf) < lead for leaf in leaves):
        shapes = [np.shape(leaf) for leaf in leaves]
        lead_axes = "num_chains, N" if decentralized else "num_chains"
        raise ValueError(f"`init` must have array leaves ({lead_axes}, *param_shape); got "
                         f"leaves shaped {shapes}.")
    one = jax.tree.map(lambda x: x[(0,) * lead], arrays)
    flat, unravel = ravel_pytree(one)
    return _Flat(unravel, static, lead, int(flat.size))


def _private_coordinates(potential, init, lead: int) -> np.ndarray | None:
    """``(d,)`` bools, ``True`` at the private coordinates of one agent's flat vector (leaf
    order, as :class:`_Flat`), or ``None`` when no leaf is private."""
    if getattr(potential, "private", None) is None:
        return None
    one = jax.tree.map(lambda x: x[(0,) * lead] if eqx.is_array(x) else x, init)
    mask = potential.private_mask(one)
    if mask is None:
        return None
    flags = [np.full(int(np.size(x)), bool(m)) for x, m in
             zip(jax.tree.leaves(one), jax.tree.leaves(mask)) if eqx.is_array(x)]
    out = np.concatenate(flags)
    return out if out.any() else None


# ------------------------------------------------------------------ local curvature


class _AgentGrads(eqx.Module):
    """``x (N, d) -> ∇f_i(x_i) (N, d)`` on flat parameters (full local batches). A module
    with the parameters' layout as static fields: the same model gives the same compiled
    curvature computations, call after call."""

    potential: Any
    treedef: Any = eqx.field(static=True)
    shapes: tuple = eqx.field(static=True)
    static: Any = eqx.field(static=True)
    indices: Any = None     # (N, m) data of each agent's subsample; None: its full data

    def arrays(self, vector):
        leaves, start = [], 0
        for shape, dtype in self.shapes:
            size = int(np.prod(shape, dtype=np.int64))
            leaves.append(vector[start:start + size].reshape(shape).astype(dtype))
            start += size
        return jax.tree.unflatten(self.treedef, leaves)

    def _trees(self, x):
        """Flat vectors ``(N, d)`` as the agents' parameter trees (static leaves put back)."""
        return eqx.combine(jax.vmap(self.arrays)(x), self.static)

    def __call__(self, x):
        tree = self._trees(x)
        g = (self.potential.full_grad(tree) if self.indices is None
             else self.potential.subsample_grad(tree, self.indices))
        g = eqx.filter(g, eqx.is_array)
        return jax.vmap(lambda t: ravel_pytree(t)[0])(g).astype(x.dtype)

    def _params(self, vector):
        return eqx.combine(self.arrays(vector), self.static)

    def values(self, x):
        """``x (N, d) -> f_i(x_i) (N,)`` on each agent's full local data."""
        return self.potential.agent_values(self._trees(x))

    def prior_grads(self, x):
        """``x (N, d) -> ∇(prior terms of f_i)(x_i) (N, d)`` (zeros without a prior)."""
        if not self.potential.has_prior:
            return jnp.zeros_like(x)
        one = jax.grad(lambda v: self.potential._prior_term(self._params(v)).astype(v.dtype))
        return jax.vmap(one)(x)

    def squared_grads(self, x):
        """``x (N, d) -> Σ_n w_n (∇ log p(d_n | x_i))² (N, d)``: each agent's sum over its
        data of the per-datum squared log-likelihood gradients (``w`` the data mask)."""
        pot = self.potential
        data = jax.tree.leaves(pot.data)[0]
        weights = (jnp.ones(data.shape[:2], x.dtype) if pot.mask is None
                   else pot.mask.astype(x.dtype))

        def agent(v, agent_data, w):
            per = jax.vmap(jax.grad(lambda u, datum: pot.log_likelihood(self._params(u), datum)
                                    .astype(u.dtype)), in_axes=(None, 0))(v, agent_data)
            return w @ per**2
        return jax.vmap(agent)(x, pot.data, weights)


def _agent_grads(potential, init, lead: int) -> _AgentGrads:
    arrays, static = eqx.partition(init, eqx.is_array)
    leaves, treedef = jax.tree.flatten(jax.tree.map(lambda x: x[(0,) * lead], arrays))
    shapes = tuple((tuple(np.shape(leaf)), jnp.result_type(leaf)) for leaf in leaves)
    return _AgentGrads(potential, treedef, shapes, static)


@eqx.filter_jit
def _dense_curvature(grads, xs):
    """Hessians ``(P, N, d, d)`` and gradients ``(P, N, d)`` at points ``xs (P, N, d)``."""
    d = xs.shape[-1]

    def at(x):
        cols = jax.vmap(lambda e: jax.jvp(grads, (x,), (jnp.broadcast_to(e, x.shape),))[1])(
            jnp.eye(d, dtype=x.dtype))                    # (d, N, d): column j of each H_i
        return jnp.moveaxis(cols, 0, -1), grads(x)
    return jax.lax.map(at, xs)


#: The diagonal curvature estimates ``warmup(curvature=...)`` offers.
CURVATURES = ("hutchinson", "fisher")


@eqx.filter_jit
def _diagonal_curvature(grads, xs, key, probes: int, curvature: str = "hutchinson"):
    """Diagonal curvature of every agent's ``f_i`` at points ``xs (P, N, d)``: ``(diag, prior,
    gradients)``, each ``(P, N, d)``.

    ``diag``: ``"hutchinson"``, the Hutchinson estimate ``E[z ⊙ H_i z]`` (Rademacher ``z``,
    ``probes`` of them) of the Hessian's diagonal; ``"fisher"``, the empirical Fisher diagonal
    (the per-datum squared log-likelihood gradients summed over the agent's data) plus the prior
    terms' Hutchinson diagonal, positive by construction. ``prior``: the prior terms' Hutchinson
    diagonal (exact for a prior with a diagonal Hessian), the lower bound of :func:`_floor`."""
    def at(args):
        x, k = args

        def one(kk):
            z = jax.random.rademacher(kk, x.shape, dtype=x.dtype)
            hz = jax.jvp(grads, (x,), (z,))[1] if curvature == "hutchinson" else 0.0
            return z * hz, z * jax.jvp(grads.prior_grads, (x,), (z,))[1]
        diag, prior = jax.tree.map(lambda a: jnp.mean(a, axis=0),
                                   jax.lax.map(one, jax.random.split(k, probes)))
        if curvature == "fisher":
            diag = grads.squared_grads(x) + prior
        return diag, prior, grads(x)
    return jax.lax.map(at, (xs, jax.random.split(key, xs.shape[0])))


@eqx.filter_jit
def _pooled_top(grads, xs, scale, key, iterations: int, private=None):
    """Largest eigenvalue of ``Sᵀ (Σ_i ∇²f_i(x_i)) S`` at every point ``xs (P, N, d)`` by power
    iteration, ``S = scale`` a ``(d, d)`` matrix or ``(d,)`` diagonal: each iteration one
    Hessian-vector product per agent and one network sum.

    With ``private`` (``(d,)`` bools) the operator is the joint Hessian of ``Σ_i f_i(φ, θ_i)``
    with the private blocks scaled by ``N`` (a private coordinate moves at ``N`` times the
    network average's step): the iterate holds one ``φ`` and every agent's own ``θ_i``, and only
    the shared coordinates of the agents' products are summed over the network.

    Returns ``(values (P,), vectors)``: the eigenvalues and the last iterates, ``(P, d)``
    (``(P, N, d)`` with ``private``)."""
    def mul(v):  # S v (rows of v: agents)
        if scale.ndim == 1:
            return jnp.broadcast_to(scale, v.shape) * v
        return scale @ v if v.ndim == 1 else v @ scale.T

    def mul_t(v):  # Sᵀ v
        if scale.ndim == 1:
            return jnp.broadcast_to(scale, v.shape) * v
        return scale.T @ v if v.ndim == 1 else v @ scale

    if private is None:
        def at(args):
            x, k = args

            def hvp(v):
                t = jnp.broadcast_to(mul(v), x.shape)
                return mul_t(jnp.sum(jax.jvp(grads, (x,), (t,))[1], axis=0))

            v = jax.random.normal(k, x.shape[-1:], x.dtype)
            v = v / jnp.linalg.norm(v)
            v = jax.lax.fori_loop(
                0, iterations,
                lambda _, v: (w := hvp(v)) / jnp.maximum(jnp.linalg.norm(w), 1e-30), v)
            return v @ hvp(v), v
        return jax.lax.map(at, (xs, jax.random.split(key, xs.shape[0])))

    N = xs.shape[1]
    private = jnp.broadcast_to(private, xs.shape[1:])                    # (N, d)
    root_n = jnp.where(private, jnp.sqrt(jnp.asarray(N, xs.dtype)), 1.0)

    def joint(v):  # one φ (agent 0's row) and every θ_i
        return jnp.where(private, v, jnp.broadcast_to(v[:1], v.shape))

    def inner(v, w):  # the joint vectors' inner product: φ once, every θ_i
        return jnp.sum(jnp.where(private, v * w, 0.0)) + jnp.sum(
            jnp.where(private[0], 0.0, v[0] * w[0]))

    def at(args):
        x, k = args

        def hvp(v):
            out = jax.jvp(grads, (x,), (mul(root_n * v),))[1]
            total = jnp.broadcast_to(jnp.sum(out, axis=0, keepdims=True), out.shape)
            return root_n * mul_t(jnp.where(private, out, total))

        def normalized(v):
            return v / jnp.maximum(jnp.sqrt(inner(v, v)), 1e-30)

        v = normalized(joint(jax.random.normal(k, x.shape, x.dtype)))
        v = jax.lax.fori_loop(0, iterations, lambda _, v: normalized(hvp(v)), v)
        return inner(v, hvp(v)), v
    return jax.lax.map(at, (xs, jax.random.split(key, xs.shape[0])))


class _Adaptation(NamedTuple):
    kind: str                      # "dense", "diagonal", "lowrank" or "identity" (M = I)
    M: np.ndarray                  # (d, d) dense or (d,) diagonal of the base part
    factor: np.ndarray | None      # (d, k) low-rank widening U, or None
    shift: np.ndarray              # (d,) agreed centre c; (N, d) with private coordinates
    step: float
    parameter: float | None
    errors: Any
    errors_at: Any                 # (eta, parameter) -> Errors
    law: str
    curvature_range: tuple
    stiffest: float
    capped: bool
    cost: _gossip.GossipCost
    noise_ratio: float = 0.0       # κ: the gradient error's variance over the curvature
    distance: float = 0.0          # gᵀ M g of the pooled gradient at the agents' centres

    def preconditioner(self):
        if self.kind == "identity":
            return None
        if self.kind == "dense":
            return DensePreconditioner(self.M)
        if self.kind == "lowrank" and self.factor is not None and self.factor.shape[1]:
            return LowRankPreconditioner(self.M, self.factor)
        return DiagonalPreconditioner(self.M)

    def root(self) -> np.ndarray:
        """``S`` with ``S Sᵀ = M``: ``(d, d)`` (dense, low-rank) or ``(d,)``."""
        if self.M.ndim == 2:
            return np.linalg.cholesky(self.M)
        if self.kind == "lowrank" and self.factor is not None and self.factor.shape[1]:
            return np.asarray(self.preconditioner().dense(np)[1], np.float64)
        return np.sqrt(self.M)


def _floor(lam: np.ndarray, rel: float = 1e-4, absolute: float = 1e-8,
           lower: np.ndarray | None = None) -> np.ndarray:
    """``max(|λ|, lower, floor)``: a curvature estimate made positive definite; ``lower``
    (diagonal estimates) the prior's curvature, below which a posterior whose likelihood is
    log-concave cannot curve, and which a noisy estimate of a flat direction must not
    undercut (its ``M`` entry would exceed the prior variance)."""
    out = np.maximum(np.abs(lam), max(absolute, rel * float(np.max(np.abs(lam)))))
    return out if lower is None else np.maximum(out, lower)


def _widen(D: np.ndarray, draws: np.ndarray, shift: np.ndarray, rank: int,
           mixing) -> tuple[np.ndarray, _gossip.GossipCost]:
    """The low-rank widening ``U (d, k)`` of ``diag(D)`` from the window's draws
    ``(C, T, N, d)``: each agent sketches its draws' covariance in ``D``-whitened coordinates by
    its top ``rank`` eigenpairs (``B_i = V_i √e_i``), the sketches are flooded, and every agent
    takes the top ``rank`` eigenpairs ``(e, V)`` of ``Σ_i B_i B_iᵀ / N``; directions with
    ``e`` above the Marchenko–Pastur edge ``(1 + √(d / n))²`` of ``n`` draws are widened to
    ``e`` (``U = D^{1/2} V √(e − 1)``), never narrowed."""
    C, T, N, d = draws.shape
    z = (draws - shift) / np.sqrt(D)
    z = z - z.mean(axis=1, keepdims=True)  # within-chain: unmixed chains add nothing
    k = min(rank, d)
    sketches = []
    for i in range(N):
        zi = z[:, :, i].reshape(-1, d)
        _, s, vt = np.linalg.svd(zi, full_matrices=False)
        e = s[:k] ** 2 / max(zi.shape[0] - C, 1)
        sketches.append(vt[:k].T * np.sqrt(e))
    cost = _gossip.all_gather(np.full(N, d * k), mixing) if mixing is not None else \
        _gossip.GossipCost(0, 0)
    B = np.concatenate(sketches, axis=1) / math.sqrt(N)
    V, s, _ = np.linalg.svd(B, full_matrices=False)
    e = s[:k] ** 2
    edge = (1.0 + math.sqrt(d / max(C * (T - 1), 1))) ** 2
    keep = e > edge
    U = np.sqrt(D)[:, None] * V[:, :k][:, keep] * np.sqrt(e[keep] / edge - 1.0)
    return U, cost


def _whitened(V: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``Sᵀ V_i S (N, d, d)`` of covariances ``V (N, d, d)`` or variances ``V (N, d)``, with
    ``S`` dense ``(d, d)``."""
    if V.ndim == 2:
        V = np.einsum("ia,ab->iab", V, np.eye(V.shape[1]))
    return np.einsum("ab,iac,cd->ibd", S, V, S)


def _noise_ratio(V: np.ndarray, clipped: np.ndarray, dense: bool) -> float:
    """``κ``: the largest generalized eigenvalue of (pooled gradient-error covariance, pooled
    curvature), invariant to the preconditioner; for diagonals the largest ratio of their
    entries."""
    if not dense:
        return float(np.max(V / clipped))
    L = np.linalg.cholesky(clipped)
    K = np.linalg.solve(L, np.linalg.solve(L, V).T)
    return float(np.linalg.eigvalsh(0.5 * (K + K.T))[-1])


def _modes(kind: str, curvature_range) -> list:
    """The scalar modes of the modal law: the preconditioned curvature's extremes and 1 (what a
    perfect ``M`` gives); without a preconditioner the stiffest alone (its bias sets the step,
    and a flat mode's law at the small steps it allows is numerically singular)."""
    if kind == "identity":
        return [curvature_range[1]]
    return sorted({max(curvature_range[0], 1e-6), 1.0, curvature_range[1]})


def _dense(kind: str, d: int) -> bool:
    """Whether curvature is measured as dense Hessians (else Hutchinson diagonals): a dense
    ``M``, or none (``"identity"``) up to :data:`DENSE_MAX_DIM` parameters."""
    return kind == "dense" or (kind == "identity" and d <= DENSE_MAX_DIM)


def _inverse_curvature(pooled: np.ndarray, dense: bool, kind: str, lower=None):
    """``(M, clipped)``: a pooled curvature made positive definite (``clipped``; a diagonal one
    at least ``lower``) and its inverse (the identity for ``kind == "identity"``)."""
    if dense:
        lam, Q = np.linalg.eigh(pooled)
        clipped = (Q * _floor(lam)) @ Q.T
        M = np.eye(len(pooled)) if kind == "identity" else np.linalg.inv(clipped)
        return 0.5 * (M + M.T), clipped
    clipped = _floor(pooled, lower=lower)
    return (np.ones(len(pooled)) if kind == "identity" else 1.0 / clipped), clipped


def _joint_quadratic(A, A_s, g, p, shift, S, sh, pr) -> Quadratic | None:
    """The agents' quadratics over shared and private coordinates in ``y = S⁻¹(x − c_i)``
    (``c_i = shift[i]``: the agreed shared centre, the agent's own private one), centred at the
    joint minimizer, or ``None`` when they are not jointly positive definite. ``A (N, d, d)``
    the measured Hessians, ``A_s`` their shared blocks as floored; each private block is
    floored on its own. A private gradient never leaves its agent: each private block is taken
    at its conditional optimum (its gradient 0 at the centre)."""
    N, d = p.shape
    A = np.array(A)
    A[:, sh[:, None], sh[None, :]] = A_s
    for i in range(N):
        lam, Q = np.linalg.eigh(A[i][np.ix_(pr, pr)])
        A[i][np.ix_(pr, pr)] = (Q * _floor(lam)) @ Q.T
    g = np.array(g)
    g[:, pr] = 0.0
    b = np.einsum("iab,ib->ia", A, p - shift) - g
    Ay, by = np.einsum("ab,iac,cd->ibd", S, A, S), b @ S
    mask = np.zeros(d, bool)
    mask[pr] = True
    q = Quadratic(Ay, by, tuple(bool(m) for m in mask))
    J = q.joint(np)[0]
    if np.linalg.eigvalsh(0.5 * (J + J.T))[0] <= 0:
        return None
    centre = np.einsum("iad,d->ia", q.embedding(), q.minimizer())
    return q._replace(shifts=by - np.einsum("iab,ib->ia", Ay, centre))


def _normal_anchors(points: np.ndarray, key, blocks, dense: bool) -> np.ndarray:
    """Anchors around ``points (P, N, d)``: ``points + δ``, ``δ`` normal with covariance
    ``C⁻¹`` on each block ``(coordinates, agent, C)`` of ``blocks`` (``agent`` ``None``: every
    agent; ``C`` a curvature, ``(k, k)`` dense or ``(k,)`` diagonal): one posterior sd away
    where ``C`` is the posterior's curvature."""
    z = np.asarray(jax.random.normal(key, points.shape), np.float64)
    delta = np.zeros_like(z)
    for coords, agent, C in blocks:
        rows = slice(None) if agent is None else agent
        zb = z[:, rows][..., coords]
        delta[:, rows, coords] = (zb @ np.linalg.cholesky(np.linalg.inv(C)).T if dense
                                  else zb / np.sqrt(C))
    return points + delta


def _noise_reach(mixing, age: float) -> float:
    """How far the Langevin noise of ``age`` steps moves an agent, in units of one step's
    ``2η`` per coordinate: ``Σ_{k < age} max_i ‖row_i(W⁽ᵏ⁾ ⋯ W⁽¹⁾)‖²`` (the noise injected
    ``k`` steps back has been mixed ``k`` times), at most ``age`` (no mixing: ``mixing``
    ``None``, or a schedule without stored matrices). An estimate of an anchor's distance
    while ``age`` is shorter than the chains' relaxation: the drift's pull and the gradient
    error's own steps move the chain somewhat further."""
    if mixing is None:
        return float(age)
    try:
        stack = _gossip.mixing_stack(mixing)
    except (ValueError, TypeError):
        return float(age)
    whole = math.floor(age)
    part = age - whole
    product, reach = np.eye(stack.shape[1]), 0.0
    for k in range(whole + (part > 0)):
        share = float(np.max(np.sum(product**2, axis=1)))
        reach += share if k < whole else part * share
        product = stack[k % len(stack)] @ product
    return reach


def _svrg_hint(grads, ad: _Adaptation, eta: float, mixing, points, key, dense: bool):
    """The noise ratio SVRG refreshed every :data:`HINT_PERIOD` steps would leave at step
    ``eta`` under ``ad``'s ``M``: its error around anchors as far as the Langevin noise moves
    an agent in the anchor's mean age (normal, covariance ``2η · reach · M``,
    :func:`_noise_reach`), over the pooled curvature ``M⁻¹``, at ``points (P, N, d)``.
    ``None`` where ``M`` is not the pooled curvature's inverse (no preconditioner)."""
    if ad.kind == "identity":
        return None
    spread = 2.0 * eta * _noise_reach(mixing, HINT_PERIOD / 2.0)
    curvature = np.linalg.inv(ad.M) if dense else 1.0 / ad.M
    anchors = _normal_anchors(points, key, [(np.arange(points.shape[-1]), None,
                                             curvature / spread)], dense)
    V = _anchored_noise(grads, points, anchors, key, NOISE_DRAWS, dense)
    return _noise_ratio(V.sum(0), curvature, dense)


def _anchored_noise(grads, points, anchors, key, num_draws: int, dense: bool,
                    directions=None) -> np.ndarray:
    """A control variate's gradient-error covariances ``(N, d[, d])`` (``(N, k, k)`` along
    ``directions (d, k)``), averaged over the pairs of ``points`` and ``anchors``
    (``(pairs, N, d)`` each), the same mini-batch at both points of a pair
    (:func:`estimate_gradient_covariance` with ``anchor``)."""
    return np.mean([estimate_gradient_covariance(
        grads.potential, grads._trees(jnp.asarray(point, jnp.float32)),
        jax.random.fold_in(jax.random.fold_in(key, 2), c), num_draws=num_draws,
        diagonal=not dense, anchor=grads._trees(jnp.asarray(anchor, jnp.float32)),
        directions=directions)
        for c, (point, anchor) in enumerate(zip(points, anchors))], axis=0)


def _adapt(family: _Family, grads, mixing, xs, draws, *, kind: str, key, probes: int, rank: int,
           tol_sd: float, tol_mean: float, num_draws: float, start: int,
           final: bool = True, private: np.ndarray | None = None,
           curvature_batch: int | None = None, curvature: str = "hutchinson",
           prior_floor: bool = True, stiff_tol_sd: float = 0.5,
           noise_draws: int = 0, noise_lag: int | None = None) -> _Adaptation:
    """One adaptation from the agents' points ``xs (P, N, d)`` (and the window's draws
    ``(C, T, N, d)`` for the low-rank widening); ``private``: ``(d,)`` bools of the private
    coordinates (module doc), or ``None``; ``noise_draws``: mini-batch gradients per agent
    that measure the gradient noise at its centre (0: exact gradients, or not measured);
    ``noise_lag``: measure a control variate's error instead, at the last kept draws of up
    to :data:`LAG_PAIRS` chains around their draws ``noise_lag`` kept draws earlier as
    anchors (averaged); without a usable pair (no ``draws``: chains just moved to the mode; or
    a window that kept one draw) at up to as many of ``xs`` around anchors one posterior sd
    away (module doc)."""
    P, N, d = xs.shape
    decentralized = family.cls.decentralized
    x = jnp.asarray(xs, jnp.float32)
    k_curv, k_top = jax.random.split(key)
    full = grads
    if curvature_batch is not None:  # one subsample per agent for every point of this window
        indices = grads.potential.subsample_indices(jax.random.fold_in(key, 1), curvature_batch)
        grads = eqx.tree_at(lambda g: g.indices, grads, indices, is_leaf=lambda v: v is None)
    dense = _dense(kind, d)
    if dense:
        H, g = _dense_curvature(grads, x)
        H = np.asarray(H, np.float64)
        H = 0.5 * (H + np.swapaxes(H, -1, -2))
    else:
        H, prior, g = _diagonal_curvature(grads, x, k_curv, probes, curvature)
        H, prior = np.asarray(H, np.float64), np.asarray(prior, np.float64)
    g = np.asarray(g, np.float64)
    finite = np.isfinite(H.reshape(P, -1)).all(1) & np.isfinite(g.reshape(P, -1)).all(1)
    if not finite.any():
        raise RuntimeError("the curvature is not finite at any of the chains' positions.")
    H, g, pts = H[finite], g[finite], np.asarray(xs, np.float64)[finite]
    A, gbar, p = H.mean(0), g.mean(0), pts.mean(0)          # (N, d[, d]), (N, d), (N, d)
    A_all, g_all, p_all = A, gbar, p
    V = None
    if noise_draws and noise_lag is None:  # each agent's mini-batch error at its centre
        V = estimate_gradient_covariance(
            grads.potential, grads._trees(jnp.asarray(p, jnp.float32)),
            jax.random.fold_in(key, 2), num_draws=noise_draws, diagonal=not dense)
    elif noise_draws and draws is not None:  # a control variate's error, (N, d[, d])
        lag = min(int(noise_lag), draws.shape[1] - 1)
        chains = np.arange(min(LAG_PAIRS, draws.shape[0]))
        points, anchors = draws[chains, -1], draws[chains, -1 - lag]   # (pairs, N, d) each
        if lag >= 1 and np.all(np.isfinite(points)) and np.all(np.isfinite(anchors)):
            V = _anchored_noise(grads, points, anchors, key, noise_draws, dense)
    # Shared coordinates `sh` (all of them without private ones) and private ones `pr`.
    sh = np.arange(d) if private is None else np.flatnonzero(~private)
    pr = np.arange(0) if private is None else np.flatnonzero(private)
    ds = sh.size
    A_s = A[:, sh][:, :, sh] if dense else A[:, sh]
    pooled = A_s.sum(0)
    # The prior's curvature floors a diagonal estimate (no M entry above the prior variance).
    lower = None if dense or not prior_floor else prior[finite].mean(0).sum(0)
    M, clipped = _inverse_curvature(pooled, dense, kind,
                                    None if lower is None else lower[sh])
    A_s = A_s + ((clipped - pooled) / N)[None]               # the floor shared evenly
    if V is None and noise_draws and noise_lag is not None:
        # A control variate with no usable (point, anchor) pairs (the chains were just moved
        # to the mode, or the window kept one draw): its error around anchors one posterior
        # sd away, as far as an anchor as old as the chains' relaxation: an upper bound for
        # the younger ones the sampler will hold. A private block's sd is its agent's own
        # (its curvature's inverse).
        points = np.asarray(xs, np.float64)[:LAG_PAIRS]
        blocks = [(sh, None, clipped)] + [
            (pr, i, _inverse_curvature(A[i][np.ix_(pr, pr)] if dense else A[i, pr], dense,
                                       kind)[1]) for i in range(N if pr.size else 0)]
        anchors = _normal_anchors(points, jax.random.fold_in(key, 3), blocks, dense)
        V = _anchored_noise(grads, points, anchors, key, noise_draws, dense)
    noise_ratio = 0.0
    if V is not None:
        V_s = V[:, sh][:, :, sh] if dense else V[:, sh]
        noise_ratio = _noise_ratio(V_s.sum(0), clipped, dense)
        for i in range(N if pr.size else 0):  # a private block: its agent's own ratio
            A_p = A[i][np.ix_(pr, pr)] if dense else A[i, pr]
            V_p = V[i][np.ix_(pr, pr)] if dense else V[i, pr]
            floored = _inverse_curvature(A_p, dense, kind)[1]
            noise_ratio = max(noise_ratio, _noise_ratio(V_p, floored, dense))
    c = p[:, sh].mean(0)
    shift = c
    # How far the chains' centre is from the quadratic's mode, in M's metric: the pooled
    # gradient there (each agent's at its own centre; on all its data, not the curvature's
    # subsample, whose error alone would look far) against the pooled curvature.
    g_c = (gbar if curvature_batch is None else np.asarray(
        _gradients_at(full, jnp.asarray(p[None], jnp.float32))[0], np.float64))[:, sh].sum(0)
    distance = float(g_c @ M @ g_c) if dense else float(g_c @ (M * g_c))
    tri = ds * (ds + 1) // 2 if dense else ds
    flood_points = dense and private is None
    # Flooded: every agent's shared (A_i, g_i, p_i) and, dense, its Hessians at the points (for
    # the stiffness cap); diagonal (and with private coordinates): the cap's power iterations
    # are network sums of shared d-vectors. Private coordinates add their curvature: the
    # private block (and, dense, its coupling to the shared one).
    dp = pr.size
    extra = (dp * (dp + 1) // 2 + ds * dp if dense else dp) if dp else 0
    cost = _gossip.GossipCost(0, 0)
    if decentralized:  # the gradient-error covariances, when measured, as the curvatures
        cost = _gossip.all_gather(np.full(N, tri + 2 * ds + extra + (
            len(H) * tri if flood_points else 0) + (0 if V is None else tri + extra) + (
            0 if curvature_batch is None else ds)), mixing, start)
    if pr.size:
        # The private blocks: one M_pp for every agent, the inverse of the network sum of the
        # agents' private curvatures (each moves at N times the network average's step, so
        # this balances the two); their positions and gradients never leave the agent.
        A_p = A[:, pr][:, :, pr] if dense else A[:, pr]
        M_p, _ = _inverse_curvature(A_p.sum(0), dense, kind,
                                    None if lower is None else lower[pr])
        full = np.zeros((d, d) if dense else d)
        if dense:
            full[np.ix_(sh, sh)], full[np.ix_(pr, pr)] = M, M_p
        else:
            full[sh], full[pr] = M, M_p
        M = full
        shift = np.empty((N, d))
        shift[:, sh], shift[:, pr] = c, p[:, pr]
    factor = None
    if kind == "lowrank":
        factor = np.zeros((d, 0))
        if draws is not None:
            U, more = _widen(M[sh], draws[..., sh], c, rank, mixing if decentralized else None)
            factor = np.zeros((d, U.shape[1]))
            factor[sh] = U
            cost = cost + more
    adaptation = _Adaptation(kind, M, factor, shift, 0.0, None, None, None, "", (1.0, 1.0), 0.0,
                             False, cost)
    S_full = adaptation.root()
    S = S_full[np.ix_(sh, sh)] if S_full.ndim == 2 else S_full[sh]
    A, p, gbar = A_s, p[:, sh], gbar[:, sh]
    # The local quadratics of the shared coordinates in y = S⁻¹(x − c):
    # A_i' = Sᵀ A_i S, b_i' = Sᵀ (A_i p_i − g_i − A_i c) (a private block sits at its agent's
    # own centre, so it adds nothing to b_i').
    if S.ndim == 2:
        b = np.einsum("iab,ib->ia", A, p - c) - gbar if A.ndim == 3 else A * (p - c) - gbar
        Ay = (np.einsum("ab,iac,cd->ibd", S, A, S) if A.ndim == 3
              else np.einsum("ab,ia,ad->ibd", S, A, S))
        by = b @ S
        # The criterion is translation invariant: centre the y-coordinates at the quadratic's
        # minimizer, so that chains still far from the mode leave no large offset for the
        # nearly singular (I − Φ) of a small step to amplify.
        centre = np.linalg.solve(Ay.sum(0), by.sum(0))
        by = by - np.einsum("iab,b->ia", Ay, centre)
        spectrum = np.linalg.eigvalsh(Ay.sum(0))
    else:
        b = A * (p - c) - gbar
        Ay, by = None, b * S
        spectrum = (A * S**2).sum(0)
    private_modes = []
    if pr.size:
        # Each agent's private curvature in the preconditioned coordinates, times N: the shared
        # mode of the same speed (the network average moves at η/N, a private block at η).
        S_p = S_full[np.ix_(pr, pr)] if S_full.ndim == 2 else S_full[pr]
        if dense:
            Ap = np.einsum("ab,iac,cd->ibd", S_p, A_p, S_p)
            lam = np.linalg.eigvalsh(0.5 * (Ap + np.swapaxes(Ap, -1, -2)))
        else:
            lam = A_p * S_p**2
        lam = _floor(N * lam.ravel())
        private_modes = sorted({float(lam.min()), float(lam.max())})
        spectrum = np.concatenate([spectrum, lam])
    curvature_range = (float(spectrum.min()), float(spectrum.max()))
    # The stiffest curvature met: the pooled preconditioned Hessian's top eigenvalue per point.
    if flood_points:
        Hy = np.einsum("ab,pnac,cd->pnbd", S, H, S)
        stiffest = float(np.max(np.linalg.eigvalsh(Hy.sum(1))[:, -1]))
    else:
        top = min(len(pts), 8)
        iterations = 30
        vals, _ = _pooled_top(grads, jnp.asarray(pts[:top], jnp.float32),
                           jnp.asarray(S_full, jnp.float32), k_top, iterations,
                           None if private is None else jnp.asarray(private))
        stiffest = float(np.max(np.asarray(vals, np.float64)))
        if decentralized:
            per = _gossip.all_reduce_cost(ds, mixing, start)
            cost = cost + _gossip.GossipCost(per.rounds * iterations * top,
                                             per.bytes * iterations * top)
    stiffest = max(stiffest, curvature_range[1])
    # The dense exact law for the adaptation that sets the final step; the earlier windows'
    # steps (capped by the growth factor anyway) from the cheap scalar modes. Private
    # coordinates enter the exact law's errors as their scalar modes.
    exact = final and Ay is not None and N * d <= EXACT_MAX_SIZE
    q = None
    if exact:
        q = Quadratic(Ay, by, None, None if V is None else _whitened(
            V[:, sh][:, :, sh] if V.ndim == 3 else V[:, sh], S))
    if exact and dp:
        joint = _joint_quadratic(A_all, A_s, g_all, p_all, shift, S_full, sh, pr)
        if joint is not None:
            q, private_modes = joint, []
            if V is not None:
                q = q._replace(gradient_noise=_whitened(V, S_full))
    if exact:
        law = "exact"

        def errors_at(eta, par):
            sampler = family.build(eta, par, law=True)
            e = _criterion.stationary_errors(sampler, q, mixing)
            if private_modes:  # a joint approximation that was not positive definite
                e = _criterion.worst(e, _criterion.modal_errors(sampler, private_modes, N,
                                                                 mixing, noise_ratio))
            return e
    else:
        modes = _modes(kind, curvature_range)
        law = "modal"

        def errors_at(eta, par):
            return _criterion.modal_errors(family.build(eta, par, law=True), modes, N, mixing,
                                           noise_ratio)
    # The grid in units of the largest preconditioned curvature (about 1 with a preconditioner):
    # the network average of N agents moves like one chain at a step up to N times smaller.
    scale = 1.0 / max(curvature_range[1], 1e-12)
    lo, hi = 1e-3 * scale, (4.0 * N if decentralized else 4.0) * scale
    parameters = family.parameters
    if exact and len(parameters) > 1:
        # The second parameter by the cheap modal law, the step by the exact one at it.
        modes = _modes(kind, curvature_range)

        def modal(eta, par):
            return _criterion.modal_errors(family.build(eta, par, law=True), modes, N, mixing,
                                           noise_ratio)
        parameters = (_criterion.choose_step(modal, lo=lo, hi=hi, parameters=parameters,
                                             tol_sd=tol_sd, tol_mean=tol_mean,
                                             num_draws=num_draws).parameter,)
    choice = _criterion.choose_step(errors_at, lo=lo, hi=hi, parameters=parameters,
                                    tol_sd=tol_sd, tol_mean=tol_mean, num_draws=num_draws)
    eta, par, errors = choice.step_size, choice.parameter, choice.errors
    capped = False
    if stiffest > curvature_range[1] * (1 + 1e-9):
        def stiff(e, pp):
            return _criterion.modal_errors(family.build(e, pp, law=True), [stiffest], N, mixing,
                                           noise_ratio)
        guard = _criterion.choose_step(stiff, lo=lo / 10, hi=hi, parameters=(par,),
                                       tol_sd=stiff_tol_sd, tol_mean=math.inf)
        if guard.step_size < eta:
            eta, capped = guard.step_size, True
            errors = errors_at(eta, par)
    return adaptation._replace(step=eta, parameter=par, errors=errors, errors_at=errors_at,
                               law=law, curvature_range=curvature_range, stiffest=stiffest,
                               capped=capped, cost=cost, noise_ratio=noise_ratio,
                               distance=distance)


@eqx.filter_jit
def _agent_values(grads, xs):
    """Every agent's potential ``(P, N)`` at points ``xs (P, N, d)``."""
    return jax.lax.map(grads.values, xs)


@eqx.filter_jit
def _gradients_at(grads, xs):
    """Gradients ``(P, N, d)`` at points ``xs (P, N, d)``."""
    return jax.lax.map(grads, xs)


def _approach(grads, x: np.ndarray, mixing, *, dense: bool, key, probes: int, curvature: str,
              start: int, max_steps: int = APPROACH_STEPS, curvature_batch: int | None = None,
              stop: float = 1.0):
    """Move every chain's point ``x (C, d)`` to the pooled potential's mode by Newton steps
    with a backtracking line search: ``(points, cost, steps, trials)``, ``trials`` the line
    search's evaluations of the pooled potential (each at every chain's trial point).

    At each step every agent measures its curvature (the dense Hessian, or the diagonal
    estimate), gradient and potential at the chain's point, and floods them (bytes counted);
    every agent then takes the same step ``x − t A⁻¹ g`` on the pooled ``(A, g)`` (``mixing``
    ``None``: nothing counted): ``A``'s
    eigenvalues (or diagonal) in absolute value, floored at :data:`NEWTON_FLOOR` of the largest
    (a diagonal also at the prior's), and ``t`` halved from 1 until the pooled potential,
    flooded again, falls by a quarter of the Newton decrement ``t gᵀA⁻¹g`` (Armijo). A chain
    stops when ``gᵀA⁻¹g <= d`` (within about one standard deviation per direction of its
    Gaussian approximation's mode; ``stop · d`` with ``stop``) or when no step of 30 halvings
    descends. With
    ``curvature_batch`` each step's curvature is measured on a fresh subsample of that many of
    every agent's data; gradients and values on all of them. A chain whose curvature or
    gradient is not finite at its point (an overflow far out) cannot take a Newton step: it ends
    at the point of the chain of lowest pooled potential that could.

    Raises:
        RuntimeError: when the curvature is not finite at any chain's starting point."""
    C, d = x.shape
    N = grads.potential.num_agents
    tri = d * (d + 1) // 2 if dense else d
    cost = _gossip.GossipCost(0, 0)
    moving = np.ones(C, bool)
    stuck = np.zeros(C, bool)
    steps = trials = 0
    for _ in range(max_steps):
        xs = jnp.asarray(np.broadcast_to(x[:, None], (C, N, d)), jnp.float32)
        hess = grads
        if curvature_batch is not None:
            indices = grads.potential.subsample_indices(
                jax.random.fold_in(jax.random.fold_in(key, steps), 1), curvature_batch)
            hess = eqx.tree_at(lambda gr: gr.indices, grads, indices,
                               is_leaf=lambda v: v is None)
        if dense:
            H, g = _dense_curvature(hess, xs)
            H = np.asarray(H, np.float64).sum(1)
            finite = np.isfinite(H).all((1, 2))
            H = np.where(finite[:, None, None], H, np.eye(d))
            lam, Q = np.linalg.eigh(0.5 * (H + np.swapaxes(H, -1, -2)))
            lam = np.stack([_floor(row, rel=NEWTON_FLOOR) for row in lam])
        else:
            diag, prior, g = _diagonal_curvature(hess, xs, jax.random.fold_in(key, steps),
                                                 probes, curvature)
            diag = np.asarray(diag, np.float64).sum(1)
            prior = np.asarray(prior, np.float64).sum(1)
            finite = np.isfinite(diag).all(1) & np.isfinite(prior).all(1)
            diag, prior = np.where(finite[:, None], diag, 1.0), np.where(finite[:, None], prior, 0)
            lam = np.stack([_floor(a, rel=NEWTON_FLOOR, lower=b) for a, b in zip(diag, prior)])
        if hess is not grads:  # the full local gradients, not the subsample's
            g = _gradients_at(grads, xs)
        g = np.asarray(g, np.float64).sum(1)
        finite &= np.isfinite(g).all(1)
        stuck |= moving & ~finite
        if stuck.all():
            raise RuntimeError("the curvature or gradient is not finite at any chain's point: "
                               "no Newton step to the mode can start; start the chains nearer "
                               "the posterior.")
        g = np.where(finite[:, None], g, 0.0)
        direction = np.einsum("cab,cb,cdb,cd->ca", Q, 1.0 / lam, Q, g) if dense else g / lam
        decrement = np.einsum("ca,ca->c", g, direction)
        f0 = np.asarray(_agent_values(grads, xs), np.float64).sum(1)
        if mixing is not None:  # None: centralized, or not counted
            cost = cost + _gossip.all_gather(np.full(N, C * (tri + d + 1)), mixing, start)
        moving &= finite & np.isfinite(decrement) & (decrement > stop * d)
        if not moving.any():
            break
        t = np.where(moving, 1.0, 0.0)
        for _ in range(30):
            trial = x - t[:, None] * direction
            f1 = np.asarray(_agent_values(grads, jnp.asarray(
                np.broadcast_to(trial[:, None], (C, N, d)), jnp.float32)), np.float64).sum(1)
            trials += 1
            if mixing is not None:
                cost = cost + _gossip.all_gather(np.full(N, C), mixing, start)
            ok = ~moving | (np.isfinite(f1) & (f1 <= f0 - 0.25 * t * decrement))
            if ok.all():
                break
            t = np.where(ok, t, t / 2.0)
        moving &= ok
        x = np.where(moving[:, None], trial, x)
        steps += 1
    if stuck.any():  # to the point of the lowest pooled potential among the chains that moved
        f = np.asarray(_agent_values(grads, jnp.asarray(
            np.broadcast_to(x[:, None], (C, N, d)), jnp.float32)), np.float64).sum(1)
        best = int(np.argmin(np.where(stuck | ~np.isfinite(f), np.inf, f)))
        x = np.where(stuck[:, None], x[best], x)
    return x, cost, steps, trials


# ------------------------------------------------------------------ the warm-up


def _out_of_reach(ad: _Adaptation, d: int, plan) -> bool:
    """Whether chains centred ``ad.distance`` (``gᵀMg``) from the mode stay far from it through
    the windows of ``plan``, ``(steps, step size)`` pairs: in the law the distance shrinks by
    ``ρ`` per step at ``ad.step``, and from ``√distance`` to one sd per direction it must
    shrink ``√(distance / d)``-fold; a smaller step ``η`` shrinks it by ``ρ^(η / ad.step)``
    (for small steps ``1 − ρ`` scales with the step)."""
    if ad.distance <= FAR * d:
        return False
    radius = ad.errors.radius
    if not radius < 1:
        return False  # the criterion found no stable step: divergences handle it
    rate = -math.log(radius) if radius > 0 else math.inf
    shrink = sum(length * rate * min(1.0, eta / ad.step) for length, eta in plan)
    return shrink < 0.5 * math.log(ad.distance / d)


def _points(draws: np.ndarray, count: int) -> np.ndarray:
    """``count`` curvature points ``(count, N, d)`` from draws ``(C, T, N, d)``: every chain at
    evenly spaced times, cycled to exactly ``count`` (one compiled curvature computation)."""
    C, T = draws.shape[:2]
    times = np.unique(np.linspace(0, T - 1, max(1, -(-count // C))).astype(int))
    pts = draws[:, times].reshape(-1, *draws.shape[2:])
    return pts[np.arange(count) % len(pts)]


def _check(num_steps, windows, kind, d, chains, decentralized, mixing, restart, tol_sd,
           tol_mean):
    if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)):
        raise ValueError(f"`num_steps` must be an integer; got {num_steps!r}.")
    need = MIN_WINDOW_STEPS * len(windows)
    if num_steps < need:
        raise ValueError(f"`num_steps` must be at least {need} ({MIN_WINDOW_STEPS} per window "
                         f"of {len(windows)}); got {num_steps}.")
    if kind not in PRECONDITIONERS:
        raise ValueError(f"`preconditioner` must be one of {PRECONDITIONERS}; got {kind!r}.")
    if kind == "dense" and d > 2000:
        raise ValueError(f"`preconditioner`: 'dense' needs d x d Hessians; d = {d} is too large "
                         "(use 'diagonal' or 'lowrank').")
    if chains < 2:
        raise ValueError(f"`init` needs at least 2 chains (the over-dispersed check compares "
                         f"them); got {chains}.")
    if decentralized and mixing is None:
        raise ValueError("`mixing` must be the network's schedule for a decentralized sampler; "
                         "got None.")
    if not decentralized and mixing is not None:
        raise ValueError("`mixing` must be None for centralized SGLD.")
    if restart is not None and not (isinstance(restart, (int, float)) and restart > 0):
        raise ValueError(f"`restart` must be a positive number or None; got {restart!r}.")
    for name, v in (("tol_sd", tol_sd), ("tol_mean", tol_mean)):
        if not (isinstance(v, (int, float)) and v > 0):
            raise ValueError(f"`{name}` must be positive; got {v!r}.")
    w = np.asarray(windows, np.float64)
    if w.ndim != 1 or len(w) < 2 or not np.all(w > 0):
        raise ValueError(f"`windows` must be at least 2 positive fractions; got {windows!r}.")


def _check_curvature(curvature, prior_floor, stiff_tol_sd) -> None:
    if curvature not in CURVATURES:
        raise ValueError(f"`curvature` must be one of {CURVATURES}; got {curvature!r}.")
    if not isinstance(prior_floor, (bool, np.bool_)):
        raise ValueError(f"`prior_floor` must be True or False; got {prior_floor!r}.")
    if stiff_tol_sd is not None and (isinstance(stiff_tol_sd, bool) or not (
            isinstance(stiff_tol_sd, (int, float)) and stiff_tol_sd > 0)):
        raise ValueError(f"`stiff_tol_sd` must be a positive number or None; got "
                         f"{stiff_tol_sd!r}.")


def warmup(sampler, potential, mixing, init, key, num_steps: int, *,
           preconditioner: str | None = "auto", estimator=None,
           sampling_steps: int | None = None, tol_sd: float = 0.1, tol_mean: float = 0.1,
           restart: float | None = 2.0, windows=WINDOWS, thin: int | None = None,
           probe: float = 0.1, growth: float = 4.0, max_retries: int = 3,
           curvature_points: int = 32, probes: int = 8, rank: int = 8,
           curvature_batch: int | None = None, curvature: str = "hutchinson",
           prior_floor: bool = True, stiff_tol_sd: float | None = None,
           gradient_noise: bool = True,
           rhat_threshold: float = 1.1, min_ess: float = 100.0, min_check_ess: float = 50.0,
           log=None):
    """Adapt a sampler's preconditioner and step size in ``num_steps`` steps (module doc).

    Args:
        sampler: a sampler class of :data:`dgsgld.samplers.ALL` (``dgsgld.DIGingSGLD``) or an
            instance (its estimator, channel and noise generator are kept; its step size,
            friction or consensus weight and preconditioner are adapted).
        potential: the agents' potentials (:class:`dgsgld.Potential`, with ``log_likelihood``:
            curvature needs full local gradients); its ``batch_size`` is the runs'. Private
            leaves (``private=``) get a private block of ``M`` (module doc).
        mixing: the network's schedule (stored matrices), ``None`` for centralized SGLD.
        init: starting points, leaves ``(num_chains, N, *param_shape)``
            (``(num_chains, *param_shape)`` for SGLD), at least 2 chains.
        key: PRNG key.
        num_steps: the warm-up's budget of sampler steps (at least 10 per window).
        preconditioner: ``"dense"``, ``"diagonal"``, ``"lowrank"`` (diagonal plus ``rank``
            directions from the draws), ``None`` (the step alone) or ``"auto"``: dense for
            ``d <=`` :data:`DENSE_MAX_DIM`, else diagonal.
        estimator: a gradient estimator for a sampler *class* (default: plain mini-batches).
        sampling_steps: the steps that will follow (for the step's error budget and the
            predicted ESS); default ``num_steps``.
        tol_sd, tol_mean: the criterion's bounds on the stationary worst sd ratio
            (``|log r| <= log(1 + tol_sd)``) and standardized mean error.
        restart: over-dispersion of the last window's restart (``None``: no restart).
        windows: fractions of the budget per window.
        thin: keep every ``thin``-th draw of a window (default: about 200 draws per chain in
            the last window).
        probe: the first window's step as a fraction of the criterion's at ``init``.
        growth: the largest factor by which the step grows from one window to the next.
        max_retries: windows rerun after divergences before giving up (as many again after
            the Newton approach that follows a later window's last diverging rerun).
        curvature_points: points (chains x times) per agent where curvature is measured.
        probes: Hutchinson probes per point (diagonal and low-rank).
        curvature_batch: measure every agent's curvature and gradients on a uniform subsample
            of this many of its data (drawn anew for each adaptation, the same at all of its
            points; scaled by ``n_i / m``: unbiased), not on all of them: for large local data
            sets, where ``curvature_points`` full Hessians per window would cost more than the
            sampling. ``None``: full local data.
        curvature: the diagonal and low-rank preconditioners' curvature estimate (one of
            :data:`CURVATURES`): ``"hutchinson"`` (default), the Hutchinson estimate of the
            Hessian's diagonal; ``"fisher"``, the empirical Fisher diagonal (per-datum squared
            log-likelihood gradients) plus the prior's, positive by construction.
        prior_floor: floor the pooled diagonal curvature at the prior's (its Hutchinson
            diagonal, exact for independent priors): no ``M`` entry exceeds the prior variance,
            however noisy the estimate of a flat direction (default ``True``).
        stiff_tol_sd: the stiffness cap's bound on the stationary sd ratio of the stiffest
            curvature met, ``1 + stiff_tol_sd``. Default ``None``: 0.5 (within 50 %) with a
            dense preconditioner or none, 1.5 with a diagonal or low-rank one, whose stiffest
            direction met is an off-diagonal mode of a few of the ``d`` directions that the
            step criterion's modes do not see (on the digits BNN, d = 4810, the cap at 0.5
            left test NLL 0.217 and at 1.5 gave 0.143 against 0.146 for the hand-picked step).
        rank: the low-rank preconditioner's largest rank.
        gradient_noise: with mini-batches, measure every agent's gradient error
            (:data:`NOISE_DRAWS` mini-batch gradients at its centre, per adaptation; for SVRG
            with a refresh period and SAGA, the control variate's error around an anchor as
            old as theirs, module doc) and put it in the step criterion's law (default
            ``True``). An SVRG refreshed on a schedule is not measured.
        rhat_threshold, min_ess, min_check_ess: the budget checks (module doc).
        log: optional ``str -> None`` for a line per window.

    Returns:
        ``(adapted sampler, state, WarmupReport)``; continue with
        ``dgsgld.sample(adapted, potential, mixing, state, key, n)``.

    Raises:
        ValueError: bad arguments, naming them.
        RuntimeError: when the first window diverged more than ``max_retries`` times or until
            the budget ran out, or the curvature is nowhere finite. (Divergences that use up
            the budget later return the last window without one, and the verdict says so.)
    """
    family = _family(sampler, estimator)
    decentralized = family.cls.decentralized
    flat = _flat(init, decentralized)
    private = _private_coordinates(potential, init, flat.lead)
    if private is not None and not decentralized:
        raise ValueError("`potential` declares private parameters (`private=`): centralized "
                         "SGLD samples their pooled joint posterior, which has no agents' "
                         "blocks to adapt; warm up a decentralized sampler, or pass SGLD a "
                         "preconditioner and a step yourself.")
    if private is not None and private.all():
        raise ValueError("`potential` declares every parameter private: the agents share "
                         "nothing, so there is no network to adapt; sample each agent alone.")
    x = flat.flatten(init)
    chains, d = x.shape[0], flat.dim
    kind = preconditioner
    if kind == "auto":
        kind = "dense" if d <= DENSE_MAX_DIM else "diagonal"
    _check(num_steps, windows, kind, d, chains, decentralized, mixing, restart, tol_sd,
           tol_mean)
    if curvature_batch is not None and (isinstance(curvature_batch, bool) or not isinstance(
            curvature_batch, (int, np.integer)) or curvature_batch < 1):
        raise ValueError(f"`curvature_batch` must be a positive integer or None; got "
                         f"{curvature_batch!r}.")
    if curvature_batch is not None:
        curvature_batch = int(curvature_batch)
    if not np.all(np.isfinite(x)):
        raise ValueError("`init` has non-finite entries.")
    _check_curvature(curvature, prior_floor, stiff_tol_sd)
    if not isinstance(gradient_noise, bool):
        raise ValueError(f"`gradient_noise` must be True or False; got {gradient_noise!r}.")
    if stiff_tol_sd is None:
        stiff_tol_sd = 1.5 if kind in ("diagonal", "lowrank") else 0.5
    N = potential.num_agents
    if decentralized and x.shape[1] != N:
        raise ValueError(f"`init` has {x.shape[1]} agents per chain; the potential has {N}.")
    if decentralized:
        _gossip.mixing_stack(mixing)  # schedules without stored matrices are refused here
    xN = x if decentralized else np.broadcast_to(x[:, None], (chains, N, d))
    grads = _agent_grads(potential, init, flat.lead)
    if sampling_steps is not None and (isinstance(sampling_steps, bool) or not isinstance(
            sampling_steps, (int, np.integer)) or sampling_steps < 1):
        raise ValueError(f"`sampling_steps` must be a positive integer or None; got "
                         f"{sampling_steps!r}.")
    T_s = num_steps if sampling_steps is None else int(sampling_steps)
    num_draws = chains * T_s
    base = kind if kind is not None else "identity"
    # Windows are whole numbers of chunks of `unit` steps: two compiled runs serve them all
    # (a chunk from positions, a chunk continuing a state), whatever M and η.
    fractions = np.asarray(windows, np.float64) / float(np.sum(windows))
    unit = max(MIN_WINDOW_STEPS, int(num_steps * fractions.min()))
    lengths = [max(1, round(f * num_steps / unit)) * unit for f in fractions[:-1]]
    lengths.append(num_steps - sum(lengths))
    while lengths[-1] < unit and max(lengths[:-1]) > unit:
        # The rounding up to whole chunks left the last window short: take chunks from the
        # longest earlier window (every window keeps one), so any budget `_check` accepts fits.
        i = int(np.argmax(lengths[:-1]))
        lengths[i] -= unit
        lengths[-1] += unit
    if lengths[-1] < unit:
        raise ValueError(f"`num_steps` = {num_steps} leaves the last window {lengths[-1]} "
                         f"steps; raise it or use fewer windows.")
    if thin is None:  # about 200 kept draws per chain in the last window, dividing `unit`
        target = max(1, lengths[-1] // 200)
        thin = max(t for t in range(1, unit + 1) if unit % t == 0 and t <= target)
    elif not (isinstance(thin, (int, np.integer)) and thin >= 1 and unit % thin == 0):
        raise ValueError(f"`thin` must be a positive integer dividing {unit} (the windows' "
                         f"chunk); got {thin!r}.")
    keys = jax.random.split(key, 3 * len(lengths) + 1)
    plain = _plain_minibatch(family.estimator_in_use, potential)
    common = {"kind": base, "probes": probes, "rank": rank, "tol_sd": tol_sd,
              "tol_mean": tol_mean, "num_draws": num_draws, "private": private,
              "curvature_batch": curvature_batch, "curvature": curvature,
              "prior_floor": prior_floor, "stiff_tol_sd": stiff_tol_sd,
              "noise_draws": NOISE_DRAWS if gradient_noise and plain else 0}
    age = _anchor_age(family.estimator_in_use, potential) if gradient_noise else None
    if age is not None:  # a control variate: its error around anchors `age` steps back
        common |= {"noise_draws": NOISE_DRAWS, "noise_lag": max(1, round(age / thin))}
    pts = _points(xN[:, None], curvature_points)
    # The gradient noise is measured where the chains have run, from the first window's draws
    # on: at the starts it can be many times the posterior's (per-datum gradients far from the
    # mode disagree), and a first step chosen from it stays small through the growth cap.
    at_start = common | {"noise_draws": 0}
    ad = _adapt(family, grads, mixing, pts, None, key=keys[-1], start=0,
                final=len(lengths) == 1, **at_start)
    cost = ad.cost
    history = []
    eta, ceiling, retries, spent, w = probe * ad.step, math.inf, 0, 0, 0
    allowed = max_retries  # reruns before giving up (more after a late approach)
    approach_steps, approach_trials, approached, approach_reason = 0, 0, False, ""
    state, good, exhausted = None, None, False

    def to_mode(k_newton, k_adapt, final, **options):
        # Every chain's agents' average to the pooled mode by Newton steps; adapt there.
        nonlocal xN, approach_steps, approach_trials, approached
        moved, more, approach_steps, approach_trials = _approach(
            grads, xN.mean(axis=1), mixing, dense=_dense(base, d), key=k_newton, probes=probes,
            curvature=curvature, start=spent, curvature_batch=curvature_batch)
        approached = True
        xN = np.broadcast_to(moved[:, None], (chains, N, d))
        there = _adapt(family, grads, mixing, _points(xN[:, None], curvature_points), None,
                       key=k_adapt, start=spent, final=final, **options)
        return there, more + there.cost

    while w < len(lengths):
        last = w == len(lengths) - 1
        L = lengths[w] if not last else num_steps - spent
        if L < MIN_WINDOW_STEPS:
            if state is None:
                raise RuntimeError(f"the warm-up's budget was spent on {retries} reruns after "
                                   "divergences; lower the starting step (probe) or raise "
                                   "num_steps.")
            exhausted = True  # the last good window's state, at the lowered step
            break
        if last and restart and private is not None:
            # Every agent of a chain at one shared point; each private block on its own, √N
            # wider (M's private block is the network sum's inverse: N times too narrow).
            S = ad.root()
            z = np.asarray(jax.random.normal(keys[len(lengths) + w], (chains, N, d)),
                           np.float64)
            z = np.where(private, z * math.sqrt(N), z[:, :1])
            spread = z @ S.T if S.ndim == 2 else z * S
            start_x = ad.shift + restart * spread
        elif last and restart:
            S = ad.root()
            z = np.asarray(jax.random.normal(keys[len(lengths) + w], (chains, d)), np.float64)
            spread = z @ S.T if S.ndim == 2 else z * S
            start_x = np.broadcast_to((ad.shift + restart * spread)[:, None], (chains, N, d))
        else:
            start_x = xN
        algorithm = family.build(eta, ad.parameter, ad.preconditioner())
        start_tree = flat.tree(start_x if decentralized else start_x[:, 0])
        trace, parts = None, []
        for j in range(L // unit + (L % unit > 0)):
            n = min(unit, L - j * unit)
            trace = _loop.sample(algorithm, potential, mixing,
                                 start_tree if trace is None else trace.state,
                                 jax.random.fold_in(jax.random.fold_in(keys[w], retries), j), n,
                                 output=_loop.Output(thin=thin), on_divergence="flag")
            parts.append(flat.flatten(trace.positions, lead=flat.lead + 1))
            if bool(np.any(np.asarray(trace.diverged))):
                break
        draws = np.concatenate(parts, axis=1)  # (C, T, [N,] d)
        if not decentralized:
            draws = np.broadcast_to(draws[:, :, None], (*draws.shape[:2], N, d))
        diverged = bool(np.any(np.asarray(trace.diverged))) or not np.all(np.isfinite(draws))
        spent += L
        history.append(WindowReport(L, float(eta), ad.parameter, float(ad.step), diverged))
        if log is not None:
            log(f"window {w}: {L} steps at {eta:.4g} (criterion {ad.step:.4g}), "
                f"{'diverged' if diverged else 'ok'}")
        if diverged:
            ceiling = min(ceiling, eta / 2.0)
            eta /= 4.0
            retries += 1
            if retries > allowed:
                if state is None:
                    raise RuntimeError(f"the warm-up diverged {retries} times (last step "
                                       f"{eta * 4:.3g}).")
                if not approached and private is None:
                    # Every rerun of a later window diverged: its chains met curvature far
                    # stiffer than the windows before showed. Move the last good window's
                    # chains to the mode, adapt there (a new M: no old ceiling) and run this
                    # window again, with as many reruns again.
                    k = keys[len(lengths) + w]
                    ad, more = to_mode(jax.random.fold_in(k, 3), jax.random.fold_in(k, 4),
                                       final=w == len(lengths) - 1, **common)
                    cost = cost + more
                    eta, ceiling, approach_reason = ad.step, math.inf, "reruns"
                    allowed = retries + max_retries
                    continue
                exhausted = True
                break
            if state is None and not approached and private is None:
                # The chains met curvature far stiffer than at their starts: move the starts
                # to the mode and adapt there (a new M: the old step's ceiling does not apply).
                ad, more = to_mode(keys[len(lengths)], keys[-1], final=len(lengths) == 1,
                                   **at_start)
                cost = cost + more
                eta, ceiling, approach_reason = probe * ad.step, math.inf, "divergence"
            continue
        state, good = trace.state, draws
        xN = draws[:, -1]
        if last:
            break
        half = draws[:, draws.shape[1] // 2:]
        pts = _points(half, curvature_points)
        k = keys[len(lengths) + w]
        start = spent
        ad = _adapt(family, grads, mixing, pts, half, key=k, start=start,
                    final=w == len(lengths) - 2, **common)
        cost = cost + ad.cost
        eta = min(ad.step, growth * eta, ceiling)
        if not approached and private is None:
            # The windows left, at the steps they will run (growth-capped), up to the last
            # window's second half: if they cannot bring the chains to the mode, Newton can.
            plan, e = [], eta
            for length in [*lengths[w + 1:-1], lengths[-1] // 2]:
                plan.append((length, e))
                e = min(ad.step, growth * e, ceiling)
            if _out_of_reach(ad, d, plan):
                ad, more = to_mode(jax.random.fold_in(k, 1), jax.random.fold_in(k, 2),
                                   final=w == len(lengths) - 2, **common)
                cost = cost + more
                eta, approach_reason = min(ad.step, ceiling), "distance"
        w += 1
    final = good[:, good.shape[1] // 2:]
    errors = ad.errors if eta == ad.step else ad.errors_at(eta, ad.parameter)
    radius = errors.radius
    relax = 1.0 / -math.log(radius) if 0 < radius < 1 else (0.0 if radius == 0 else math.inf)
    ess = num_draws / _criterion.tau_int(radius) if radius < 1 else 0.0
    # The check runs on the network average in the preconditioned coordinates: one quantity per
    # direction of the metric, the draws the sampler's law is about.
    S = ad.root()

    def whiten(v):  # S⁻¹ v over the last axis
        return (np.linalg.solve(S, v.reshape(-1, d).T).T.reshape(v.shape) if S.ndim == 2
                else v / S)

    if private is None:
        y = whiten(final.mean(axis=2) - ad.shift)
    else:  # the shared coordinates' network average and every agent's private ones
        y = whiten(final - ad.shift)
        y = np.concatenate([y[..., ~private].mean(axis=2),
                            y[..., private].reshape(*y.shape[:2], -1)], axis=-1)
    rhat_max = float(np.nanmax(np.asarray(evaluate.rhat(y, diverged="drop"))))
    check_ess = float(np.nanmin(np.asarray(evaluate.ess(y, diverged="drop"))))
    reasons = []
    if exhausted:
        reasons.append(f"divergences used up the budget or the reruns (the step was lowered to "
                       f"{eta:.3g}; the state is the last window without one)")
    elif restart and check_ess < min_check_ess:
        reasons.append(f"the last window's second half holds about {check_ess:.0f} effective "
                       f"draws (< {min_check_ess:g}), too few to check that the chains forgot "
                       "the over-dispersed restart")
    elif restart and not rhat_max <= rhat_threshold:
        reasons.append(f"after the over-dispersed restart the largest R-hat is {rhat_max:.3f} "
                       f"(> {rhat_threshold:g})")
    if not exhausted and L < 5 * relax:
        reasons.append(f"the last window ({L} steps) is shorter than five relaxation times "
                       f"({5 * relax:.0f} steps)")
    if ess < min_ess:
        note = ""
        if ad.noise_ratio >= NOISY and plain:
            hint = None if private is not None else _svrg_hint(
                grads, ad, eta, mixing if decentralized else None, final[:LAG_PAIRS, -1],
                jax.random.fold_in(keys[-1], 5), ad.M.ndim == 2)
            note = (f": plain mini-batches' gradient noise, {ad.noise_ratio:.3g} times the "
                    "curvature, holds the step down (a control variate, e.g. "
                    f"`estimator=gradients.svrg({HINT_PERIOD})`"
                    + ("" if hint is None else ", which would leave "
                       + (f"about {hint:.2g}" if hint >= 0.01 else "less than 0.01")
                       + " times it at this step")
                    + ", whose error the warm-up measures, or larger batches can raise it)")
        # ESS grows with the sampling steps at this step and this many chains: chains · T / τ.
        more = (f"; about {math.ceil(min_ess / ess * T_s)} would give {min_ess:g}"
                if ess > 0 else "")
        reasons.append(f"{T_s} sampling steps would give an ESS of about {ess:.0f} for the "
                       f"slowest mode (< {min_ess:g}{more})" + note)
    verdict = "ok" if not reasons else "budget too small: " + "; ".join(reasons)
    adapted = family.build(eta, ad.parameter, ad.preconditioner())
    report = WarmupReport(
        sampler=family.cls.name, preconditioner=kind if kind is not None else "none",
        step_size=float(eta), parameter=ad.parameter, law=ad.law,
        stationary_sd_ratio=math.exp(errors.sd), stationary_mean_error=float(errors.mean),
        spectral_radius=float(radius), relaxation_steps=relax, predicted_ess=float(ess),
        curvature_range=ad.curvature_range, stiffest=float(ad.stiffest), capped=ad.capped,
        rhat_max=rhat_max, check_ess=check_ess, windows=tuple(history), retries=retries,
        bytes_sent=int(cost.bytes), rounds=int(cost.rounds), num_steps=int(spent),
        budget_ok=not reasons, verdict=verdict,
        private_coordinates=0 if private is None else int(private.sum()),
        approach_steps=approach_steps, gradient_noise=float(ad.noise_ratio),
        approach_reason=approach_reason, approach_trials=approach_trials)
    return adapted, state, report
