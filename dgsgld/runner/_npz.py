"""Reading ``.npz`` archives without trusting them: checkpoints and trace files.

A file is opened without following a symbolic link and only when it is a regular file (a FIFO
or a device would block or never end). Every member's ``.npy`` header is read and checked by
the caller before its data is, and its declared size must agree with that header, so a damaged
or hostile file cannot make the reader allocate more than the file declares; compressed
members are read only up to a limit on what they declare (their inflated size), which bounds
what a zip bomb can inflate to, and a stored member may not declare more bytes than the file
holds. Errors are :class:`ArchiveError`, whose message says what is
wrong; the caller names the file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import zipfile
from collections.abc import Callable

import numpy as np

__all__ = ["ArchiveError", "open_regular", "Archive", "digest"]


class ArchiveError(ValueError):
    """What is wrong with an archive, as a phrase that follows its file name."""


def open_regular(file: str, flags: int = os.O_RDONLY, mode: int = 0o644,
                 one_name: bool = False) -> int:
    """A file descriptor for ``file``, opened without following a link, refused unless it is a
    regular file (``one_name``: with no other hard link). ``flags`` may add ``os.O_CREAT``."""
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(
        os, "O_CLOEXEC", 0)
    try:
        fd = os.open(file, flags, mode)
    except OSError as err:
        if err.errno == errno.ELOOP or os.path.islink(file):
            raise ArchiveError("is a symbolic link; it is not followed") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ArchiveError("is not a regular file")
        if one_name and info.st_nlink > 1:
            raise ArchiveError(f"has {info.st_nlink} hard links; it may be another file")
    except BaseException:
        os.close(fd)
        raise
    return fd


class Archive:
    """An open ``.npz``: its member names and a checked read of each.

    Args:
        file: the path.
        max_compressed: the most bytes that compressed members may declare in all (``0``:
            compressed members are refused).
    """

    def __init__(self, file: str, max_compressed: int = 0):
        self.file = file
        fd = open_regular(file)
        size = os.fstat(fd).st_size
        try:
            self._zip = zipfile.ZipFile(os.fdopen(fd, "rb"))
        except (zipfile.BadZipFile, ValueError, OSError) as err:
            raise ArchiveError(f"is unreadable ({type(err).__name__}: {err})") from err
        infos = self._zip.infolist()
        for info in infos:  # a stored entry's data lies inside the file
            stored = info.compress_type == zipfile.ZIP_STORED
            if info.compress_size > size or (stored and info.file_size > size):
                self.close()
                raise ArchiveError(
                    f"declares {max(info.compress_size, info.file_size)} bytes for its entry "
                    f"`{info.filename}`, more than the file's {size}")
        self._members = {info.filename: info for info in infos}
        self.names = {n[: -len(".npy")] for n in self._members if n.endswith(".npy")}
        if len(self.names) != len(infos):
            others = sorted(n for n in self._members if not n.endswith(".npy"))
            self.close()
            raise ArchiveError(f"holds {len(infos)} entries, not all NumPy arrays "
                               f"(also {others[:10]})")
        declared = sum(info.file_size for info in infos if info.compress_type != zipfile.ZIP_STORED)
        if declared > max_compressed:
            name = next(info.filename for info in infos
                        if info.compress_type != zipfile.ZIP_STORED)[: -len(".npy")]
            self.close()
            raise ArchiveError(
                f"has a compressed entry `{name}`" + (
                    f" (its compressed entries declare {declared} bytes, more than the "
                    f"{max_compressed} read from compressed entries)" if max_compressed else "")
            )

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def check_names(self, expected, partial: bool = False) -> None:
        """The archive holds exactly the ``expected`` names (``partial``: at least them)."""
        expected = set(expected)
        if not (expected <= self.names if partial else expected == self.names):
            missing, extra = sorted(expected - self.names), sorted(self.names - expected)
            raise ArchiveError(f"holds {len(self.names)} entries; missing {missing[:10]}, "
                               f"unexpected {extra[:10]}")

    def read(self, name: str, check: Callable[[tuple, np.dtype], str | None]) -> np.ndarray:
        """Member ``name``; ``check(shape, dtype)`` returns what is wrong with its header, or
        ``None``, before any of its data is read."""
        info = self._members[name + ".npy"]
        try:
            with self._zip.open(info) as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
                if dtype.hasobject:
                    raise ArchiveError(f"has an entry `{name}` of object dtype")
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if info.file_size != f.tell() + nbytes:
                    raise ArchiveError(f"has an entry `{name}` whose size ({info.file_size} "
                                       f"bytes) disagrees with its header ({shape}, {dtype})")
                wrong = check(shape, dtype)
                if wrong:
                    raise ArchiveError(f"has an entry `{name}` {wrong}")
                buffer = bytearray(nbytes)
                if f.readinto(buffer) != nbytes:
                    raise ArchiveError(f"has a truncated entry `{name}`")
        except ArchiveError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise ArchiveError(
                f"has an unreadable entry `{name}` ({type(err).__name__}: {err})"
            ) from err
        return np.frombuffer(buffer, dtype).reshape(shape, order="F" if fortran else "C")


def digest(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes (C order)."""
    h = hashlib.sha256(f"{array.dtype.str}{list(array.shape)}".encode())
    h.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    return h.hexdigest()
