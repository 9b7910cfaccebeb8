"""The command line's compile cache: a second process reuses programs, the opt-outs store none."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from dgsgld._cli import cache as _cache

ROOT = Path(__file__).resolve().parents[2]


def _files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def _cli(cache: Path, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DGSGLD_NO_CACHE"}
    env |= {"DGSGLD_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "dgsgld", "run", "--trials", "4", "--num-steps", "3", *extra],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    return "\n".join(line for line in out.splitlines() if not line.startswith("wall time"))


@pytest.mark.slow  # two CLI processes; the opt-out tests below run by default
def test_a_second_process_reuses_every_stored_program(tmp_path):
    first = _cli(tmp_path)
    stored = _files(tmp_path)
    # The run is ONE program (three samplers and every W2): its data, network and key are
    # prepared without eager JAX operations, each of which would be a program of its own.
    assert len(stored) == 1 and next(iter(stored)).startswith("jit__lambda"), stored
    second = _cli(tmp_path)
    assert second == first                  # same numbers from the loaded programs
    assert _files(tmp_path) == stored       # nothing compiled anew: no new entry


def test_the_opt_outs_leave_jax_untouched(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(jax.config, "update", lambda *a: calls.append(a))
    monkeypatch.setenv("DGSGLD_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("DGSGLD_NO_CACHE", "1")
    assert _cache.enable() is None
    monkeypatch.setenv("DGSGLD_NO_CACHE", "0")       # "0" does not opt out ...
    assert _cache.enable(disabled=True) is None      # ... but --no-cache does
    assert calls == []
    assert _cache.enable() == tmp_path / "c"
    assert ("jax_compilation_cache_dir", str(tmp_path / "c")) in calls
    monkeypatch.delenv("DGSGLD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.cache_dir() == tmp_path / "xdg" / "dgsgld" / "jax"


@pytest.mark.parametrize("opt_out", ["--no-cache", "env"])
def test_the_cli_opt_out_stores_nothing(opt_out, tmp_path, monkeypatch):
    from dgsgld.__main__ import build_parser

    args = build_parser().parse_args(["run"] + (["--no-cache"] if opt_out == "--no-cache" else []))
    if opt_out == "env":
        monkeypatch.setenv("DGSGLD_NO_CACHE", "yes")
    else:
        monkeypatch.delenv("DGSGLD_NO_CACHE", raising=False)
    monkeypatch.setenv("DGSGLD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jax.config, "update", lambda *a: pytest.fail("config changed"))
    assert _cache.enable(disabled=args.no_cache) is None


_GRID_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np, dgsgld
from dgsgld._cli import cache as _cache
from dgsgld import networks
from dgsgld.tuning import grid_search
_cache.enable()
data = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3, 2)), jnp.float32)
potential = dgsgld.Potential(lambda t, x: -0.5 * jnp.sum((x - t) ** 2), lambda t: -0.5 * t @ t,
                             data)
init = jnp.zeros((3, 4, 2))
final = lambda trace: jnp.mean(trace.state.position ** 2)
search = grid_search(dgsgld.DIGingSGLD, [0.01, 0.02], potential, networks.barbell(4, period=3),
                     init, jax.random.key(0), 5, score_fn=final)
print(search.best_step_size, *search.scores)
"""


@pytest.mark.slow  # two processes; the opt-out tests above run by default
def test_a_grid_search_program_is_stored_for_the_next_process(tmp_path):
    # The reproduce/sweep commands' programs take the network as an argument; checked on the
    # host first (`dgsgld.checked_network`), it leaves no host callback in them, so JAX stores
    # them (a program with host callbacks is never stored) and a second process loads them.
    env = {k: v for k, v in os.environ.items() if k != "DGSGLD_NO_CACHE"}
    env |= {"DGSGLD_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    go = lambda: subprocess.run([sys.executable, "-c", _GRID_SCRIPT], env=env,  # noqa: E731
                                capture_output=True, text=True, check=True, timeout=600).stdout
    first = go()
    stored = _files(tmp_path)
    assert any(name.startswith("jit__grid_run") for name in stored)
    assert go() == first
    assert _files(tmp_path) == stored
