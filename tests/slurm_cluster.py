"""A real Slurm cluster for tests (Debian's slurm-wlm 22.05 and munge), started under a temp dir and stopped.

``SlurmCluster`` (a context manager; ``slurm`` is its module-scoped fixture) brings up, as root:

* munged with its own key, socket, pid and seed files and log (nothing of /etc/munge is read);
* a controller "host" ``slurmhead`` running slurmctld, and compute nodes ``node1`` and ``node2`` running one
  slurmd each. Every daemon has its own PID and mount namespaces (``unshare``), so its own /proc, and
  killing the namespace kills the daemon and everything it started (slurmstepd, the jobs). slurmctld and
  each slurmd also have their own UTS namespace and so their own hostname: that is how a slurmd finds its
  NodeName and how slurmctld recognises itself as SlurmctldHost. Each node has its own network namespace,
  joined to the controller's through a veth pair on a bridge: the nodes are separate machines on a small
  LAN, each with its own loopback, and both slurmd listen on the same SlurmdPort, as on a real cluster;
* slurm.conf and gres.conf under the temp dir, every path in them under it too, so the machine's own
  /etc/slurm (its plugstack.conf included), /var/spool, /var/log and syslog are never used. Each node has
  ``gpus_per_node`` GPUs as gres whose ``File=`` entries are character devices made with mknod under the temp
  dir (Slurm rejects regular files there).

Clients (sbatch, squeue, scancel, scontrol, sinfo, srun, sacct) talk to this cluster only when run with
``cluster.env`` (``SLURM_CONF`` names the private slurm.conf, whose ``AuthInfo=socket=`` names the private
munged; every other ``SLURM_*``/``SBATCH_*``/... variable of the caller is dropped) *inside the controller's
network* (``cluster.argv`` prefixes ``nsenter --net``; ``cluster.run`` does both). ``cluster.network`` is a
``tests.sshd.PrivateNetwork``, so ``LoopbackSshd(network=cluster.network)`` can add an ssh login node on it.

The LAN uses loopback-range addresses (``127.47.0.1`` for the controller, ``127.47.0.11`` and up for the
nodes): every namespace sets ``route_localnet`` and keeps only ``127.0.0.1/32`` on its ``lo``, so that these
addresses travel over the veth links. A client run by mistake outside the namespaces therefore reaches the
machine's own loopback and nothing answers: no packet of this cluster can leave the machine. Nothing is
ever added to the machine's own network namespace; the links vanish with the namespaces.

Stopping kills every daemon's PID namespace, waits until no process is left in any of them (and raises if
one is), ends the network namespaces and removes the temp tree. The daemons also get SIGKILL if the test
process dies without stopping them (``setpriv --pdeathsig``), which ends their namespaces and jobs too; only
the sleeping holders of the network namespaces and the temp tree are left then, as with tests/sshd.py.

Facts of this build that shaped the configuration (measured here, see tests/slurm_facts.md for the rest):
munged refuses a socket directory that is not searchable by all ("Socket is inaccessible: execute
permissions for all required"), and ``mkdtemp`` makes 0700 folders, so the tree is made 0755; without
cgroup delegation the cgroup plugins cannot work, hence proctrack/linuxproc and task/none (and so no
cgroup.conf); slurmd logs "mpi/pmix: can not load PMIx library" errors at start, which are harmless (no MPI
here); ``SlurmdParameters=config_overrides`` lets each node declare ``cpus_per_node`` CPUs whatever the
machine has (2 cores here), and with ``ReturnToService=2`` a node registering with fewer GPUs than
configured would be INVAL instead.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.sshd import PrivateNetwork
from tests.system_packages import MissingProgram, require
from tests.tmp_dirs import short_tmp_dir

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
MUNGED = "/usr/sbin/munged"
CONTROLLER = "slurmhead"
NODES = ("node1", "node2")
SUBNET = "127.47.0"  # controller .1, nodes .11, .12, ...
SLURMCTLD_PORT = 16817  # not Slurm's defaults (6817/6818), so nothing here is mistaken for a real cluster
SLURMD_PORT = 16818
#: Environment variables that steer Slurm's clients (output formats, defaults, an enclosing job's ids).
CLIENT_VARIABLE = re.compile(r"^(SLURM|SBATCH|SRUN|SALLOC|SQUEUE|SINFO|SACCT|SCONTROL|SCANCEL)_")
_FIELD = re.compile(r"([A-Za-z][\w/:]*)=(\S*)")


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _in_namespace(inode: str) -> list[int]:
    """Host pids of the processes whose PID namespace is ``inode`` (as ``readlink /proc/PID/ns/pid`` says)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "pid") == inode:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


class Daemon:
    """One daemon in the foreground in its own PID and mount namespaces (its own /proc), optionally with its
    own hostname and inside a network namespace. Killing it kills everything it started."""

    def __init__(self, name: str, argv: list[str], log: Path, *, hostname: str | None = None,
                 network: PrivateNetwork | None = None) -> None:
        self.name = name
        self.log = log
        # setpriv: SIGKILL to unshare if the test process dies first (and so to the namespace, --kill-child)
        full = ["setpriv", "--pdeathsig", "KILL", "--",
                "unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc"]
        # sh stays pid 1 of the namespace (the trailing exit keeps it from exec'ing the daemon): it reaps the
        # orphans that daemonizing leaves (slurmstepd forks twice), which a daemon as pid 1 leaves as zombies.
        script = '"$@"; exit $?'
        if hostname is not None:  # set in the namespace's own UTS namespace
            full.append("--uts")
            script = f"hostname {hostname} && {script}"
        full += ["sh", "-c", script, "sh", *argv]
        if network is not None:
            full = network.argv(full)  # nsenter and setpriv exec: the pid below is unshare's
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            self.namespace = self._namespace()
        except BaseException:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended by itself (the error says why): nothing to kill
                pass
            self.proc.wait(timeout=10)
            raise

    def _namespace(self) -> str:
        """The inode of the daemon's PID namespace, once unshare has forked pid 1 into it (bounded)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            for child in _children(self.proc.pid):
                try:
                    inode = os.readlink(f"/proc/{child}/ns/pid")
                except OSError:
                    continue
                if inode != os.readlink("/proc/self/ns/pid"):
                    return inode
            time.sleep(0.01)
        raise RuntimeError(f"{self.name} did not start: {self.tail()}")

    @property
    def init_pid(self) -> int:
        """Host pid of pid 1 in the daemon's namespaces (the sh that runs the daemon)."""
        return _children(self.proc.pid)[0]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, size: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL to pid 1 of the namespace: the kernel kills every other process in it, and unshare reaps
        pid 1 and exits (killing unshare instead would leave that reaping to the machine's init, which can
        take seconds). Then unshare's process group, in case. Raises if a process is left after 10 s."""
        for pid in _children(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while (left := _in_namespace(self.namespace)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            raise RuntimeError(f"{self.name}: processes {left} outlived their namespace")


class SlurmCluster:
    """A controller and ``nodes`` compute nodes with ``gpus_per_node`` GPUs each; see the module docstring.

    ``min_job_age`` and ``kill_wait`` are short (Slurm's defaults are 300 s and 30 s) so that tests can watch
    a finished job being forgotten and a job that ignores SIGTERM being killed."""

    def __init__(self, nodes: tuple[str, ...] = NODES, *, gpus_per_node: int = 2, cpus_per_node: int = 8,
                 min_job_age: int = 5, kill_wait: int = 3) -> None:
        require("slurmctld", "slurmd", "munged", "sbatch", "ip")
        if os.getuid() != 0:
            raise RuntimeError("slurmd, mknod and network namespaces need root")
        self.nodes = tuple(nodes)
        self.gpus_per_node = gpus_per_node
        self.cpus_per_node = cpus_per_node
        self.min_job_age = min_job_age
        self.kill_wait = kill_wait
        self.root = Path(short_tmp_dir("ajsslurm"))
        self.root.chmod(0o755)  # munged wants its socket directory, and so every parent, searchable by all
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        #: For job scripts and their output: the "shared filesystem", visible at this path on every node.
        self.shared = self.root / "shared"
        self.network: PrivateNetwork | None = None
        self.node_networks: dict[str, PrivateNetwork] = {}
        self.daemons: dict[str, Daemon] = {}
        self.startup_seconds: float | None = None

    # ---- addresses and client side
    def address(self, host: str) -> str:
        return f"{SUBNET}.1" if host == CONTROLLER else f"{SUBNET}.{11 + self.nodes.index(host)}"

    @property
    def env(self) -> dict[str, str]:
        """The caller's environment without its Slurm client variables, plus ``SLURM_CONF``."""
        return self.client_env(os.environ)

    def client_env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if not CLIENT_VARIABLE.match(k)}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run in the controller's network, where this cluster's daemons are reachable."""
        assert self.network is not None, "the cluster is not started"
        return self.network.argv(argv)

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster, as a user on the controller would run it."""
        return subprocess.run(self.argv(list(argv)), env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def sbatch(self, *args: str) -> int:
        """``sbatch --parsable ARGS``: the job id (raises with sbatch's message if it refused)."""
        proc = self.run("sbatch", "--parsable", *args)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)}: {proc.stderr.strip()}")
        return int(proc.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str] | None:
        """``scontrol show job -o``'s fields (JobState, Reason, ExitCode, ...), or None once Slurm has
        forgotten the job."""
        proc = self.run("scontrol", "show", "job", "-o", str(job_id))
        if proc.returncode != 0:
            if "Invalid job id specified" in proc.stderr:
                return None
            raise RuntimeError(f"scontrol show job {job_id}: {proc.stderr.strip()}")
        return dict(_FIELD.findall(proc.stdout))

    def wait_job(self, job_id: int, states: set[str], timeout: float = 60) -> dict[str, str]:
        """Poll until the job's JobState is one of ``states``; its fields then."""
        deadline = time.monotonic() + timeout
        fields = self.job(job_id)
        while fields is None or fields["JobState"] not in states:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not in {sorted(states)} after {timeout} s: {fields}")
            time.sleep(0.2)
            fields = self.job(job_id)
        return fields

    def node_exec(self, node: str, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """``argv`` on a node itself (its slurmd's PID, mount, UTS and network namespaces): to look at the
        processes of its jobs without going through Slurm."""
        target = self.daemons[f"slurmd-{node}"].init_pid
        # --root: the daemon's root directory (entering a mount namespace would reset it to the namespace's)
        return subprocess.run(["nsenter", f"--target={target}", "--pid", "--mount", "--root", "--uts", "--net", "--",
                               *argv],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)

    # ---- files
    def _write_tree(self) -> None:
        r = self.root
        for sub in ("etc", "state", "log", "shared", *(f"spool/{n}" for n in self.nodes)):
            (r / sub).mkdir(parents=True)
        (r / "munge").mkdir(mode=0o755)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)  # munged refuses a key that others can read
        for node in self.nodes:
            dev = r / "dev" / node
            dev.mkdir(parents=True)
            for i in range(self.gpus_per_node):  # /dev/null's numbers, as tests/gpu_helpers.py: opening is harmless
                os.mknod(dev / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (r / "etc" / "plugstack.conf").write_text("")
        self.conf.write_text(self._slurm_conf())
        (r / "etc" / "gres.conf").write_text(self._gres_conf())

    def _slurm_conf(self) -> str:
        r = self.root
        nodes = [f"NodeName={n} NodeHostname={n} NodeAddr={self.address(n)} CPUs={self.cpus_per_node} "
                 f"Gres=gpu:{self.gpus_per_node} State=UNKNOWN" for n in self.nodes]
        return "\n".join([
            "# Written by tests/slurm_cluster.py: every path is under this test's temp dir.",
            "ClusterName=ajstest",
            f"SlurmctldHost={CONTROLLER}({self.address(CONTROLLER)})  # hostname(address)",
            f"SlurmctldPort={SLURMCTLD_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "SlurmUser=root  # the daemons run as root (the default)",
            f"AuthInfo=socket={self.munge_socket}  # auth/munge and cred/munge talk to our munged only",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool' / '%n'}  # %n: the node's name",
            f"SlurmctldPidFile={r / 'state' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'spool' / '%n' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}  # the default is syslog",
            f"SlurmdLogFile={r / 'log' / 'slurmd-%n.log'}",
            # Default: plugstack.conf beside the *system* slurm.conf (/etc/slurm has one).
            f"PlugStackConfig={r / 'etc' / 'plugstack.conf'}",
            "MailProg=/bin/true  # never mail anyone (--mail-type)",
            # No systemd or cgroup delegation here: track job processes through /proc, bind nothing.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none  # no slurmdbd: sacct says accounting is disabled",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            # Nodes are what this file says (CPUs above the machine's 2 cores), not what the hardware shows.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2  # a DOWN node comes back when its slurmd registers with a valid configuration",
            f"MinJobAge={self.min_job_age}  # seconds a finished job stays visible (default 300)",
            f"KillWait={self.kill_wait}  # seconds from SIGTERM to SIGKILL at the time limit (default 30)",
            *nodes,
            "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    def _gres_conf(self) -> str:
        last = self.gpus_per_node - 1
        suffix = "0" if last == 0 else f"[0-{last}]"
        lines = ["AutoDetect=off  # never probe the machine's own GPUs (NVML)"]
        lines += [f"NodeName={n} Name=gpu File={self.root / 'dev' / n / 'nvidia'}{suffix}" for n in self.nodes]
        return "\n".join(lines) + "\n"

    # ---- network
    def _loopback_lan(self, net: PrivateNetwork) -> None:
        """Let 127.47.0.x travel over links: route_localnet on, and lo keeps only 127.0.0.1 (its /8 would
        claim every 127.x address as local)."""
        script = ("echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet && "
                  "ip addr del 127.0.0.1/8 dev lo && ip addr add 127.0.0.1/32 dev lo")
        subprocess.run(net.argv(["sh", "-c", script]), check=True, timeout=20)

    def _start_network(self) -> None:
        self.network = head = PrivateNetwork()
        self._loopback_lan(head)
        ip = ["ip"]
        for cmd in (["link", "add", "slurmlan", "type", "bridge"],
                    ["addr", "add", f"{self.address(CONTROLLER)}/24", "dev", "slurmlan"],
                    ["link", "set", "slurmlan", "up"]):
            subprocess.run(head.argv(ip + cmd), check=True, timeout=20)
        for i, node in enumerate(self.nodes):
            net = self.node_networks[node] = PrivateNetwork()
            self._loopback_lan(net)
            link = f"veth{i}"  # the controller's end; the node's end is its eth0
            subprocess.run(head.argv(ip + ["link", "add", link, "type", "veth", "peer", "name", "eth0", "netns",
                                           str(net.proc.pid)]), check=True, timeout=20)
            subprocess.run(head.argv(ip + ["link", "set", link, "master", "slurmlan", "up"]), check=True, timeout=20)
            subprocess.run(net.argv(["sh", "-c", f"ip addr add {self.address(node)}/24 dev eth0 && "
                                                 "ip link set eth0 up"]), check=True, timeout=20)

    # ---- lifecycle
    def _start_munged(self) -> None:
        m = self.root / "munge"
        self.daemons["munged"] = Daemon("munged", [
            MUNGED, "--foreground", f"--key-file={m / 'munge.key'}", f"--socket={self.munge_socket}",
            f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'munged.seed'}",
            f"--log-file={self.root / 'log' / 'munged.log'}"], self.root / "log" / "munged.out")
        self._wait_for(self.munge_socket.exists, "munged's socket", 10)

    def _wait_for(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll ``ready`` until it holds; raise with the daemons' log tails if one exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [d for d in self.daemons.values() if not d.alive()]
            if dead or time.monotonic() > deadline:
                logs = " | ".join(f"{d.name}: {d.tail()}" for d in (dead or self.daemons.values()))
                raise RuntimeError(f"{what}: {'exited' if dead else f'not ready after {timeout} s'}: {logs}")
            time.sleep(0.1)

    def _nodes_idle(self) -> bool:
        proc = self.run("sinfo", "--noheader", "--Node", "--format=%N %T", timeout=20)
        states = dict(line.split(maxsplit=1) for line in proc.stdout.splitlines() if " " in line)
        return proc.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)

    def start(self) -> SlurmCluster:
        began = time.monotonic()
        try:
            self._write_tree()
            self._start_network()
            self._start_munged()
            conf = ["-D", "-f", str(self.conf)]  # foreground; this config, not /etc/slurm's
            self.daemons["slurmctld"] = Daemon("slurmctld", [SLURMCTLD, *conf], self.root / "log" / "slurmctld.out",
                                               hostname=CONTROLLER, network=self.network)
            for node in self.nodes:
                self.daemons[f"slurmd-{node}"] = Daemon(f"slurmd-{node}", [SLURMD, *conf],
                                                        self.root / "log" / f"slurmd-{node}.out", hostname=node,
                                                        network=self.node_networks[node])
            self._wait_for(self._nodes_idle, "nodes idle in sinfo", 60)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Kill the daemons (compute nodes first), check that nothing of theirs is left, end the networks and
        remove the tree. Safe to call on a cluster that started only in part."""
        errors = []
        for name in sorted(self.daemons, key=lambda n: (n.startswith("munged"), n.startswith("slurmctld"), n)):
            try:
                self.daemons[name].stop()
            except Exception as exc:  # keep stopping the others
                errors.append(f"{name}: {exc}")
        self.daemons.clear()
        for net in [*self.node_networks.values(), *([self.network] if self.network else [])]:
            net.stop()
        self.node_networks.clear()
        self.network = None
        shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise RuntimeError("; ".join(errors))

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """A two-node cluster per test module (it starts in seconds; jobs of one module never meet another's)."""
    if os.getuid() != 0:
        pytest.skip("slurmd, mknod and network namespaces need root; CI runs as root")
    try:
        require("slurmctld", "slurmd", "munged", "sbatch", "ip")
    except MissingProgram as exc:
        pytest.fail(str(exc), pytrace=False)
    with SlurmCluster() as cluster:
        yield cluster
