"""The command line's compile cache: a second process reuses programs, the opt-outs store none."""

import os
import subprocess
import sys
from pathlib import Path

import jax
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


@pytest.mark.slow  # two CLI processes; the opt-out tests below run by default
def test_a_second_process_reuses_every_stored_program(tmp_path):
    first = _cli(tmp_path)
    stored = _files(tmp_path)
    # JAX's cache entries: the run's one program (three samplers and every W2), and small ones.
    assert any(name.startswith("jit__lambda") for name in stored)
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
