"""Starting the run's two daemons, the monitor (``monitor``) and its supervisor (``supervisor``), on this host.

Each is this version's agent install (``<state>/agent/<digest>/``, made by the same stage one that SSH calls run;
no per-run copy) run as ``<entry> RUN_DIR``, in a session of its own, outside the run's process groups and
without the run marker, so a stop, a closed pane or a dropped ssh link never takes it down with the run. The
process ``start`` spawns detaches at once (``detach``: it forks again and is adopted by init) and ``start`` waits
for that first process only. Where the install is missing it goes through stage one, which installs it.
Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os
import signal
import sys

from . import files
from .files import AgentError
from .protocol import RUN_MARKER, TYPE_CHECKING
from .rundir import LOG

if TYPE_CHECKING:
    from typing import Any

START_TIMEOUT_S = 20.0
#: The daemons there are (each module has ``main(argv)``).
ENTRIES = ("monitor", "supervisor")
#: The channel nonce of a daemon started through stage one (its stdin carries nothing else).
_NONCE = "monitor"
_PAYLOAD: list[bytes] = []


def payload() -> bytes:
    """What a daemon's interpreter reads on stdin through stage one: the stage one and sources SSH ships."""
    from . import program

    if not _PAYLOAD:
        _PAYLOAD.append(program.ssh_payload(_NONCE))
    return _PAYLOAD[0]


def environment() -> dict[str, str]:
    """The daemon's environment: this one without the run marker, with the state directory the launch used."""
    env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    from .protocol import STATE_DIR_ENV, state_dir

    env[STATE_DIR_ENV] = state_dir()  # the install and the run directory the launch used, whatever HOME says
    return env


#: How a daemon starts from this version's install (``program.install_dir``): nothing else is loaded.
_FROM_INSTALL = ("import sys; sys.path.insert(0, sys.argv[1]); from ajs_agent import %s as m; "
                 "sys.exit(m.main(sys.argv[2:]))")


def argv(run_dir: str, entry: str = "monitor") -> tuple[list[str], bool]:
    """The daemon's interpreter arguments (after ``python -I -S``), and whether they run this version's install
    (else the stage one SSH calls run, which reads its payload on stdin and installs it)."""
    from . import program

    if entry not in ENTRIES:
        raise ValueError(entry)
    base = program.install_dir()
    if os.path.isfile(os.path.join(base, program.PACKAGE, entry + ".py")):
        return ["-c", _FROM_INSTALL % entry, base, run_dir], True
    return ["-c", program.BOOTSTRAP, *program.bootstrap_argv(_NONCE), entry, run_dir], False


def start(run_dir: str, entry: str = "monitor") -> None:
    """Start the run's ``entry`` daemon; raises ``AgentError`` when it did not start."""
    import subprocess

    args, installed = argv(run_dir, entry)
    log_path = os.path.join(run_dir, LOG)
    try:
        with open(log_path, "ab") as log:
            child = subprocess.Popen([sys.executable, "-I", "-S"] + args,
                                     stdin=subprocess.DEVNULL if installed else subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=log, cwd=run_dir, env=environment(),
                                     start_new_session=True, close_fds=True)
    except OSError as exc:
        raise AgentError("cannot start the run %s: %s" % (entry, exc.strerror or exc)) from None
    try:
        child.communicate(None if installed else payload(), timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise AgentError("the run %s did not start within %d s" % (entry, START_TIMEOUT_S)) from None
    if child.returncode != 0:
        from .scanner import clip

        said = (files.read_small(log_path, 1024 * 1024) or "").strip().splitlines()
        raise AgentError("the run %s did not start (exit %s): %s" % (
            entry, child.returncode, clip(said[-1] if said else "no message", 300)))


def detach() -> None:
    """Leave the launcher (it waits for this first process only) and every terminal: fork once more; the child
    is adopted by init and reads nothing from the launcher's pipe."""
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def log(text: str) -> None:
    """A line in the run's ``monitor.log`` (the daemons' stderr); a full disk loses it, never the daemon."""
    import time

    try:
        sys.stderr.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), text))
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def on_term(flag: dict[str, Any]) -> None:
    """SIGTERM and SIGINT set ``flag["stop"]`` (the daemon ends at its next look)."""

    def handler(signum: int, frame: object) -> None:
        del signum, frame
        flag["stop"] = True

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
