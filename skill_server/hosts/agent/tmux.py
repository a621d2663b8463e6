"""The dedicated tmux server on this host, always addressed by socket path (``tmux -S``).

The path is ``$TMUX_TMPDIR`` (or /tmp) ``/tmux-<uid>/<name>``, exactly where ``tmux -L <name>`` would put
it; it is recorded at launch, so later calls find the server whatever their environment says. Each
process runs as its pane's own command (not typed into a shell), so the wrapper is the pane's session
leader and process group leader, and ``remain-on-exit`` keeps a finished pane inspectable.
"""

from __future__ import annotations

import os
import subprocess

from . import deadline
from .files import AgentError
from .protocol import RUN_MARKER, TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypedDict

    from .protocol import Pane

    class NewPane(TypedDict):
        """A window tmux just created, its pane's command's pid, and its session's id."""

        session_id: str
        window_id: str
        pane_id: str
        pid: int

    class RecordedPane(TypedDict):
        """A pane as a launch recorded it: its id and its command's pid and start time."""

        pane_id: str | None
        pid: int | None
        start: str | None

WIDTH, HEIGHT = 220, 50
TIMEOUT_S = 20
_SEP = "\x1f"
_PANE_FORMAT = _SEP.join(["#{session_name}", "#{window_id}", "#{window_name}", "#{pane_id}", "#{pane_dead}",
                          "#{pane_dead_status}", "#{pane_pid}", "#{session_id}"])
_NEW_FORMAT = _SEP.join(["#{session_id}", "#{window_id}", "#{pane_id}", "#{pane_pid}"])
#: What tells whose a session is: its id, and per pane its id, pid, deadness and the command it started with.
_OWNER_FORMAT = _SEP.join(["#{session_id}", "#{pane_id}", "#{pane_pid}", "#{pane_dead}", "#{pane_start_command}"])


def socket_path(name: str) -> str:
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"
    return os.path.join(os.path.realpath(base), "tmux-%d" % os.getuid(), name)


def _tmux(socket: str, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """One tmux command, bounded by ``TIMEOUT_S`` and by what the request has left (a stopped or hung
    server must not hold the caller past its deadline)."""
    bound = deadline.left(TIMEOUT_S)
    try:
        return subprocess.run(["tmux", "-S", socket] + args, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=bound, check=False)
    except FileNotFoundError:
        raise AgentError("tmux is not installed on this host (experiments run in tmux)", kind="no_tmux") from None
    except subprocess.TimeoutExpired:
        raise AgentError("tmux did not answer within %.0f s (socket %s)" % (max(1.0, bound), socket),
                         kind="timeout") from None


def _err(result: subprocess.CompletedProcess[bytes]) -> str:
    text = " ".join(result.stderr.decode("utf-8", "replace").split())
    return text or "exit %d" % result.returncode


def _new_ids(result: subprocess.CompletedProcess[bytes]) -> NewPane:
    line = result.stdout.decode("utf-8", "replace").strip().splitlines()[-1]
    session_id, window_id, pane_id, pid = line.split(_SEP)
    return {"session_id": session_id, "window_id": window_id, "pane_id": pane_id, "pid": int(pid)}


def new_session(socket: str, session: str, window: str, cwd: str, argv: list[str]) -> NewPane:
    """A detached session whose first window runs ``argv``; remain-on-exit is on before it starts."""
    parent = os.path.dirname(socket)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AgentError("cannot create the tmux socket directory %s: %s" % (parent, exc.strerror or exc)) from None
    command = ["start-server", ";", "set-option", "-wg", "remain-on-exit", "on", ";",
               "new-session", "-d", "-s", session, "-n", window, "-c", cwd, "-x", str(WIDTH),
               "-y", str(HEIGHT), "-P", "-F", _NEW_FORMAT, "--"] + argv
    result = _tmux(socket, command)
    for _ in range(3):
        # The server exits with its last session (a finished run's, removed by its monitor just then): it
        # created nothing for this call, and the next call starts a new server.
        if result.returncode == 0 or "server exited unexpectedly" not in _err(result):
            break
        result = _tmux(socket, command)
    if result.returncode != 0:
        text = _err(result)
        if "duplicate session" in text:
            raise AgentError("a tmux session named %r already exists on %s" % (session, socket), "name",
                             kind="duplicate")
        raise AgentError("tmux new-session failed: " + text)
    return _new_ids(result)


def new_window(socket: str, session: str, window: str, cwd: str, argv: list[str]) -> NewPane:
    result = _tmux(socket, ["new-window", "-d", "-t", "=" + session + ":", "-n", window, "-c", cwd,
                            "-P", "-F", _NEW_FORMAT, "--"] + argv)
    if result.returncode != 0:
        raise AgentError("tmux new-window failed: " + _err(result))
    return _new_ids(result)


def list_panes(socket: str) -> list[Pane] | None:
    """Every pane on the server; None when no server runs there."""
    if not os.path.exists(socket):
        return None
    try:
        result = _tmux(socket, ["list-panes", "-a", "-F", _PANE_FORMAT])
    except AgentError:
        return None
    if result.returncode != 0:
        return None
    panes: list[Pane] = []
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split(_SEP)
        if len(parts) != 8:
            continue
        session, window_id, window_name, pane_id, dead, dead_status, pid, session_id = parts
        panes.append({"session": session, "window_id": window_id, "window": window_name, "pane_id": pane_id,
                      "dead": dead == "1",
                      "dead_status": int(dead_status) if dead_status.lstrip("-").isdecimal() else None,
                      "pid": int(pid) if pid.isdecimal() else None, "session_id": session_id})
    return panes


def recorded_exit(socket: str, session_id: str | None, pane_id: str | None, option: str
                  ) -> tuple[int | None, str | None]:
    """(exit code, where it was found) of a pane whose wrapper ended without an exit file: the session
    option the wrapper set (``option``), else the dead pane's status; (None, None) when tmux has neither,
    or the pane is no longer the recorded one (another session id)."""
    if not pane_id or not session_id or not os.path.exists(socket):
        return None, None
    fields = ["#{session_id}", "#{pane_dead}", "#{pane_dead_status}", "#{%s}" % option]
    try:
        result = _tmux(socket, ["display-message", "-p", "-t", pane_id, _SEP.join(fields)])
    except AgentError:
        return None, None
    parts = result.stdout.decode("utf-8", "replace").strip().split(_SEP)
    if result.returncode != 0 or len(parts) != 4 or parts[0] != session_id:
        return None, None
    _, dead, status, stored = parts
    if stored.lstrip("-").isdecimal():
        return int(stored), "tmux_option"
    if dead == "1" and status.lstrip("-").isdecimal():
        return int(status), "pane_status"
    return None, None


def kill_session(socket: str, session_id: str) -> bool:
    """End the session with this id (``$3``); an id, never a name: names repeat across runs."""
    if not os.path.exists(socket) or not session_id.startswith("$"):
        return False
    try:
        return _tmux(socket, ["kill-session", "-t", session_id]).returncode == 0
    except AgentError:
        return False


def run_sessions(socket: str, exp_id: str, session_id: str | None, recorded: list[RecordedPane]) -> list[str] | None:
    """The ids of the sessions that belong to run ``exp_id``; None when the tmux server did not answer
    (no server at all is an answer: no session).

    A session is the run's when one of its panes was started with the run's marker (every pane of a run
    runs ``env AGENTJET_SKILL_RUN=<exp_id>/<role> ...``), or when it has the recorded session id and a pane
    with a recorded pane id and pid whose start time, while it runs, is the recorded one. A session found by
    name alone is never the run's: names repeat across runs."""
    from . import procs

    if not os.path.exists(socket):
        return []
    try:
        result = _tmux(socket, ["list-panes", "-a", "-F", _OWNER_FORMAT])
    except AgentError:
        return None
    if result.returncode != 0:
        text = _err(result)
        return [] if "no server running" in text or "error connecting" in text else None
    marker = "%s=%s/" % (RUN_MARKER, exp_id)
    known = {(p["pane_id"], p["pid"]): p["start"] for p in recorded if p["pane_id"] and p["pid"]}
    found: list[str] = []
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split(_SEP, 4)
        if len(parts) != 5 or parts[0] in found:
            continue
        sid, pane_id, pid, dead, command = parts
        if marker in command:
            found.append(sid)
            continue
        if sid != session_id or not pid.isdecimal() or (pane_id, int(pid)) not in known:
            continue
        start = known[(pane_id, int(pid))]
        if dead == "1" or start is None or procs.start_time(int(pid)) == start:
            found.append(sid)
    return found


def kill_run_sessions(socket: str, exp_id: str, session_id: str | None, recorded: list[RecordedPane]
                      ) -> tuple[bool, bool]:
    """End every session of run ``exp_id`` (see ``run_sessions``): (whether one was removed, whether the
    tmux server answered so that none is known to be left)."""
    sessions = run_sessions(socket, exp_id, session_id, recorded)
    if sessions is None:
        return False, False
    removed = [sid for sid in sessions if kill_session(socket, sid)]
    return bool(removed), len(removed) == len(sessions)


_RUN_PANES_FORMAT = _SEP.join(["#{session_id}", "#{pane_dead}", "#{pane_start_command}"])


def remove_finished(socket: str, exp_id: str) -> bool | None:
    """Remove the tmux sessions of run ``exp_id`` once every pane in them is dead (their exit codes are on disk:
    the caller's check). A session is the run's when a pane of it was started with the run's marker (each
    pane runs ``env AGENTJET_SKILL_RUN=<exp_id>/<role> bash ...``); it is addressed by its id, never by its
    name, which later runs may reuse. True: none of the run's sessions is left; False: one still has a live
    pane; None: the tmux server did not answer."""
    from .protocol import RUN_MARKER

    if not os.path.exists(socket):
        return True
    try:
        result = _tmux(socket, ["list-panes", "-a", "-F", _RUN_PANES_FORMAT])
    except AgentError:
        return None
    if result.returncode != 0:
        text = _err(result)
        return True if "no server running" in text or "error connecting" in text else None
    marker = "%s=%s/" % (RUN_MARKER, exp_id)
    ours: set[str] = set()
    live: set[str] = set()
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split(_SEP, 2)
        if len(parts) != 3:
            continue
        sid, dead, command = parts
        if marker in command:
            ours.add(sid)
        if dead != "1":
            live.add(sid)
    for sid in ours - live:
        try:
            _tmux(socket, ["kill-session", "-t", sid])
        except AgentError:
            return None
    return not ours & live
