"""The command line's persistent compilation cache: compiled programs reused across processes.

``python -m dgsgld run`` compiles three sampling loops; the ``reproduce``/``sweep`` commands
compile many more. :func:`enable` points JAX's persistent compilation cache at
:func:`cache_dir`, so every program a command compiles is loaded from disk by the next process
(tracing and lowering still run: the toolkit keeps no compiled artefacts of its own, so nothing
can outlive a change of the code it was built from). Only the command line turns it on
(``dgsgld.__main__`` calls :func:`enable`): importing the library never changes JAX's global
configuration.

Where: ``$DGSGLD_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/dgsgld/jax``, else
``~/.cache/dgsgld/jax``. Opt out with ``DGSGLD_NO_CACHE=1`` or the commands' ``--no-cache``.
Entries are keyed by JAX on the program, the JAX/XLA version and the device, so a stale entry
is never used. Delete the directory to reclaim the space.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "enable"]

#: Values of ``DGSGLD_NO_CACHE`` that do NOT opt out (anything else does).
_FALSE = ("", "0", "false", "no", "off")


def cache_dir() -> Path:
    """The per-user directory of the command line's compiled programs (see the module doc)."""
    explicit = os.environ.get("DGSGLD_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "dgsgld" / "jax"


def enable(disabled: bool = False) -> Path | None:
    """Point JAX's persistent compilation cache at :func:`cache_dir`, for every program.

    Args:
        disabled: the ``--no-cache`` flag; ``DGSGLD_NO_CACHE`` (any value but ``0``/``false``/
            ``no``/``off``/empty) also disables.

    Returns:
        The directory in use, or ``None`` when disabled (JAX's configuration is then untouched).
    """
    if disabled or os.environ.get("DGSGLD_NO_CACHE", "").strip().lower() not in _FALSE:
        return None
    import jax

    path = cache_dir()
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Every program, however small or quick to compile: the command line's small programs
    # (moments, W2) are many, and a disk read is cheaper than any compilation.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
