import os
import sys
import threading
import traceback

# XLA:CPU's multi-threaded Eigen matrix products have been reported to wedge its thread pool
# (a pool thread waiting on work queued behind it; docs/known-issues.md): tests run them
# single-threaded. Set before JAX starts a backend; subprocesses inherit it.
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
# (nor point JAX's cache elsewhere for the rest of the session); tests/cli/test_cache.py opts in.
os.environ.setdefault("DGSGLD_NO_CACHE", "1")

# Catch ``(n, d)`` vs ``(d,)`` broadcasting slips in mixing and gradient code.
jax.config.update("jax_numpy_rank_promotion", "raise")


def _stuck(nodeid: str, seconds: float, fd: int) -> None:
    """A test has run ``seconds`` past its timeout without pytest-timeout ending it: it is
    stuck outside Python bytecode (compiled code, a C call). Write its name and the main
    thread's innermost frames, innermost last, so that they end any log's tail, and exit the
    worker (reported as a failure of this test)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    frames = traceback.extract_stack(frame)[-12:] if frame is not None else []
    lines = [f"STUCK {nodeid}: {seconds:.0f} s; main thread, innermost frame last:"]
    lines += [f"  {f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno} {f.name}: {f.line}"
              for f in frames]
    lines.append("threads: " + ", ".join(t.name for t in threading.enumerate()))
    os.write(fd, ("\n".join(lines) + "\n").encode())
    os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # The Python-level fallback of pytest-timeout's signal method, from a thread (which runs
    # while the main thread waits in compiled code with the interpreter lock released);
    # `faulthandler_timeout` covers a test that holds the lock.
    # Written where pytest's faulthandler writes: the worker's stderr before output capture.
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    marker = item.get_closest_marker("timeout")
    limit = (marker.args[0] if marker and marker.args else None) or item.config.getoption(
        "timeout", None) or float(item.config.getini("timeout") or 0)
    fd = item.config.stash.get(fault_handler_stderr_fd_key, 2)
    timer = None
    if limit:
        timer = threading.Timer(limit + 30, _stuck, args=(item.nodeid, limit + 30, fd))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


@pytest.fixture
def key():
    return jax.random.key(0)
