"""Potentials from numpyro models (numpyro is an optional dependency, imported on use).

A numpyro model whose observed sites sit inside a plate over the data, and whose latent sites
are global (outside that plate), factors per datum:

    log p(x, D) = log p(x) + sum_{d in D} log p(d | x).

:meth:`dgsgld.Potential.from_numpyro` builds the
:class:`dgsgld.Potential` of that factorization on numpyro's unconstrained space:

* parameters are a dict ``site name -> unconstrained value``, pushed to the support of each
  latent site by numpyro's own bijection ``biject_to(site.support)``;
* ``log_prior(u) = sum_sites log p(T(u)) + log |det dT/du|`` (the log-Jacobian belongs to the
  prior, so it is split over the agents with it), plus any observed site outside the data plate
  (e.g. a ``numpyro.factor`` on the parameters);
* ``log_likelihood(u, datum)`` runs the model on the one datum (every data argument with a
  leading axis of size 1, so the plate has size 1) and sums the log-probabilities of the
  observed sites inside the plate.

The data are the model's keyword arguments that carry the plate's axis, split across agents:
leaves ``(num_agents, local_size, ...)`` as :class:`dgsgld.Potential` takes them (see
:mod:`dgsgld.model.data`). :func:`constrain` maps draws back to the constrained sites, and
:func:`init_params` draws starting points as numpyro's ``init_to_uniform`` does.

Hierarchical models (``agent_plate=``): the model is written for the pooled data, its data
arguments with the agents' axis first, and latent sites inside a plate over the agents
(``numpyro.plate("agents", x.shape[0], dim=-2)``) hold one value per agent. Each agent then
runs the model on its own slice (the agent plate of size 1), and such a site is a *private*
parameter (:class:`dgsgld.Potential`'s ``private=``): agent ``i``'s value ``θ_i``, with the
agent plate's axis dropped from its shape. Its log-density ``log p(θ_i | φ)`` and log-Jacobian
form ``log_agent_prior`` (added undivided to ``f_i``), the global sites' form ``log_prior``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array, PRNGKey, PyTree

__all__ = ["NumpyroModel", "Site", "constrain", "factorize", "init_params", "numpyro_model"]


def _numpyro():
    try:
        import numpyro  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Potential.from_numpyro needs numpyro: pip install 'dgsgld[numpyro]'."
        ) from err
    from numpyro import handlers
    from numpyro.distributions import transforms

    return handlers, transforms


class Site(NamedTuple):
    """A latent site of the model.

    Attributes:
        shape: its constrained shape (e.g. ``(K,)`` for a ``K``-simplex); one agent's, without
            the agent plate's axis, for a private site.
        unconstrained_shape: the shape of its parameter (e.g. ``(K - 1,)``).
        run_shape: for a site inside the agent plate (private), the shape of its value in one
            agent's run: ``shape`` with the agent plate's axis and the size-1 batch axes right
            of it that no plate holds (numpyro's broadcasting) put back; ``None`` for a global
            site.
    """

    shape: tuple
    unconstrained_shape: tuple
    run_shape: tuple | None = None


class NumpyroModel:
    """A numpyro model read as a per-datum potential (built by
    :meth:`dgsgld.Potential.from_numpyro`).

    Attributes:
        model: the numpyro model.
        plate: name of the data plate.
        latent: ``name -> Site`` of the global latent sites, in the model's order.
        observed: names of the observed sites inside the data plate.
        deterministic: names of the ``numpyro.deterministic`` sites outside the data plate.
        agent_plate: name of the plate over the agents, or ``None``.
    """

    @property
    def private(self) -> tuple[str, ...]:
        """The private sites: latent sites inside the agent plate."""
        return tuple(name for name, site in self.latent.items() if site.run_shape is not None)

    def __init__(self, model, model_kwargs, example, plate, latent, observed, deterministic,
                 agent_plate=None):
        self.agent_plate = agent_plate
        self.model = model
        self.model_kwargs = dict(model_kwargs)
        self.example = example  # one datum, leaves (1, ...): the model's data for prior terms
        self.plate = plate
        self.latent = latent
        self.observed = observed
        self.deterministic = deterministic

    def __repr__(self):
        return (f"NumpyroModel(plate={self.plate!r}, latent={list(self.latent)}, "
                f"observed={list(self.observed)})")

    def _trace(self, params: PyTree, data: Mapping) -> tuple[dict, Array, Array]:
        """The model's trace at unconstrained ``params`` and the sums of the log-Jacobians
        of the global and of the private sites."""
        handlers, transforms = _numpyro()
        log_det, log_det_private = [], []

        def substitute_fn(site):
            if site["type"] == "sample" and site["name"] in self.latent:
                u = params[site["name"]]
                t = transforms.biject_to(site["fn"].support)
                value = t(u)
                run_shape = self.latent[site["name"]].run_shape
                (log_det if run_shape is None else log_det_private).append(
                    jnp.sum(t.log_abs_det_jacobian(u, value)))
                return value if run_shape is None else jnp.reshape(value, run_shape)
            return None

        model = handlers.substitute(handlers.seed(self.model, 0), substitute_fn=substitute_fn)
        trace = handlers.trace(model).get_trace(**self.model_kwargs, **data)
        return trace, sum(log_det, jnp.zeros(())), sum(log_det_private, jnp.zeros(()))

    def _in_agent_plate(self, site: dict) -> bool:
        return self.agent_plate is not None and any(
            f.name == self.agent_plate for f in site.get("cond_indep_stack", ()))

    def log_likelihood(self, params: PyTree, datum: PyTree) -> Array:
        """``log p(datum | params)``: ``params`` unconstrained, ``datum`` one datum's leaves."""
        lead = (None, None) if self.agent_plate is not None else (None,)
        trace, _, _ = self._trace(params, jax.tree.map(lambda leaf: leaf[lead], datum))
        return sum((_log_prob(trace[name]) for name in self.observed), jnp.zeros(()))

    def log_prior(self, params: PyTree) -> Array:
        """``log p(T(u)) + log |det dT/du|`` at unconstrained ``params``, with the observed
        sites outside the data plate."""
        trace, log_det, _ = self._trace(params, self.example)
        terms = [_log_prob(site) for name, site in trace.items()
                 if site["type"] == "sample" and name not in self.observed
                 and not self._in_agent_plate(site)]
        return sum(terms, log_det)

    def log_agent_prior(self, params: PyTree) -> Array:
        """``log p(θ_i | φ) + log |det dT/du|`` of the private sites (with the observed sites
        inside the agent plate but outside the data plate) at agent ``i``'s ``params``."""
        trace, _, log_det = self._trace(params, self.example)
        terms = [_log_prob(site) for name, site in trace.items()
                 if site["type"] == "sample" and name not in self.observed
                 and self._in_agent_plate(site)]
        return sum(terms, log_det)

    def constrain(self, draws: PyTree) -> dict[str, Array]:
        """Constrained latent and (global) deterministic sites of unconstrained ``draws``.

        Args:
            draws: ``name -> (*batch, *unconstrained_shape)``, any leading axes (e.g.
                ``trace.positions``: chains, draws, agents).

        Returns:
            ``name -> (*batch, *shape)`` for every latent site and every deterministic site
            outside the data plate.
        """
        _check_draws(draws, self.latent, "draws")
        batch = None
        for name, site in self.latent.items():
            leaf = jnp.asarray(draws[name])
            cut = leaf.ndim - len(site.unconstrained_shape)
            if cut < 0 or leaf.shape[cut:] != site.unconstrained_shape:
                raise ValueError(
                    f"`draws`['{name}'] must end in the site's unconstrained shape "
                    f"{site.unconstrained_shape}; got shape {leaf.shape}."
                )
            if batch is None:
                batch = leaf.shape[:cut]
            elif leaf.shape[:cut] != batch:
                raise ValueError(
                    f"`draws` leaves disagree on their leading (batch) axes: '{name}' has "
                    f"{leaf.shape[:cut]}, earlier sites {batch}."
                )
        size = int(np.prod(batch))
        flat = {name: jnp.reshape(jnp.asarray(draws[name]), (size, *site.unconstrained_shape))
                for name, site in self.latent.items()}
        keep = (*self.latent, *self.deterministic)

        def one(params):
            trace, _, _ = self._trace(params, self.example)
            out = {name: trace[name]["value"] for name in keep}
            for name, site in self.latent.items():   # one agent's value of a private site
                if site.run_shape is not None:
                    out[name] = jnp.reshape(out[name], site.shape)
            return out

        out = jax.vmap(one)(flat) if size else jax.eval_shape(jax.vmap(one), flat)
        return {name: jnp.reshape(v, (*batch, *jnp.shape(v)[1:])) for name, v in out.items()}


def _log_prob(site: dict) -> Array:
    """The site's summed log-probability, scaled like numpyro's ``log_density``."""
    value = site["fn"].log_prob(site["value"])
    if site["scale"] is not None:
        value = site["scale"] * value
    return jnp.sum(value)


def _check_draws(draws, latent, name):
    if not isinstance(draws, Mapping):
        raise TypeError(f"`{name}` must be a dict of the model's latent sites; got "
                        f"{type(draws).__name__}.")
    missing = [s for s in latent if s not in draws]
    if missing:
        raise ValueError(f"`{name}` lacks the latent sites {missing}; expected {list(latent)}.")


def _sites(model, model_kwargs: Mapping, data: Mapping) -> dict[str, dict]:
    """What the model's trace on ``data`` says of each sample and deterministic site: type,
    observed, plates ``name -> size``, value shape, support and scale. Traced abstractly
    (``jax.eval_shape``): nothing is computed or compiled."""
    handlers, _ = _numpyro()
    found = {}

    def run(data):
        trace = handlers.trace(handlers.seed(model, 0)).get_trace(**model_kwargs, **data)
        for name, site in trace.items():
            if site["type"] in ("sample", "deterministic"):
                sample = site["type"] == "sample"
                found[name] = {
                    "type": site["type"],
                    "observed": sample and bool(site["is_observed"]),
                    "plates": {f.name: f.size for f in site.get("cond_indep_stack", ())},
                    "plate_dims": {f.name: f.dim for f in site.get("cond_indep_stack", ())},
                    "event_dim": len(site["fn"].event_shape) if sample else 0,
                    "shape": tuple(jnp.shape(site["value"])),
                    "support": site["fn"].support if sample else None,
                    "scaled": sample and not _is_one(site["scale"]),
                }
        return jnp.zeros(())

    jax.eval_shape(run, dict(data))
    return found


def _is_one(scale) -> bool:
    return scale is None or (isinstance(scale, (int, float)) and scale == 1)


def factorize(
    model: Callable,
    data: Mapping[str, Any],
    *,
    model_kwargs: Mapping[str, Any] | None = None,
    plate: str | None = None,
    agent_plate: str | None = None,
) -> NumpyroModel:
    """The per-datum factorization of a numpyro model on numpyro's unconstrained space: what
    :meth:`dgsgld.Potential.from_numpyro` builds its potential from.

    Args:
        model: a numpyro model called as ``model(**model_kwargs, **data)``; its observed
            sites sit in a plate whose size is the number of data it is given (e.g.
            ``with numpyro.plate("data", x.shape[0])``), its latent sites outside that plate.
        data: the model's data arguments, ``name -> (num_agents, local_size, ...)`` (agent,
            local datum, datum shape): each agent's slice is passed to the model as
            ``(local_size, ...)``, one datum as ``(1, ...)``.
        model_kwargs: the model's other keyword arguments (hyperparameters, sizes), the same
            for every datum.
        plate: the data plate's name; by default the one plate whose size follows the data.
        agent_plate: the name of a plate over the agents (hierarchical models, module
            docstring): the model then takes data ``(num_agents, local_size, ...)``, each
            agent's run its slice ``(1, local_size, ...)``, and latent sites inside this plate
            are private parameters.

    Returns:
        A :class:`NumpyroModel`: its ``log_likelihood`` and ``log_prior`` take parameters that
        are dicts ``site name -> unconstrained value``; :func:`constrain` maps draws back and
        :func:`init_params` draws starting points.

    Raises:
        ValueError: when the data do not fit, no observed site is in a data plate, a latent
            site is inside it (local latent variables do not factor per datum), or the plate
            subsamples (the sampler draws mini-batches itself: ``batch_size``); an
            ``agent_plate`` that is no plate of the model or not of size 1 in an agent's run.
    """
    if not callable(model):
        raise TypeError(f"`model` must be a numpyro model (a callable); got {type(model)}.")
    if not isinstance(data, Mapping) or not data:
        raise ValueError(
            "`data` must be a non-empty dict of the model's data arguments, name -> "
            f"(num_agents, local_size, ...); got {type(data).__name__}."
        )
    model_kwargs = dict(model_kwargs or {})
    clash = sorted(set(model_kwargs) & set(data))
    if clash:
        raise ValueError(f"{clash} appear in both `data` and `model_kwargs`.")
    shapes = {k: np.shape(v) for k, v in data.items()}
    if any(len(s) < 2 for s in shapes.values()) or len({s[:2] for s in shapes.values()}) != 1:
        raise ValueError(
            "`data` leaves must share leading axes (num_agents, local_size); got shapes "
            f"{shapes}."
        )
    # Two traces, on one datum and on the same datum twice: the data plate is the plate whose
    # size follows the number of data (1, then 2), whatever the local data size is.
    # (Sliced on the host: no eager device program per shape.)
    axis = 0 if agent_plate is None else 1      # the local data's axis in the model's data
    one = {k: np.asarray(v)[0, :1] if agent_plate is None else np.asarray(v)[:1, :1]
           for k, v in data.items()}
    two = {k: np.concatenate([v, v], axis=axis) for k, v in one.items()}
    try:
        sites1 = _sites(model, model_kwargs, one)
        sites2 = _sites(model, model_kwargs, two)
    except Exception as err:  # noqa: BLE001 - re-raised with the setting named
        raise ValueError(
            f"the model failed on one datum (data leaves (1, ...)): {type(err).__name__}: {err}"
        ) from err
    data_plates = set()
    for name, site in sites1.items():
        if site["observed"] and name in sites2:
            p2 = sites2[name]["plates"]
            data_plates |= {p for p, size in site["plates"].items() if size == 1 and p2.get(p) == 2}
    if plate is None:
        if not data_plates:
            raise ValueError(
                "found no plate over the data: no observed site sits in a plate whose size "
                "follows the number of data given. Observe the data inside e.g. "
                "numpyro.plate('data', x.shape[0]), not a plate of fixed size."
            )
        if len(data_plates) > 1:
            raise ValueError(
                f"several plates follow the data: {sorted(data_plates)}; pass `plate=`."
            )
        (plate,) = data_plates
    elif plate not in data_plates:
        raise ValueError(
            f"`plate` = {plate!r} holds no observed site whose size follows the data "
            f"(plates found: {sorted(data_plates)}). The plate's size must come from the "
            "data, e.g. numpyro.plate('data', x.shape[0])."
        )
    if agent_plate is not None and not any(agent_plate in site["plates"]
                                           for site in sites1.values()):
        raise ValueError(f"`agent_plate` = {agent_plate!r} is no plate of the model's sites "
                         "(e.g. numpyro.plate('agents', x.shape[0], dim=-2)).")
    latent, observed, deterministic = {}, [], []
    _, transforms = _numpyro()
    for name, site in sites1.items():
        in_plate = plate in site["plates"]
        if site["type"] == "deterministic":
            if not in_plate:
                deterministic.append(name)
        elif site["observed"]:
            if in_plate:
                if site["scaled"]:
                    raise ValueError(
                        f"observed site '{name}' is scaled (a subsampling plate or "
                        "numpyro.handlers.scale); dgsgld draws mini-batches itself: pass "
                        "`batch_size=` and a plate over all the data given."
                    )
                observed.append(name)
        elif in_plate:
            raise ValueError(
                f"latent site '{name}' is inside the data plate {plate!r}: a latent variable "
                "per datum does not factor as the sum of per-datum log-likelihoods. Move it "
                "outside the plate or marginalize it."
            )
        elif agent_plate is not None and agent_plate in site["plates"]:
            if site["plates"][agent_plate] != 1:
                raise ValueError(f"`agent_plate` {agent_plate!r} has size "
                                 f"{site['plates'][agent_plate]} in one agent's run; its size "
                                 "must follow the data's agent axis, e.g. x.shape[0].")
            # Plate dims count from the right of the batch shape (left of the event shape).
            batch = len(site["shape"]) - site["event_dim"]
            agent_axis = batch + site["plate_dims"][agent_plate]
            held = {batch + d for d in site["plate_dims"].values()}
            keep = [a for a in range(len(site["shape"])) if a != agent_axis and not (
                agent_axis < a < batch and a not in held and site["shape"][a] == 1)]
            shape = tuple(site["shape"][a] for a in keep)
            t = transforms.biject_to(site["support"])
            latent[name] = Site(shape, tuple(t.inverse_shape(shape)), tuple(site["shape"]))
        else:
            t = transforms.biject_to(site["support"])
            latent[name] = Site(site["shape"], tuple(t.inverse_shape(site["shape"])))
    if not latent:
        raise ValueError("the model has no latent sample site outside the data plate.")
    return NumpyroModel(model, model_kwargs, jax.tree.map(jnp.asarray, one), plate, latent,
                        tuple(observed), tuple(deterministic), agent_plate)


def numpyro_model(potential) -> NumpyroModel:
    """The :class:`NumpyroModel` behind a potential built by
    :meth:`dgsgld.Potential.from_numpyro`."""
    info = getattr(potential.log_prior, "__self__", None)
    if not isinstance(info, NumpyroModel):
        raise TypeError(
            "`potential` was not built by Potential.from_numpyro; it has no numpyro model."
        )
    return info


def constrain(potential, draws: PyTree) -> dict[str, Array]:
    """Constrained sites of unconstrained ``draws`` of a :meth:`dgsgld.Potential.from_numpyro`
    potential.

    Args:
        potential: a potential built by :meth:`dgsgld.Potential.from_numpyro`.
        draws: ``name -> (*batch, *unconstrained_shape)``, e.g. ``trace.positions`` with
            leaves ``(chains, draws, agents, ...)`` (or ``(chains, draws, ...)`` for the
            centralized sampler).

    Returns:
        ``name -> (*batch, *shape)``: every latent site on its support, and the model's
        deterministic sites outside the data plate.
    """
    return numpyro_model(potential).constrain(draws)


def init_params(potential, key: PRNGKey, num_chains: int, *, agents: bool = True,
                radius: float = 2.0) -> dict[str, Array]:
    """Starting points uniform on ``(-radius, radius)`` in the unconstrained space (numpyro's
    ``init_to_uniform``), one per chain and agent.

    Args:
        potential: a potential built by :meth:`dgsgld.Potential.from_numpyro`.
        key: PRNG key.
        num_chains: chains.
        agents: leaves ``(num_chains, num_agents, *unconstrained_shape)`` for the
            decentralized samplers; ``False``: ``(num_chains, *unconstrained_shape)`` for the
            centralized ``dgsgld.SGLD``.
        radius: half-width of the interval, ``> 0``.
    """
    info = numpyro_model(potential)
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) \
            or num_chains < 1:
        raise ValueError(f"`num_chains` must be a positive int; got {num_chains!r}.")
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"`radius` must be positive and finite; got {radius!r}.")
    lead = (num_chains, potential.num_agents) if agents else (num_chains,)
    keys = jax.random.split(key, len(info.latent))
    return {name: jax.random.uniform(k, (*lead, *site.unconstrained_shape),
                                     minval=-radius, maxval=radius)
            for k, (name, site) in zip(keys, info.latent.items())}
