"""The Claude Code plugin: its manifests, its launcher, and a real Claude Code installing and starting it.

The repository root is the plugin (``.claude-plugin/plugin.json``, listed by the one-plugin marketplace
``.claude-plugin/marketplace.json``), as it is the skill that ``npx skills add`` installs. The manifests'
shape is checked against Claude Code's documented format here; then the real ``claude`` CLI
(``@anthropic-ai/claude-code`` from the npm registry, installed into the tests' cache the first time)
validates them offline, adds the marketplace from a clean clone, installs the plugin and health-checks
its MCP server, which ``bin/agentjet-swarm-skill`` starts from a venv it makes itself (PyPI, on the first
start). Nothing of the machine's own Claude Code, caches or venvs is touched: HOME, the launcher's cache
and Claude Code's temp folder are all under the test's temp dir.
"""

from __future__ import annotations

import ast
import fcntl
import importlib.machinery
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

import skill_server
from tests.conftest import REPO, cli_env
from tests.test_packaging import (
    CACHE,
    SKILL_NAME,
    clean_clone,
    export_checkout,
    uv_bin,  # noqa: F401  (a fixture)
)
from tests.tokens import npm_install

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
PLUGIN = "agentjet-swarm"
MARKETPLACE = "agentjet-swarm-skill"
LAUNCHER = REPO / "bin" / "agentjet-swarm-skill"
#: plugin.json keys Claude Code documents (metadata, component paths, inline components, user options).
PLUGIN_KEYS = {"$schema", "name", "version", "description", "author", "homepage", "repository", "license",
               "keywords", "commands", "agents", "skills", "hooks", "mcpServers", "lspServers", "outputStyles",
               "userConfig", "channels", "icon"}
KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def manifest(name: str) -> dict:
    return json.loads((REPO / ".claude-plugin" / name).read_text(encoding="utf-8"))


def launcher() -> ModuleType:
    """``bin/agentjet-swarm-skill`` as a module (it has no .py suffix: it is a command)."""
    loader = importlib.machinery.SourceFileLoader("ajs_launcher", str(LAUNCHER))
    spec = importlib.util.spec_from_loader("ajs_launcher", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def project_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


# --- the manifests, as Claude Code documents them ---------------------------------------------------


def test_the_plugin_manifest_carries_the_skill_and_registers_the_server():
    plugin = manifest("plugin.json")
    assert set(plugin) <= PLUGIN_KEYS, set(plugin) - PLUGIN_KEYS
    assert KEBAB.match(plugin["name"]) and plugin["name"] == PLUGIN
    assert plugin["version"] == project_version() == skill_server.__version__
    assert plugin["license"] == "Apache-2.0" and plugin["description"] and plugin["author"]["name"]
    for path in plugin["skills"]:  # component paths are relative to the plugin root and start with ./
        assert path.startswith("./")
        folder = (REPO / path).resolve()
        assert folder == REPO and (folder / "SKILL.md").is_file()
        assert re.search(rf"^name: {SKILL_NAME}$", (folder / "SKILL.md").read_text(), re.M)
    (name, server), = plugin["mcpServers"].items()
    assert name == "agentjet-swarm" and server["args"] == []
    assert "env" not in server  # the tmux socket is one per state folder (checks.default_socket), not pinned
    command = server["command"]
    assert command.startswith("${CLAUDE_PLUGIN_ROOT}/"), command
    resolved = REPO / command.removeprefix("${CLAUDE_PLUGIN_ROOT}/")
    assert resolved == LAUNCHER and resolved.is_file() and os.access(resolved, os.X_OK)
    # Claude Code also reads a plugin root's .mcp.json as the plugin's servers: there must be none beside it
    assert not (REPO / ".mcp.json").exists()


def test_the_marketplace_lists_this_plugin_at_its_own_root():
    market, plugin = manifest("marketplace.json"), manifest("plugin.json")
    assert KEBAB.match(market["name"]) and market["name"] == MARKETPLACE and market["owner"]["name"]
    (entry,) = market["plugins"]
    assert entry["name"] == plugin["name"] and entry["version"] == plugin["version"]
    assert entry["source"] == "./" and (REPO / entry["source"] / ".claude-plugin" / "plugin.json").is_file()
    assert entry["description"] and entry["category"] == "development"


# --- the launcher, without the network ---------------------------------------------------------------


def test_the_launcher_reads_pyproject_as_tomllib_does_and_parses_on_old_pythons():
    import tomllib

    module = launcher()
    text = (REPO / "pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    assert module.toml_strings(text, "project", "dependencies") == project["dependencies"]
    assert module.toml_strings(text, "project.optional-dependencies", "plots") == \
        project["optional-dependencies"]["plots"]
    assert module.requirements() == (project["dependencies"], project["optional-dependencies"]["plots"])
    ast.parse(LAUNCHER.read_text(), feature_version=(3, 6))  # an old python3 can say it is too old
    assert LAUNCHER.read_text().startswith("#!/usr/bin/env python3\n")


def test_a_python_too_old_without_a_newer_one_is_told_what_to_do(monkeypatch, capsys):
    module = launcher()
    monkeypatch.setattr(module, "MIN_PYTHON", (99, 0))  # this interpreter is "too old"
    monkeypatch.setattr(module, "NEWER_PYTHONS", ("python99.0-does-not-exist",))
    with pytest.raises(SystemExit) as done:
        module.base_python()
    err = capsys.readouterr().err
    assert done.value.code == 3 and err.count("\n") == 1
    assert err.startswith("agentjet-swarm-skill: needs Python 99.0 or newer: ") and "SKILL_SERVER_PYTHON" in err


def test_given_an_interpreter_the_launcher_runs_it_as_is(tmp_path):
    """SKILL_SERVER_PYTHON (the Quick start venv, say) runs the server and the CLI; nothing is installed."""
    env = launcher_env(tmp_path) | {"SKILL_SERVER_PYTHON": sys.executable}
    done = subprocess.run([str(LAUNCHER), "call", "episode_cap", "max_env_worker=128", "num_repeat=6"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["episode_cap"] == 128 and done.stderr == ""
    assert not (tmp_path / "cache" / "agentjet-swarm-skill" / "venvs").exists()  # no venv made (bytecode only)


def test_the_launcher_runs_its_own_folders_files_and_writes_no_bytecode_there(tmp_path):
    """Started from a folder that holds another skill_server (a checkout the assistant works in), the launcher
    still runs the files beside it; the bytecode goes to its cache, so a plugin copy stays as installed."""
    plugin = export_checkout(tmp_path / "plugin")
    work = tmp_path / "work"
    (work / "skill_server").mkdir(parents=True)
    (work / "skill_server" / "__init__.py").write_text("raise SystemExit('the skill_server of the current folder')\n")
    env = launcher_env(tmp_path) | {"SKILL_SERVER_PYTHON": sys.executable}
    launcher_copy = str(plugin / "bin" / "agentjet-swarm-skill")
    done = subprocess.run([launcher_copy, "--version"], capture_output=True, text=True, env=env, cwd=work,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == f"agentjet-swarm-skill {project_version()} " \
        f"({plugin / 'skill_server'})\n", done.stdout + done.stderr
    done = subprocess.run([launcher_copy, "call", "episode_cap", "max_env_worker=8", "num_repeat=2"],
                          capture_output=True, text=True, env=env, cwd=work, timeout=60, check=False)
    assert done.returncode == 0 and json.loads(done.stdout)["episode_cap"] == 8 and done.stderr == ""
    assert not list(plugin.rglob("__pycache__"))
    assert list((tmp_path / "cache" / "agentjet-swarm-skill" / "pycache").rglob("cli.cpython-*.pyc"))


def claude_records(plugins: Path, marketplace: Path, copy: Path, project: Path) -> None:
    """Claude Code's records of a marketplace added from a local folder and this plugin installed from it (their
    shape as Claude Code 2.1.332 writes them)."""
    plugins.mkdir(parents=True)
    (plugins / "known_marketplaces.json").write_text(json.dumps({MARKETPLACE: {
        "source": {"source": "directory", "path": str(marketplace)}, "installLocation": str(marketplace)}}))
    (plugins / "installed_plugins.json").write_text(json.dumps({"version": 2, "plugins": {f"{PLUGIN}@{MARKETPLACE}": [
        {"scope": "project", "projectPath": "/elsewhere", "installPath": "/nonexistent/copy", "version": "0.1.0"},
        {"scope": "user", "installPath": str(copy), "version": project_version()}]}}))


def test_started_from_a_local_marketplace_the_launcher_runs_the_installed_copy(tmp_path):
    """Claude Code starts a plugin's server from a local marketplace's folder (CLAUDE_PLUGIN_ROOT is that
    folder), not from the copy it installed: the launcher runs the copy, as installed, found through Claude
    Code's records. Without records, or started as the copy, or in another folder, it runs its own files."""
    live, copy = export_checkout(tmp_path / "live"), export_checkout(tmp_path / "copy")
    plugins = tmp_path / "home" / ".claude" / "plugins"
    claude_records(plugins, live, copy, tmp_path)
    env = launcher_env(tmp_path) | {"SKILL_SERVER_PYTHON": sys.executable, "CLAUDE_PLUGIN_ROOT": str(live),
                                    "CLAUDE_PLUGIN_DATA": str(plugins / "data" / f"{PLUGIN}-{MARKETPLACE}")}

    def version(launcher_root: Path, **changes: str) -> str:
        done = subprocess.run([str(launcher_root / "bin" / "agentjet-swarm-skill"), "--version"], capture_output=True,
                              text=True, env=env | changes, cwd=tmp_path, timeout=60, check=False)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout.rsplit("(", 1)[1].rstrip(")\n")

    assert version(live) == str(copy / "skill_server")
    assert version(copy, CLAUDE_PLUGIN_ROOT=str(copy)) == str(copy / "skill_server")
    assert version(live, CLAUDE_PLUGIN_ROOT=str(tmp_path)) == str(live / "skill_server")  # not Claude Code's start
    (plugins / "installed_plugins.json").write_text("{}")
    assert version(live) == str(live / "skill_server")  # no record of an install: as Claude Code asked


def test_a_cache_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("a file where the cache folder should be")
    env = launcher_env(tmp_path) | {"XDG_CACHE_HOME": str(tmp_path / "file")}
    done = subprocess.run([str(LAUNCHER), "tools"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60, check=False)
    assert done.returncode == 3 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"agentjet-swarm-skill: cannot make the server's venv in {tmp_path / 'file'}/")
    assert "SKILL_SERVER_PYTHON" in done.stderr


def test_an_install_that_fails_says_why_in_one_line_and_the_next_start_tries_again(tmp_path):
    """No index reachable (pip told to use none): pip's own last words, exit 3; nothing on stdout. A PATH whose
    python3 is the test's and that has no uv (the test extras install one beside it), so pip makes the venv."""
    (tmp_path / "no-wheels").mkdir()
    env = launcher_env(tmp_path) | {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
                                    "PIP_FIND_LINKS": str(tmp_path / "no-wheels")}
    only_python = tmp_path / "bin"
    only_python.mkdir()
    (only_python / "python3").symlink_to(sys.executable)
    env["PATH"] = os.pathsep.join([str(only_python)] + [d for d in env["PATH"].split(os.pathsep)
                                                         if d != str(Path(sys.executable).parent)])
    for attempt in (1, 2):
        done = subprocess.run([str(LAUNCHER), "tools"], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=300, check=False)
        assert done.returncode == 3 and done.stdout == "", done.stderr
        first, failed = done.stderr.splitlines()
        assert first.startswith("agentjet-swarm-skill: first start: making a venv"), (attempt, first)
        assert failed.startswith("agentjet-swarm-skill: making the venv failed: ") and \
            "-m pip install exited 1: ERROR: No matching distribution found for mcp" in failed, failed


# --- the real Claude Code (npm registry) and the launcher's first start (PyPI) ----------------------


def launcher_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment with nothing of this machine's: own HOME, launcher cache and Claude Code temp, and
    Python writing bytecode where it would for a user (the launcher puts it into its cache)."""
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS",
                                                            "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (tmp_path / "cctmp").mkdir(mode=0o700, exist_ok=True)
    env.update(HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"), CLAUDE_CODE_TMPDIR=str(tmp_path / "cctmp"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",  # a python3 >= 3.10 first
               PIP_CACHE_DIR=str(CACHE / "pip"), PIP_DISABLE_PIP_VERSION_CHECK="1", DISABLE_AUTOUPDATER="1",
               DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    return env


@pytest.fixture(scope="session")
def claude() -> Path:
    """The ``claude`` CLI of a pinned Claude Code release, from the npm registry into the tests' cache."""
    prefix = CACHE / "claude-code"
    binary = prefix / "node_modules" / ".bin" / "claude"
    version = CLAUDE_CODE.rsplit("@", 1)[1]
    if not binary.exists() or version not in subprocess.run([str(binary), "--version"], capture_output=True,
                                                            text=True, timeout=60, check=False).stdout:
        proc = npm_install(prefix, CLAUDE_CODE)
        assert proc.returncode == 0, f"installing {CLAUDE_CODE} failed: {proc.stderr[-2000:]}"
    return binary


def run_claude(claude: Path, env: dict[str, str], cwd: Path, *args: str,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(claude), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def installer_done(lock: Path, timeout: float) -> None:
    """Wait until no installer holds the venv's lock (it is done, the plots extra included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
        time.sleep(0.5)
    raise AssertionError("the launcher's installer did not finish")


def test_claude_code_validates_installs_and_starts_the_plugin(claude, tmp_path):
    checkout = clean_clone(tmp_path / "checkout")
    env = launcher_env(tmp_path)
    project = tmp_path / "project"
    project.mkdir()

    # `claude plugin validate --strict` (offline): the marketplace and the plugin it lists, warnings as errors
    for target in (checkout, checkout / ".claude-plugin" / "plugin.json"):
        proc = run_claude(claude, env, project, "plugin", "validate", "--strict", "--json", str(target))
        report = json.loads(proc.stdout)
        assert proc.returncode == 0 and report["success"], proc.stdout[-3000:]
        assert report["manifest"]["errors"] == [] and report["manifest"]["warnings"] == []
        provides = report["provides"]
        assert [(s["name"], s["type"], s["target"]) for s in provides["mcpServers"]] == [
            ("agentjet-swarm", "stdio", "${CLAUDE_PLUGIN_ROOT}/bin/agentjet-swarm-skill")]
        assert provides["skills"] == [f"{PLUGIN}:{SKILL_NAME}"]

    # one install: the marketplace from the clone, then the plugin
    proc = run_claude(claude, env, project, "plugin", "marketplace", "add", str(checkout))
    assert proc.returncode == 0 and MARKETPLACE in proc.stdout, proc.stdout + proc.stderr
    proc = run_claude(claude, env, project, "plugin", "install", f"{PLUGIN}@{MARKETPLACE}")
    assert proc.returncode == 0 and "Successfully installed" in proc.stdout, proc.stdout + proc.stderr
    proc = run_claude(claude, env, project, "plugin", "details", PLUGIN)
    assert proc.returncode == 0 and re.search(rf"Skills \(1\)\s+{SKILL_NAME}", proc.stdout), proc.stdout
    assert re.search(r"MCP servers \(1\)\s+agentjet-swarm", proc.stdout), proc.stdout

    # the first start, where a client gives up before the venv is made: the installer goes on without it
    first = subprocess.Popen([str(checkout / "bin" / "agentjet-swarm-skill")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=project)
    assert first.stderr is not None
    said = first.stderr.readline()
    assert said.startswith("agentjet-swarm-skill: first start: making a venv for the server in "), said
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=30)
    assert first.stdout is not None and first.stdout.read() == ""  # stdout is the protocol's: never a word there
    venv = Path(re.search(r" in (\S+) with ", said).group(1))
    assert venv.parent == tmp_path / "cache" / "agentjet-swarm-skill" / "venvs"
    log, failed = venv.parent / f"{venv.name}.log", venv.parent / f"{venv.name}.failed"
    assert log.is_file()  # the installer was started before the launcher said so
    deadline = time.monotonic() + 600
    while not (venv / ".ajs-ready").exists():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        assert not failed.exists(), failed.read_text()
        time.sleep(1)

    # Claude Code starts the plugin's server (its own health check, within its 30 s start-up bound)
    proc = run_claude(claude, env, project, "mcp", "list")
    line = next((x for x in proc.stdout.splitlines() if x.startswith(f"plugin:{PLUGIN}:agentjet-swarm:")), "")
    assert line.endswith("✔ Connected"), proc.stdout + proc.stderr
    # Claude Code starts the marketplace folder's launcher (the line names it), which runs the installed copy:
    # the bytecode of the server's modules is the copy's (the launcher's cache mirrors the source paths)
    assert f"{checkout}/bin/agentjet-swarm-skill" in line, line
    (copy,) = [p.parent.parent for p in (tmp_path / "home" / ".claude" / "plugins").rglob("bin/agentjet-swarm-skill")]
    pycache = tmp_path / "cache" / "agentjet-swarm-skill" / "pycache"
    assert list((pycache / str(copy).lstrip("/") / "skill_server" / "app").glob("mcp_server.*.pyc")), copy
    assert not list((pycache / str(checkout).lstrip("/")).rglob("mcp_server.*.pyc"))
    assert not list(copy.rglob("__pycache__")) and not (copy / ".git").exists()  # as installed
    installer_done(venv.parent / f"{venv.name}.lock", timeout=600)
    assert (venv / ".ajs-plots-ready").exists(), log.read_text()[-3000:]
    # and the venv's server answers from the CLI too, as the assistant's shell runs it (on PATH in Claude Code)
    done = subprocess.run([str(checkout / "bin" / "agentjet-swarm-skill"), "call", "episode_cap",
                           "max_env_worker=512", "num_repeat=8", "train_batch_size=32"], capture_output=True,
                          text=True, env=env, cwd=project, timeout=60, check=False)
    assert done.returncode == 0 and json.loads(done.stdout)["episode_cap"] == 256, done.stderr
    assert done.stderr == ""  # a ready venv: not a word on stderr either


def test_with_uv_on_path_the_first_start_takes_seconds(uv_bin, tmp_path):
    env = launcher_env(tmp_path)
    env.update(PATH=f"{uv_bin}{os.pathsep}{env['PATH']}", UV_CACHE_DIR=str(CACHE / "uv-cache"))
    done = subprocess.run([str(LAUNCHER), "call", "episode_cap", "max_env_worker=128", "num_repeat=6"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["episode_cap"] == 128
    assert "(uv; " in done.stderr.splitlines()[0], done.stderr
    venv = Path(re.search(r" in (\S+) with ", done.stderr).group(1))
    installer_done(venv.parent / f"{venv.name}.lock", timeout=600)  # the plots extra, in the background
    assert (venv / ".ajs-plots-ready").exists(), (venv.parent / f"{venv.name}.log").read_text()[-3000:]
    assert "$ " + str(uv_bin / "uv") + " venv" in (venv.parent / f"{venv.name}.log").read_text()
