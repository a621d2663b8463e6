"""Experiments on ssh hosts, against a real OpenSSH server on loopback ("node1" and "node2", see tests/sshd.py).

Nothing here reads or writes the user's ~/.ssh, agent or tmux: ssh runs with a temporary config
(SKILL_SERVER_SSH_CONFIG), HOME is a temporary directory, and each test uses its own state directory,
tmux socket name and control sockets; the nodes' runs die with the sshd namespace at the end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.experiments.store import open_registry
from skill_server.hosts import get_host
from skill_server.hosts.ssh import close_masters, control_dir, ssh_options
from tests.conftest import call_cli, cli_env
from tests.experiment_helpers import FAKE, call, status, wait_until
from tests.sshd import NODES, LoopbackSshd, free_port

NODE_PY = "python3"  # the nodes' own interpreter (sshd's default PATH), not this test's


@pytest.fixture(scope="module")
def sshd():
    server = LoopbackSshd().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def remote(sshd: LoopbackSshd, monkeypatch: pytest.MonkeyPatch):
    client = Path(tempfile.mkdtemp(prefix="c", dir=sshd.root))  # short: control sockets live under it
    for sub in ("home", "t"):
        (client / sub).mkdir()
    name = f"ajr-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(sshd.config))
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(client / "s"))
    monkeypatch.setenv("HOME", str(client / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", name)
    monkeypatch.setenv("TMUX_TMPDIR", str(client / "t"))
    monkeypatch.setenv("SHELL", "/bin/sh")
    sshd.client = client  # type: ignore[attr-defined]
    yield sshd
    close_masters()
    for sock in [client / "t" / f"tmux-{os.getuid()}" / name] + [
            sshd.node_dir(n) / "tmux" / f"tmux-{os.getuid()}" / name for n in NODES]:
        if sock.exists():
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10, check=False)
    for node in NODES:
        sshd.set_port(node, sshd.ports[node])


def workdir_on(sshd: LoopbackSshd, label: str = "w") -> Path:
    d = Path(tempfile.mkdtemp(prefix=label, dir=sshd.root))
    return d


def trainer(*args: str) -> str:
    return f"{NODE_PY} {FAKE} " + " ".join(args)


def node_marked(node: str, prefix: str) -> list[int]:
    """Pids on a node carrying the run marker (asked on the node: its pids live in its namespace)."""
    code = ("import os,sys\n"
            "for e in os.listdir('/proc'):\n"
            "    try: env=open('/proc/'+e+'/environ','rb').read(); st=open('/proc/'+e+'/stat').read()\n"
            "    except Exception: continue\n"
            "    if st.rsplit(')',1)[-1].split()[0]!='Z' and "
            "('\\0'+env.decode('latin-1')).find('\\0AGENTJET_SKILL_RUN='+sys.argv[1])>=0: print(e)\n")
    out = get_host(node).run([NODE_PY, "-c", code, prefix], timeout_s=20)
    assert out.returncode == 0, out
    return [int(x) for x in out.stdout.split()]


def test_launch_wait_status_collect_on_a_node(remote: LoopbackSshd):
    work = workdir_on(remote)
    val_md, train_md = work / "val.md", work / "train.md"
    out = call("launch_experiment", host="node1", name="r1", workdir=str(work),
               command=trainer("--steps", "3", "--delay", "0.3", "--val-md", str(val_md), "--train-md", str(train_md)))
    socket = remote.node_dir("node1") / "tmux" / f"tmux-{os.getuid()}" / os.environ["SKILL_SERVER_TMUX_SOCKET"]
    assert out["host"] == "node1" and out["processes"][0]["host"] == "node1"
    assert out["attach"] == f"ssh -t -F {remote.config} node1 'tmux -S {socket} attach -t ajet_r1'"
    assert out["log_path"] == str(work / "auto_agent" / "exp_results" / out["id"] / "ajet_r1.log")
    assert [p.name for p in (remote.node_dir("node1") / "state" / "runs" / out["id"]).glob("*/main.sh")] == ["main.sh"]
    assert not (remote.client / "s" / "runs").exists()  # the run directory is on the node, not here
    first = status(out["id"])
    assert first["state"] == "running" and first["host"] == "node1"
    done = call("wait_experiment", id=out["id"], timeout_s=30)
    assert done["reason"] == "exited" and done["state"] == "succeeded" and done["exit_code"] == 0
    assert done["global_step"] == 3 and done["first_step_seen"] and "training finished" in done["lines"]
    assert status(out["id"])["lines"] == []  # the stored cursor moved
    assert len(status(out["id"], since="0", max_lines=3)["lines"]) == 3
    res = call("collect_results", id=out["id"], val_markdown=str(val_md), train_markdown=str(train_md))
    assert res["host"] == "node1"
    assert res["results_path"] == str(work / "auto_agent" / "exp_results" / out["id"] / "results.md")
    assert res["finish_flag_path"] == str(work / "auto_agent" / "exp_results" / "finish.flag")
    assert {m["key"]: m["n"] for m in res["val_metrics"]}["mean_reward"] == 3
    text = Path(res["results_path"]).read_text()
    assert "**succeeded**" in text and "- host: node1" in text and Path(res["finish_flag_path"]).read_text() == ""


def test_progress_checkpoints_history_and_plot_of_a_run_on_a_node(remote: LoopbackSshd):
    """The run's YAML and checkpoint folders are read on the node, through the host layer; the plot is
    written there beside results.md."""
    work = workdir_on(remote)
    (work / "exp.yaml").write_text("ajet:\n  project_name: p\n  experiment_name: e\n  trainer_common:\n"
                                   "    total_training_steps: 20\n    checkpoint_base_dir: ./ckpt\n")
    out = call("launch_experiment", host="node1", name="insight", workdir=str(work), command=trainer(
        "--steps", "8", "--delay", "0", "--timing", "1.5", "--conf", "exp.yaml", "--save-freq", "4",
        "--checkpoint-dir", str(work / "ckpt" / "p" / "e")))
    done = call("wait_experiment", id=out["id"], timeout_s=30)
    assert done["state"] == "succeeded" and done["global_step"] == 8
    assert done["progress"]["total_steps"] == 20 and str(work / "exp.yaml") in done["progress"]["total_steps_source"]
    assert done["progress"]["seconds_per_step"] == 1.5
    ckpt = done["checkpoints"]
    assert ckpt["host"] == "node1" and [c["step"] for c in ckpt["checkpoints"]] == [4, 8] and ckpt["latest"] == 8
    series = status(out["id"], metrics_history=["critic/score/mean"])["metrics_history"]["series"][0]
    assert series["points"] == 8 and series["steps"] == list(range(1, 9))
    res = call("collect_results", id=out["id"])
    assert res["host"] == "node1" and res["plot"]["host"] == "node1"
    assert res["metrics_source"]["training"].startswith("the log's step lines")
    assert Path(res["plot"]["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(res["plot"]["path"]).parent == Path(res["results_path"]).parent


def test_one_experiment_spans_two_nodes(remote: LoopbackSshd):
    work = workdir_on(remote)
    port = free_port()
    out = call("launch_experiment", name="span", workdir=str(work), host="node1", processes=[
        {"role": "server", "command": f"echo serving; exec {NODE_PY} -m http.server {port} --bind 127.0.0.1"},
        {"role": "client", "host": "node2", "command": trainer("--steps", "2"),
         "wait_for_url": f"http://127.0.0.1:{port}/", "wait_for_url_timeout_s": 60},
    ])
    assert [(p["role"], p["host"]) for p in out["processes"]] == [("server", "node1"), ("client", "node2")]
    with open_registry() as reg:  # what other tools (swarm_status) read about a run
        row = reg.find(out["id"])
        assert [(p.role, p.host, p.workdir) for p in row.processes] == [("server", "node1", str(work)),
                                                                        ("client", "node2", str(work))]
        assert row.processes[1].command.startswith(NODE_PY) and row.host == "node1"
        assert row.hosts == ["node1", "node2"]
    assert "node2" in out["processes"][1]["attach"] and "node1" in out["processes"][0]["attach"]
    for node in NODES:
        assert (remote.node_dir(node) / "state" / "runs" / out["id"]).is_dir()

    def client_done():
        s = status(out["id"], max_lines=0)
        return s if s["processes"][1]["state"] == "succeeded" else None

    s = wait_until(client_done, timeout=60, interval=0.3)
    assert s["state"] == "running" and s["processes"][0]["state"] == "running" and s["global_step"] == 2
    lines = status(out["id"], since="0,0")["lines"]
    assert "[server] serving" in lines and any(x.startswith("[client] ") and "step:2" in x for x in lines)
    stopped = call("stop_experiment", id=out["id"], grace_s=5)
    assert stopped["state"] == "stopped" and stopped["interrupted"] == ["server"] and stopped["still_alive"] == []
    assert {p["role"]: p["state"] for p in stopped["processes"]} == {"server": "stopped", "client": "succeeded"}
    assert node_marked("node1", out["id"] + "/") == [] and node_marked("node2", out["id"] + "/") == []


def test_the_run_survives_losing_the_ssh_connection(remote: LoopbackSshd):
    work = workdir_on(remote)
    out = call("launch_experiment", host="node1", name="survive", workdir=str(work),
               command=trainer("--steps", "2", "--hold", "4"))
    check = subprocess.run(ssh_options() + ["-O", "check", "node1"], capture_output=True, text=True, timeout=20,
                           check=False)
    master = int(re.search(r"pid=(\d+)", check.stderr).group(1))
    subprocess.run(ssh_options() + ["-O", "exit", "node1"], capture_output=True, timeout=20, check=False)
    wait_until(lambda: not Path(f"/proc/{master}").exists() or "Z" in Path(f"/proc/{master}/stat").read_text())
    assert status(out["id"], max_lines=0)["state"] == "running"  # a new connection, the same run
    check = subprocess.run(ssh_options() + ["-O", "check", "node1"], capture_output=True, text=True, timeout=20,
                           check=False)
    os.kill(int(re.search(r"pid=(\d+)", check.stderr).group(1)), 9)  # and now the master dies hard
    done = call("wait_experiment", id=out["id"], timeout_s=40)
    assert done["state"] == "succeeded" and done["global_step"] == 2


def test_an_unreachable_host_is_unreachable_not_lost_and_the_next_call_retries(remote: LoopbackSshd, tmp_path: Path):
    work = workdir_on(remote)
    far = call("launch_experiment", host="node2", name="far", workdir=str(work), command="sleep 120")
    near = call("launch_experiment", name="near", workdir=str(tmp_path), command="sleep 120")
    remote.set_port("node2", remote.down_port)
    close_masters()
    t0 = time.monotonic()
    listed = {e["id"]: e for e in call("experiment_status")["experiments"]}
    assert time.monotonic() - t0 < 30
    assert listed[near["id"]]["state"] == "running"  # one host down costs nothing elsewhere
    gone = listed[far["id"]]
    assert gone["state"] == "unreachable" and gone["processes"][0]["state"] == "unreachable"
    assert "Connection refused" in gone["processes"][0]["reason"] and "node2" in gone["note"]
    waited = call("wait_experiment", id=far["id"], timeout_s=1)
    assert waited["reason"] == "unreachable" and waited["state"] == "unreachable" and waited["next_wait_s"] > 0
    stop = call("stop_experiment", id=far["id"], grace_s=1)
    assert stop["state"] == "unreachable" and "call stop again" in stop["note"]
    with open_registry() as reg:
        assert reg.get(far["id"]).final_state is None  # nothing recorded as final
    remote.set_port("node2", remote.ports["node2"])
    assert status(far["id"], max_lines=0)["state"] == "running"
    assert call("stop_experiment", id=far["id"], grace_s=1)["state"] == "stopped"
    assert call("stop_experiment", id=near["id"], grace_s=1)["state"] == "stopped"


@pytest.mark.parametrize("alias,message", [
    ("badkey", "Permission denied (publickey)"),
    ("nohostkey", "Host key verification failed"),
    ("down", "Connection refused"),
])
def test_hosts_that_refuse_give_one_line_naming_host_and_ssh_message(remote: LoopbackSshd, alias: str, message: str):
    work = workdir_on(remote)
    t0 = time.monotonic()
    with pytest.raises(ToolFailure) as err:
        call("launch_experiment", host=alias, name="refused", workdir=str(work), command="true")
    assert time.monotonic() - t0 < 30
    assert err.value.field == "host" and alias in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ToolFailure) as err:  # a process on another host: nothing starts anywhere
        call("launch_experiment", host="node1", name="refused2", workdir=str(work),
             processes=[{"role": "a", "command": "sleep 30"}, {"role": "b", "command": "true", "host": alias}])
    assert err.value.field == "processes.1.host"
    runs = remote.node_dir("node1") / "state" / "runs"
    assert not [p for p in runs.glob("ajet_refused2-*")] if runs.exists() else True
    assert call("experiment_status")["experiments"] == []
    rc, _, cli_err = call_cli("launch_experiment", {"host": alias, "name": "r", "workdir": str(work),
                                                   "command": "true"}, env=cli_env())
    assert rc == 1 and cli_err.count("\n") == 1 and message in cli_err


def test_hostile_names_paths_and_env_values_reach_the_node_unchanged(remote: LoopbackSshd):
    weird = "sp ace 'q' \"dq\" $HOME `echo hi` ;& \\ * nl\nx"
    work = workdir_on(remote) / weird
    work.mkdir()
    out = call("launch_experiment", host="node1", name="hostile", workdir=str(work), result_dir=weird,
               log_path=f"log '{weird}'.log", env={"WEIRD": weird, "EMPTY": ""},
               command="printf '%s|' \"$WEIRD\" \"$EMPTY\" > out.txt; pwd > pwd.txt; echo \"$WEIRD\"")
    done = call("wait_experiment", id=out["id"], timeout_s=30)
    assert done["state"] == "succeeded", done
    assert (work / "out.txt").read_text() == weird + "||"
    assert (work / "pwd.txt").read_text() == str(work) + "\n"
    assert Path(out["log_path"]) == work / weird / f"log '{weird}'.log" and Path(out["log_path"]).is_file()
    lines = done["lines"]
    assert any(lines[i:i + 2] == weird.split("\n") for i in range(len(lines)))
    for bad, field in [("-oProxyCommand=touch /tmp/x", "host"), ("a b", "host"), ("node1\n", "host"), ("", "host"),
                       ("ssh://-x", "host")]:
        with pytest.raises(ToolInputError) as err:
            call("launch_experiment", host=bad, name="x", workdir=str(work), command="true")
        assert err.value.field == field, bad
    with pytest.raises(ToolInputError) as err:
        call("launch_experiment", name="x", workdir=str(work), processes=[{"role": "a", "command": "true",
                                                                           "host": "-F/etc/passwd"}])
    assert err.value.field == "processes.0.host"


def test_stop_on_a_node_ends_the_tree_and_the_max_time_is_enforced_there(remote: LoopbackSshd):
    work = workdir_on(remote)
    tree = (f"sh -c 'trap \"\" INT TERM; exec sleep 901' & sh -c 'sleep 902 & wait' & "
            f"{NODE_PY} -c 'import os,time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
            f"time.sleep(903)'; echo tree-ready; wait")
    out = call("launch_experiment", host="node1", name="tree", workdir=str(work), command=tree)
    wait_until(lambda: "tree-ready" in status(out["id"], since="0", max_lines=50)["lines"], timeout=30)
    wait_until(lambda: len(node_marked("node1", out["id"] + "/")) >= 7, timeout=30)
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped" and stopped["still_alive"] == [] and stopped["killed"] == ["main"]
    commands = [p["command"] for p in stopped["killed_processes"]]
    assert all(p["host"] == "node1" for p in stopped["killed_processes"])
    assert any(c.startswith("sleep 901") for c in commands) and any("time.sleep(903)" in c for c in commands)
    assert node_marked("node1", out["id"] + "/") == []
    timed = call("launch_experiment", host="node2", name="slow", workdir=str(work), command=trainer("--mode", "hang"),
                 max_time_s=2)
    done = call("wait_experiment", id=timed["id"], timeout_s=30)
    assert done["state"] == "timed_out" and done["exit_code"] == 130
    assert any("max time of 2 s reached" in line for line in done["lines"])
    assert node_marked("node2", timed["id"] + "/") == []


def node_alive(node: str, pid: int) -> bool:
    """Whether ``pid`` lives on the node (asked there: its pids are its namespace's)."""
    code = ("import sys\ntry: st=open('/proc/%s/stat' % sys.argv[1]).read()\nexcept OSError: st='x) Z'\n"
            "print(st.rsplit(')',1)[1].split()[0]!='Z')")
    return get_host(node).run([NODE_PY, "-c", code, str(pid)], timeout_s=20).stdout.strip() == "True"


def test_the_monitor_on_a_node_scans_with_nobody_asking_and_ends_with_the_run(remote: LoopbackSshd):
    work = workdir_on(remote)
    out = call("launch_experiment", host="node1", name="watched", workdir=str(work),
               command="sleep 1; echo 'torch.OutOfMemoryError: CUDA out of memory.'; sleep 120")
    close_masters()  # no connection, no tool call: only the node's own monitor sees the line
    (host_dir,) = (remote.node_dir("node1") / "state" / "runs" / out["id"]).iterdir()  # the node's identity
    found = host_dir / "monitor.json"
    doc = wait_until(lambda: found.exists() and "cuda_oom" in (d := json.loads(found.read_text()))["roles"]["main"][
        "errors"] and d, timeout=20)
    assert doc["roles"]["main"]["errors"]["cuda_oom"]["count"] == 1 and node_alive("node1", doc["pid"])
    assert {e["signature"] for e in status(out["id"], max_lines=0)["errors"]} == {"cuda_oom", "python_exception"}
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped" and stopped["session_removed"]
    wait_until(lambda: not node_alive("node1", doc["pid"]), timeout=20)
    assert json.loads(found.read_text())["ended"] and node_marked("node1", out["id"] + "/") == []


def test_the_cli_drives_remote_runs_and_shares_the_connection(remote: LoopbackSshd):
    work = workdir_on(remote)
    env = cli_env()
    rc, launched, err = call_cli("launch_experiment", {"host": "node2", "name": "cli", "workdir": str(work),
                                                       "command": trainer("--steps", "1")}, env=env)
    assert rc == 0, err
    rc, waited, err = call_cli("wait_experiment", {"id": launched["id"], "timeout_s": 30}, env=env)
    assert rc == 0 and waited["state"] == "succeeded", err
    sockets = [p for p in Path(control_dir()).iterdir() if p.is_socket()]
    assert len(sockets) == 1  # one master for node2, reused by every call


def test_a_blueprint_written_here_launches_on_a_node(remote: LoopbackSshd, tmp_path: Path):
    work = workdir_on(remote)
    (work / "exp.yaml").write_text("ajet:\n  trainer_common:\n    val_print_to_markdown_file_path: val.md\n")
    blueprint = tmp_path / "blueprint.md"  # on this machine; its paths are the node's
    call("blueprint", action="template", path=str(blueprint), purpose="remote blueprint", codebase_dir=str(work),
         venv_exe="/usr/bin/python3", yaml_path="exp.yaml", max_time="30 min",
         launch_command=f"python3 {FAKE} --steps 2 --val-md val.md --conf exp.yaml")
    out = call("launch_experiment", blueprint=str(blueprint), host="node2")
    assert out["host"] == "node2" and out["session"] == "ajet_remote_blueprint" and out["max_time_s"] == 1800
    assert call("wait_experiment", id=out["id"], timeout_s=30)["state"] == "succeeded"
    res = call("collect_results", id=out["id"])
    assert res["host"] == "node2" and res["val_markdown"] == str(work / "val.md")
    assert {m["key"]: m["n"] for m in res["val_metrics"]}["mean_reward"] == 2
