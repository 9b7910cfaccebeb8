"""The network operand a message is sent over, and the questions a channel asks it.

A step's mixing operand is ``W⁽ᵏ⁾``: whole, a dense ``(N, N)`` array or a sparse snapshot
(:mod:`dgsgld.networks.sparse`), or, under a placement that splits the ``N`` agents over
devices, one device's ``R`` rows of it (:mod:`dgsgld.parallel.rows`). The channel never asks
an operand for its type: it asks the operand, one method per question, and an operand without
that method is a whole snapshot, answered by the default on its dense matrix. The protocol,
each hook with its whole snapshot's default:

- ``num_agents``: ``N``, the network's agents (default: the rows the caller holds; a sparse
  snapshot has it too);
- ``own_rows(tree, num_agents)``: the device's rows of the leaves of ``tree`` with
  ``num_agents`` rows, other leaves as they are (default: ``tree``);
- ``gather(tree)``: ``(W⁽ᵏ⁾ whole, tree)`` with every leaf ``(R, ...)`` gathered to
  ``(N, ...)``, for rows that a channel mixes whole as on one device, keeping the device's
  rows after (default: none, the operand is whole);
- ``without(link_up, held, keep)``: the operand with the links ``j → i`` where
  ``link_up(i, j)`` is False dropped and the ``held`` agents made ``e_i``
  (:func:`~dgsgld.communication.links.drop_links`; default:
  :func:`~dgsgld.communication.links.cut_links` on the dense matrix);
- ``gossip(choose)``: the operand of a gossip round on the links ``choose(links)`` picks among
  the snapshot's, ``(N, N)`` bool (:func:`~dgsgld.communication.links.gossip_matrix`; default:
  ``½`` on each pick, the rest of each column on its diagonal);
- ``out_degrees()``: the out-degrees of the agents of the rows
  (:func:`~dgsgld.communication.links.out_degrees`; default: the dense matrix's column counts);
- ``self_weights()``: ``W[i, i]`` of the agents of the rows (default: the diagonal);
- ``mix_payloads(local, payload, expand)``: the rows of ``W q`` when only the compressed
  payloads of ``q`` travel (default: none, ``q`` is expanded here and mixed).

Every device's rows answer ``num_agents`` and ``own_rows``. The rows of a neighbour exchange,
on which a channel runs with its draws made for all ``N`` agents, answer ``without`` to
``mix_payloads``; their ``copies`` (the exchange of public copies, itself such rows with
``receive``, ``sources`` and ``neighbors``), ``slots`` and ``combine_terms`` keep error
feedback's and an event trigger's public copies per agent. The other rows answer ``gather``.
"""

import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PyTree

__all__ = ["dense", "local", "num_agents", "own_rows", "self_weights"]


def num_agents(matrix, local: int | None = None) -> int:
    """``N``, the network's agents: ``matrix.num_agents`` where the operand has it (a device's
    rows, a sparse snapshot), else ``local``, the rows the caller holds, or a dense matrix's
    size when ``local`` is ``None``."""
    total = getattr(matrix, "num_agents", None)
    if total is not None:
        return total
    return matrix.shape[-1] if local is None else local


def own_rows(matrix, tree: PyTree, total: int) -> PyTree:
    """The device's rows of every leaf of ``tree`` with ``total`` rows (``matrix.own_rows``):
    ``tree`` itself for a whole snapshot."""
    own = getattr(matrix, "own_rows", None)
    return tree if own is None else own(tree, total)


def local(matrix, flags: Array) -> Array:
    """``flags`` ``(N,)`` of all agents restricted to the rows ``matrix`` holds (``(R,)``):
    as they are for a whole snapshot."""
    return own_rows(matrix, flags, num_agents(matrix, flags.shape[0]))


def dense(matrix) -> Array:
    """A whole snapshot's dense ``(N, N)`` (a sparse snapshot's ``todense()``)."""
    return matrix if isinstance(matrix, (jax.Array, np.ndarray)) else matrix.todense()


def self_weights(matrix) -> Array:
    """``W[i, i]`` of the agents of ``matrix``'s rows (``matrix.self_weights()``): a whole
    snapshot's diagonal ``(N,)``."""
    weights = getattr(matrix, "self_weights", None)
    return jnp.diagonal(dense(matrix)) if weights is None else weights()
