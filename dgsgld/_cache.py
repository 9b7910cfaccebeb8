"""The command line's persistent compilation cache: compiled programs reused across processes.

``python -m dgsgld run`` compiles three sampling loops (about 2 s each on a laptop CPU); the
``reproduce``/``sweep`` commands compile many more. Two layers, both under :func:`cache_dir`:

* JAX's persistent compilation cache (:func:`enable`): every program a command compiles is
  loaded from disk by the next process (tracing and lowering still run);
* whole executables (:func:`load_or_compile`, used by the main job): the next process skips
  tracing too, which is most of what is left once compilation is cached.

Only the command line turns them on (``dgsgld.__main__`` calls :func:`enable` and passes the
directory down): importing the library never changes JAX's global configuration.

Where: ``$DGSGLD_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/dgsgld/jax``, else
``~/.cache/dgsgld/jax``. Opt out with ``DGSGLD_NO_CACHE=1`` or the commands' ``--no-cache``.
Entries are keyed by JAX on the program, the JAX/XLA version and the device, so a stale entry
is never used; the executables' file names are digests of the program's description (static
arguments, argument shapes and dtypes, the JAX version, the device and the source of dgsgld).
Delete the directory to reclaim the space.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "enable", "load_or_compile"]

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


@cache
def _source_digest() -> str:
    """Digest of dgsgld's own source: an edited library never loads an old executable."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _describe(obj: Any) -> str:
    """A process-independent text for a static leaf or tree structure (no memory addresses)."""
    if callable(obj) and hasattr(obj, "__qualname__"):
        text = f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"
    else:
        text = repr(obj)
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def load_or_compile(fn: Callable, args: tuple, *, tag: str, directory: Path | None,
                    constants: tuple = ()):
    """``fn(*constants, *args)`` run from a stored executable when ``directory`` holds one, else
    compiled (and stored there, unless the program calls library kernels or host callbacks:
    those stay with JAX's cache).

    Args:
        fn: a jittable function.
        args: a tuple of pytrees; their array leaves are the program's arguments (not typed
            PRNG keys: pass key data), other leaves are static.
        tag: what the program is (part of its file name's digest).
        directory: :func:`cache_dir` (from :func:`enable`), or ``None`` to call ``fn`` as is.
        constants: arrays passed to ``fn`` as concrete values (baked into the program; their
            bytes are part of the digest), e.g. a mixing stack that ``dgsgld.sample`` then
            checks on the host instead of inside the computation.

    Returns:
        ``fn(*constants, *args)``.
    """
    if directory is None:
        return fn(*constants, *args)
    import equinox as eqx
    import jax
    import numpy as np

    dynamic, static = eqx.partition(args, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)

    def flat(*arrays):
        return fn(*constants, *eqx.combine(jax.tree.unflatten(treedef, list(arrays)), static))

    from jax.experimental import serialize_executable

    device = jax.devices()[0]
    description = [tag, jax.__version__, device.platform, device.device_kind, _source_digest(),
                   _describe(treedef), [_describe(x) for x in jax.tree.leaves(static)],
                   [(x.shape, str(x.dtype)) for x in leaves],
                   [hashlib.sha256(np.ascontiguousarray(c).tobytes()).hexdigest()
                    + str((np.shape(c), np.asarray(c).dtype)) for c in constants]]
    digest = hashlib.sha256(repr(description).encode()).hexdigest()[:32]
    path = Path(directory) / "executables" / f"{digest}.pkl"
    try:
        payload, in_tree, out_tree = pickle.loads(path.read_bytes())
        compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # missing, truncated or from an incompatible build: compile again
        lowered = jax.jit(flat).lower(*leaves)
        compiled = lowered.compile()
        if "custom_call" in lowered.as_text():
            # Library kernels (LAPACK's eigh, ...) and host callbacks are registered while
            # lowering, which a loaded executable skips: loading one that calls them crashes.
            return compiled(*leaves)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(serialize_executable.serialize(compiled)))
            tmp.replace(path)                        # atomic: concurrent runs never see half
        except OSError:
            pass                                     # a read-only cache only costs speed
    return compiled(*leaves)
