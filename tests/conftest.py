import os

# XLA:CPU's multi-threaded Eigen pool has been seen to wedge, never returning from a finished
# vmap computation, on shared CI machines (a hang no timeout inside Python can end): tests run
# Eigen single-threaded, one XLA:CPU worker per test process. Set before JAX starts a backend;
# subprocesses inherit it.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=false"]).strip()

import jax
import pytest
from hypothesis import settings

# Property tests draw the same examples on every run, so that a run's verdict never depends on
# draws no one has seen; `--hypothesis-profile explore` draws new ones (and keeps failures in
# the example database).
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")

# Tests that call the command line in-process must not store programs in the user's cache
# (nor point JAX's cache elsewhere for the rest of the session); tests/test_cache.py opts in.
os.environ.setdefault("DGSGLD_NO_CACHE", "1")

# Catch ``(n, d)`` vs ``(d,)`` broadcasting slips in mixing and gradient code.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
