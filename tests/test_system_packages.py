"""The system packages the README's test command installs cover every program the suite starts.

A scan of the tests, their fixtures, the product and the plugin launcher finds the programs they start
(the first element of an argv list handed to ``subprocess``, ``os.exec*`` or a helper that runs one, the
commands of an ``sh -c`` string, names looked up with ``shutil.which`` and absolute paths of programs); each
must be a program of ``tests/system_packages.py``'s table, of every minimal Debian (``BASE``) or not a
Debian package at all (``NOT_DEBIAN``). Where dpkg is there, the table's packages are checked against the
files they ship. The installer itself runs here against a stand-in apt-get (a test never installs system
packages); a fresh Debian root runs it for real (``.ci/fresh-debian``).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import system_packages
from tests.conftest import REPO
from tests.system_packages import BASE, COMMANDS, NOT_DEBIAN

#: Calls whose first argument (or ``args=``/``argv=``) is the argv of a program they start.
SPAWNERS = frozenset({"run", "Popen", "check_output", "check_call", "_run", "execv", "execvp", "execve", "execvpe",
                      "node_exec", "argv", "client"})
_NAME = re.compile(r"^(/[\w.+/-]+|[A-Za-z][\w.+-]*)$")
_PROGRAM_PATH = re.compile(r"^/(usr/)?s?bin/[\w.+-]+$")
_SHELL_SPLIT = re.compile(r"&&|\|\||[;|&\n()]")
#: Found by the scan, never started as a system program: the installer's own tools (tests/system_packages.py
#: runs them only outside the suite), a file the installer writes, and a program that must not exist.
NOT_PROGRAMS = {"apt-get", "sudo", system_packages.POLICY_RC_D}


def sources() -> list[Path]:
    return sorted([*REPO.glob("tests/**/*.py"), *REPO.glob("skill_server/**/*.py"),
                   REPO / "bin" / "agentjet-swarm-skill"])


def _text(node: ast.AST) -> str | None:
    """A string constant, or the constant parts of an f-string with ``{}`` for each value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _argv(node: ast.AST) -> list[ast.AST] | None:
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # ["ps"] + args
        node = node.left
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple)) and node.elts else None


def _shell_commands(script: str) -> list[str]:
    """The first word of each command of a shell script (``{}`` stands for an interpolated value)."""
    words = []
    for part in _SHELL_SPLIT.split(script):
        tokens = part.split()
        while tokens and re.match(r"^\w+=", tokens[0]):  # VAR=value cmd
            tokens.pop(0)
        if tokens and "{}" not in tokens[0] and not tokens[0].startswith(("-", "$", "'", '"', "<", ">", "[")):
            words.append(tokens[0])
    return words


def programs_started() -> dict[str, set[str]]:
    """Program -> where it is started (``path:line``)."""
    found: dict[str, set[str]] = {}

    def add(name: str | None, where: str) -> None:
        if name and _NAME.match(name):
            found.setdefault(name, set()).add(where)

    for path in sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        rel = path.relative_to(REPO)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _PROGRAM_PATH.match(node.value):
                add(node.value, where)
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func == "which" and node.args:
                add(_text(node.args[0]), where)
            if func not in SPAWNERS:
                continue
            for candidate in [*node.args[:1], *(k.value for k in node.keywords if k.arg in ("args", "argv"))]:
                argv = _argv(candidate)
                if not argv:
                    continue
                add(_text(argv[0]), where)
                if _text(argv[0]) in ("sh", "bash", "/bin/sh", "/bin/bash") and len(argv) > 2 \
                        and _text(argv[1]) == "-c" and _text(argv[2]) is not None:
                    for word in _shell_commands(_text(argv[2]) or ""):
                        add(word, where)
    return found


def known(name: str) -> bool:
    base = os.path.basename(name)
    wheres = {c.where for c in COMMANDS.values()}
    return (name in COMMANDS or name in wheres or base in COMMANDS or base in BASE or base in NOT_DEBIAN
            or name in NOT_PROGRAMS or base in NOT_PROGRAMS)


def test_every_program_the_suite_starts_is_in_the_package_table():
    found = programs_started()
    unknown = {name: sorted(where)[:3] for name, where in found.items() if not known(name)}
    assert not unknown, ("programs started but not in tests/system_packages.py (add them to COMMANDS with their "
                         f"Debian package, or to BASE / NOT_DEBIAN): {unknown}")
    # the scan sees the programs it must (a scan that found nothing would pass the check above)
    assert {"tmux", "ssh", "ssh-keygen", "git", "npm", "npx", "ip", "ps", "pgrep", "sshfs", "fusermount", "sbatch",
            "scancel", "/usr/sbin/sshd", "/usr/sbin/slurmctld", "/usr/sbin/munged", "uv"} <= set(found), sorted(found)


def test_every_package_of_the_table_is_used():
    """No stale row: each program of the table is started, or named, by the sources."""
    found = set(programs_started())
    text = "\n".join(p.read_text(encoding="utf-8") for p in sources() if p.name != "system_packages.py")
    unused = [key for key, c in COMMANDS.items()
              if key not in found and c.where not in found and f'"{key}"' not in text and c.where not in text]
    assert not unused, unused


def test_a_missing_program_fails_naming_its_package(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(system_packages.MissingProgram) as err:
        system_packages.require("tmux", "npm")
    message = str(err.value)
    assert "tmux is missing: apt-get install tmux (" in message and "apt-get install npm (" in message
    assert "python tests/system_packages.py installs" in message
    system_packages.require()  # nothing asked, nothing missing


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian or Ubuntu machine: no dpkg to ask")
def test_the_table_names_the_packages_that_ship_the_programs():
    """Every program of the table that is installed here belongs to the package the table names (dpkg -S)."""
    wrong = {}
    for key, command in COMMANDS.items():
        path = command.where if os.path.isabs(command.where) else shutil.which(command.where)
        if path is None or not os.path.exists(path):
            continue
        expected = set(command.owner or (command.package,))
        # dpkg knows a file by the path its package ships (/bin/ip, /usr/bin/git), past alternatives symlinks
        twins = set()
        for found in {path, os.path.realpath(path)}:
            twins |= {found, re.sub(r"^/usr/(s?bin)/", r"/\1/", found), re.sub(r"^/(s?bin)/", r"/usr/\1/", found)}
        done = subprocess.run(["dpkg-query", "-S", *sorted(twins)], capture_output=True, text=True, timeout=60,
                              check=False)
        owners = {name.strip().split(":")[0] for line in done.stdout.splitlines() if ": " in line
                  for name in line.split(": ", 1)[0].split(",")}
        if owners and not owners & expected:  # a file no package shipped (built by hand) says nothing
            wrong[key] = (sorted(expected), sorted(owners))
    assert not wrong, wrong


def stand_in_apt(tmp_path: Path) -> tuple[Path, Path]:
    """A bin folder whose apt-get records its arguments and whether the policy-rc.d file is there meanwhile."""
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$* policy=$(cat "$AJS_POLICY" 2>/dev/null | tail -1)" >> {log}\n')
    (bin_dir / "apt-get").chmod(0o755)
    return bin_dir, log


def test_the_installer_names_what_it_installs_and_keeps_services_from_starting(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               capfd: pytest.CaptureFixture[str]):
    bin_dir, log = stand_in_apt(tmp_path)
    policy = tmp_path / "policy-rc.d"
    monkeypatch.setattr(system_packages, "POLICY_RC_D", str(policy))
    monkeypatch.setattr(system_packages, "_privilege", lambda: [])  # as root (a stand-in: no real root needed)
    monkeypatch.setenv("AJS_POLICY", str(policy))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    absent = ["sshd", "munged", "slurmctld", "sbatch"]
    monkeypatch.setattr(system_packages, "missing", lambda keys=None: absent if keys is None else [])
    assert system_packages.main([]) == 0
    calls = log.read_text().splitlines()
    assert calls == ["update -qq policy=exit 101",
                     "install -y -qq --no-install-recommends munge openssh-server slurm-wlm policy=exit 101"]
    assert not policy.exists()  # removed after the install
    err = capfd.readouterr().err
    assert "system packages: installing openssh-server (/usr/sbin/sshd): remote experiments" in err
    assert "installing slurm-wlm (/usr/sbin/slurmctld, sbatch): a real two-node Slurm cluster" in err
    assert err.rstrip().endswith("system packages: installed munge openssh-server slurm-wlm")


def test_without_root_or_sudo_it_says_what_to_install_and_the_suite_goes_on(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           capfd: pytest.CaptureFixture[str]):
    bin_dir, log = stand_in_apt(tmp_path)
    monkeypatch.setattr(system_packages, "_privilege", lambda: None)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setattr(system_packages, "missing", lambda keys=None: ["npm"] if keys is None else [])
    assert system_packages.main([]) == 0 and not log.exists()
    assert "not root and no sudo: install npm yourself; the tests that need them fail naming them" in \
        capfd.readouterr().err


def test_check_and_report_modes_install_nothing(tmp_path: Path):
    """As a script (before the test dependencies exist): --check says what is missing with exit 1; with
    AJS_SYSTEM_PACKAGES=report (how tests/test_packaging.py runs the README's lines) it says so with exit 0."""
    bin_dir, log = stand_in_apt(tmp_path)
    env = {"PATH": f"{bin_dir}{os.pathsep}/nonexistent", "HOME": str(tmp_path)}  # nothing is on PATH
    script = str(REPO / "tests" / "system_packages.py")
    done = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert done.returncode == 1 and done.stdout == "" and not log.exists()
    assert re.match(r"system packages: missing: (\S+ )*git iproute2 (\S+ )*npm openssh-client .*\(for tmux, git, ssh, ",
                    done.stderr), done.stderr
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60, check=False,
                          env={**env, system_packages.REPORT_ENV: "report"})
    assert done.returncode == 0 and not log.exists() and done.stderr.endswith(
        "not installed (AJS_SYSTEM_PACKAGES=report)\n")
    listed = subprocess.run([sys.executable, script, "--list"], capture_output=True, text=True, timeout=60,
                            check=False, env=env).stdout.splitlines()
    assert len(listed) == len(COMMANDS) and listed[0].split()[:2] == ["tmux", "tmux"]
