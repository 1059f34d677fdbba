"""The command in a process of its own (``tracestore.cli.run``): what its client commands
import is frozen out of the garbage collector, and so is everything at its end; called
in-process (``main``, as the other tests do), the collector is left as it was."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points

import click
import pytest
from click.testing import CliRunner

from tracestore.cli import main
from tracestore.cli.common import OWN_PROCESS, lasting_imports

pytestmark = pytest.mark.slow  # the installed command as processes

# A client command that fails at once (nothing listens on port 9), after its imports.
UNREACHABLE = ["ls", "--url", "http://127.0.0.1:9", "--token", "t"]


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()


def test_a_command_run_as_its_own_process_freezes_its_imports_and_ends_frozen() -> None:
    script = (
        "import atexit, gc, sys\n"
        "from tracestore.cli import run\n"
        "made = []\n"
        "def report():\n"  # a frozen object is in no generation that get_objects lists
        "    print(gc.isenabled(), not any(o is made[0] for o in gc.get_objects()))\n"
        "atexit.register(report)\n"
        "def seen_by_the_command(*args, **kwargs):\n"
        "    print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
        "    made.append([])\n"
        "    raise SystemExit(3)\n"
        "import tracestore.client\n"
        "gc.unfreeze()\n"
        "tracestore.client.Client.__init__ = seen_by_the_command\n"
        f"sys.argv = ['tracestore', *{UNREACHABLE!r}]\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    # While the command runs: the collector is on, and the client's import was frozen.
    # At exit (atexit runs after run()): still on, and what the command made frozen too.
    assert done.stdout.split("\n")[:2] == ["True True", "True True"]


def test_the_installed_command_and_python_m_run_it_as_a_process_of_its_own() -> None:
    (script,) = entry_points(group="console_scripts", name="tracestore")
    assert script.value == "tracestore.cli:run"
    as_python_m = (
        "import atexit, gc, runpy, sys\n"
        "atexit.register(lambda: print(gc.get_freeze_count() > 0))\n"
        f"sys.argv = ['tracestore', *{UNREACHABLE!r}]\n"
        "runpy.run_module('tracestore.cli', run_name='__main__', alter_sys=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", as_python_m],
        capture_output=True,
        text=True,
        env={**os.environ, "TRACESTORE_RETRY_SECONDS": "0"},
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == "True\n"


def test_called_in_process_the_command_leaves_the_collector_as_it_was(unfrozen: None) -> None:
    result = CliRunner().invoke(main, UNREACHABLE, env={"TRACESTORE_RETRY_SECONDS": "0"})
    assert result.exit_code == 1, result.output
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_lasting_imports_pause_the_collector_and_freeze_only_in_a_process_of_its_own(
    unfrozen: None,
) -> None:
    with click.Context(main, obj={OWN_PROCESS: True}):
        with lasting_imports():
            assert not gc.isenabled()
            made: list[list[int]] = [[] for _ in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
        gc.unfreeze()
        with pytest.raises(ImportError), lasting_imports():
            raise ImportError("a failed import")
        assert gc.isenabled()
        gc.unfreeze()
    for obj in (None, {"http": None}):
        with click.Context(main, obj=obj), lasting_imports():
            assert gc.isenabled()
    assert gc.get_freeze_count() == 0
