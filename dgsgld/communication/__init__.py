"""Communication channels: what a decentralized sampler's agents send each other at a step.

Every message a sampler sends over the network (``x`` in DE-SGLD, D-ULA and DE-SGHMC; ``x``
and the tracker ``y`` in DIGing-SGLD and DIGing-SGHMC; ``x⁽ᵏ⁾`` and ``x⁽ᵏ⁺¹⁾`` in EXTRA-SGLD)
goes through :func:`send`, which returns the message mixed over the network, ``W x`` with
exact communication. A sampler without a channel (``channel=None``, the default) mixes
exactly as ``W @ x`` and keeps no channel state. A :class:`Channel` keeps a
:class:`ChannelState` per message in the sampler state's ``channel`` field (threaded by the
runner like the estimator state) and mixes as follows, agent ``i`` receiving from its
in-neighbours ``j`` (``W[i, j] ≠ 0``, ``j ≠ i``) and knowing its own ``x_i`` exactly:

- ``Channel()``: exact, ``W @ x`` (the same numbers as no channel), with bytes counted;
- ``Channel(compressor)``: agent ``j`` sends ``q_j = C(x_j)``;
  ``mixed_i = W[i, i] x_i + Σ_{j≠i} W[i, j] q_j``;
- ``Channel(compressor, error_feedback=True)``: CHOCO-gossip (Koloskova, Stich and Jaggi,
  2019). Every agent keeps public copies ``x̂`` (``x̂⁽⁰⁾ = 0``); agent ``j`` sends
  ``q_j = C(x_j − x̂_j)`` (``C`` in its contractive form, :meth:`Compressor.contract`),
  everyone updates ``x̂_j ← x̂_j + q_j``, and ``mixed = x + γ (W − I) x̂`` with ``γ`` =
  ``consensus``.

When messages are sent (each composes with the modes above):

- ``every=τ``: rounds at iterations ``k ≡ 0 (mod τ)`` only, local steps (``mixed = x``,
  nothing sent, public copies kept) in between;
- ``probability=p``: each round happens with probability ``p`` for all agents at once; with
  ``per_link=True`` instead every undirected link of the snapshot is up with probability
  ``p`` independently, and the used matrix is ``W'`` with the weights of the links that are
  down moved to the endpoints' diagonals (:func:`drop_links`: row sums kept, a symmetric
  doubly stochastic ``W`` stays symmetric doubly stochastic). Bytes: the out-degrees of
  ``W'``. ``p = 1`` is the channel without it, bit for bit;
- ``threshold=δ`` (event trigger): every agent keeps the copy ``x̂_j`` its neighbours last
  received (``x̂⁽⁰⁾ = 0``; every agent sends at its first round); at a round agent ``j`` sends
  only if ``‖x_j − x̂_j‖₂ > δ`` (its whole flat message), and then ``x̂_j ← C(x_j)``
  (``x̂_j ← x̂_j + C(x_j − x̂_j)`` with error feedback). Its neighbours mix with ``x̂``:
  ``mixed_i = W[i, i] x_i + Σ_{j≠i} W[i, j] x̂_j`` (CHOCO's formula with error feedback).
  ``δ = 0`` sends whenever the message moved, which is always-on mixing;
- ``gossip="edge"`` or ``"matching"``: randomized gossip, one random link or a random
  matching of the snapshot's links carries the round, each pair averaging
  (:func:`gossip_matrix`; :func:`gossip_outcomes` lists its outcomes with their
  probabilities);
- ``clock=Clock(...)``: simulated time. Per-agent compute times each step, a latency per
  round, and an optional deadline past which slow agents are stragglers as with
  ``activity`` (:class:`Clock`, :func:`elapsed_time`);
- ``activity=q`` (or a ``(P, N)`` 0/1 pattern): stragglers. Each agent is active at a step
  with probability ``q`` (:func:`active_agents`); an inactive agent takes no step
  (:func:`hold` keeps its rows of the sampler state) and sends nothing, and the step mixes
  with ``W'``: every link of an inactive agent dropped as in :func:`drop_links` (the weight
  its active neighbours put on it moved to their diagonals) and its own row ``e_i``, so
  ``W'`` is symmetric doubly stochastic when ``W`` is. It still receives (public copies stay
  known to all neighbours): an active agent sends to all its out-neighbours, an inactive one
  nothing. ``q = 1`` is the channel without it, bit for bit.

Directed networks (the push-sum samplers, column-stochastic ``C``): :func:`send_mass` sends
the mass ``u`` through the channel and the weight ``v`` exact beside it over the same used
matrix; a dropped one-way link (each direction drawn on its own) leaves its weight on the
sender's diagonal, and an inactive agent's row and column are ``e_i``, so the used matrix stays
column stochastic (:func:`drop_links` with ``keep="columns"``).

With error feedback the network sum is kept exactly: ``I − W`` has zero column sums, so
``Σ_i mixed_i = Σ_i x_i`` whatever the compressor, and DIGing's tracking invariant
``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` holds up to rounding. Without it, ``Σ_i mixed_i − Σ_i x_i =
Σ_j (1 − W[j, j]) (q_j − x_j)``: zero-mean noise for an unbiased compressor (the tracker sum
random-walks), a drift for a biased one.

Compressors act on each agent's message as one flat vector of ``d`` entries (all leaves,
row-major, concatenated). Bytes: agent ``j`` sends one message to each out-neighbour
(``W[i, j] ≠ 0``, ``i ≠ j``) of that step's ``W⁽ᵏ⁾``; a message of ``d`` entries of ``b`` bits
(32 for float32) is encoded as

=================  ================================================================
``identity()``     ``b d`` bits (dense)
``top_k(f)``       ``k (b + 32)`` bits: ``k = ⌈f d⌉`` values and their int32 indices
``random_k(f)``    ``k b`` bits: values only (the indices follow from shared randomness)
``quantize(s)``    ``d (1 + ⌈log₂(s + 1)⌉) + b`` bits: sign and level per entry, one norm
``sign()``         ``d + b`` bits: one sign bit per entry, one scale
=================  ================================================================

rounded up to whole bytes per message, the bytes of :meth:`Compressor.payload` (quantize's and
sign's bits packed into uint8), which is what a neighbour exchange sends between devices.

A message with public copies (error feedback, an event trigger) goes instead to every agent
that keeps a copy of ``x̂_j``: on a time-varying network that is every agent that ever listens
to ``j`` (``W⁽ᵏ⁾[i, j] ≠ 0`` at some ``k``, :func:`listener_counts`), as each update of the
copy must reach them all or the copies part. :meth:`Channel.for_network` sets these counts
(:attr:`Channel.listeners`) from the network, as :func:`dgsgld.sample` runs a channel; on a
static network they are its out-degrees.
:func:`messages_sent` counts the point-to-point messages, :meth:`Channel.bytes_sent` turns
them into bytes.

Randomness: the channel's key of a step is ``fold_in(key, tag of the message)`` of the step's
key, and agent ``i``'s is ``split(that, N)[i]``; the round and the links that are up are drawn
from ``fold_in(key, round tag)`` and the active agents from ``fold_in(key, activity tag)``,
shared by all messages of the step (DIGing's ``x`` and ``y`` go over the same links). The
noise and gradient keys (``split(key)``) are untouched, so a channel changes no other draw,
and a chain's draws do not depend on how chains are batched.

The modules: :mod:`~dgsgld.communication.compressors` (what a message becomes on the wire),
:mod:`~dgsgld.communication.links` (which links carry a round, who listens),
:mod:`~dgsgld.communication.clock` (stragglers and simulated time),
:mod:`~dgsgld.communication.channel` (the channel and what the samplers call) and
:mod:`~dgsgld.communication.operand` (what a channel asks of the network operand: a whole
snapshot, or a device's rows under a placement that splits the agents).
"""

from . import channel as channel
from . import clock as clock
from . import compressors as compressors
from . import links as links
from . import operand as operand
from .channel import Channel as Channel
from .channel import ChannelState as ChannelState
from .channel import as_channel as as_channel
from .channel import hold as hold
from .channel import init_states as init_states
from .channel import messages_sent as messages_sent
from .channel import send as send
from .channel import send_mass as send_mass
from .clock import Clock as Clock
from .clock import active_agents as active_agents
from .clock import elapsed_time as elapsed_time
from .compressors import MAX_LEVELS as MAX_LEVELS
from .compressors import Compressor as Compressor
from .compressors import Identity as Identity
from .compressors import Quantize as Quantize
from .compressors import RandomK as RandomK
from .compressors import Sign as Sign
from .compressors import TopK as TopK
from .compressors import identity as identity
from .compressors import quantize as quantize
from .compressors import random_k as random_k
from .compressors import sign as sign
from .compressors import top_k as top_k
from .links import MAX_GOSSIP_PROFILES as MAX_GOSSIP_PROFILES
from .links import drop_links as drop_links
from .links import gossip_matrix as gossip_matrix
from .links import gossip_outcomes as gossip_outcomes
from .links import link_mask as link_mask
from .links import listener_counts as listener_counts
from .links import out_degrees as out_degrees
from .links import without_inactive as without_inactive

__all__ = [
    "Channel", "ChannelState", "Clock", "Compressor", "Identity", "Quantize", "RandomK", "Sign",
    "TopK", "active_agents", "drop_links", "elapsed_time", "gossip_matrix", "gossip_outcomes",
    "hold", "identity", "init_states", "link_mask", "listener_counts", "messages_sent",
    "out_degrees", "quantize", "random_k", "send", "send_mass", "sign", "top_k", "without_inactive",
]
