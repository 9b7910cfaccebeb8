"""The channel: how a message goes from the agents to their neighbours at a step.

A :class:`Channel` holds the options of the package's modes (:mod:`dgsgld.communication`), a
:class:`ChannelState` per message keeps what they need between steps, and the samplers call
:func:`init_states`, :func:`send` (:func:`send_mass` for push-sum) and :func:`hold` (the state
of inactive agents kept). :func:`messages_sent` and :meth:`Channel.bytes_sent` count what was
sent. The network operand of a step is asked, never tested for its type
(:mod:`~dgsgld.communication.operand`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import private as _private
from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree
from . import operand
from ._checks import unit_interval
from .clock import Clock, _activity, _by_activity, _with_deadline, active_agents
from .compressors import Compressor, Identity
from .links import (
    drop_links,
    gossip_matrix,
    link_mask,
    listener_counts,
    out_degrees,
    without_inactive,
)

__all__ = ["Channel", "ChannelState", "as_channel", "hold", "init_states", "messages_sent",
           "send", "send_mass"]


#: Per-message tags folded into the step key: one channel key per message of a step.
_TAGS = {"position": 0x636F6D30, "tracker": 0x636F6D31, "next_position": 0x636F6D32}
#: Tag of the draws shared by a step's messages: whether the round happens, which links are up.
_ROUND_TAG = 0x636F6D72
#: Tag of the step's gossip draw (which links carry the round), folded into the round key.
_GOSSIP_TAG = 0x636F6D67


class ChannelState(NamedTuple):
    """Per-message state of a :class:`Channel`.

    Attributes:
        public: the public copies ``x̂`` (leaves like the message, ``(N, ...)``) with error
            feedback or an event trigger; ``()`` without.
        sent: ``(N,)`` int32, the point-to-point messages each agent has sent so far.
        heard: ``(N,)`` bool with an event trigger: whether the agent's neighbours hold a copy
            of it yet (it sends at its first round whatever the threshold); ``()`` without.
        elapsed: float32 scalar, the simulated seconds so far, in the ``position`` message's
            state of a channel with a :class:`Clock`; ``()`` otherwise.
        copies: ``(N, L, d)`` over a neighbour exchange (``Channel.copy_slots`` ``= L``):
            agent ``i``'s copies of the flat public copies ``x̂_j`` of the ``L`` agents it ever
            listens to (the operand's ``copies``, :mod:`~dgsgld.communication.operand`), equal
            to theirs; ``()`` otherwise.
    """

    public: PyTree
    sent: Array
    heard: Any = ()
    elapsed: Any = ()
    copies: Any = ()


def _consensus(consensus) -> float:
    return unit_interval(consensus, "consensus")


def _probability(probability) -> float:
    return unit_interval(probability, "probability")


def _threshold(threshold):
    """``None``, a float, or per message a tuple of ``(name, float | None)`` pairs (static and
    hashable) from a mapping ``{message name: threshold}`` (or from those pairs again, as
    ``dataclasses.replace`` passes them)."""
    if isinstance(threshold, tuple) and all(isinstance(p, tuple) and len(p) == 2
                                            for p in threshold):
        threshold = dict(threshold)
    if isinstance(threshold, dict):
        unknown = sorted(set(threshold) - set(_TAGS))
        if unknown:
            raise ValueError(
                f"`threshold` names unknown messages {unknown}; the messages are "
                f"{sorted(_TAGS)}.")
        return tuple(sorted((name, _threshold(value)) for name, value in threshold.items()))
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) \
            or not 0 <= float(threshold) < math.inf:
        raise ValueError(
            "`threshold` must be None, a finite number >= 0, or a dict of them by message "
            f"name; got {threshold!r}.")
    return float(threshold)


def _gossip(gossip):
    if gossip not in (None, "edge", "matching"):
        raise ValueError(f"`gossip` must be None, 'edge' or 'matching'; got {gossip!r}.")
    return gossip


def _every(every) -> int:
    return _validation.check_positive_int(every, name="every")


def _clock(clock):
    if clock is not None and not isinstance(clock, Clock):
        raise TypeError("`clock` must be None or a dgsgld.communication.Clock; got "
                        f"{type(clock).__name__}.")
    return clock


def _listeners(listeners):
    """``None`` or per agent a count ``>= 0`` (kept as a tuple of ints: static and hashable)."""
    if listeners is None:
        return None
    counts = np.asarray(listeners)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer) \
            or (counts < 0).any():
        raise ValueError("`listeners` must be None or one count >= 0 per agent, (N,) integers "
                         f"(listener_counts(network)); got {listeners!r}.")
    return tuple(int(c) for c in counts)


def _copy_slots(slots) -> int:
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 0:
        raise ValueError("`copy_slots` must be an int >= 0 (the copies of public copies each "
                         f"agent keeps; dgsgld.sample sets it); got {slots!r}.")
    return int(slots)


def _compressor(compressor) -> Compressor:
    if not isinstance(compressor, Compressor):
        raise TypeError(
            "`compressor` must be a dgsgld.communication compressor (identity(), top_k(f), "
            f"random_k(f), quantize(levels), sign()); got {type(compressor).__name__}."
        )
    return compressor


class Channel(eqx.Module):
    """How agents exchange a message (:mod:`dgsgld.communication` for the modes).

    Attributes:
        compressor: a :class:`Compressor` (default :func:`~dgsgld.communication.identity`:
            exact messages).
        error_feedback: CHOCO-gossip public copies (static).
        consensus: CHOCO's ``γ ∈ (0, 1]`` in ``x + γ (W − I) x̂``; used with error feedback
            only (biased compressors may need ``γ < 1``).
        every: ``τ``, communicate at iterations ``k ≡ 0 (mod τ)`` only; at the others no
            message is sent and ``mixed = x`` (a local step: ``W⁽ᵏ⁾`` replaced by ``I``,
            public copies kept). Default 1: every step.
        probability: ``p ∈ (0, 1]``. Without ``per_link``: each round happens with
            probability ``p`` for all agents at once (else a local step, as between rounds of
            ``every``). With ``per_link``: every undirected link ``{i, j}`` of the snapshot
            (``W[i, j] ≠ 0`` or ``W[j, i] ≠ 0``) is up with probability ``p``, independently,
            and a link that is down carries nothing either way; its weights move to the
            endpoints' diagonals, ``W'[i, i] = W[i, i] + Σ_{j down} W[i, j]``, so every row
            sum is kept and a symmetric doubly stochastic ``W`` stays so. Default 1: always.
        per_link: draw ``probability`` per link (static); not with error feedback or an event
            trigger, whose one public copy per agent needs every neighbour to receive it.
        threshold: event trigger (``None``: off). Agent ``j`` sends at a round only when
            ``‖x_j − x̂_j‖₂ > threshold`` (its whole flat message against the copy ``x̂_j`` its
            neighbours last received), and at its first round; its neighbours mix with
            ``x̂_j``. ``threshold = 0`` sends whenever the message moved: always-on mixing.
            A dict gives each message its own, e.g. ``{"position": 0.1, "tracker": 1.0}``
            (a message left out, or given ``None``, is sent at every round), for messages on
            different scales.
        activity: stragglers. A number ``q ∈ (0, 1]``: each agent is active at a step with
            probability ``q``, independently; or a ``(P, N)`` pattern of 0/1: agent ``i``
            active at iteration ``k`` iff ``pattern[k % P][i]`` (static). An inactive agent
            takes no step (its position, tracker, velocity, gradient and per-agent
            estimator leaves are kept: the vectorized gradient and noise are computed and
            discarded) and sends nothing (its public copies stay what its neighbours last
            received); it still receives (so every agent's public copy stays known to all
            its neighbours). Weights: every link of an inactive agent is dropped as in
            :func:`drop_links`, its row becomes ``e_i`` (it does not mix) and the weight its
            active neighbours put on it moves to their diagonals, so the used matrix stays
            symmetric doubly stochastic when ``W`` is, and DIGing's ``Σ_i y_i = Σ_i ∇̃f_i``
            still holds. Bytes: an active agent sends to all out-neighbours of the snapshot.
            Default 1: always active, bit for bit the channel without it.
        gossip: randomized gossip (static; ``None``: every link of the snapshot carries the
            round). ``"edge"``: one link of the snapshot, drawn uniformly, and its two agents
            average (``W'`` is ``I`` but for ``½`` on their 2 × 2 block); ``"matching"``: every
            agent proposes to one neighbour drawn uniformly, mutual proposals are matched and
            each matched pair averages. ``W'`` is symmetric doubly stochastic; an agent sends
            one message to its partner. On a directed (column-stochastic) network
            (:func:`gossip_matrix`): ``"edge"`` one one-way link ``j → i`` and ``"matching"``
            every agent pushing to one out-neighbour drawn uniformly, each with half its
            value (``C'[i, j] = C'[j, j] = ½``). Not with error feedback or an event trigger
            (their public copy needs every neighbour to receive it).
        clock: a :class:`Clock` (``None``: no simulated time): compute times per agent and
            step, the round's latency, and a deadline past which slow agents sit the step out.
        listeners: ``(N,)`` ints or ``None`` (static): how many agents receive each message of
            agent ``j`` that has public copies (error feedback, an event trigger), the agents
            that keep a copy of ``x̂_j``. :meth:`for_network` sets it to
            :func:`~dgsgld.communication.listener_counts` of the network (every agent that
            ever listens to ``j``; :func:`dgsgld.sample` calls it); ``None`` counts the
            out-neighbours of the step's snapshot. Messages without public copies are always
            counted over the snapshot's out-neighbours.
        copy_slots: ``L`` (static), the copies of public copies each agent keeps for a
            neighbour exchange (:attr:`ChannelState.copies`); :meth:`for_exchange` sets it
            (placement ``Agents`` over a sparse schedule). 0: none (the whole network's public
            copies are at hand).
    """

    compressor: Compressor = eqx.field(default_factory=Identity, converter=_compressor)
    error_feedback: bool = eqx.field(default=False, static=True, converter=bool)
    consensus: float = eqx.field(default=1.0, static=True, converter=_consensus)
    every: int = eqx.field(default=1, static=True, converter=_every)
    probability: float = eqx.field(default=1.0, static=True, converter=_probability)
    per_link: bool = eqx.field(default=False, static=True, converter=bool)
    threshold: Any = eqx.field(default=None, static=True, converter=_threshold)
    activity: Any = eqx.field(default=1.0, static=True, converter=_activity)
    gossip: str | None = eqx.field(default=None, static=True, converter=_gossip)
    clock: Clock | None = eqx.field(default=None, converter=_clock)
    listeners: tuple[int, ...] | None = eqx.field(default=None, static=True,
                                                   converter=_listeners)
    copy_slots: int = eqx.field(default=0, static=True, converter=_copy_slots)

    def __check_init__(self):
        if self.per_link and self.has_public_copies:
            raise ValueError(
                "`per_link` drops cannot be combined with error feedback or an event trigger "
                "(one public copy per agent needs every neighbour to receive it); use "
                "per_link=False (rounds drawn for all agents at once)."
            )
        if self.gossip is not None and self.has_public_copies:
            raise ValueError(
                "`gossip` cannot be combined with error feedback or an event trigger (one "
                "public copy per agent needs every neighbour to receive it, and gossip reaches "
                "one partner)."
            )

    @property
    def has_public_copies(self) -> bool:
        """Whether some message keeps public copies ``x̂_j`` that every listener of ``j``
        holds (error feedback, or an event trigger on any message; :meth:`_public` per
        message)."""
        return self.error_feedback or self.threshold is not None

    def threshold_of(self, name: str | None = None) -> float | None:
        """The event trigger's threshold of message ``name`` (``None``: no trigger)."""
        if isinstance(self.threshold, tuple):
            return dict(self.threshold).get(name)
        return self.threshold

    def _public(self, name: str | None = None) -> bool:
        return self.error_feedback or self.threshold_of(name) is not None

    def for_network(self, mixing) -> Channel:
        """This channel as it runs over ``mixing`` (any network :func:`dgsgld.sample` takes):
        with public copies and no :attr:`listeners` given, every agent that ever listens to
        ``j`` is a receiver of each update of ``x̂_j`` (:attr:`listeners` set to
        :func:`~dgsgld.communication.listener_counts` of ``mixing``); itself otherwise."""
        if self.listeners is not None or not self.has_public_copies:
            return self
        return dataclasses.replace(self, listeners=listener_counts(mixing))

    def for_exchange(self, copy_slots: int) -> Channel:
        """This channel as it runs over a neighbour exchange whose agents each listen to at
        most ``copy_slots`` others over the period (the exchange's, placement ``Agents`` over
        a sparse schedule): with public copies and no :attr:`copy_slots` given, each agent
        keeps copies of those others' public copies (:attr:`copy_slots` set); itself
        otherwise."""
        if self.copy_slots or not self.has_public_copies:
            return self
        return dataclasses.replace(self, copy_slots=copy_slots)

    def init(self, message: PyTree, name: str | None = None) -> ChannelState:
        """State before the first step for message ``name`` shaped like ``message``
        (``(N, ...)``)."""
        num_agents = jax.tree.leaves(message)[0].shape[0]
        public = jax.tree.map(jnp.zeros_like, message) if self._public(name) else ()
        heard = jnp.zeros((num_agents,), bool) if self.threshold_of(name) is not None else ()
        elapsed = jnp.zeros((), jnp.float32) if self.clock is not None and name == "position" \
            else ()
        copies = ()
        if self.copy_slots and self._public(name):
            flat = _flat(message)
            copies = jnp.zeros((num_agents, self.copy_slots, flat.shape[1]), flat.dtype)
        return ChannelState(public, jnp.zeros((num_agents,), jnp.int32), heard, elapsed,
                            copies)

    def mix(self, key: PRNGKey, state: ChannelState, matrix, message: PyTree, count=0,
            round_key: PRNGKey | None = None, active: Array | None = None,
            directed: bool = False, name: str | None = None):
        """``(mixed, state)``: ``message`` (leaves ``(N, ...)``) sent over ``matrix``
        (``W⁽ᵏ⁾``, ``(N, N)`` or a sparse snapshot) at iteration ``count`` and mixed as the
        package docstring says. ``key`` draws the compressors; ``round_key`` whether the round
        happens or which links are up (shared by the messages of a step; default
        ``fold_in(key, ·)``); ``active`` ``(N,)`` bool the active agents (``None``: all;
        :func:`active_agents`); ``directed``: ``matrix`` is column stochastic (:meth:`plan`);
        ``name`` the message's (its threshold, :meth:`threshold_of`)."""
        if round_key is None:
            round_key = jax.random.fold_in(key, _ROUND_TAG)
        talk, used, degrees = self.plan(round_key, matrix, count, active, directed)
        sends = None if active is None else operand.local(used, active)
        mixed, new = self._mix(key, state, used, message, degrees, sends, name)
        if talk is None:
            return mixed, new
        return jax.tree.map(lambda a, b: jnp.where(talk, a, b), (mixed, new),
                            (message, state))

    def round(self, key: PRNGKey, matrix, count=0, directed: bool = False):
        """``(talk, used)`` of iteration ``count``: ``talk`` a scalar bool, whether this is a
        round (``None``: always), and ``used`` the matrix mixed with (``matrix`` itself unless
        links are dropped, then a dense ``(N, N)``). ``directed``: ``matrix`` is column
        stochastic (push-sum), each one-way link is drawn on its own and a dropped weight
        stays with its sender (:func:`drop_links` with ``keep="columns"``)."""
        talk = None
        if self.every > 1:
            talk = jnp.asarray(count) % self.every == 0
        if self.probability < 1 and not self.per_link:
            up = jax.random.uniform(key) < self.probability
            talk = up if talk is None else talk & up
        if self.probability < 1 and self.per_link:
            up = link_mask(key, operand.num_agents(matrix), self.probability,
                           directed=directed)
            matrix = drop_links(matrix, up, keep="columns" if directed else "rows")
        return talk, matrix

    def plan(self, round_key: PRNGKey, matrix, count=0, active: Array | None = None,
             directed: bool = False):
        """``(talk, used, degrees)`` of a step, shared by all its messages: whether it is a
        round (:meth:`round`), the matrix used (links dropped, inactive agents cut off:
        ``active`` ``(N,)`` bool or ``None``) and the messages ``(N,)`` each agent sends.
        A device's rows of a neighbour exchange (:mod:`~dgsgld.communication.operand`) give
        its rows rewritten and its agents' ``(R,)`` messages."""
        talk, used = self.round(round_key, matrix, count, directed)
        if self.gossip is not None:
            gossip_key = jax.random.fold_in(round_key, _GOSSIP_TAG)
            used = gossip_matrix(gossip_key, used, self.gossip, directed)
        degrees = out_degrees(used)
        if active is not None:
            used = without_inactive(used, active, keep="columns" if directed else "rows")
            degrees = jnp.where(operand.local(used, active), degrees, 0)
        return talk, used, degrees

    def _mix(self, key, state, matrix, message, degrees, sends=None, name=None):
        """Mix over ``matrix`` (the one used); ``degrees`` ``(N,)``: messages an agent sends
        this round; ``sends`` ``(N,)`` bool (``None``: all) the agents that send at all;
        ``name`` the message's."""
        threshold = self.threshold_of(name)
        exact = isinstance(self.compressor, Identity) and not self._public(name)
        if self._public(name) and self.listeners is not None:
            # Every holder of a public copy receives each update (package docstring).
            total = operand.num_agents(matrix, degrees.shape[0])
            if len(self.listeners) != total:
                raise ValueError(f"`listeners` has {len(self.listeners)} counts for a network "
                                 f"of {total} agents.")
            degrees = operand.local(matrix, jnp.asarray(self.listeners, jnp.int32))
        if exact and sends is None:
            return _tree.mix(matrix, message), state._replace(sent=state.sent + degrees)
        fire, heard = sends, state.heard
        if threshold is not None:
            moved = jnp.sqrt(jnp.sum(_flat(_tree.tree_sub(message, state.public)) ** 2, 1))
            fire = (moved > threshold) | ~state.heard
            fire = fire if sends is None else fire & sends
            heard = state.heard | fire
        sent = state.sent + (degrees if fire is None else jnp.where(fire, degrees, 0))
        if self._public(name) and hasattr(matrix, "mix_payloads"):    # payloads travel
            mixed, public, copies = self._mix_copies(key, state, matrix, message, fire)
            return mixed, state._replace(public=public, sent=sent, heard=heard, copies=copies)
        if not self.error_feedback:
            if exact:
                q, wq = message, None
            else:
                q, wq = _compress_mix(self.compressor, key, matrix, message)
            if threshold is not None:               # neighbours hold the last copy received
                q, wq = _select(fire, q, state.public), None
            diag = operand.self_weights(matrix)
            mixed = jax.tree.map(
                lambda wq, x, c: wq + _rows(diag, x) * (x - c),
                _tree.mix(matrix, q) if wq is None else wq, message, q)
            public = q if threshold is not None else state.public
            return mixed, state._replace(public=public, sent=sent, heard=heard)
        diff = _tree.tree_sub(message, state.public)
        keys = jax.random.split(key, jax.tree.leaves(message)[0].shape[0])
        contract = jax.vmap(self.compressor.contract)
        public = _tree.tree_add(state.public, _unflat(contract(keys, _flat(diff)), diff))
        if fire is not None:
            public = _select(fire, public, state.public)
        gamma = self.consensus
        mixed = jax.tree.map(
            lambda x, wh, h: x + jnp.asarray(gamma, x.dtype) * (wh - h),
            message, _tree.mix(matrix, public), public)
        return mixed, state._replace(public=public, sent=sent, heard=heard)

    def _mix_copies(self, key, state, matrix, message, fire):
        """``(mixed, public, copies)``: the public-copy modes of :meth:`_mix` over a neighbour
        exchange (``matrix`` a device's rows that answer ``mix_payloads``, with ``copies``:
        :mod:`~dgsgld.communication.operand`).

        Each device's agents compress (error feedback: ``x_j − x̂_j`` in the contractive form;
        an event trigger alone: ``x_j``) and update their ``x̂_j``; the payloads and whether
        they were sent (``fire`` ``(R,)``, ``None``: all) travel over the union's exchange, and
        every copy of ``x̂_j`` takes the same update, so the copies stay equal to ``x̂_j`` bit
        for bit. The snapshot's terms are then read from the copies and summed as the
        snapshot's format does on one device."""
        link = matrix.copies
        if link is None:
            raise ValueError("public copies over a neighbour exchange need the exchange of "
                             "copies planned: split_rows(..., copies=True) (dgsgld.sample "
                             "plans it under placement=Agents).")
        if isinstance(state.copies, tuple) or state.copies.shape[1] != link.neighbors.shape[1]:
            raise ValueError(
                "`state` holds no copies of the public copies for this neighbour exchange "
                f"(ChannelState.copies: {jax.tree.map(jnp.shape, state.copies)}, "
                f"{link.neighbors.shape[1]} per agent needed): a state made under another "
                "placement or network cannot continue here; run it where it was made.")
        flat, public = _flat(message), _flat(state.public)
        size, dim = flat.shape
        total = operand.num_agents(matrix, size)
        keys = jax.random.split(key, total)
        own = operand.own_rows(matrix, keys, total)
        comp = self.compressor
        if self.error_feedback:
            payload_fn, expand_fn, v = comp.contract_payload, comp.contract_expand, flat - public
        else:
            payload_fn, expand_fn, v = comp.payload, comp.expand, flat
        expand = jax.vmap(lambda k, p: expand_fn(k, p, dim))
        payload = jax.vmap(payload_fn)(own, v)
        if fire is None:                        # every agent sends: no flags travel
            payload_in = link.receive(payload)
            fire, fired = jnp.ones((size,), bool), jnp.ones((size, 1, 1), bool)
        else:                                   # a flag (one byte) per payload: sent or not
            payload_in, fire_in = link.receive((payload, fire))
            fired = jnp.concatenate([fire, fire_in])[link.neighbors][..., None]  # (R, L, 1)
        # Every update expanded in one program, and the owner's x̂_j and its copies updated by
        # one sum, so that every copy takes the very rounding its owner does (XLA may fuse an
        # expansion's last product with the sum).
        expanded = expand(jnp.concatenate([own, keys[link.sources]]),
                          jax.tree.map(lambda a, b: jnp.concatenate([a, b]), payload, payload_in))
        update = jnp.concatenate([expanded[:size, None], expanded[link.neighbors]], axis=1)
        held = jnp.concatenate([public[:, None], state.copies], axis=1)         # (R, 1 + L, d)
        took = jnp.concatenate([jnp.broadcast_to(fire[:, None, None], (size, 1, 1)),
                                jnp.broadcast_to(fired, (size, held.shape[1] - 1, 1))], axis=1)
        if self.error_feedback:
            held = jnp.where(took, held + update, held)
        else:                                   # neighbours hold the last message received
            held = jnp.where(took, update, held)
        new = held[:, 0]
        terms = jnp.take_along_axis(held, matrix.slots[:, :, None], axis=1)    # (R, K, d)
        wnew = _unflat(matrix.astype(new.dtype).combine_terms(new, terms), message)
        copies, new = held[:, 1:], _unflat(new, message)
        if self.error_feedback:
            gamma = self.consensus
            mixed = jax.tree.map(lambda x, wh, h: x + jnp.asarray(gamma, x.dtype) * (wh - h),
                                 message, wnew, new)
        else:
            diag = operand.self_weights(matrix)
            mixed = jax.tree.map(lambda wq, x, c: wq + _rows(diag, x) * (x - c),
                                 wnew, message, new)
        return mixed, new, copies

    def message_bytes(self, dim: int, dtype=jnp.float32) -> int:
        """Bytes of one message of ``dim`` entries of ``dtype``."""
        return -(-self.compressor.bits(int(dim), 8 * jnp.dtype(dtype).itemsize) // 8)

    def bytes_sent(self, state, potential=None) -> np.ndarray:
        """Bytes each agent has sent, ``int64`` of shape ``state``'s counters' ``(..., N)``.

        ``state``: a sampler state run with this channel (e.g. ``trace.state``, leaves
        ``(num_chains, N, ...)``), whose ``position`` gives the message size. A push-sum
        state (one with a ``weight``) also sends its weight, one exact entry, with every
        ``position`` message (:func:`send_mass`). ``potential``: the run's potential, needed
        when it has private leaves (never sent, so not counted).
        """
        mask = None if potential is None else potential.private_mask(state.position)
        if not _private.has_shared(mask):   # every leaf private: nothing is ever sent
            return np.zeros(np.shape(state.count) + (potential.num_agents,), np.int64)
        counts = np.asarray(messages_sent(state), np.int64)
        leaves = jax.tree.leaves(_private.shared_part(state.position, mask))
        lead = counts.ndim
        dim = sum(int(np.prod(np.shape(leaf)[lead:])) for leaf in leaves)
        dtype = jnp.result_type(*leaves)
        total = counts * self.message_bytes(dim, dtype)
        if getattr(state, "weight", None) is not None:
            weights = np.asarray(state.channel["position"].sent, np.int64)
            total = total + weights * jnp.dtype(jnp.result_type(state.weight)).itemsize
        return total


def hold(channel: Channel | None, key: PRNGKey, old, new, matrix=None):
    """The sampler state ``new`` after a step from ``old`` with inactive agents' rows kept
    from ``old``: every leaf with a leading agent axis ``(N, ...)`` of every field but
    ``count`` and ``channel`` (the channel keeps its own: an inactive agent sent nothing).
    ``new`` itself when every agent is active. ``matrix``: the step's mixing operand; a
    device's rows of ``W⁽ᵏ⁾`` (placement ``Agents``, state leaves ``(R, ...)``) draws the
    activity of all ``N`` agents and keeps the device's rows."""
    if channel is None:
        return new
    num_agents = jax.tree.leaves(old.position)[0].shape[0]
    total = operand.num_agents(matrix, num_agents)
    active = active_agents(channel, key, old.count, total)
    if active is None:
        return new
    if total != num_agents:
        active = operand.own_rows(matrix, active, total)

    def keep(a, b):
        if jnp.ndim(a) == 0 or jnp.shape(a)[0] != num_agents:
            return a
        return jnp.where(_rows(active, a).astype(bool), a, b)

    return new._replace(**{
        name: jax.tree.map(keep, getattr(new, name), getattr(old, name))
        for name in new._fields if name not in ("count", "channel")})


def _select(mask: Array, a: PyTree, b: PyTree) -> PyTree:
    """Per agent: ``a`` where ``mask`` (``(N,)``), else ``b`` (leaves ``(N, ...)``)."""
    return jax.tree.map(lambda u, v: jnp.where(_rows(mask, u).astype(bool), u, v), a, b)


def messages_sent(state) -> Array:
    """Point-to-point messages each agent has sent so far, summed over the sampler's messages:
    ``(..., N)`` int32 from a state run with a :class:`Channel` (usable as
    ``Output(trace_fn=messages_sent)`` for a per-iteration trace)."""
    channels = getattr(state, "channel", ())
    if not channels:
        raise ValueError(
            "`state` has no channel state: run the sampler with channel=dgsgld.communication."
            "Channel(...) (sample's `channel` option) to count messages."
        )
    return sum(c.sent for c in channels.values())


def _compress_mix(compressor: Compressor, key: PRNGKey, matrix, message: PyTree):
    """``(q, W q)``: every agent's compressed message ``q_j = C(x_j)`` (agent ``j``'s key
    ``split(key, N)[j]``; leaves like ``message``) and its mix over ``matrix``. Over rows
    that answer ``mix_payloads`` (a device's rows of a neighbour exchange under placement
    ``Agents``) the payloads travel (:meth:`Compressor.payload`), and the receivers expand
    them with their senders' keys: the same ``q`` as on one device."""
    flat = _flat(message)
    if not hasattr(matrix, "mix_payloads"):
        keys = jax.random.split(key, flat.shape[0])
        q = _unflat(jax.vmap(compressor.compress)(keys, flat), message)
        return q, _tree.mix(matrix, q)
    total = operand.num_agents(matrix, flat.shape[0])
    dim = flat.shape[1]
    keys = jax.random.split(key, total)
    own = operand.own_rows(matrix, keys, total)
    expand = jax.vmap(lambda k, p: compressor.expand(k, p, dim))
    payload = jax.vmap(compressor.payload)(own, flat)
    q = expand(own, payload)
    wq = matrix.astype(q.dtype).mix_payloads(
        q, payload, lambda agents, received: expand(keys[agents], received))
    return _unflat(q, message), _unflat(wq, message)


def _rows(diag: Array, leaf: Array) -> Array:
    """``diag`` (N,) shaped to broadcast over ``leaf``'s rows ``(N, ...)``."""
    return diag.astype(leaf.dtype).reshape((-1,) + (1,) * (leaf.ndim - 1))


def _flat(tree: PyTree) -> Array:
    """``(N, d)``: every leaf ``(N, ...)`` raveled per agent, concatenated."""
    leaves = jax.tree.leaves(tree)
    return jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in leaves], axis=1)


def _unflat(flat: Array, like: PyTree) -> PyTree:
    leaves, treedef = jax.tree.flatten(like)
    sizes = np.cumsum([int(np.prod(leaf.shape[1:])) for leaf in leaves])[:-1]
    parts = jnp.split(flat, sizes, axis=1)
    return jax.tree.unflatten(
        treedef, [p.reshape(leaf.shape).astype(leaf.dtype) for p, leaf in zip(parts, leaves)])


# -- what the samplers call -------------------------------------------------------------------


def init_states(channel: Channel | None, private: PyTree | None = None,
                **messages: PyTree) -> Any:
    """The sampler state's ``channel`` field: ``()`` without a channel, else one
    :class:`ChannelState` per named message (``position=x, tracker=y``), over the message's
    shared leaves only (``private``: the potential's mask, :meth:`dgsgld.Potential.private_mask`;
    a message with no shared leaf is never sent and has no state)."""
    if channel is None:
        return ()
    return {name: channel.init(_private.shared_part(message, private), name)
            for name, message in messages.items() if _private.has_shared(private)}


def send(channel: Channel | None, key: PRNGKey, states, name: str, matrix, message: PyTree,
         count=0, directed: bool = False, private: PyTree | None = None):
    """``(mixed, states)``: message ``name`` sent over ``matrix`` at iteration ``count``;
    ``W @ message`` exactly and ``states`` unchanged without a channel. ``directed``: a
    column-stochastic ``matrix`` (push-sum; :meth:`Channel.plan`). ``private``: the
    potential's mask of private leaves (:meth:`dgsgld.Potential.private_mask`); those leaves
    are neither sent nor counted and come back as they are (an agent's own value)."""
    if private is not None:
        if not _private.has_shared(private):
            return message, states
        mixed, states = send(channel, key, states, name, matrix,
                             _private.shared_part(message, private), count, directed)
        return _private.merge(mixed, message, private), states
    if channel is None:
        return _tree.mix(matrix, message), states
    mixed, _, states = _send(channel, key, states, name, matrix, message, count, directed)
    return mixed, states


def send_mass(channel: Channel | None, key: PRNGKey, states, name: str, matrix,
              mass: PyTree, weight: Array, count=0, private: PyTree | None = None):
    """``(mixed mass, mixed weight, states)``: a push-sum message, the mass ``u`` (leaves
    ``(N, ...)``) with the weight ``v`` ``(N, 1)``, pushed over the column-stochastic
    ``matrix`` at iteration ``count``. The mass goes through the channel like any message
    (compressed, with error feedback, triggered); the weight, one scalar per agent, is sent
    exact beside it over the same used matrix ``C'`` (the same round, links and active
    agents), ``v⁺ = C' v`` (``v`` itself when the step is no round), so that ``x = u / v``
    stays push-sum's ratio and ``Σ_i v_i`` is kept. ``C u`` and ``C v`` without a channel.

    ``private``: as for :func:`send`. A private leaf's mass is not sent; it comes back
    rescaled to the agent's new weight, ``u_i v⁺_i / v_i``, so that its read-out ``u / v⁺``
    is the agent's own ``u_i / v_i``."""
    if private is not None:
        if _private.has_shared(private):
            mixed, new_weight, states = send_mass(
                channel, key, states, name, matrix, _private.shared_part(mass, private),
                weight, count)
        else:
            mixed, new_weight = None, _tree.mix(matrix, weight)
        ratio = new_weight / weight

        def own(u):
            return u * ratio.astype(u.dtype).reshape(ratio.shape[:1] + (1,) * (u.ndim - 1))

        own_mass = jax.tree.map(own, mass)
        return _private.merge(mixed, own_mass, private), new_weight, states
    if channel is None:
        return _tree.mix(matrix, mass), _tree.mix(matrix, weight), states
    return _send(channel, key, states, name, matrix, mass, count, True, weight)


def _send(channel: Channel, key: PRNGKey, states, name: str, matrix, message: PyTree,
          count, directed: bool, weight: Array | None = None):
    """The one body of :func:`send` and :func:`send_mass`: ``(mixed, mixed weight or None,
    states)``. The step's activity and compute times are drawn once here and serve the
    active set, the used matrix and the clock.

    ``matrix`` may be a device's rows of ``W⁽ᵏ⁾`` (placement ``Agents``, leaves ``(R, ...)``;
    :mod:`~dgsgld.communication.operand`). Over a neighbour exchange the step runs on the
    device's rows, its draws made for all ``N`` agents (the active agents and links that are
    up rewrite the device's rows, :meth:`Channel.plan`), and the compressed payloads travel
    (:func:`_compress_mix`); rows that answer ``gather`` instead have the message, its channel
    state and the weight gathered over the devices, sent over the whole snapshot as on one
    device and the device's rows kept. Either way the draws, mixed values and counts are the
    unsharded run's."""
    gather = getattr(matrix, "gather", None)
    if gather is not None:
        full, (message, state, weight) = gather((message, states[name], weight))
        num_agents = jax.tree.leaves(message)[0].shape[0]
        out = _send(channel, key, {name: state}, name, full, message, count, directed, weight)
        mixed, mixed_weight, new = operand.own_rows(matrix, out, num_agents)
        return mixed, mixed_weight, {**states, **new}
    # Draws for all N agents (over a neighbour exchange a device holds R of them).
    num_agents = operand.num_agents(matrix, jax.tree.leaves(message)[0].shape[0])
    by_activity = _by_activity(channel, key, count, num_agents)
    times = None if channel.clock is None else channel.clock.times(key, num_agents)
    active = _with_deadline(channel, by_activity, times)
    talk, used, degrees = channel.plan(jax.random.fold_in(key, _ROUND_TAG), matrix, count,
                                       active, directed)
    sends = None if active is None else operand.local(used, active)
    mixed, state = channel._mix(jax.random.fold_in(key, _TAGS[name]), states[name], used,
                                message, degrees, sends, name)
    mixed_weight = None if weight is None else _tree.mix(used, weight)
    if talk is not None:
        mixed, state, mixed_weight = jax.tree.map(
            lambda a, b: jnp.where(talk, a, b), (mixed, state, mixed_weight),
            (message, states[name], weight))
    if times is not None and not isinstance(state.elapsed, tuple):
        step = channel.clock.duration(times, by_activity, talk)
        state = state._replace(elapsed=state.elapsed + step.astype(state.elapsed.dtype))
    return mixed, mixed_weight, {**states, name: state}


def as_channel(channel) -> Channel | None:
    """The converter of the samplers' ``channel`` field: ``None`` or a :class:`Channel`."""
    if channel is not None and not isinstance(channel, Channel):
        raise TypeError(
            "`channel` must be None or a dgsgld.communication.Channel (e.g. "
            f"Channel(top_k(0.1), error_feedback=True)); got {type(channel).__name__}."
        )
    return channel

