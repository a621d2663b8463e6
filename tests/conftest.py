"""Shared fixtures: a private environment per test, helpers to run the CLI and a real MCP client."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

REPO = Path(__file__).resolve().parents[1]


def _redirect_bytecode() -> list[Path]:
    """Bytecode of this session and every process it starts goes to the suite's cache, never beside the
    sources: a checkout the suite ran in stays as cloned (the Claude Code plugin installed from a checkout
    copies every file it holds). Only what Python wrote before this file ran (tests/__init__ and this
    file's own pytest-rewritten code) lands in tests/__pycache__: those files, when this process wrote
    them, are returned, and removed at the end of the session."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentjet-swarm-skill-tests"
    sys.pycache_prefix = str(base / "pycache")
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    with open("/proc/self/stat", "rb") as handle:
        ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])
    with open("/proc/stat", "rb") as handle:
        boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime "))
    started = boot + ticks / os.sysconf("SC_CLK_TCK") - 2.0  # btime is whole seconds
    early = REPO / "tests" / "__pycache__"
    return [p for p in early.glob("*.pyc") if p.stat().st_mtime >= started] if early.is_dir() else []


_EARLY_BYTECODE = _redirect_bytecode()

# Ctrl-C as from a terminal, whatever started the suite: a shell that runs it in the background starts it with
# SIGINT ignored, which every process it starts would inherit (tests send SIGINT and expect exit 130).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from tests import system_packages  # noqa: E402  (after the bytecode redirection)
from tests.tmp_dirs import (  # noqa: E402
    SESSION_MARKER,
    SSH_FALLBACK,
    end_marked_processes,
    home_listing,
    kill_run_processes,
    left_behind,
    process_tmp_dir,
    short_tmp_dir,
)
from tests.tokens import CACHE  # noqa: E402  (resolved from the user's $HOME / $XDG_CACHE_HOME, before they change)

# Hypothesis keeps its example database and caches in ./.hypothesis by default, which would land in the
# checkout (and from there in every installed copy of the skill): a temp folder of this session instead.
set_hypothesis_home_dir(process_tmp_dir("ajs-hypothesis"))

# --- the session's own home, and what it must leave as it found it --------------------------------------
#
# Nothing a test starts may write under the user's home but the declared cache (CACHE: Node, npm packages,
# Claude Code, uv and pip downloads, matplotlib's font list). So the session runs with a $HOME and XDG folders
# of its own (a default such as ray_cluster's workdir "~" lands there), the tools that download are pointed at
# the cache, and at the end the user's home (as $HOME says and as the password database says: ssh and sshd go
# by the latter) is compared with a listing taken now. The session's marker, inherited by every process a
# test starts, lets the end find what is still running.
_CACHE = os.path.realpath(CACHE)
_USER_HOMES = sorted({os.path.realpath(os.path.expanduser("~")), os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)})
_HOME_AT_START = {home: home_listing(home, _CACHE) for home in _USER_HOMES}
SESSION_HOME = process_tmp_dir("ajs-home")
_SESSION = uuid.uuid4().hex
# Toolchain shims on PATH find their installation through $HOME unless told (rustup's: pip runs `rustc
# --version` for its user agent): they keep the user's, read only, as outside the suite.
for _name, _folder in (("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")):
    if _name not in os.environ and os.path.isdir(os.path.join(os.path.expanduser("~"), _folder)):
        os.environ[_name] = os.path.join(os.path.expanduser("~"), _folder)
os.environ.update({
    "HOME": SESSION_HOME,
    **{name: os.path.join(SESSION_HOME, sub) for name, sub in (
        ("XDG_CACHE_HOME", ".cache"), ("XDG_CONFIG_HOME", ".config"), ("XDG_STATE_HOME", ".local/state"),
        ("XDG_DATA_HOME", ".local/share"))},
    "MPLCONFIGDIR": str(CACHE / "matplotlib"), "PIP_CACHE_DIR": str(CACHE / "pip"),
    "npm_config_cache": str(CACHE / "npm"), "UV_CACHE_DIR": str(CACHE / "uv-cache"),
    "NODE_COMPILE_CACHE": str(CACHE / "node-compile-cache"),  # Node 22 would keep it in /tmp
    SESSION_MARKER: _SESSION,
})


def untracked_in_checkout() -> set[str] | None:
    """Files in the checkout that git does not track, ignored ones included (bytecode caches aside); None
    outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--others", "-z"], capture_output=True,
                                timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {name for name in listed.decode(errors="replace").split("\0")
            if name and "__pycache__" not in name.split("/")}


_SSH_FALLBACK_EXISTED = os.path.lexists(SSH_FALLBACK)


def bytecode_folders() -> set[str]:
    """The __pycache__ folders among the checkout's sources (this session's early files aside)."""
    found = set()
    for top in ("skill_server", "tests", "bench", "bin"):
        for folder in (REPO / top).rglob("__pycache__"):
            if any(p not in _EARLY_BYTECODE for p in folder.iterdir()):
                found.add(str(folder.relative_to(REPO)))
    return found


_PYCACHE_AT_START = bytecode_folders()
_UNTRACKED_AT_START = untracked_in_checkout()


@pytest.hookimpl(trylast=True)  # after pytest's own session teardown (session-scoped fixtures are gone)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests leave the machine as they found it: a folder of ours still in /tmp, a file the session added to
    the checkout, anything new under the user's home outside the declared cache (or in the session's own
    home), or a process of the session still running (it is killed now) fails the session."""
    problems = []
    left = left_behind(_SSH_FALLBACK_EXISTED)
    if left:
        problems.append(f"tests left {len(left)} entries in /tmp: {', '.join(left[:10])}")
    now = untracked_in_checkout()
    added = sorted(now - _UNTRACKED_AT_START) if now is not None and _UNTRACKED_AT_START is not None else []
    if added:
        problems.append(f"tests left {len(added)} new files in the checkout: {', '.join(added[:10])}")
    for path in _EARLY_BYTECODE:  # what Python wrote beside the sources before the redirection
        path.unlink(missing_ok=True)
    if _EARLY_BYTECODE and not any(_EARLY_BYTECODE[0].parent.iterdir()):
        _EARLY_BYTECODE[0].parent.rmdir()
    bytecode = sorted(bytecode_folders() - _PYCACHE_AT_START)
    if bytecode:
        problems.append(f"tests left bytecode in the checkout: {', '.join(bytecode[:10])}")
    for home, before in _HOME_AT_START.items():
        new = sorted(home_listing(home, _CACHE) - before)
        if new:
            problems.append(f"tests wrote {len(new)} entries under {home} outside {CACHE}: {', '.join(new[:10])}")
    in_session_home = sorted(home_listing(SESSION_HOME, _CACHE))
    if in_session_home:
        problems.append(f"tests wrote {len(in_session_home)} entries into the session's $HOME (a user's home in a "
                        f"real run): {', '.join(in_session_home[:10])}")
    running = end_marked_processes(_SESSION)
    if running:
        listed = "; ".join(f"{pid} {command}" for pid, command in sorted(running.items())[:10])
        problems.append(f"tests left {len(running)} processes running (killed now): {listed}")
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            for problem in problems:
                reporter.write_line(problem, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*programs): programs (keys of tests/system_packages.py's COMMANDS) the "
                                       "test starts; without one it fails naming the package to install")


def needs(*keys: str) -> None:
    """Fail the test at once, naming the package to install, when a program of ``keys`` is not there."""
    try:
        system_packages.require(*keys)
    except system_packages.MissingProgram as exc:
        pytest.fail(str(exc), pytrace=False)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs(...)`` fails at once, naming the package, when a program it starts is not there."""
    needs(*[key for marker in item.iter_markers("needs") for key in marker.args])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's AgentJet, tmux or state directory.

    The state directory has a short path: ssh control sockets go under it, and a path past the socket
    limit would send them to the machine-wide fallback in /tmp, which tests must not touch."""
    monkeypatch.delenv("AJET_ROOT", raising=False)
    monkeypatch.delenv("TMUX", raising=False)
    box = short_tmp_dir()
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", os.path.join(box, "state"))
    yield
    kill_run_processes(os.path.join(box, "state"))  # a failed test's runs end with it
    shutil.rmtree(box, ignore_errors=True)


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AJET_ROOT", "TMUX")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m skill_server ARGS`` in a subprocess, as an assistant's shell would."""
    return subprocess.run(
        [sys.executable, "-m", "skill_server", *args],
        capture_output=True, text=True, env=env or cli_env(), cwd=cwd or REPO, timeout=timeout, check=False,
    )


def run_cli_to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m skill_server ARGS | head -c 0``: the reader has gone before the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "skill_server", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(), timeout=60, check=False)
    finally:
        os.close(write_end)


def call_cli(tool: str, arguments: dict[str, Any], **kw: Any) -> tuple[int, Any, str]:
    """``call TOOL --json ...``: (exit code, parsed stdout or None, stderr)."""
    proc = run_cli("call", tool, "--json", json.dumps(arguments), **kw)
    out = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, out, proc.stderr


@pytest.fixture
def private_tmux(monkeypatch: pytest.MonkeyPatch):
    """A private tmux server for experiment tools: its own socket name in its own TMUX_TMPDIR, killed after.

    ``SHELL=/bin/sh`` keeps pane shells free of login hooks that a killed test could leave half-run.
    """
    needs("tmux")
    name = f"ajs-{uuid.uuid4().hex[:8]}"
    tmpdir = short_tmp_dir()  # short: socket paths are limited to ~100 bytes
    monkeypatch.setenv("TMUX_TMPDIR", tmpdir)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", name)
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield name
    try:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, timeout=30,
                       env={**os.environ, "TMUX_TMPDIR": tmpdir}, check=False)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
