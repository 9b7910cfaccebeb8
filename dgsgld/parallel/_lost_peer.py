"""One line instead of a page when another process of a multi-process run dies.

When a process of a ``jax.distributed`` run dies, the coordination service stops the others by
aborting them from one of its threads, with its log lines and a C++ stack trace on standard
error. ``jax.distributed.initialize`` takes no callback for it (and the jaxlib client's own
``missed_heartbeat_callback`` cannot be given a Python function: calling it fails to convert
the status). So :func:`dgsgld.parallel.processes.initialize` routes the process's standard error
through this file, run as a small filter process: it forwards every line unchanged, holds back
the coordination service's log lines, and when they end in the fatal error it prints one line
naming the process that died instead of them and the stack trace that follows. Held lines that
are not followed by a fatal error within :data:`HOLD_SECONDS` are forwarded as they were.

What it cannot change: the survivor still ends by ``abort`` (exit status 134 from a shell,
``-6`` from ``subprocess``), since the abort comes from the coordination client's thread.

Self-contained (standard library only), so that it runs without importing dgsgld or JAX::

    python _lost_peer.py PROCESS_ID NUM_PROCESSES  < stderr-of-the-process
"""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import time

#: A line of the coordination service's log (glog format: severity, date, time, thread, file).
_COORDINATION = re.compile(
    rb"^[IWEF]\d{4} [\d:.]+\s+\d+ (coordination_service\w*\.cc|preemption_sync_manager\.cc|"
    rb"client\.(?:h|cc)|service\.cc):\d+\]")
#: The line that announces the abort.
_FATAL = (b"detected fatal errors", b"Check failure stack trace")
#: Seconds that held lines wait for the fatal error before they are forwarded.
HOLD_SECONDS = 3.0


def dead_processes(text: str, me: int) -> tuple[list[int], str]:
    """``(ids, how)``: the processes the coordination service's error ``text`` names as dead
    (never ``me``), and how it knows."""
    _, found, tail = text.partition("stopped sending heartbeats")
    if found:  # the service's list: one task id per line after the colon
        ids = []
        for line in tail.split("\n")[1:]:
            if not line.strip().isdigit():
                break
            ids.append(int(line))
        ids = [i for i in ids if i != me]
        if ids:
            return ids, "it stopped sending heartbeats"
    if ("leader task was preempted/died" in text or "to coordination service" in text) and me:
        return [0], "the coordination service it ran is unreachable"
    ids = sorted({int(t) for t in re.findall(r"task:(\d+)", text)} - {me})
    return ids, "the coordination service reported it"


def message(text: str, me: int, count: int) -> str:
    """The one line printed for a coordination service's fatal error ``text``."""
    ids, how = dead_processes(text, me)
    of = f" of {count}" if count > 0 else ""
    who = ("another process" if not ids else
           " and ".join(f"process {i}{of}" for i in ids))
    this = f"process {me}{of}" if me >= 0 else "this process"
    return (f"error: {who} of this jax.distributed run died ({how}); {this} was stopped by "
            "the coordination service. Restart every process with the same command to resume "
            "from the last checkpoint the processes committed.")


def _filter(source: int, sink: int, me: int, count: int) -> None:
    held: list[bytes] = []
    fatal, since, pending = False, 0.0, b""
    while True:
        wait = None if not held or fatal else max(0.0, since + HOLD_SECONDS - time.monotonic())
        ready, _, _ = select.select([source], [], [], wait)
        if not ready:  # held lines without a fatal error: forward them
            os.write(sink, b"".join(held))
            held = []
            continue
        chunk = os.read(source, 1 << 16)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            line += b"\n"
            if fatal:
                held.append(line)
            elif held or _COORDINATION.match(line):
                if not held:
                    since = time.monotonic()
                held.append(line)
                fatal = any(f in line for f in _FATAL)
            else:
                os.write(sink, line)
    if pending:  # a last line without a newline
        if held:
            held.append(pending)
        else:
            os.write(sink, pending)
    if fatal:
        text = b"".join(held).decode("utf-8", "replace")
        os.write(sink, (message(text, me, count) + "\n").encode())
    elif held:
        os.write(sink, b"".join(held))


if __name__ == "__main__":
    # Ctrl-C or a launcher's SIGTERM is for the process being filtered; this one ends when
    # the last copy of the pipe's write end closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _filter(0, 1, int(sys.argv[1]), int(sys.argv[2]))
