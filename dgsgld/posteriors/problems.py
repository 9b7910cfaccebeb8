"""The paper's regression problems (§4), split across agents, ready to sample.

Three generators return a :class:`Problem`:

* :func:`linear_regression_problem` — Bayesian linear regression on synthetic data (§4.1), with
  its closed-form Gaussian posterior ``N(m̂, Σ̂)``.
* :func:`logistic_regression_problem` — Bayesian logistic regression on synthetic data
  (§4.2.1), with a held-out test set.
* :func:`breast_cancer_problem` — Bayesian logistic regression on the Breast Cancer Wisconsin
  (Diagnostic) data bundled with scikit-learn (§4.2.2), with a held-out test set.

Every feature vector carries a trailing intercept ``1``, so the parameter has ``d + 1``
entries. Data are generated with NumPy in float64 and stored in float32.
"""

from collections.abc import Callable
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util.types import Array
from ..evaluate import label_accuracy
from ..model.potential import Potential

__all__ = [
    "derive_seeds",
    "GaussianLogLikelihood",
    "GaussianLogPrior",
    "Problem",
    "logistic_labels",
    "breast_cancer_problem",
    "linear_regression_problem",
    "logistic_log_likelihood",
    "logistic_regression_problem",
]


def derive_seeds(seed: int) -> dict:
    """Independent seeds from one integer: the data, the network schedule, the chains' initial
    positions, their PRNG key, and the Monte Carlo reference levels."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer; got {seed!r}.")
    names = ("data", "network", "init", "sampling", "reference")
    states = np.random.SeedSequence(int(seed)).generate_state(len(names))
    return {name: int(s) for name, s in zip(names, states)}


# The model functions are value-hashable so that two problems with the same settings share
# compiled runs (jit caches on static fields by hash and equality).


@dataclass(frozen=True)
class GaussianLogPrior:
    """``log N(x; 0, precision⁻¹ I)`` up to a constant: ``-precision ‖x‖² / 2``."""

    precision: float

    def __call__(self, params: Array) -> Array:
        return -0.5 * self.precision * jnp.sum(params**2)


@dataclass(frozen=True)
class GaussianLogLikelihood:
    """Linear-Gaussian likelihood of one datum ``(z, y)``: ``-(zᵀx − y)² / (2 σ²)``."""

    noise_var: float = 1.0

    def __call__(self, params: Array, datum) -> Array:
        z, y = datum
        return -0.5 * (z @ params - y) ** 2 / self.noise_var


def logistic_log_likelihood(params: Array, datum) -> Array:
    """``log P(y | z, x)`` for ``P(y = 1 | z, x) = σ(zᵀx)``: ``y zᵀx − log(1 + e^{zᵀx})``."""
    z, y = datum
    t = z @ params
    return y * t - jax.nn.softplus(t)


def logistic_labels(params: Array, features: Array) -> Array:
    """Labels ``1[zᵀx > 0]`` predicted by logistic-regression parameters.

    Args:
        params: ``(..., p)``.
        features: ``(n, p)``.

    Returns:
        ``(..., n)`` booleans; compare with ``targets > 0.5`` through
        :func:`dgsgld.evaluate.label_accuracy`.
    """
    return jnp.einsum("...p,tp->...t", params, features) > 0


class Problem(eqx.Module):
    """A Bayesian regression problem whose training data are split evenly across agents.

    Attributes:
        features: ``(N, n_local, p)`` training features of each agent (``p = d + 1``).
        targets: ``(N, n_local)`` responses (linear) or labels in ``{0, 1}`` (logistic).
        log_likelihood: ``(params (p,), (z, y)) -> scalar`` for one datum.
        log_prior: ``params -> scalar``.
        true_params: ``(p,)`` parameter that generated synthetic data, or ``None``.
        posterior_mean, posterior_cov: ``(p,)`` and ``(p, p)`` exact posterior when Gaussian
            (linear regression), else ``None``.
        test_features, test_targets: ``(n_test, p)`` and ``(n_test,)`` held-out data, or
            ``None``.
        name: short description.
        validation_features, validation_targets: ``(n_val, p)`` and ``(n_val,)`` held-out
            data for tuning (never the test set), or ``None``.
    """

    features: Array
    targets: Array
    true_params: Array | None
    posterior_mean: Array | None
    posterior_cov: Array | None
    test_features: Array | None
    test_targets: Array | None
    log_likelihood: Callable = eqx.field(static=True)
    log_prior: Callable = eqx.field(static=True)
    name: str = eqx.field(static=True)
    validation_features: Array | None = None
    validation_targets: Array | None = None

    @property
    def num_agents(self) -> int:
        return self.features.shape[0]

    @property
    def local_size(self) -> int:
        return self.features.shape[1]

    @property
    def dim(self) -> int:
        """``p``, the number of parameters (features plus intercept)."""
        return self.features.shape[2]

    @property
    def num_train(self) -> int:
        return self.num_agents * self.local_size

    def potential(self, batch_size: int | None = None) -> Potential:
        """The agents' potentials ``f_i`` (eqs. 4.2, 4.3); ``batch_size=None`` is the full
        local batch, otherwise mini-batches of ``batch_size`` scaled by ``n_local / b``."""
        return Potential(
            self.log_likelihood,
            self.log_prior,
            (self.features, self.targets),
            batch_size=batch_size,
        )

    def test_accuracy(self, params: Array) -> Array:
        """Accuracy of :func:`logistic_labels` on the held-out set; ``params (..., p)`` ->
        ``(...)``."""
        if self.test_features is None:
            raise ValueError(f"Problem {self.name!r} has no test set.")
        return label_accuracy(logistic_labels(params, self.test_features),
                              self.test_targets > 0.5)


def split_potentials(problem: Problem) -> dict[str, Potential]:
    """The paper's i.i.d. split, and a heterogeneous one: the same data set (same posterior)
    sorted by response before it is dealt out, so that the agents' local posteriors disagree."""
    x, y = np.asarray(problem.features), np.asarray(problem.targets)
    order = np.argsort(y.ravel(), kind="stable")
    shape = x.shape
    sorted_x = x.reshape(-1, shape[-1])[order].reshape(shape)
    sorted_y = y.ravel()[order].reshape(y.shape)
    return {"iid": problem.potential(),
            "sorted": Potential(problem.log_likelihood, problem.log_prior,
                                (jnp.asarray(sorted_x), jnp.asarray(sorted_y)))}


def _check_split(num_train: int, num_agents: int, what: str) -> int:
    if num_agents < 1 or num_train % num_agents:
        raise ValueError(
            f"`num_agents` must divide the {what} ({num_train}) so every agent holds the same "
            f"amount of data; got num_agents={num_agents}."
        )
    return num_train // num_agents


def _with_intercept(z: np.ndarray) -> np.ndarray:
    return np.concatenate([z, np.ones((z.shape[0], 1))], axis=1)


def _agents(z: np.ndarray, y: np.ndarray, num_agents: int) -> tuple[Array, Array]:
    """Consecutive blocks of the (already shuffled) data to agents 0, 1, ..."""
    n_local = z.shape[0] // num_agents
    features = z.reshape(num_agents, n_local, z.shape[1])
    return _f32(features), _f32(y.reshape(num_agents, n_local))


def _f32(x):
    """Host data as a float32 JAX array: converted by NumPy and transferred (``jnp.asarray``
    would compile and run a conversion program for each shape)."""
    return None if x is None else jax.device_put(np.asarray(x, np.float32))


def linear_regression_problem(
    seed: int = 0,
    *,
    num_samples: int = 100,
    dim: int = 5,
    num_agents: int = 20,
    prior_precision: float = 0.1,
    noise_std: float = 1.0,
) -> Problem:
    """Synthetic Bayesian linear regression of §4.1 and its exact posterior.

    The true parameter ``x ~ N(0, λ⁻¹ I_{d+1})`` is drawn once; features ``ẑ ~ N(0, I_d)`` get an
    intercept, ``z = [ẑ, 1]``, and ``y = zᵀx + N(0, σ²)``. Agent ``i`` holds samples
    ``i n̄, ..., (i + 1) n̄ − 1`` (the samples are i.i.d., so this is a uniform split). The
    posterior is ``N(m̂, Σ̂)`` with ``Σ̂ = (ZᵀZ / σ² + λ I)⁻¹`` and ``m̂ = Σ̂ Zᵀy / σ²`` (computed
    in float64).

    Args:
        seed: NumPy seed of the data.
        num_samples: ``n`` (100 in the paper); must be a multiple of ``num_agents``.
        dim: ``d`` features before the intercept (5).
        num_agents: ``N`` (20).
        prior_precision: ``λ`` (0.1).
        noise_std: ``σ`` (1).

    Returns:
        A :class:`Problem` with ``posterior_mean (d+1,)`` and ``posterior_cov (d+1, d+1)``.
    """
    _check_split(num_samples, num_agents, "number of samples")
    if prior_precision <= 0 or noise_std <= 0:
        raise ValueError(
            "`prior_precision` and `noise_std` must be positive; got "
            f"{prior_precision!r} and {noise_std!r}."
        )
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=dim + 1) / np.sqrt(prior_precision)
    z = _with_intercept(rng.normal(size=(num_samples, dim)))
    y = z @ truth + noise_std * rng.normal(size=num_samples)
    precision = z.T @ z / noise_std**2 + prior_precision * np.eye(dim + 1)
    cov = np.linalg.inv(precision)
    cov = 0.5 * (cov + cov.T)
    mean = cov @ (z.T @ y) / noise_std**2
    features, targets = _agents(z, y, num_agents)
    return Problem(
        features,
        targets,
        _f32(truth),
        _f32(mean),
        _f32(cov),
        None,
        None,
        GaussianLogLikelihood(float(noise_std) ** 2),
        GaussianLogPrior(float(prior_precision)),
        f"linear regression (n={num_samples}, d={dim}, N={num_agents})",
    )


def _balanced_indices(labels: np.ndarray, per_class: int) -> np.ndarray | None:
    """The first ``per_class`` indices of each class (in the given order), or ``None``."""
    picks = [np.flatnonzero(labels == c)[:per_class] for c in (0, 1)]
    if min(len(p) for p in picks) < per_class:
        return None
    return np.concatenate(picks)


def _partition(train: np.ndarray, labels: np.ndarray, partition: str, rng) -> np.ndarray:
    """Order of the balanced training set before it is dealt to agents in blocks."""
    if partition == "random":
        return train[rng.permutation(train.size)]
    if partition == "by_label":
        train = train[rng.permutation(train.size)]
        return train[np.argsort(labels[train], kind="stable")]
    raise ValueError(f"`partition` must be 'random' or 'by_label'; got {partition!r}.")


def logistic_regression_problem(
    seed: int = 0,
    *,
    num_samples: int = 600,
    dim: int = 5,
    train_fraction: float = 0.7,
    train_size: int = 380,
    num_agents: int = 20,
    prior_precision: float = 0.1,
    partition: str = "random",
    max_redraws: int = 1000,
) -> Problem:
    """Synthetic Bayesian logistic regression of §4.2.1.

    The true parameter ``x ~ N(0, λ⁻¹ I_{d+1})`` is drawn once, ``ẑ ~ N(0, I_d)``, ``z = [ẑ, 1]``,
    and ``y = 1[p ≤ σ(zᵀx)]`` with ``p ~ U(0, 1)``. The samples are shuffled and split
    ``train_fraction`` / rest into training and test sets; the training set is class-balanced
    to ``train_size`` by keeping the first ``train_size / 2`` samples of each class, shuffled
    again, and dealt to the agents in consecutive blocks. A validation set for tuning (as many
    samples as the test set) is drawn from the same model last, leaving the rest unchanged.

    When a draw leaves fewer than ``train_size / 2`` training samples in a class (an extreme
    intercept), the whole data set, true parameter included, is drawn again from the same
    generator (at most ``max_redraws`` times), so the result is a deterministic function of
    ``seed``.

    Args:
        seed: NumPy seed.
        num_samples: total samples (600).
        dim: ``d`` (5).
        train_fraction: training share (0.7, giving 420 training and 180 test samples).
        train_size: ``n`` after class balancing (380); even and a multiple of ``num_agents``.
        num_agents: ``N`` (20; each agent then holds 19 samples).
        prior_precision: ``λ`` (0.1).
        max_redraws: see above.

    Returns:
        A :class:`Problem` with ``true_params``, ``test_*`` and ``validation_*`` data.
    """
    _check_split(train_size, num_agents, "balanced training-set size `train_size`")
    if train_size % 2:
        raise ValueError(f"`train_size` must be even to balance two classes; got {train_size}.")
    num_train = round(train_fraction * num_samples)
    if not train_size <= num_train < num_samples:
        raise ValueError(
            f"`train_fraction` * `num_samples` = {num_train} training samples cannot be balanced "
            f"to `train_size` = {train_size} while leaving a test set."
        )
    rng = np.random.default_rng(seed)
    for _ in range(max_redraws):
        truth = rng.normal(size=dim + 1) / np.sqrt(prior_precision)
        z = _with_intercept(rng.normal(size=(num_samples, dim)))
        prob = 1.0 / (1.0 + np.exp(-(z @ truth)))
        y = (rng.uniform(size=num_samples) <= prob).astype(np.float64)
        order = rng.permutation(num_samples)
        train, test = order[:num_train], order[num_train:]
        keep = _balanced_indices(y[train], train_size // 2)
        if keep is not None:
            break
    else:
        raise ValueError(
            f"No draw in {max_redraws} gave {train_size // 2} training samples of each class; "
            "lower `train_size` or raise `train_fraction`."
        )
    train = _partition(train[keep], y, partition, rng)
    features, targets = _agents(z[train], y[train], num_agents)
    # Validation data for tuning: fresh draws from the same model, as many as the test set,
    # drawn after everything else so that the training and test data do not change.
    z_val = _with_intercept(rng.normal(size=(test.size, dim)))
    y_val = (rng.uniform(size=test.size) <= 1.0 / (1.0 + np.exp(-(z_val @ truth))))
    return Problem(
        features,
        targets,
        _f32(truth),
        None,
        None,
        _f32(z[test]),
        _f32(y[test]),
        logistic_log_likelihood,
        GaussianLogPrior(float(prior_precision)),
        f"synthetic logistic regression (n={train_size}, d={dim}, N={num_agents})",
        _f32(z_val),
        _f32(y_val.astype(np.float64)),
    )


def breast_cancer_problem(
    seed: int = 0,
    *,
    train_fraction: float = 51 / 569,
    train_size: int = 30,
    num_agents: int = 30,
    prior_precision: float = 0.3,
    partition: str = "random",
) -> Problem:
    """Bayesian logistic regression on Breast Cancer Wisconsin (Diagnostic) (§4.2.2).

    The 569 samples with 30 features bundled with scikit-learn (no download); labels are
    1 = benign, 0 = malignant (scikit-learn's encoding). The split into training and test sets
    is stratified by class: ``round(train_fraction · n_c)`` random samples of each class ``c``
    train (19 + 32 = 51 of 569 for the default 51/569, the paper's 51 training samples), the rest
    test (518). Features are standardized with the mean
    and standard deviation of the training split; the training split is then class-balanced to
    ``train_size`` (the first ``train_size / 2`` of each class in random order), shuffled, and
    dealt to the agents in consecutive blocks (one sample each for 30 agents). The training-split
    samples that balancing leaves out (21 by default) are the validation set for tuning.

    Args:
        seed: NumPy seed of the split.
        train_fraction: training share before balancing (51/569: the paper's 51 samples).
        train_size: ``n`` after balancing (30); even and a multiple of ``num_agents``.
        num_agents: ``N`` (30).
        prior_precision: ``λ`` (0.3, the paper's tuned value).

    Returns:
        A :class:`Problem` with 31 parameters and ``test_*`` and ``validation_*`` data.
    """
    _check_split(train_size, num_agents, "balanced training-set size `train_size`")
    if train_size % 2:
        raise ValueError(f"`train_size` must be even to balance two classes; got {train_size}.")
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"`train_fraction` must lie in (0, 1); got {train_fraction!r}.")
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "breast_cancer_problem needs scikit-learn (pip install scikit-learn), which bundles "
            "the data set."
        ) from err
    data = load_breast_cancer()
    x, y = np.asarray(data.data, np.float64), np.asarray(data.target, np.float64)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in (0, 1):
        idx = rng.permutation(np.flatnonzero(y == c))
        cut = round(train_fraction * idx.size)
        train.append(idx[:cut])
        test.append(idx[cut:])
    train = rng.permutation(np.concatenate(train))
    test = np.sort(np.concatenate(test))
    keep = _balanced_indices(y[train], train_size // 2)
    if keep is None:
        raise ValueError(
            f"The training split holds fewer than {train_size // 2} samples of a class; raise "
            "`train_fraction` or lower `train_size`."
        )
    loc = x[train].mean(axis=0)
    scale = x[train].std(axis=0)
    standard = (x - loc) / np.where(scale > 0, scale, 1.0)
    z = _with_intercept(standard)
    # Validation data for tuning: the training-split samples that balancing left out.
    validation = np.sort(np.setdiff1d(train, train[keep]))
    train = _partition(train[keep], y, partition, rng)
    features, targets = _agents(z[train], y[train], num_agents)
    return Problem(
        features,
        targets,
        None,
        None,
        None,
        _f32(z[test]),
        _f32(y[test]),
        logistic_log_likelihood,
        GaussianLogPrior(float(prior_precision)),
        f"breast cancer logistic regression (n={train_size}, d=30, N={num_agents})",
        _f32(z[validation]),
        _f32(y[validation]),
    )
