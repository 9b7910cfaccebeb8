"""The command line that owns a test's argv: ``run``/``launch`` are the library's (``python -m
dgsgld``), ``reproduce``/``sweep``/``bench`` the repository's application (``python -m
experiments``)."""

from dgsgld import __main__ as library_cli
from experiments import __main__ as application_cli

LIBRARY_COMMANDS = ("run", "launch")


def module_for(argv) -> str:
    """``"dgsgld"`` or ``"experiments"``: the ``python -m`` module that runs ``argv``."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return "dgsgld" if command in (*LIBRARY_COMMANDS, None) else "experiments"


def main(argv) -> int:
    """The exit code of ``python -m <module_for(argv)> *argv``, run in this process."""
    cli = library_cli if module_for(argv) == "dgsgld" else application_cli
    return cli.main(argv)
