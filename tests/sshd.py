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
login user ``shell`` (default /bin/sh) as shell and a temporary home, ``home`` (no shell start-up files of
the machine run; a test may write its own there), a private
/run holds sshd's privilege-separation directory, and stopping the fixture kills the namespace: sshd,
every session, every remote tmux server and every process a test started "remotely". Pids that the host
agent reports are pids inside that namespace (``node_exec`` runs a command on the node itself).

``one_per_node=True`` (root only) gives every node its own sshd in its own PID namespace, so a program
that acts on every process it can see (``ray stop``) acts on one node only. Options for that mode:
``network`` puts every sshd into a ``PrivateNetwork`` (only loopback; the tool under test joins it with
``network.argv``), ``node_paths`` puts directories first on a node's PATH (sshd's own ``SetEnv``, for
example a bin directory holding a stand-in ``nvidia-smi``), ``node_env`` sets more variables there the same
way (``SLURM_CONF`` for a Slurm login node), and ``private_tmp`` gives each node its own
/tmp and /dev/shm, as separate machines have (the fixture's directory, the tests' Python and HOME stay
visible at their paths: ``kept_in_tmp``), and ``shared_home`` gives the nodes one state directory in their
common home (``shared_state``: one home directory on a network filesystem, as on a cluster) while each
node keeps its own identity (its own host name in a UTS namespace and its own /etc/machine-id) and its
own tmux socket directory (node-local /tmp).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.system_packages import require
from tests.tmp_dirs import SESSION_MARKER, short_tmp_dir

SSHD = "/usr/sbin/sshd"
NODES = ("node1", "node2")
#: PATH of a session on the nodes (sshd's default for a non-login command), after any ``node_paths``.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class PrivateNetwork:
    """A network namespace that has only loopback, held open by a sleeping process; the machine's own
    network is never touched. Processes join it through ``argv`` (``nsenter --net``); it ends when the
    holder is killed and nothing else is inside."""

    def __init__(self) -> None:
        if os.getuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
            raise RuntimeError("a private network namespace needs root, unshare and nsenter (util-linux)")
        require("ip")
        self.proc = subprocess.Popen(["unshare", "--net", "sleep", "infinity"], stdin=subprocess.DEVNULL)
        try:
            mine = os.readlink("/proc/self/ns/net")
            deadline = time.monotonic() + 10
            while True:  # until the holder has left this namespace (unshare runs before it execs sleep)
                try:
                    if os.readlink(self.path) != mine:
                        break
                except OSError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("unshare --net did not start")
                time.sleep(0.02)
            subprocess.run(self.argv(["ip", "link", "set", "lo", "up"]), check=True, timeout=20)
        except BaseException:
            self.stop()  # the holder never outlives a failed start
            raise

    @property
    def path(self) -> str:
        return f"/proc/{self.proc.pid}/ns/net"

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this network."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


#: Run inside a private network: exit 0 once every port given accepts a connection on 127.0.0.1.
_PROBE = """import socket, sys, time
pending = {int(p) for p in sys.argv[1:]}
deadline = time.monotonic() + 20
while pending and time.monotonic() < deadline:
    for port in list(pending):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pending.discard(port)
    time.sleep(0.05)
sys.exit(1 if pending else 0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ajs-test", "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return path.with_suffix(".pub").read_text().strip()


class LoopbackSshd:
    def __init__(self, nodes: tuple[str, ...] = NODES, *, one_per_node: bool = False,
                 network: PrivateNetwork | None = None, node_paths: dict[str, list[str]] | None = None,
                 private_tmp: bool = False, shell: str = "/bin/sh", shared_home: bool = False,
                 node_env: dict[str, dict[str, str]] | None = None) -> None:
        require("sshd", "ssh", "ssh-keygen")
        self.nodes = tuple(nodes)
        self.one_per_node = one_per_node
        self.network = network
        self.node_paths = dict(node_paths or {})
        self.node_env = dict(node_env or {})
        self.private_tmp = private_tmp
        self.shared_home = shared_home
        self.shell = shell
        # Short root: control sockets and tmux sockets under it must fit in ~100 bytes.
        self.root = Path(short_tmp_dir("ajss"))
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.ports = {**{node: free_port() for node in self.nodes}, "fail": free_port()}
        self.down_port = free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.namespaced = os.getuid() == 0 and shutil.which("unshare") is not None
        if (one_per_node or network or node_paths or private_tmp or shared_home or node_env) and not (
                self.namespaced and one_per_node):
            raise RuntimeError("network, node_paths, private_tmp and shared_home need one_per_node=True, which "
                               "needs root and unshare")

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
        for node in self.nodes:
            (r / node / "state").mkdir(parents=True)
            (r / node / "tmux").mkdir(parents=True)
            (r / node / "machine-id").write_text(os.urandom(16).hex() + "\n")
        if self.shared_home:
            self.shared_state.mkdir(parents=True)
        if self.one_per_node:
            for i, node in enumerate(self.nodes):
                ports = [self.ports[node]] + ([self.ports["fail"]] if i == 0 else [])
                variables = dict(self.node_env.get(node, {}))
                if self.node_paths.get(node):
                    variables["PATH"] = ":".join(self.node_paths[node] + [DEFAULT_PATH])
                self._write_sshd_config(f"sshd_config_{node}", ports, f"sshd_{node}.pid", variables)
        else:
            self._write_sshd_config("sshd_config", list(self.ports.values()), "sshd.pid", {})
        known = {node: f"[127.0.0.1]:{self.ports[node]} {' '.join(host_pub.split()[:2])}\n" for node in self.nodes}
        known["fail"] = f"[127.0.0.1]:{self.ports['fail']} {' '.join(host_pub.split()[:2])}\n"
        for name, line in known.items():
            (r / f"known_hosts_{name}").write_text(line)
        first = self.nodes[0]
        blocks = []
        for node in self.nodes:
            blocks.append(self._host_block(node, self.ports[node], "user_key", f"known_hosts_{node}", node))
        blocks.append(self._host_block("badkey", self.ports["fail"], "other_key", "known_hosts_fail", first))
        blocks.append(self._host_block("nohostkey", self.ports["fail"], "user_key", "empty", first))
        blocks.append(self._host_block("down", self.down_port, "user_key", "known_hosts_fail", first))
        (r / "ssh_config").write_text("\n".join(blocks))
        if self.namespaced:
            entry = pwd.getpwuid(os.getuid())
            lines = []
            for line in Path("/etc/passwd").read_text().splitlines():
                fields = line.split(":")
                if len(fields) == 7 and fields[0] == entry.pw_name:
                    fields[5], fields[6] = str(home), self.shell
                lines.append(":".join(fields))
            (r / "passwd").write_text("\n".join(lines) + "\n")

    def _write_sshd_config(self, name: str, ports: list[int], pid_file: str, variables: dict[str, str]) -> None:
        """The config of one sshd; ``variables`` are set in every session (sshd's ``SetEnv``), with the test
        session's marker, so that what a test starts "remotely" is found if it is left running."""
        r = self.root
        # and the session's bytecode folder: Python started "remotely" from the checkout writes none into it
        inherited = {name: os.environ[name] for name in (SESSION_MARKER, "PYTHONPYCACHEPREFIX") if os.environ.get(name)}
        variables = {**inherited, **variables}
        extra = ["SetEnv " + " ".join(f"{k}={v}" for k, v in variables.items())] if variables else []
        (r / name).write_text("\n".join([
            *(f"Port {p}" for p in ports),
            "ListenAddress 127.0.0.1",
            f"HostKey {r / 'host_key'}",
            f"PidFile {r / pid_file}",
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
            "Subsystem sftp internal-sftp",  # sshfs mounts a node's folder (a FUSE network filesystem)
            "MaxSessions 64",
            "MaxStartups 64",
            "LogLevel ERROR",
            *extra,
            "",
        ]))

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
            f"  SetEnv SKILL_SERVER_STATE_DIR={self.state_dir(node)} TMUX_TMPDIR={r / node / 'tmux'}",
            "",
        ])

    def state_dir(self, node: str) -> Path:
        """The node's state directory: its own, or the one in the common home (``shared_home``)."""
        return self.shared_state if self.shared_home else self.root / node / "state"

    @property
    def shared_state(self) -> Path:
        """The state directory every node uses with ``shared_home`` (in their common home)."""
        return self.home / ".local" / "state" / "agentjet-swarm-skill"

    @property
    def config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def home(self) -> Path:
        """The login user's home on the nodes (as root, in the namespaces: its start-up files run there)."""
        return self.root / "home"

    # ---- lifecycle
    def _namespace_script(self, config: str, node: str | None) -> str:
        r = self.root
        steps = [f"mount --bind {r / 'passwd'} /etc/passwd", "mount -t tmpfs -o mode=755 tmpfs /run",
                 "mkdir -p /run/sshd"]
        if self.shared_home and node is not None:  # a machine of its own: host name and machine id
            # without /etc/machine-id (a system without systemd, a container) there is nothing to mount over:
            # the node gets a copy of /etc in its own /run, holding one
            steps += [f"hostname {node}", "{ [ -e /etc/machine-id ] || { cp -a /etc /run/ajs-etc && "
                      "mount --bind /run/ajs-etc /etc && : > /etc/machine-id; }; }",
                      f"mount --bind {r / node / 'machine-id'} /etc/machine-id"]
        if self.private_tmp:  # the node's own /tmp and /dev/shm; what it must still see stays where it is
            kept = self.kept_in_tmp()
            steps += [f"mkdir -p /run/ajs-keep/{i} && mount --bind {shlex.quote(path)} /run/ajs-keep/{i}"
                      for i, path in enumerate(kept)]
            steps += ["mount -t tmpfs -o mode=1777 tmpfs /tmp"]
            steps += [f"mkdir -p {shlex.quote(path)} && mount --bind /run/ajs-keep/{i} {shlex.quote(path)}"
                      for i, path in enumerate(kept)]
            steps += ["mount -t tmpfs -o mode=1777,size=1g tmpfs /dev/shm"]
        return " && ".join(steps + [f"exec {SSHD} -D -e -f {r / config}"])

    def kept_in_tmp(self) -> list[str]:
        """Folders in /tmp that a node with a private /tmp must still see: the fixture's own, the Python running
        the tests (its venv and base install: nodes run its ``ray`` and ``python3``) and HOME, whichever lie in
        /tmp (a venv or HOME there is common on CI machines); a folder inside another kept one is covered."""
        found: list[str] = []
        for path in sorted({os.path.realpath(p) for p in (self.root, sys.prefix, sys.base_prefix, Path.home())}):
            if path.startswith("/tmp/") and not any(path.startswith(k + "/") for k in found):
                found.append(path)
        return found

    def _spawn(self, key: str, config: str) -> None:
        log = open(self.root / f"sshd_{key}.log", "wb")  # noqa: SIM115  (sshd writes it while it runs)
        if self.namespaced:
            argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
                    *(["--uts"] if self.shared_home else []), "--mount-proc", "sh", "-c",
                    self._namespace_script(config, key if key in self.nodes else None)]
        else:
            argv = [SSHD, "-D", "-e", "-f", str(self.root / config)]
        if self.network is not None:
            argv = self.network.argv(argv)
        self.procs[key] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()

    def _logs(self) -> str:
        return " | ".join(p.read_text()[-1000:] for p in self.root.glob("sshd_*.log"))

    def start(self) -> LoopbackSshd:
        self._write_files()
        if self.one_per_node:
            for node in self.nodes:
                self._spawn(node, f"sshd_config_{node}")
        else:
            self._spawn("all", "sshd_config")
        ports = [str(p) for p in self.ports.values()]
        if self.network is not None:
            probe = subprocess.run(self.network.argv([sys.executable, "-c", _PROBE, *ports]), timeout=60, check=False)
            if probe.returncode != 0:
                self.stop()
                raise RuntimeError("sshd did not listen: " + self._logs())
            return self
        deadline = time.monotonic() + 20
        pending = {int(p) for p in ports}
        while pending and time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs.values()):
                logs = self._logs()
                self.stop()
                raise RuntimeError("sshd exited: " + logs)
            for port in list(pending):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        pending.discard(port)
            time.sleep(0.05)
        if pending:
            logs = self._logs()
            self.stop()
            raise RuntimeError("sshd did not listen: " + logs)
        return self

    def stop(self) -> None:
        """Kill sshd and (in the namespace) everything that runs "on the nodes"; remove the files."""
        for proc in self.procs.values():
            if proc.poll() is None:
                # unshare ignores SIGTERM while it waits; killing it kills the namespace (--kill-child)
                proc.send_signal(signal.SIGKILL if self.namespaced else signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if not self.namespaced:  # without a namespace, end the remote tmux servers one by one
            for node in self.nodes:
                for sock in (self.root / node / "tmux").glob("tmux-*/*"):
                    subprocess.run(["tmux", "-S", str(sock), "kill-server"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, timeout=10, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def node_exec(self, node: str, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on a node (one_per_node mode): in its PID, mount and network namespaces, as sshd sees
        them, with no ssh in between (for checks that must not depend on the tool under test)."""
        proc = self.procs[node]  # unshare (nsenter execs it): its child is sshd, pid 1 of the node
        target = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        uts = ["--uts"] if self.shared_home else []
        # --root: sshd's root directory (entering a mount namespace would reset it to the namespace's own,
        # which is not the machine's / when the tests themselves run in a chroot)
        return subprocess.run(["nsenter", f"--target={target}", "--pid", "--mount", "--root", *uts, "--net", "--",
                               *argv],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def trust_port(self, alias: str, port: int) -> None:
        """Let ``alias`` reach the same host key on another port too (a proxy in front of its sshd)."""
        known = self.root / f"known_hosts_{alias}"
        key = " ".join(known.read_text().split()[1:3])
        with open(known, "a") as handle:
            handle.write(f"[127.0.0.1]:{port} {key}\n")

    def set_port(self, alias: str, port: int) -> None:
        """Point an alias at another port (to make a node unreachable, or reachable again)."""
        text = self.config.read_text()
        blocks = text.split("Host ")
        for i, block in enumerate(blocks):
            if block.startswith(alias + "\n"):
                lines = [f"  Port {port}" if x.startswith("  Port ") else x for x in block.splitlines()]
                blocks[i] = "\n".join(lines) + "\n"
        self.config.write_text("Host ".join(blocks))
