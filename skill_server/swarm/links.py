"""Which experiment launched a swarm server, and on which port (for ``swarm_status`` and ``episode_cap``).

The experiment registry records each run's processes (role, command, workdir, wait_for_url, and on
remote runs a host). The swarm server's address is derived from them in one place,
``server_address``: ``--swarm-port N`` in the ``ajet-swarm start`` command, else an ``AJET_SWARM_URL``
the run sets, else a client's ``wait_for_url``, else AgentJet's default port 10086. The registry's
row shape may change; only this module reads it.
"""

from __future__ import annotations

import re
import shlex
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field

from skill_server.core.errors import SkillError, ToolInputError
from skill_server.core.models import SparseOutput

DEFAULT_SWARM_PORT = 10086
_PORT_FLAG = re.compile(r"--swarm-port(?:=|\s+)([0-9]{1,5})\b")
_URL_ASSIGNMENT = re.compile(r"\bAJET_SWARM_URL=(\S+)")
_SERVER_COMMAND = re.compile(r"\bajet-swarm\s+start\b|\bajet\.swarm_cli\b.*\bstart\b")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
#: How the registry names this machine (``skill_server.hosts.LOCAL``; not imported: keep this module light).
LOCAL = "local"


class ExperimentLink(SparseOutput):
    """The experiment this skill launched that runs (or ran) the swarm server."""

    id: str
    session: str
    state: str = Field(description="'running' while the registry has no end recorded, else the recorded end state.")
    role: str | None = Field(default=None, description="The process that runs the swarm server, when one does.")
    host: str | None = Field(default=None, description="Where that process runs (remote runs only).")
    workdir: str | None = Field(default=None, description="The server process's working directory.")
    port: int = Field(description="The port the server was given.")
    port_source: str = Field(description="Where the port comes from (command flag, URL, default).")
    url: str = Field(description="The swarm server URL this experiment implies.")


def server_address(spec: dict[str, Any]) -> dict[str, Any] | None:
    """Role, host, workdir, port and its source for the swarm server of one registry row's spec (its JSON
    form, ``RunSpec.to_json``)."""
    processes = [p for p in spec.get("processes") or [] if isinstance(p, dict)]
    server = next((p for p in processes if _SERVER_COMMAND.search(str(p.get("command", "")))), None)
    if server is None:
        server = next((p for p in processes if "server" in str(p.get("role", "")).lower()), None)
    found: dict[str, Any] = {}
    if server is not None:
        host = server.get("host")
        found.update(role=str(server.get("role")), host=None if host in (None, LOCAL) else host,
                     workdir=server.get("workdir"))
        flag = _PORT_FLAG.search(str(server.get("command", "")))
        if flag and 0 < int(flag.group(1)) < 65536:
            return found | {"port": int(flag.group(1)), "port_source": "--swarm-port in the server's command"}
    for process in processes:
        given_env = process.get("env")
        env = given_env if isinstance(given_env, dict) else {}
        for text, source in ((env.get("AJET_SWARM_URL"), "AJET_SWARM_URL in the run's environment"),
                             (_assigned_url(str(process.get("command", ""))), "AJET_SWARM_URL in a command"),
                             (process.get("wait_for_url"), f"wait_for_url of process {process.get('role')}")):
            port, host = _port_of(text)
            if port is not None:
                found.setdefault("host", host if host not in LOOPBACK_HOSTS else None)
                return found | {"port": port, "port_source": source}
    if server is not None:
        return found | {"port": DEFAULT_SWARM_PORT,
                        "port_source": f"AgentJet's default (no --swarm-port in the {found['role']} command)"}
    return None


def _assigned_url(command: str) -> str | None:
    match = _URL_ASSIGNMENT.search(command)
    if not match:
        return None
    try:
        return shlex.split(match.group(1))[0]
    except (ValueError, IndexError):
        return match.group(1)


def _port_of(url: Any) -> tuple[int | None, str | None]:
    if not isinstance(url, str) or not url.strip():
        return None, None
    text = url.strip() if "://" in url else "http://" + url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, None
    return (port, parts.hostname) if parts.hostname else (None, None)


def _link(row: Any, address: dict[str, Any]) -> ExperimentLink:
    host = address.get("host") or "localhost"
    shown_host = f"[{host}]" if ":" in host else host
    return ExperimentLink(
        id=row.id, session=row.session, state=row.final_state or "running", role=address.get("role"),
        host=address.get("host"), workdir=address.get("workdir"), port=address["port"],
        port_source=address["port_source"], url=f"http://{shown_host}:{address['port']}",
    )


def experiment_server(exp_id: str) -> ExperimentLink:
    """The swarm server experiment ``exp_id`` launched; ``ToolInputError`` on ``id`` when there is none."""
    from skill_server.experiments.store import open_registry

    with open_registry(create=False) as registry:
        row = registry.find(exp_id)
    if row is None:
        raise ToolInputError(f"no experiment {exp_id!r} in the registry (experiment_status lists them)", field="id")
    address = server_address(row.spec.to_json())
    if address is None:
        raise ToolInputError(f"experiment {row.id} runs no swarm server (no `ajet-swarm start` process) and names "
                             "no swarm URL; pass url instead", field="id")
    return _link(row, address)


def experiments_on_port(port: int, limit: int = 200) -> list[ExperimentLink]:
    """Experiments whose swarm server was given ``port`` (unfinished first); empty when unknown."""
    try:
        from skill_server.experiments.store import open_registry

        with open_registry(create=False) as registry:
            rows = registry.all(limit)
    except (SkillError, ImportError, OSError):
        return []
    links = []
    for row in rows:
        try:
            address = server_address(row.spec.to_json())
        except (TypeError, ValueError, AttributeError):
            continue  # a row of an unexpected shape says nothing about ports
        if address is not None and address["port"] == port:
            links.append(_link(row, address))
    return links


def is_local(url: str) -> bool:
    """Whether ``url`` names this machine (paths the server reports can then be read here)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def normalize_url(value: str) -> str:
    """``host:port`` or ``http(s)://host:port[/prefix]`` → canonical base URL without a trailing slash."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    text = value.strip()
    if not text or any(ch.isspace() for ch in text):
        raise ValueError(f"not a URL: {value!r}")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"only http:// and https:// swarm servers are supported, got {value!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"invalid port in {value!r}") from None
    if not parts.hostname or (port is not None and not 0 < port < 65536):
        raise ValueError(f"no host in {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"a server base URL takes no query or fragment: {value!r}")
    return text.rstrip("/")
