"""Ctrl-C for the command line: every command stops within seconds, with status 130.

Python raises ``KeyboardInterrupt`` at the main thread's next bytecode, where it can be lost:
raised inside a garbage-collection callback (JAX registers one) or a ``__del__``, it is printed as
"Exception ignored" and the command runs on to the end. Two guards close that:

* while the package imports under ``python -m dgsgld`` (seconds: JAX), Ctrl-C ends the
  process at once (:func:`exit_while_importing`): nothing has started that needs unwinding;
* while a command runs, :func:`stop_on_interrupt` keeps ``KeyboardInterrupt`` and adds a
  watcher thread woken by the signal itself (``signal.set_wakeup_fd``): if the command has not
  finished ``grace`` seconds after Ctrl-C, the watcher prints the error line and ends the
  process (``os._exit``; checkpoints are written atomically, so this is as safe as a kill).
  A ``KeyboardInterrupt`` that reaches ``sys.unraisablehook`` (raised in a callback, so lost)
  ends the process at once, with the same line instead of the "Exception ignored" report.
"""

import contextlib
import os
import signal
import socket
import sys
import threading


def _exit(signum, frame) -> None:
    os.write(2, b"error: interrupted\n")
    os._exit(130)


_COMMANDS = ("dgsgld", "experiments")


def _is_command_line() -> bool:
    """Whether this process is ``python -m dgsgld`` (or the repository's ``python -m
    experiments``) or the ``dgsgld`` script."""
    argv = list(getattr(sys, "orig_argv", ()))
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] in _COMMANDS:
        return True
    return bool(argv) and os.path.basename(sys.argv[0] if sys.argv else "") in _COMMANDS


def exit_while_importing() -> None:
    """Under the command line only (a library import never changes signal handling): Ctrl-C
    ends the process until :func:`restore` is called."""
    if (_is_command_line() and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        signal.signal(signal.SIGINT, _exit)


def restore() -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` again (after :func:`exit_while_importing`)."""
    if signal.getsignal(signal.SIGINT) is _exit:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def stop_on_interrupt(grace: float):
    """While the block runs, Ctrl-C ends the process with status 130 within ``grace`` seconds
    if the block has not finished by then. Yields an event set when Ctrl-C arrived."""
    interrupted, finished = threading.Event(), threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)

    def watch():
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data or finished.is_set():
                return
            if signal.SIGINT in data:  # the wake-up bytes are signal numbers
                interrupted.set()
                if not finished.wait(grace):
                    os.write(2, b"error: interrupted\n")
                    os._exit(130)
                return

    def lost(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _exit(signal.SIGINT, None)  # nothing will unwind: the interrupt was swallowed
        previous_hook(unraisable)

    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    previous_hook, sys.unraisablehook = sys.unraisablehook, lost
    watcher = threading.Thread(target=watch, name="dgsgld-interrupt", daemon=True)
    watcher.start()
    try:
        yield interrupted
    finally:
        finished.set()
        sys.unraisablehook = previous_hook
        signal.set_wakeup_fd(previous)
        with contextlib.suppress(OSError):
            writer.send(b"\0")
        watcher.join(timeout=1.0)
        reader.close()
        writer.close()


# Imported first by the package: under the command line, from here until ``main`` runs.
exit_while_importing()
