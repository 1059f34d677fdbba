"""The ``tracestore`` command: run the service, administer it, and work with tracesets.

``upload``, ``listing`` (ls) and ``client`` (the commands on one stored traceset) hold
the commands that talk to a service over HTTP, ``inspect`` the local inspection,
``analyze`` the local analysis; ``serve`` (serve, worker, migrate), ``admin``
(tenant, user, token, workspace) and ``maintenance`` (gc, reinspect, signing-key) those that run or
administer a service on its data directory (they import the server only when they run,
through ``store``); ``common`` and ``output`` are what they all share.
"""

from __future__ import annotations

import gc
import sys

import click

from tracestore import __version__
from tracestore.cli.admin import COMMANDS as ADMIN_COMMANDS
from tracestore.cli.analyze import analyze_command
from tracestore.cli.client import COMMANDS as CLIENT_COMMANDS
from tracestore.cli.common import OWN_PROCESS
from tracestore.cli.compare import compare
from tracestore.cli.inspect import inspect_command
from tracestore.cli.listing import ls
from tracestore.cli.maintenance import COMMANDS as MAINTENANCE_COMMANDS
from tracestore.cli.serve import COMMANDS as SERVE_COMMANDS
from tracestore.cli.upload import upload

__all__ = ["main", "run"]

# httpx imports its own command line whenever rich and click are installed, as they are
# beside tracestore: rich's console, progress and syntax highlighting and pygments, ~85 ms
# of every command that talks to a service (`python -X importtime`). This process never
# runs httpx's command line, and httpx falls back to a stub of it when that import fails,
# which a None in sys.modules makes it do. The commands import rich themselves where they
# draw progress on a terminal.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# The version from the package itself: asking importlib.metadata costs ~20 ms at start.
@click.version_option(__version__, prog_name="tracestore")
def main() -> None:
    """tracestore: keep, find and fetch the trace files of distributed training runs."""


for _command in (
    *SERVE_COMMANDS,
    *ADMIN_COMMANDS,
    *MAINTENANCE_COMMANDS,
    upload,
    ls,
    *CLIENT_COMMANDS,
    inspect_command,
    analyze_command,
    compare,
):
    main.add_command(_command)


def run() -> None:
    """The installed ``tracestore`` command (and ``python -m tracestore.cli``): ``main`` in
    a process of its own. At its end the objects it made are frozen out of the garbage
    collector (``gc.freeze``): the interpreter's last collections would otherwise walk
    every one of them on the way out, ~28 ms of a client command here."""
    try:
        main(obj={OWN_PROCESS: True})
    finally:
        gc.freeze()
