"""Checks on launch arguments that need no host: names, paths' form, environment, regexes, the tmux socket.

Shared by the launch, wait and result tools and by ``ray_cluster``; what a path points to is checked
on its host by the agent (``hosts.agent.runs``).
"""

from __future__ import annotations

import hashlib
import os
import re

from skill_server.core.errors import ToolInputError
from skill_server.experiments.models import MAX_ENV_VALUE, MAX_ENV_VARS
from skill_server.hosts.agent.protocol import RUN_MARKER, state_dir

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SOCKET_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_SOCKET = "agentjet"


def socket_name() -> str:
    """The dedicated tmux server's name on every host: ``SKILL_SERVER_TMUX_SOCKET`` when set, else one per
    state directory (``default_socket``)."""
    name = os.environ.get("SKILL_SERVER_TMUX_SOCKET") or default_socket()
    if not SOCKET_RE.match(name):
        raise ToolInputError(
            f"SKILL_SERVER_TMUX_SOCKET={name!r} is not a usable socket name (letters, digits, '_', '.', '-')",
            field="SKILL_SERVER_TMUX_SOCKET")
    return name


def default_socket() -> str:
    """``agentjet`` for the default state directory, ``agentjet-<8 hex>`` (of its absolute path) for another.

    Each state directory is its own workspace with its own registry: a tmux server of its own keeps a listing
    of the server's sessions (what a user attaches to, what ``ray_cluster`` reads) from showing another
    workspace's runs. Runs keep the socket they were started on (their handle records it), so runs of an
    older version stay reachable."""
    here = state_dir()
    default = os.path.abspath(os.path.join(os.path.expanduser("~"), ".local", "state", "agentjet-swarm-skill"))
    if here == default:
        return DEFAULT_SOCKET
    return f"{DEFAULT_SOCKET}-{hashlib.sha256(here.encode()).hexdigest()[:8]}"


#: Words a purpose sentence needs and a session name does not.
FILLER = frozenset((
    "a", "an", "the", "of", "to", "for", "and", "or", "in", "on", "at", "by", "with", "from", "into", "via", "as",
    "is", "are", "be", "we", "our", "us", "i", "my", "you", "your", "it", "its", "this", "that", "these", "those",
    "which", "what", "whether", "if", "how", "than", "then", "so", "do", "does", "can", "will", "want", "would",
    "should", "let"))
SLUG_CHARS = 24  # a name to type in `tmux attach -t`, not a sentence


def _slug(text: str) -> str:
    """A few words of ``text``: lower-case letters and digits, filler words dropped, whole words only (up to
    ``SLUG_CHARS`` characters; a first word longer than that is cut)."""
    every = re.findall(r"[a-z0-9]+", text.lower())
    words = [w for w in every if w not in FILLER] or every
    out = ""
    for word in words:
        joined = f"{out}_{word}" if out else word
        if len(joined) > SLUG_CHARS:
            break
        out = joined
    return out or (words[0][:SLUG_CHARS] if words else "")


def session_name(name: str | None, purpose: str | None) -> str:
    if name is not None:
        if not NAME_RE.match(name):
            raise ToolInputError(
                f"{name!r} is not a usable session name: use 1-64 letters, digits, '_' or '-' "
                "(tmux treats '.' and ':' as separators)", field="name")
        return name if "ajet" in name else ("ajet_" + name)[:64]
    if purpose:
        slug = _slug(purpose)
        if slug:
            return slug if "ajet" in slug else "ajet_" + slug
    raise ToolInputError("a session name is required (or a blueprint with [exp_purpose])", field="name")


def host_path(value: str, field: str) -> str:
    """A path on some host: absolute, or ``~``-relative (expanded there). Nothing is checked here."""
    if "\x00" in value:
        raise ToolInputError("contains a NUL character", field=field)
    if not (value.startswith("/") or value == "~" or value.startswith("~/")):
        raise ToolInputError(f"give an absolute path (got {value!r})", field=field)
    return value


def relative_path(value: str, field: str) -> str:
    """A path that may also be relative (resolved on the host against the workdir or result dir)."""
    if "\x00" in value:
        raise ToolInputError("contains a NUL character", field=field)
    if not value.strip():
        raise ToolInputError("empty path", field=field)
    return value


def check_env(env: dict[str, str] | None, field: str) -> dict[str, str]:
    env = dict(env or {})
    if len(env) > MAX_ENV_VARS:
        raise ToolInputError(f"at most {MAX_ENV_VARS} variables", field=field)
    for key, value in env.items():
        if not ENV_KEY_RE.match(key) or len(key) > 200:
            raise ToolInputError(f"{key!r} is not a valid environment variable name", field=f"{field}.{key}")
        if key == RUN_MARKER:
            raise ToolInputError(f"{RUN_MARKER} is reserved: it marks every process of a run", field=f"{field}.{key}")
        if "\x00" in value:
            raise ToolInputError("contains a NUL character", field=f"{field}.{key}")
        if len(value) > MAX_ENV_VALUE:
            raise ToolInputError(f"longer than {MAX_ENV_VALUE} characters", field=f"{field}.{key}")
    return env


def compile_pattern(pattern: str, field: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ToolInputError(f"not a valid regular expression: {exc}", field=field) from None
