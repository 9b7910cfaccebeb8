"""Benchmark targets: real and non-Gaussian posteriors, each a :class:`dgsgld.Potential`.

Every target is a Bayesian model on a flat parameter vector ``x (d,)`` in unconstrained
coordinates (scales enter through their logarithm, with the log-Jacobian in the prior), with
its pooled data ``(n, ...)`` and two documented ways to split them across ``N`` agents:

* ``"iid"``: a random permutation cut into near-equal parts (:func:`dgsgld.model.data.split_iid`);
* ``"skew"``: each agent holds one group (:func:`dgsgld.model.data.split_by_label` with one
  class per agent): the class for classifiers, the quantile bin of a covariate or of the
  response for regressions. The number of groups is the number of agents (or the number of classes).

=======================  ====  =====  ==============================================================
name                     d     n      model
=======================  ====  =====  ==============================================================
gaussian_linear          6     100    linear regression, known noise, Gaussian prior (exact anchor)
logistic_breast_cancer   31    569    logistic regression, standardized features + intercept
multinomial_wine         42    178    softmax regression, 3 classes, 13 standardized features
poisson_linnerud         4     20     Poisson regression of chin-ups on weight, waist, pulse
student_t_diabetes       12    442    robust regression, Student-t (nu = 4) noise, unknown scale
sparse_mixture           10    40     regression with a spike-and-slab-like scale-mixture prior
eight_schools            10    8      hierarchical normal model, non-centred
bnn_regression           10    40     one-hidden-layer tanh network (3 units), known noise
logistic_large           50    10⁶    logistic regression on 49 correlated features + intercept
hierarchical_regression  21    240    per-group intercepts and slopes under a shared hyperprior
=======================  ====  =====  ==============================================================

``hierarchical_regression``'s ``"skew"`` split deals pairs of its 8 groups (``2j, 2j + 1``), so
that it runs on 4 agents like the others. Its personalized form
:func:`dgsgld.posteriors.hierarchical_private_potential` gives each of 8 agents one group, whose
intercept and slope ``(a_g, b_g)`` are then needed by that agent only, and declares them
private (:class:`dgsgld.Potential`'s ``private=``) beside the shared hyperparameters.

The data of the breast-cancer, wine, Linnerud and diabetes targets are the sets bundled with
scikit-learn (imported on use: the ``examples`` extra); the others are generated with NumPy from
a fixed seed. A target's :attr:`Target.fingerprint` hashes its data, so that a stored reference
is only ever compared with the data it was computed on.

``logistic_large`` is the large-data target, meant for 16 agents with mini-batches (its
``"skew"`` split has 16 groups): its data take 400 MB in float64 (0.2 GB more per float32
:meth:`Target.potential`) and are generated in a few seconds, once per process
(:func:`get_target` caches targets). Its ``predictive`` is evaluated at the first
:data:`LARGE_PREDICTIVE_INPUTS` inputs only (a random sample: the data are i.i.d.), so that
:meth:`Target.mean_predictive` stays ``(m, n_inputs, 2)`` small for ``m`` hundreds of draws.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import special as jsp_special
from jax.scipy import stats as jsp_stats

from ..model import data as _data
from ..model.potential import Potential
from .problems import (
    GaussianLogLikelihood,
    GaussianLogPrior,
    linear_regression_problem,
    logistic_log_likelihood,
)

__all__ = ["LARGE_PREDICTIVE_INPUTS", "LARGE_TARGETS", "SPLITS", "TARGETS", "Target",
           "get_target", "hierarchical_private_potential"]

SPLITS = ("iid", "skew")


@dataclass(frozen=True, eq=False)
class Target:
    """A benchmark posterior.

    Attributes:
        name: registry name.
        description: one line: model and data.
        log_likelihood: ``(x (d,), datum) -> scalar``, one datum's log-likelihood.
        log_prior: ``x (d,) -> scalar`` (with the log-Jacobian of any transformed scale).
        data: pooled data, a tuple of NumPy arrays with leading size ``n`` (float64).
        param_names: ``d`` coordinate names.
        groups: ``(n,)`` int group of each datum for the ``"skew"`` split.
        skew: what the groups are (documentation).
        quantities: optional ``x (d,) -> (q,)`` the scores compare instead of ``x`` (for
            targets whose parameters are not identified, e.g. a network's weights).
        quantity_names: ``q`` names when ``quantities`` is given.
        init_scale: standard deviation of :meth:`init`'s draws around zero.
        predictive: for classifiers, ``x (d,) -> (n, K)`` class probabilities at the data's
            inputs (at a fixed subsample of ``n' < n`` of them for ``logistic_large``; the
            scores compare the posterior predictive); else ``None``.
        num_agents: the number of agents the benchmark splits the data over when the target
            asks for its own (``logistic_large``: 16, its ``"skew"`` groups); ``None``: the
            benchmark's setting.
    """

    name: str
    description: str
    log_likelihood: Callable
    log_prior: Callable
    data: tuple
    param_names: tuple
    groups: np.ndarray
    skew: str
    quantities: Callable | None = None
    quantity_names: tuple | None = None
    init_scale: float = 0.1
    predictive: Callable | None = None
    num_agents: int | None = None
    _hash: list = field(default_factory=list, repr=False)

    @property
    def dim(self) -> int:
        """``d``, the number of parameters."""
        return len(self.param_names)

    @property
    def num_data(self) -> int:
        return int(np.shape(self.data[0])[0])

    @property
    def names(self) -> tuple:
        """Names of the compared coordinates: ``quantity_names`` or ``param_names``."""
        return self.param_names if self.quantities is None else self.quantity_names

    @property
    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) of the data in float64."""
        if not self._hash:
            h = hashlib.sha256()
            for leaf in self.data:  # the array's own buffer: no copy of large data
                h.update(np.ascontiguousarray(np.asarray(leaf, np.float64)))
            self._hash.append(h.hexdigest()[:16])
        return self._hash[0]

    def log_density(self, x):
        """Unnormalized log-posterior ``log p(x) + sum_d log p(d | x)`` at ``x (d,)``."""
        return _log_density(self.log_likelihood, self.log_prior, self.data, x)

    def score(self, x):
        """``grad log p(x | D)`` at ``x (..., d)`` (any leading axes)."""
        x = jnp.asarray(x)
        flat = x.reshape(-1, x.shape[-1])
        return _score(self.log_likelihood, self.log_prior, self.data, flat).reshape(x.shape)

    def compared(self, x):
        """The coordinates the scores compare: ``quantities(x)`` over ``x (..., d)``, or ``x``."""
        if self.quantities is None:
            return x
        x = jnp.asarray(x)
        flat = x.reshape(-1, x.shape[-1])
        out = jax.vmap(self.quantities)(flat)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def mean_predictive(self, x):
        """``(n, K)`` posterior predictive class probabilities, averaged over ``x (m, d)``
        (``n`` the inputs ``predictive`` evaluates)."""
        if self.predictive is None:
            raise ValueError(f"target {self.name!r} is not a classifier (no `predictive`).")
        return _mean_predictive(self.predictive, self.data, jnp.asarray(x))

    def split(self, num_agents: int, split: str = "iid", *, seed: int = 0) -> _data.AgentSplit:
        """The data dealt to ``num_agents`` agents (see the module doc for ``split``)."""
        if split not in SPLITS:
            raise ValueError(f"`split` must be one of {SPLITS}; got {split!r}.")
        if split == "iid":
            return _data.split_iid(self.data, num_agents, seed=seed)
        num_groups = int(self.groups.max()) + 1
        if num_agents < num_groups:
            raise ValueError(
                f"`split`='skew' of target {self.name!r} needs `num_agents` >= its "
                f"{num_groups} groups ({self.skew}); got {num_agents}.")
        return _data.split_by_label(self.data, self.groups, num_agents, 1, seed=seed)

    def potential(self, num_agents: int = 4, split: str = "iid", *, batch_size: int | None = None,
                  seed: int = 0) -> Potential:
        """The agents' :class:`dgsgld.Potential` (float32 data unless x64 is on)."""
        s = self.split(num_agents, split, seed=seed)
        dtype = jnp.result_type(float)
        data = jax.tree.map(
            lambda a: jnp.asarray(a, dtype if jnp.issubdtype(a.dtype, jnp.floating) else a.dtype),
            s.data)
        return Potential(self.log_likelihood, self.log_prior, data, batch_size, mask=s.mask)

    def init(self, key, num: int):
        """``(num, d)`` starting points ``N(0, init_scale^2 I)``."""
        return self.init_scale * jax.random.normal(key, (num, self.dim))


# One compiled program per model (the model functions are hashable, the data an argument).
@partial(jax.jit, static_argnums=(0, 1))
def _log_density(log_likelihood, log_prior, data, x):
    ll = jax.vmap(log_likelihood, in_axes=(None, 0))(x, data)
    return log_prior(x) + jnp.sum(ll)


@partial(jax.jit, static_argnums=(0, 1))
def _score(log_likelihood, log_prior, data, x):
    return jax.vmap(jax.grad(_log_density, argnums=3), (None, None, None, 0))(
        log_likelihood, log_prior, data, x)


@partial(jax.jit, static_argnums=0)
def _mean_predictive(predictive, data, x):
    return jnp.mean(jax.vmap(predictive, (0, None))(x, data), axis=0)


def _standardize(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    return (a - a.mean(axis=0)) / a.std(axis=0)


def _intercept(z: np.ndarray) -> np.ndarray:
    return np.concatenate([z, np.ones((z.shape[0], 1))], axis=1)


def _sklearn(loader: str):
    try:
        from sklearn import datasets
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this benchmark target uses a data set bundled with scikit-learn: "
            "pip install 'dgsgld[examples]'.") from err
    return getattr(datasets, loader)()


def _bins(values: np.ndarray, num: int) -> np.ndarray:
    return _data.quantile_bins(values, num)


# -- model functions (module level and value-hashable, so that runs share compilations) ---------


def _softmax_log_likelihood(x, datum, num_classes: int):
    z, y = datum
    w = x.reshape(z.shape[0], num_classes)
    return jnp.sum(jax.nn.log_softmax(z @ w) * jax.nn.one_hot(y, num_classes))


@dataclass(frozen=True)
class SoftmaxLogLikelihood:
    """``log softmax(zᵀ W)_y`` with ``W = x.reshape(p, K)`` and ``y`` an integer class."""

    num_classes: int

    def __call__(self, x, datum):
        return _softmax_log_likelihood(x, datum, self.num_classes)


def logistic_predictive(x, data):
    """``(n, 2)`` probabilities ``(1 − σ(zᵀx), σ(zᵀx))`` at the data's inputs."""
    p = jax.nn.sigmoid(data[0] @ x)
    return jnp.stack([1 - p, p], axis=-1)


@dataclass(frozen=True)
class SoftmaxPredictive:
    """``(n, K)`` probabilities ``softmax(zᵀ W)`` at the data's inputs."""

    num_classes: int

    def __call__(self, x, data):
        z = data[0]
        return jax.nn.softmax(z @ x.reshape(z.shape[1], self.num_classes), axis=-1)


def poisson_log_likelihood(x, datum):
    """``y η − e^η − log y!`` with ``η = zᵀx``."""
    z, y = datum
    eta = z @ x
    return y * eta - jnp.exp(eta) - jsp_special.gammaln(y + 1.0)


@dataclass(frozen=True)
class StudentTLogLikelihood:
    """``log t_ν((y − zᵀβ) / σ) − log σ`` with ``x = (β, log σ)``."""

    df: float

    def __call__(self, x, datum):
        z, y = datum
        log_sigma = x[-1]
        r = (y - z @ x[:-1]) * jnp.exp(-log_sigma)
        return jsp_stats.t.logpdf(r, self.df) - log_sigma


@dataclass(frozen=True)
class StudentTLogPrior:
    """``β ~ N(0, I)``, ``σ ~ half-normal(1)`` on ``log σ`` (with its Jacobian ``log σ``)."""

    def __call__(self, x):
        sigma = jnp.exp(x[-1])
        return -0.5 * jnp.sum(x[:-1] ** 2) - 0.5 * sigma**2 + x[-1]


@dataclass(frozen=True)
class ScaleMixtureLogPrior:
    """Independent ``x_j ~ w N(0, s_spike²) + (1 − w) N(0, s_slab²)`` (not log-concave)."""

    spike: float
    slab: float
    weight: float

    def __call__(self, x):
        comp = jnp.stack([
            jnp.log(self.weight) + jsp_stats.norm.logpdf(x, 0.0, self.spike),
            jnp.log1p(-self.weight) + jsp_stats.norm.logpdf(x, 0.0, self.slab),
        ])
        return jnp.sum(jax.nn.logsumexp(comp, axis=0))


def eight_schools_log_likelihood(x, datum):
    """School ``j``: ``y ~ N(μ + τ θ̃_j, σ_j²)``; ``x = (μ, log τ, θ̃_1..8)``, datum
    ``(y, σ, one-hot j)``."""
    y, sigma, onehot = datum
    theta = x[0] + jnp.exp(x[1]) * (onehot @ x[2:])
    return jsp_stats.norm.logpdf(y, theta, sigma)


def eight_schools_log_prior(x):
    """``μ ~ N(0, 5²)``, ``τ ~ half-Cauchy(5)`` on ``log τ`` (with Jacobian), ``θ̃ ~ N(0, I)``."""
    tau = jnp.exp(x[1])
    return (jsp_stats.norm.logpdf(x[0], 0.0, 5.0) + jsp_stats.cauchy.logpdf(tau, 0.0, 5.0)
            + x[1] + jnp.sum(jsp_stats.norm.logpdf(x[2:])))


_BNN_HIDDEN = 3


def bnn_function(x, inputs):
    """The network ``b₂ + Σ_h w₂ₕ tanh(w₁ₕ u + b₁ₕ)`` at ``inputs (m,)``; ``x (10,)`` holds
    ``(w₁, b₁, w₂, b₂)``."""
    h = _BNN_HIDDEN
    w1, b1, w2, b2 = x[:h], x[h:2 * h], x[2 * h:3 * h], x[3 * h]
    return jnp.tanh(inputs[:, None] * w1 + b1) @ w2 + b2


@dataclass(frozen=True)
class BNNLogLikelihood:
    """``log N(y; net(u), σ²)`` for datum ``(u, y)``."""

    noise_std: float

    def __call__(self, x, datum):
        u, y = datum
        return jsp_stats.norm.logpdf(y, bnn_function(x, u[None])[0], self.noise_std)


#: Inputs at which the network's function is compared (its weights are not identified).
BNN_GRID = (-2.0, -1.0, 0.0, 1.0, 2.0)


def bnn_quantities(x):
    """``(5,)`` network outputs at :data:`BNN_GRID`."""
    return bnn_function(x, jnp.asarray(BNN_GRID, x.dtype))


#: Inputs at which ``logistic_large``'s predictive is compared: the first this many data.
LARGE_PREDICTIVE_INPUTS = 10_000


@dataclass(frozen=True)
class LogisticPredictiveHead:
    """``(m, 2)`` logistic class probabilities at the data's first ``m`` inputs."""

    num_inputs: int

    def __call__(self, x, data):
        return logistic_predictive(x, (data[0][:self.num_inputs],))


# logistic_large's generator: n data, p features with corr(z_j, z_k) = rho^|j - k| (AR(1)
# across features: Hessian condition number ~ ((1 + rho) / (1 - rho))^2, 135 at the MAP).
_LARGE_N, _LARGE_P, _LARGE_RHO, _LARGE_SEED = 1_000_000, 49, 0.85, 11
_LARGE_AGENTS = 16


def large_logistic_data(num_data: int = _LARGE_N, seed: int = _LARGE_SEED):
    """``logistic_large``'s generated data and the coefficients they were drawn from.

    Features ``z_1..z_p`` (``p = 49``) are unit-variance Gaussians with AR(1) correlation
    ``0.85^|j-k|``, generated in float32 (so that a float32 potential holds them exactly) and
    followed by an intercept column; the true coefficients are ``N(0, 1.5² / p)`` draws with
    ``β_1 = 1`` (the split feature carries signal: the skew groups differ in label rate) and
    intercept ``-0.5``; ``y ~ Bernoulli(σ(zᵀβ))``.

    Args:
        num_data: ``n`` (the target uses 10⁶; smaller for tests of the generator).
        seed: NumPy seed.

    Returns:
        ``(z (n, p + 1) float64, y (n,) float64 in {0, 1}, truth (p + 1,))``.
    """
    p, rho = _LARGE_P, _LARGE_RHO
    rng = np.random.default_rng(seed)
    truth = np.append(rng.normal(0.0, 1.5 / np.sqrt(p), p), -0.5)
    truth[0] = 1.0
    # Feature-major, so that the recursion runs over contiguous rows.
    e = rng.standard_normal((p, num_data), dtype=np.float32)
    s, r = np.float32(np.sqrt(1.0 - rho**2)), np.float32(rho)
    for j in range(1, p):
        e[j] *= s
        e[j] += r * e[j - 1]
    z = np.empty((num_data, p + 1))
    z[:, :p] = e.T
    z[:, p] = 1.0
    del e
    eta = z @ truth
    y = (rng.random(num_data) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float64)
    return z, y, truth


# -- the targets ----------------------------------------------------------------------------------


def gaussian_linear() -> Target:
    problem = linear_regression_problem(0, num_samples=100, dim=5, num_agents=1)
    z = np.asarray(problem.features[0], np.float64)
    y = np.asarray(problem.targets[0], np.float64)
    return Target("gaussian_linear",
                  "Bayesian linear regression (generated, n=100, d=5 + intercept, noise 1, "
                  "prior N(0, 10 I)); Gaussian posterior in closed form",
                  GaussianLogLikelihood(1.0), GaussianLogPrior(0.1), (z, y),
                  tuple(f"beta[{j}]" for j in range(5)) + ("intercept",),
                  _bins(z[:, 0], 4), "quartile of the first feature")


def exact_gaussian_posterior(target: Target) -> tuple[np.ndarray, np.ndarray]:
    """``(mean (d,), cov (d, d))`` of :func:`gaussian_linear`'s posterior, in float64."""
    if target.name != "gaussian_linear":
        raise ValueError(f"only 'gaussian_linear' has a closed form; got {target.name!r}.")
    z, y = target.data
    cov = np.linalg.inv(z.T @ z / target.log_likelihood.noise_var
                        + target.log_prior.precision * np.eye(z.shape[1]))
    cov = 0.5 * (cov + cov.T)
    return cov @ z.T @ y / target.log_likelihood.noise_var, cov


def logistic_breast_cancer() -> Target:
    d = _sklearn("load_breast_cancer")
    z = _intercept(_standardize(d.data))
    y = np.asarray(d.target, np.float64)
    return Target("logistic_breast_cancer",
                  "logistic regression, breast cancer (n=569, 30 standardized features + "
                  "intercept, prior N(0, I))",
                  logistic_log_likelihood, GaussianLogPrior(1.0), (z, y),
                  tuple(d.feature_names) + ("intercept",), d.target.astype(np.int64),
                  "the class (malignant / benign)", predictive=logistic_predictive)


def multinomial_wine() -> Target:
    d = _sklearn("load_wine")
    z = _intercept(_standardize(d.data))
    names = tuple(f"{f}[{k}]" for f in (*d.feature_names, "intercept") for k in range(3))
    return Target("multinomial_wine",
                  "softmax regression, wine (n=178, 13 standardized features + intercept, "
                  "3 classes, all 42 weights with prior N(0, I))",
                  SoftmaxLogLikelihood(3), GaussianLogPrior(1.0),
                  (z, np.asarray(d.target, np.int64)), names, d.target.astype(np.int64),
                  "the cultivar (class)", predictive=SoftmaxPredictive(3))


def poisson_linnerud() -> Target:
    d = _sklearn("load_linnerud")
    body = np.asarray(d.target, np.float64)  # weight, waist, pulse
    chins = np.asarray(d.data[:, 0], np.float64)
    z = _intercept(_standardize(body))
    return Target("poisson_linnerud",
                  "Poisson regression of chin-ups on weight, waist and pulse, Linnerud (n=20, "
                  "standardized, log link, prior N(0, I))",
                  poisson_log_likelihood, GaussianLogPrior(1.0), (z, chins),
                  ("weight", "waist", "pulse", "intercept"), _bins(body[:, 0], 4),
                  "quartile of body weight")


def student_t_diabetes() -> Target:
    d = _sklearn("load_diabetes")
    z = _intercept(_standardize(d.data))
    y = _standardize(d.target)
    return Target("student_t_diabetes",
                  "robust regression, diabetes (n=442, 10 standardized features + intercept, "
                  "standardized response, Student-t noise nu=4, beta ~ N(0, I), "
                  "sigma ~ half-normal(1))",
                  StudentTLogLikelihood(4.0), StudentTLogPrior(), (z, y),
                  tuple(d.feature_names) + ("intercept", "log_sigma"), _bins(y, 4),
                  "quartile of the response")


def sparse_mixture() -> Target:
    rng = np.random.default_rng(3)
    truth = np.array([2.0, -1.5, 1.0, 0.5, 0, 0, 0, 0, 0, 0])
    z = rng.normal(size=(40, 10))
    y = z @ truth + rng.normal(size=40)
    return Target("sparse_mixture",
                  "sparse linear regression (generated, n=40, d=10, 4 non-zero, noise 1) with "
                  "the prior 0.5 N(0, 0.1^2) + 0.5 N(0, 2^2) per coefficient (not log-concave)",
                  GaussianLogLikelihood(1.0), ScaleMixtureLogPrior(0.1, 2.0, 0.5), (z, y),
                  tuple(f"beta[{j}]" for j in range(10)), _bins(z[:, 0], 4),
                  "quartile of the first feature")


def eight_schools() -> Target:
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    return Target("eight_schools",
                  "eight schools, non-centred (mu ~ N(0, 25), tau ~ half-Cauchy(5), "
                  "theta_j = mu + tau theta_tilde_j)",
                  eight_schools_log_likelihood, eight_schools_log_prior,
                  (y, sigma, np.eye(8)), ("mu", "log_tau") + tuple(
                      f"theta_tilde[{j}]" for j in range(8)),
                  _bins(y, 4), "quartile of the observed effect", init_scale=0.5)


def bnn_regression() -> Target:
    rng = np.random.default_rng(5)
    u = rng.uniform(-2.0, 2.0, size=40)
    y = np.sin(1.5 * u) + 0.3 * rng.normal(size=40)
    h = _BNN_HIDDEN
    names = tuple(f"{p}[{j}]" for p in ("w1", "b1", "w2") for j in range(h)) + ("b2",)
    return Target("bnn_regression",
                  "one-hidden-layer tanh network (3 units) on generated 1-D data (n=40, "
                  "y = sin(1.5 u) + N(0, 0.3^2), weights ~ N(0, I)); compared through its "
                  f"outputs at u = {BNN_GRID}",
                  BNNLogLikelihood(0.3), GaussianLogPrior(1.0), (u, y), names,
                  _bins(u, 4), "quartile of the input", quantities=bnn_quantities,
                  quantity_names=tuple(f"f({g:g})" for g in BNN_GRID), init_scale=0.5)


#: Groups of :func:`hierarchical_regression`, and their sizes (unequal: the small groups borrow
#: strength from the others through the hyperprior).
HIERARCHICAL_GROUP_SIZES = (6, 10, 15, 20, 30, 40, 50, 69)
#: Names of the shared hyperparameters of :func:`hierarchical_regression`, in order.
HIERARCHICAL_SHARED = ("mu_a", "mu_b", "log_tau_a", "log_tau_b", "log_sigma")


def _half_normal_log(log_scale):
    """``log half-N(s; 0, 1) + log s`` at ``s = exp(log_scale)`` (prior and Jacobian)."""
    return -0.5 * jnp.exp(2.0 * log_scale) + log_scale


def hierarchical_group_prior(shared, local):
    """``log p(a_g, b_g | φ)``: ``a_g ~ N(μ_a, τ_a²)``, ``b_g ~ N(μ_b, τ_b²)``; ``shared`` the
    5 hyperparameters :data:`HIERARCHICAL_SHARED`, ``local = (a_g, b_g)``."""
    mu, log_tau = shared[:2], shared[2:4]
    return jnp.sum(jsp_stats.norm.logpdf(local, mu, jnp.exp(log_tau)))


def hierarchical_hyperprior(shared):
    """``log p(φ)``: ``μ_a, μ_b ~ N(0, 2²)``; ``τ_a, τ_b, σ ~ half-N(0, 1)`` on their logs."""
    return (jnp.sum(jsp_stats.norm.logpdf(shared[:2], 0.0, 2.0))
            + jnp.sum(_half_normal_log(shared[2:5])))


def hierarchical_datum_log_likelihood(shared, local, u, y):
    """``log N(y; a + b u, σ²)`` with ``(a, b) = local`` and ``log σ = shared[4]``."""
    return jsp_stats.norm.logpdf(y, local[0] + local[1] * u, jnp.exp(shared[4]))


def _hierarchical_local(x, g):
    num = len(HIERARCHICAL_GROUP_SIZES)
    return jnp.stack([x[5 + g], x[5 + num + g]])


def hierarchical_log_likelihood(x, datum):
    """Datum ``(u, y, g)`` of group ``g``: ``log N(y; a_g + b_g u, σ²)``; ``x`` the flat
    ``(μ_a, μ_b, log τ_a, log τ_b, log σ, a_1..a_G, b_1..b_G)``."""
    u, y, g = datum
    return hierarchical_datum_log_likelihood(x[:5], _hierarchical_local(x, g), u, y)


def hierarchical_log_prior(x):
    """``log p(φ) + Σ_g log p(a_g, b_g | φ)`` of the flat ``x``."""
    num = len(HIERARCHICAL_GROUP_SIZES)
    local = jnp.stack([x[5:5 + num], x[5 + num:]], axis=-1)
    return hierarchical_hyperprior(x[:5]) + jnp.sum(
        jax.vmap(hierarchical_group_prior, (None, 0))(x[:5], local))


def hierarchical_regression() -> Target:
    sizes = np.asarray(HIERARCHICAL_GROUP_SIZES)
    num = sizes.size
    rng = np.random.default_rng(11)
    a = 1.0 + 1.0 * rng.normal(size=num)
    b = 0.5 + 0.5 * rng.normal(size=num)
    g = np.repeat(np.arange(num), sizes)
    u = rng.normal(size=g.size)
    y = a[g] + b[g] * u + 0.5 * rng.normal(size=g.size)
    names = HIERARCHICAL_SHARED + tuple(f"a[{j}]" for j in range(num)) + tuple(
        f"b[{j}]" for j in range(num))
    return Target("hierarchical_regression",
                  f"hierarchical linear regression on generated grouped data ({num} groups of "
                  f"{sizes.min()}-{sizes.max()}, n={g.size}): y ~ N(a_g + b_g u, sigma^2), "
                  "a_g ~ N(mu_a, tau_a^2), b_g ~ N(mu_b, tau_b^2), mu ~ N(0, 4), "
                  "tau, sigma ~ half-N(0, 1), centred",
                  hierarchical_log_likelihood, hierarchical_log_prior, (u, y, g), names, g // 2,
                  "a pair of groups (2j, 2j + 1)", init_scale=0.5)


def hierarchical_private_potential(target: Target | None = None, *,
                                   batch_size: int | None = None) -> tuple[Potential, np.ndarray]:
    """The personalized potential of :func:`hierarchical_regression`, agent ``i`` holding one
    group (:func:`dgsgld.model.data.split_by_label`, one label per agent): parameters
    ``{"shared": (5,), "local": (2,)}``, ``local = (a_g, b_g)`` private,
    ``f_i = −Σ log N(y; a + b u, σ²) − log p(a, b | φ) − log p(φ)/N``.

    Returns:
        ``(potential, groups (N,))``: the group each agent holds.
    """
    target = target or get_target("hierarchical_regression")
    num = len(HIERARCHICAL_GROUP_SIZES)
    s = _data.split_by_label(target.data, np.asarray(target.data[2], int), num, 1)
    dtype = jnp.result_type(float)
    u, y, g = s.data
    groups = np.asarray(g)[:, 0].astype(int)
    return Potential(_HierarchicalAgentLikelihood(), _HierarchicalHyperprior(),
                     (jnp.asarray(u, dtype), jnp.asarray(y, dtype)), batch_size, mask=s.mask,
                     private=("local",), log_agent_prior=_HierarchicalGroupPrior()), groups


@dataclass(frozen=True)
class _HierarchicalAgentLikelihood:
    def __call__(self, params, datum):
        return hierarchical_datum_log_likelihood(params["shared"], params["local"], *datum)


@dataclass(frozen=True)
class _HierarchicalHyperprior:
    def __call__(self, params):
        return hierarchical_hyperprior(params["shared"])


@dataclass(frozen=True)
class _HierarchicalGroupPrior:
    def __call__(self, params):
        return hierarchical_group_prior(params["shared"], params["local"])


def logistic_large() -> Target:
    z, y, _ = large_logistic_data()
    p = _LARGE_P
    return Target("logistic_large",
                  f"logistic regression on generated data (n=10^6, {p} Gaussian "
                  f"features with AR(1) correlation {_LARGE_RHO} + intercept, prior N(0, I))",
                  logistic_log_likelihood, GaussianLogPrior(1.0), (z, y),
                  tuple(f"beta[{j}]" for j in range(p)) + ("intercept",),
                  _bins(z[:, 0], 16), "sixteenth (quantile bin) of the first feature",
                  predictive=LogisticPredictiveHead(LARGE_PREDICTIVE_INPUTS),
                  num_agents=_LARGE_AGENTS)


TARGETS: dict[str, Callable[[], Target]] = {
    f.__name__: f for f in (gaussian_linear, logistic_breast_cancer, multinomial_wine,
                            poisson_linnerud, student_t_diabetes, sparse_mixture,
                            eight_schools, bnn_regression, logistic_large,
                            hierarchical_regression)
}


#: Targets meant for 16 agents and mini-batches (:attr:`Target.num_agents`): their data take
#: seconds to build, and full-data passes (Stein scores, SVRG anchors, SAGA tables) cost 10⁶
#: per-datum gradients each.
LARGE_TARGETS = ("logistic_large",)


@cache
def get_target(name: str) -> Target:
    """The target called ``name`` (one of :data:`TARGETS`), built once."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; choose one of {sorted(TARGETS)}.")
    return TARGETS[name]()
