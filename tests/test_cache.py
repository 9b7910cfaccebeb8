"""The command line's compile cache: a second process reuses programs, the opt-outs store none."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgsgld import _cache

ROOT = Path(__file__).resolve().parents[1]


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


def test_a_second_process_reuses_every_stored_program(tmp_path):
    first = _cli(tmp_path)
    stored = _files(tmp_path)
    # Three sampling loops as executables, and JAX's cache entries of the other programs.
    assert sum(name.startswith("executables/") for name in stored) == 3
    assert any(not name.startswith("executables/") for name in stored)
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


def test_load_or_compile_runs_a_stored_executable_without_compiling(monkeypatch, tmp_path):
    fn = lambda x, scale, n: (scale * jnp.cumsum(x) ** n,)   # noqa: E731  n static
    args = (np.arange(5.0, dtype=np.float32), np.float32(2.0), 2)
    expected = fn(*args)[0]
    first = _cache.load_or_compile(fn, args, tag="test", directory=tmp_path)[0]
    assert len(_files(tmp_path)) == 1
    monkeypatch.setattr(jax, "jit", None)            # any compilation would fail now
    second = _cache.load_or_compile(fn, args, tag="test", directory=tmp_path)[0]
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(second, expected)
    monkeypatch.undo()
    # A different static argument is a different program (a different file).
    _cache.load_or_compile(fn, args[:2] + (3,), tag="test", directory=tmp_path)
    assert len(_files(tmp_path)) == 2


def test_programs_with_library_kernels_are_left_to_jax(tmp_path):
    # LAPACK kernels are registered while lowering; a loaded executable would crash on them.
    a = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
    vals = _cache.load_or_compile(lambda m: jnp.linalg.eigh(m)[0], (a,), tag="t", directory=tmp_path)
    np.testing.assert_allclose(vals, np.linalg.eigvalsh(a), rtol=1e-6)
    assert _files(tmp_path) == set()


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
