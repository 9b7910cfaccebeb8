"""What a checkpoint's fingerprint costs per ``sample_chunked`` call (ms, median of 5).

Two models: the Gaussian mean model of ``tests/runner/test_checkpoint.py`` (3 agents, 2 chains,
d = 2) and the digits MLP 64-64-10 of ``experiments.digits`` (8 agents, 4 chains, batches of
32). For each: the shape probe ``sample_chunked`` already ran before it had a fingerprint (a
cold ``jax.eval_shape`` of the first chunk), the named fields (:func:`describe`), the program
hash of the whole first chunk, the programs of the potential's functions, and the whole
fingerprint. Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/fingerprint.py``.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld.runner import _fingerprint as _fingerprint
from dgsgld.runner import _random as _random
from dgsgld.runner import checkpoint as checkpoint
from dgsgld.runner.loop import sample


def _ring(n: int) -> np.ndarray:
    w = np.zeros((n, n), np.float32)
    for i in range(n):
        w[i, [i, (i + 1) % n, (i - 1) % n]] = 1 / 3
    return w


def small():
    sys.path.insert(0, "tests")
    from test_checkpoint import KWARGS, W, problem

    alg, potential, init = problem()
    return alg, potential, W, init, KWARGS


def digits(num_agents: int = 8, num_chains: int = 4):
    from experiments.digits import digits_task

    task = digits_task()
    x, y = task.train
    m = len(y) // num_agents * num_agents
    data = (jnp.asarray(x[:m].reshape(num_agents, -1, 64)),
            jnp.asarray(y[:m].reshape(num_agents, -1)))
    potential = dgsgld.Potential(task.log_likelihood, task.log_prior, data, batch_size=32)
    init = jax.vmap(task.init)(jax.random.split(jax.random.key(0), num_chains * num_agents))
    init = jax.tree.map(lambda a: a.reshape(num_chains, num_agents, *a.shape[1:]), init)
    return (dgsgld.DIGingSGLD(1e-3), potential, _ring(num_agents), init,
            dict(output=dgsgld.Output(thin=10)))


def _median_ms(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    for name, make in (("small", small), ("digits", digits)):
        alg, potential, mixing, init, options = make()
        key = jax.random.key(7)
        drawn = _random.fast_key(key)
        _, sample_options = checkpoint._sample_options("raise", options)
        thin = options["output"].thin

        def run(k):
            return sample(alg, potential, mixing, init, k, thin, **sample_options)

        start = time.perf_counter()
        jax.eval_shape(lambda: run(key))
        probe = 1e3 * (time.perf_counter() - start)
        fields = _median_ms(lambda: [_fingerprint.describe(x, "x")
                                     for x in (alg, potential, mixing, init)])
        program = _median_ms(lambda: _fingerprint.program(run, drawn))
        functions = _median_ms(lambda: checkpoint._model_programs(potential, init, True))
        total = _median_ms(lambda: checkpoint._fingerprint(alg, potential, mixing, init, key,
                                                           options, [], run))
        print(f"{name}: shape probe {probe:.0f} ms (cold); fields {fields:.1f} ms; program "
              f"{program:.1f} ms; function programs {functions:.1f} ms; fingerprint {total:.1f} "
              f"ms; {_fingerprint.program(run, drawn)}")


if __name__ == "__main__":
    main()
