"""A real OpenSSH server on loopback for tests: "two nodes" on one machine, nothing of the user's touched.

``LoopbackSshd`` generates a host key, a user key and a key that is not authorised, and starts
``/usr/sbin/sshd -D -f <temp config>`` listening on 127.0.0.1 only, on three free ports: one per fake node
(``node1``, ``node2``) and one for the aliases that must fail (``badkey``: a key not in authorized_keys;
``nohostkey``: an empty known_hosts, so host-key checking refuses it). ``down`` points at a port where
nothing listens. Every alias has its own known_hosts file (StrictHostKeyChecking stays on) and, through
``SetEnv`` (accepted by the server's ``AcceptEnv``), its own remote state directory and tmux socket
directory, so the two nodes do not share runs. Separate ports also give each node its own ssh control
master (``%C`` hashes host, port and user).

As root, sshd runs in private PID and mount namespaces (``unshare``): a private /etc/passwd gives the
login user /bin/sh as shell and a temporary home (no shell start-up files of the machine run), a private
/run holds sshd's privilege-separation directory, and stopping the fixture kills the namespace: sshd,
every session, every remote tmux server and every process a test started "remotely". Pids that the host
agent reports are pids inside that namespace (``node_pid_alive`` asks the node itself).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
NODES = ("node1", "node2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ajs-test", "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return path.with_suffix(".pub").read_text().strip()


class LoopbackSshd:
    def __init__(self) -> None:
        if not Path(SSHD).exists():
            raise RuntimeError(f"{SSHD} is missing: apt-get install -y openssh-server (.ci/run does it)")
        # Short root: control sockets and tmux sockets under it must fit in ~100 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="ajss", dir="/tmp"))
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.ports = {"node1": free_port(), "node2": free_port(), "fail": free_port()}
        self.down_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.namespaced = os.getuid() == 0 and shutil.which("unshare") is not None

    # ---- files
    def node_dir(self, node: str) -> Path:
        return self.root / node

    def _write_files(self) -> None:
        r = self.root
        host_pub = _keygen(r / "host_key")
        user_pub = _keygen(r / "user_key")
        _keygen(r / "other_key")
        (r / "authorized_keys").write_text(user_pub + "\n")
        (r / "empty").write_text("")
        home = r / "home"
        home.mkdir()
        for node in NODES:
            (r / node / "state").mkdir(parents=True)
            (r / node / "tmux").mkdir(parents=True)
        (r / "sshd_config").write_text("\n".join([
            *(f"Port {p}" for p in self.ports.values()),
            "ListenAddress 127.0.0.1",
            f"HostKey {r / 'host_key'}",
            f"PidFile {r / 'sshd.pid'}",
            f"AuthorizedKeysFile {r / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            "PermitUserRC no",
            "PermitUserEnvironment no",
            "AcceptEnv SKILL_SERVER_STATE_DIR TMUX_TMPDIR",
            "MaxSessions 64",
            "MaxStartups 64",
            "LogLevel ERROR",
            "",
        ]))
        known = {node: f"[127.0.0.1]:{self.ports[node]} {' '.join(host_pub.split()[:2])}\n" for node in NODES}
        known["fail"] = f"[127.0.0.1]:{self.ports['fail']} {' '.join(host_pub.split()[:2])}\n"
        for name, line in known.items():
            (r / f"known_hosts_{name}").write_text(line)
        blocks = []
        for node in NODES:
            blocks.append(self._host_block(node, self.ports[node], "user_key", f"known_hosts_{node}", node))
        blocks.append(self._host_block("badkey", self.ports["fail"], "other_key", "known_hosts_fail", "node1"))
        blocks.append(self._host_block("nohostkey", self.ports["fail"], "user_key", "empty", "node1"))
        blocks.append(self._host_block("down", self.down_port, "user_key", "known_hosts_fail", "node1"))
        (r / "ssh_config").write_text("\n".join(blocks))
        if self.namespaced:
            entry = pwd.getpwuid(os.getuid())
            lines = []
            for line in Path("/etc/passwd").read_text().splitlines():
                fields = line.split(":")
                if len(fields) == 7 and fields[0] == entry.pw_name:
                    fields[5], fields[6] = str(home), "/bin/sh"
                lines.append(":".join(fields))
            (r / "passwd").write_text("\n".join(lines) + "\n")

    def _host_block(self, alias: str, port: int, key: str, known: str, node: str) -> str:
        r = self.root
        return "\n".join([
            f"Host {alias}",
            "  HostName 127.0.0.1",
            f"  Port {port}",
            f"  User {self.user}",
            f"  IdentityFile {r / key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {r / known}",
            f"  GlobalKnownHostsFile {r / 'empty'}",
            "  StrictHostKeyChecking yes",
            "  PasswordAuthentication no",
            f"  SetEnv SKILL_SERVER_STATE_DIR={r / node / 'state'} TMUX_TMPDIR={r / node / 'tmux'}",
            "",
        ])

    @property
    def config(self) -> Path:
        return self.root / "ssh_config"

    # ---- lifecycle
    def start(self) -> LoopbackSshd:
        self._write_files()
        log = open(self.root / "sshd.log", "wb")
        if self.namespaced:
            script = (f"mount --bind {self.root / 'passwd'} /etc/passwd && mount -t tmpfs -o mode=755 tmpfs /run && "
                      f"mkdir -p /run/sshd && exec {SSHD} -D -e -f {self.root / 'sshd_config'}")
            argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
                    "--mount-proc", "sh", "-c", script]
        else:
            argv = [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        pending = set(self.ports.values())
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sshd exited: " + (self.root / "sshd.log").read_text()[-2000:])
            for port in list(pending):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        pending.discard(port)
            time.sleep(0.05)
        if pending:
            self.stop()
            raise RuntimeError("sshd did not listen: " + (self.root / "sshd.log").read_text()[-2000:])
        return self

    def stop(self) -> None:
        """Kill sshd and (in the namespace) everything that runs "on the nodes"; remove the files."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not self.namespaced:  # without a namespace, end the remote tmux servers one by one
            for node in NODES:
                for sock in (self.root / node / "tmux").glob("tmux-*/*"):
                    subprocess.run(["tmux", "-S", str(sock), "kill-server"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def set_port(self, alias: str, port: int) -> None:
        """Point an alias at another port (to make a node unreachable, or reachable again)."""
        text = self.config.read_text()
        blocks = text.split("Host ")
        for i, block in enumerate(blocks):
            if block.startswith(alias + "\n"):
                lines = [f"  Port {port}" if x.startswith("  Port ") else x for x in block.splitlines()]
                blocks[i] = "\n".join(lines) + "\n"
        self.config.write_text("Host ".join(blocks))
