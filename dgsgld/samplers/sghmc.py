"""Decentralized SGHMC: DE-SGHMC and its gradient-tracking variant DIGing-SGHMC.

DE-SGHMC (Gürbüzbalaban, Gao, Hu and Zhu, "Decentralized stochastic gradient Langevin dynamics
and Hamiltonian Monte Carlo", JMLR 22, 2021): each agent keeps a velocity ``v_i``, updated with
friction ``γ`` from its own stochastic gradient, and positions are mixed over the network:

    v⁺ = v − η (γ v + ∇̃F(x)) + √(2γη) w,
    x⁺ = W x + η v⁺,                                  v⁽⁰⁾ = 0.

This is the Euler discretization of underdamped Langevin dynamics per agent with the
consensus step of DE-SGLD on positions: the velocity sees only the agent's own gradient, the
network enters through ``W x`` in the position update. The form is term for term that of the
public re-implementation of the paper's experiments (sisl/Distributed_ADMM_Sampler,
``bayesian_lin_reg.py``, "D-SGHMC": ``v_new = v − η(γ v + ∇f_i(x_i)) + √(2γη) ξ``,
``x_i = Σ_j W_ij x_j + η v_new``); it starts ``v⁽⁰⁾ ~ N(0, I)``, this module ``v⁽⁰⁾ = 0``.

The network average moves like centralized SGHMC on ``f / N`` at temperature ``1 / N``, so its
``x̄`` marginal targets ``exp(−f)``. With full
batches DE-SGHMC keeps a network-induced bias (its fixed point has ``(I − W) x = −η ∇F(x) / γ``).

DIGing-SGHMC (this toolkit): DIGing's tracker replaces the local gradient in the velocity,

    v⁺ = v − η (γ v + y) + √(2γη) w,
    x⁺ = W x + η v⁺,
    y⁺ = W y + ∇̃F(x⁺) − ∇̃F(x),                        y⁽⁰⁾ = ∇̃F(x⁽⁰⁾),

with the stochastic gradient at ``x⁺`` drawn once, kept and subtracted at the next step as in
DIGing-SGLD, so ``Σ_i y_i = Σ_i ∇̃f_i(x_i)``. Its noiseless full-batch fixed point has every
agent at the minimiser of ``f`` with ``v = 0``: no network bias.

With ``γη = 1`` the velocity forgets itself each step and ``x⁺ = W x − η²∇̃F(x) + η√2 w``: DE-SGLD
with step ``η²``. Both samplers take the estimator of :mod:`dgsgld.gradients`.

With ``preconditioner=M`` the velocity step is ``v⁺ = v − η (γ v + M g) + √(2γη) S w``
(``g = ∇̃F(x)`` resp. ``y``; ``S Sᵀ = M``), the Euler step of ``dv = −(γ v + M ∇f) dt +
√(2γ) S dB``, ``dx = v dt``, whose invariant law is ``exp(−f(x)) N(v; 0, M)``: the
``x``-marginal is still the posterior.
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._util import private as _private
from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree
from ..communication import Channel, as_channel, hold, init_states, send
from ..gradients import GradientEstimator, as_estimator
from .base import SamplingAlgorithm

__all__ = [
    "DESGHMC",
    "DESGHMCState",
    "DIGingSGHMC",
    "DIGingSGHMCState",
]


class DESGHMCState(NamedTuple):
    """``position``, ``velocity`` and ``grad = ∇̃F(position)`` leaves ``(N, *param_shape)``;
    ``count`` the iteration; ``estimator`` the gradient estimator's state; ``channel`` that of
    the message ``position`` (:mod:`dgsgld.communication`)."""

    position: PyTree
    velocity: PyTree
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


class DIGingSGHMCState(NamedTuple):
    """As :class:`DESGHMCState` plus ``tracker`` (``y``), leaves ``(N, *param_shape)``;
    ``channel`` holds the states of the messages ``position`` and ``tracker``."""

    position: PyTree
    velocity: PyTree
    tracker: PyTree
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


def _velocity_update(velocity, drift, noise, eta, friction):
    """``(1 − ηγ) v − η drift + √(2γη) w`` leaf by leaf (``noise`` leaves shaped like the
    velocity or flat: :func:`dgsgld._util.tree.in_noise_shape`)."""
    decay, scale = 1.0 - eta * friction, jnp.sqrt(2.0 * friction * eta)

    def one(v, d, w):
        return decay.astype(v.dtype) * v - eta.astype(v.dtype) * d + scale.astype(v.dtype) * w

    return _tree.in_noise_shape(one, noise, velocity, drift)


def _position_update(mixed, velocity, eta):
    return jax.tree.map(lambda wx, v: wx + eta.astype(wx.dtype) * v, mixed, velocity)


def _friction(friction) -> Array:
    _validation.check_step_size(friction, name="friction")
    if callable(friction):
        raise ValueError("`friction` must be a positive constant; got a callable.")
    return _tree.as_float_array(friction)


class DESGHMC(SamplingAlgorithm):
    """DE-SGHMC: ``DESGHMC(step_size, friction=1.0, estimator=None, *,
    normal=jax.random.normal, channel=None)``, with step ``η`` (a constant or a schedule),
    friction ``γ > 0`` (a constant) and an estimator from :mod:`dgsgld.gradients` (default:
    plain mini-batches)."""

    friction: Array = eqx.field(default=1.0, converter=_friction)
    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    name: ClassVar[str] = "DE-SGHMC"

    def init(self, position: PyTree, potential, key: PRNGKey) -> DESGHMCState:
        """``v⁽⁰⁾ = 0``; ``position`` leaves ``(N, *param_shape)``."""
        grad, est = self.estimator.start(potential, position, key)
        velocity = jax.tree.map(jnp.zeros_like, position)
        channel = init_states(self.channel, potential.private_mask(position), position=position)
        return DESGHMCState(position, velocity, grad, jnp.zeros((), jnp.int32), est, channel)

    def step(
        self, key: PRNGKey, state: DESGHMCState, potential, mixing_matrix: Array,
        noise: PyTree | None = None,
    ) -> DESGHMCState:
        private = potential.private_mask(state.position)
        eta, grad_key, grad, noise = self._step_inputs(key, state, noise)
        velocity = _velocity_update(state.velocity, self._precondition(grad, state.position),
                                    noise, eta, self.friction)
        mixed, channel = send(self.channel, key, state.channel, "position", mixing_matrix,
                              state.position, state.count, private=private)
        position = _position_update(mixed, velocity, eta)
        new_grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        new = DESGHMCState(position, velocity, new_grad, state.count + 1, est, channel)
        return hold(self.channel, key, state, new, mixing_matrix)


class DIGingSGHMC(SamplingAlgorithm):
    """DIGing-SGHMC: ``DIGingSGHMC(step_size, friction=1.0, estimator=None, *,
    normal=jax.random.normal, channel=None)``, arguments as for :class:`DESGHMC`."""

    friction: Array = eqx.field(default=1.0, converter=_friction)
    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    name: ClassVar[str] = "DIGing-SGHMC"

    def init(self, position: PyTree, potential, key: PRNGKey) -> DIGingSGHMCState:
        """``v⁽⁰⁾ = 0``, ``y⁽⁰⁾ = ∇̃F(x⁽⁰⁾)``; ``position`` leaves ``(N, *param_shape)``."""
        grad, est = self.estimator.start(potential, position, key)
        velocity = jax.tree.map(jnp.zeros_like, position)
        channel = init_states(self.channel, potential.private_mask(position), position=position,
                              tracker=grad)
        return DIGingSGHMCState(position, velocity, grad, grad, jnp.zeros((), jnp.int32), est,
                                channel)

    def step(
        self, key: PRNGKey, state: DIGingSGHMCState, potential, mixing_matrix: Array,
        noise: PyTree | None = None,
    ) -> DIGingSGHMCState:
        private = potential.private_mask(state.position)
        eta, grad_key, _, noise = self._step_inputs(key, state, noise)
        velocity = _velocity_update(state.velocity,
                                    self._precondition(state.tracker, state.position), noise,
                                    eta, self.friction)
        mixed, channel = send(self.channel, key, state.channel, "position", mixing_matrix,
                              state.position, state.count, private=private)
        position = _position_update(mixed, velocity, eta)
        grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        mixed_tracker, channel = send(self.channel, key, channel, "tracker", mixing_matrix,
                                      state.tracker, state.count, private=private)
        tracker = _tree.tree_add(mixed_tracker, _tree.tree_sub(grad, state.grad))
        tracker = _private.where(private, grad, tracker)  # a private leaf's own gradient
        new = DIGingSGHMCState(position, velocity, tracker, grad, state.count + 1, est, channel)
        return hold(self.channel, key, state, new, mixing_matrix)
