"""The dedicated tmux server on this host, always addressed by socket path (``tmux -S``).

The path is ``$TMUX_TMPDIR`` (or /tmp) ``/tmux-<uid>/<name>``, exactly where ``tmux -L <name>`` would put
it; it is recorded at launch, so later calls find the server whatever their environment says. Each
process runs as its pane's own command (not typed into a shell), so the wrapper is the pane's session
leader and process group leader, and ``remain-on-exit`` keeps a finished pane inspectable.
"""

from __future__ import annotations

import os
import subprocess

from .files import AgentError
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypedDict

    from .protocol import Pane

    class NewPane(TypedDict):
        """A window tmux just created, and its pane's command's pid."""

        window_id: str
        pane_id: str
        pid: int

WIDTH, HEIGHT = 220, 50
TIMEOUT_S = 20
_SEP = "\x1f"
_PANE_FORMAT = _SEP.join(["#{session_name}", "#{window_id}", "#{window_name}", "#{pane_id}", "#{pane_dead}",
                          "#{pane_dead_status}", "#{pane_pid}"])
_NEW_FORMAT = _SEP.join(["#{window_id}", "#{pane_id}", "#{pane_pid}"])


def socket_path(name: str) -> str:
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"
    return os.path.join(os.path.realpath(base), "tmux-%d" % os.getuid(), name)


def _tmux(socket: str, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["tmux", "-S", socket] + args, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise AgentError("tmux is not installed on this host (experiments run in tmux)", kind="no_tmux") from None
    except subprocess.TimeoutExpired:
        raise AgentError("tmux did not answer within %d s (socket %s)" % (TIMEOUT_S, socket)) from None


def _err(result: subprocess.CompletedProcess[bytes]) -> str:
    text = " ".join(result.stderr.decode("utf-8", "replace").split())
    return text or "exit %d" % result.returncode


def _new_ids(result: subprocess.CompletedProcess[bytes]) -> NewPane:
    line = result.stdout.decode("utf-8", "replace").strip().splitlines()[-1]
    window_id, pane_id, pid = line.split(_SEP)
    return {"window_id": window_id, "pane_id": pane_id, "pid": int(pid)}


def new_session(socket: str, session: str, window: str, cwd: str, argv: list[str]) -> NewPane:
    """A detached session whose first window runs ``argv``; remain-on-exit is on before it starts."""
    parent = os.path.dirname(socket)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AgentError("cannot create the tmux socket directory %s: %s" % (parent, exc.strerror or exc)) from None
    result = _tmux(socket, ["start-server", ";", "set-option", "-wg", "remain-on-exit", "on", ";",
                            "new-session", "-d", "-s", session, "-n", window, "-c", cwd, "-x", str(WIDTH),
                            "-y", str(HEIGHT), "-P", "-F", _NEW_FORMAT, "--"] + argv)
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
        if len(parts) != 7:
            continue
        session, window_id, window_name, pane_id, dead, dead_status, pid = parts
        panes.append({"session": session, "window_id": window_id, "window": window_name, "pane_id": pane_id,
                      "dead": dead == "1",
                      "dead_status": int(dead_status) if dead_status.lstrip("-").isdecimal() else None,
                      "pid": int(pid) if pid.isdecimal() else None})
    return panes


def kill_session(socket: str, session: str) -> bool:
    if not os.path.exists(socket):
        return False
    try:
        return _tmux(socket, ["kill-session", "-t", "=" + session]).returncode == 0
    except AgentError:
        return False


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
