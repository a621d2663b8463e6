"""The dedicated tmux server experiments run on (libtmux, always with an explicit socket name).

The socket name comes from ``SKILL_SERVER_TMUX_SOCKET`` (default ``agentjet``), so the user's own tmux
server is never touched and an inherited ``$TMUX`` cannot redirect us. The global window option
``remain-on-exit`` is set before windows are created, so a pane whose shell exits stays inspectable.
Status uses one ``list-panes -a`` per socket for all experiments instead of one query per object.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

import libtmux
from libtmux import exc as tmux_exc

from skill_server.errors import ToolFailure, ToolInputError

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "agentjet"
SOCKET_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
WIDTH, HEIGHT = 220, 50
_SEP = "\x1f"
_PANE_FORMAT = _SEP.join(
    ["#{session_name}", "#{window_id}", "#{window_name}", "#{pane_id}", "#{pane_dead}", "#{pane_dead_status}",
     "#{pane_pid}"]
)


def socket_name() -> str:
    name = os.environ.get("SKILL_SERVER_TMUX_SOCKET") or DEFAULT_SOCKET
    if not SOCKET_RE.match(name):
        raise ToolInputError(
            f"SKILL_SERVER_TMUX_SOCKET={name!r} is not a usable socket name (letters, digits, '_', '.', '-')",
            field="SKILL_SERVER_TMUX_SOCKET",
        )
    return name


def attach_command(socket: str, session: str) -> str:
    prefix = ""
    tmpdir = os.environ.get("TMUX_TMPDIR")
    if tmpdir:
        prefix = f"TMUX_TMPDIR={tmpdir} "
    return f"{prefix}tmux -L {socket} attach -t {session}"


def server(socket: str) -> libtmux.Server:
    """``socket`` is a socket name (``-L``) or, when it starts with '/', a socket path (``-S``)."""
    if socket.startswith("/"):
        return libtmux.Server(socket_path=socket)
    return libtmux.Server(socket_name=socket)


def socket_path(name: str) -> str | None:
    """Where tmux puts the socket of ``-L name`` (``$TMUX_TMPDIR`` or /tmp, then tmux-<uid>); None if absent.

    Recorded at launch so that later calls made with another ``TMUX_TMPDIR`` still find the server.
    """
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"
    path = os.path.join(os.path.realpath(base), f"tmux-{os.getuid()}", name)
    return path if os.path.exists(path) else None


@dataclass(frozen=True)
class PaneInfo:
    session: str
    window_id: str
    window_name: str
    pane_id: str
    dead: bool
    dead_status: int | None
    pid: int | None


def list_panes(socket: str) -> list[PaneInfo] | None:
    """Every pane on the socket; None when no tmux server is running there."""
    try:
        result = server(socket).cmd("list-panes", "-a", "-F", _PANE_FORMAT)
    except (tmux_exc.LibTmuxException, OSError) as exc:
        log.debug("list-panes failed on %s: %s", socket, exc)
        return None
    if result.returncode != 0:
        return None
    panes = []
    for line in result.stdout:
        parts = line.split(_SEP)
        if len(parts) != 7:
            continue
        session, window_id, window_name, pane_id, dead, dead_status, pid = parts
        panes.append(PaneInfo(
            session, window_id, window_name, pane_id, dead == "1",
            int(dead_status) if dead_status.lstrip("-").isdigit() else None,
            int(pid) if pid.isdigit() else None,
        ))
    return panes


def _check(result: libtmux.common.tmux_cmd, what: str) -> list[str]:
    if result.returncode != 0:
        raise ToolFailure(f"tmux {what} failed: {' '.join(result.stderr) or 'exit ' + str(result.returncode)}")
    return result.stdout


def set_remain_on_exit_global(srv: libtmux.Server) -> None:
    srv.cmd("set-option", "-wg", "remain-on-exit", "on")


def create_session(socket: str, session: str, window_name: str, workdir: str) -> tuple[str, str]:
    """A detached session with one window running the user's shell; returns (window_id, pane_id).

    Raises ``ToolFailure`` naming ``name`` when the session already exists (tmux is the arbiter, so two
    concurrent launches of one name cannot both succeed).
    """
    srv = server(socket)
    if srv.is_alive():
        set_remain_on_exit_global(srv)
    result = srv.cmd(
        "new-session", "-d", "-s", session, "-n", window_name, "-c", workdir, "-x", str(WIDTH), "-y", str(HEIGHT),
        "-P", "-F", "#{window_id}" + _SEP + "#{pane_id}",
    )
    if result.returncode != 0:
        text = " ".join(result.stderr)
        if "duplicate session" in text:
            raise ToolFailure(f"a tmux session named {session!r} already exists on socket {socket!r}", field="name")
        raise ToolFailure(f"tmux new-session failed: {text or 'exit ' + str(result.returncode)}")
    window_id, pane_id = result.stdout[0].split(_SEP)
    set_remain_on_exit_global(srv)
    srv.cmd("set-option", "-w", "-t", window_id, "remain-on-exit", "on")
    return window_id, pane_id


def new_window(socket: str, session: str, window_name: str, workdir: str) -> tuple[str, str]:
    srv = server(socket)
    out = _check(srv.cmd(
        "new-window", "-d", "-t", f"={session}:", "-n", window_name, "-c", workdir,
        "-P", "-F", "#{window_id}" + _SEP + "#{pane_id}",
    ), "new-window")
    window_id, pane_id = out[0].split(_SEP)
    return window_id, pane_id


def type_line(socket: str, pane_id: str, text: str) -> None:
    """Type ``text`` into the pane's shell and press Enter (literal keys, no key-name interpretation)."""
    srv = server(socket)
    _check(srv.cmd("send-keys", "-t", pane_id, "-l", text), "send-keys")
    _check(srv.cmd("send-keys", "-t", pane_id, "Enter"), "send-keys")


def interrupt(socket: str, pane_id: str) -> bool:
    """Ctrl-C to the pane's foreground process group; False if the pane is gone."""
    result = server(socket).cmd("send-keys", "-t", pane_id, "C-c")
    return result.returncode == 0


def kill_session(socket: str, session: str) -> bool:
    result = server(socket).cmd("kill-session", "-t", f"={session}")
    return result.returncode == 0
