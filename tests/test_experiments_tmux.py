"""Experiment lifecycle against a real tmux server on a private socket per test (no tmux mocks)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import libtmux
import pytest

from skill_server.core.errors import SkillError, ToolFailure, ToolInputError
from skill_server.hosts.agent.protocol import host_identity
from tests.conftest import REPO, call_cli, cli_env
from tests.experiment_helpers import FAKE, PY, call, status, tmux_socket, trainer, wait_exit, wait_until, workdir  # noqa: F401  (fixtures are used by name)
from tests.sshd import free_port

pytestmark = pytest.mark.needs("tmux")


# ---- the basic lifecycle


def test_success_run_states_metrics_cursor(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="ok", command=trainer("--steps", "3"), workdir=str(workdir), max_time_s=60)
    assert out["session"] == "ajet_ok" and out["socket"] == tmux_socket
    sock = Path(os.environ["TMUX_TMPDIR"]).resolve() / f"tmux-{os.getuid()}" / tmux_socket
    assert out["attach"] == f"tmux -S {sock} attach -t ajet_ok" and out["host"] == "local"
    assert out["log_path"] == str(workdir / "auto_agent" / "exp_results" / out["id"] / "ajet_ok.log")
    done = wait_exit(out["id"])
    assert done["state"] == "succeeded" and done["exit_code"] == 0 and done["next_wait_s"] == 0
    assert done["first_step_seen"] and not done["first_step_overdue"] and done["global_step"] == 3
    assert done["last_metrics"]["critic/real_reward"] == 0.5 and done["last_metrics"]["actor/kl_loss"] == 0.002
    assert done["errors"] == [] and done["time_left_s"] is None
    assert any("training finished" in line for line in done["lines"])
    # the stored cursor advanced: nothing new now; an explicit cursor re-reads from there
    again = status(out["id"])
    assert again["lines"] == [] and again["cursor"] == done["cursor"] and again["state"] == "succeeded"
    replay = status(out["id"], since="0", max_lines=2)
    assert len(replay["lines"]) == 2 and replay["skipped_bytes"] > 0
    # once its exit code is on disk the run's monitor removes the finished session; the log holds everything
    assert not libtmux.Server(socket_name=tmux_socket).has_session("ajet_ok")
    assert "step:3" in Path(out["log_path"]).read_text()


def test_crash_and_oom_runs_fail_with_signatures(tmux_socket: str, workdir: Path):
    crash = call("launch_experiment", name="crash", command=trainer("--mode", "crash"), workdir=str(workdir))
    oom = call("launch_experiment", name="oom", command=trainer("--mode", "oom", "--exit-code", "7"),
               workdir=str(workdir))
    c = wait_exit(crash["id"])
    assert c["state"] == "failed" and c["exit_code"] == 1
    hit = {e["signature"]: e for e in c["errors"]}["python_exception"]
    assert hit["line"].endswith("RuntimeError: reward function returned None") and hit["hint"]
    o = wait_exit(oom["id"])
    assert o["state"] == "failed" and o["exit_code"] == 7
    names = [e["signature"] for e in o["errors"]]
    assert names[0] in ("cuda_oom", "python_exception") and "cuda_oom" in names


def test_wait_stops_early_on_a_new_error_signature(tmux_socket: str, workdir: Path):
    cmd = "sleep 0.5; echo 'torch.OutOfMemoryError: CUDA out of memory.'; sleep 30"
    out = call("launch_experiment", name="errwait", command=cmd, workdir=str(workdir))
    t0 = time.monotonic()
    res = call("wait_experiment", id=out["id"], timeout_s=20)
    assert res["reason"] == "error" and res["state"] == "running" and time.monotonic() - t0 < 10
    assert res["next_wait_s"] == 30
    call("stop_experiment", id=out["id"], grace_s=2)


def test_wait_first_step_pattern_timeout_and_backoff(tmux_socket: str, workdir: Path):
    cmd = trainer("--steps", "2", "--delay", "1.0") + "; echo READY-42; sleep 60"
    out = call("launch_experiment", name="waits", command=cmd, workdir=str(workdir))
    first = call("wait_experiment", id=out["id"], until="first_step", timeout_s=20)
    assert first["reason"] == "first_step" and first["first_step_seen"]
    pat = call("wait_experiment", id=out["id"], until="pattern", pattern=r"READY-\d+", timeout_s=20)
    assert pat["reason"] == "pattern" and pat["matched_line"] == "READY-42"
    # the same pattern is not found again in output that arrives later; since=0 finds the old line
    again = call("wait_experiment", id=out["id"], until="pattern", pattern=r"READY-\d+", timeout_s=0)
    assert again["reason"] == "timeout" and again["next_wait_s"] == 30
    old = call("wait_experiment", id=out["id"], until="pattern", pattern=r"READY-\d+", since="0", timeout_s=1)
    assert old["reason"] == "pattern"
    t0 = time.monotonic()
    nxt = call("wait_experiment", id=out["id"], timeout_s=1)
    assert nxt["reason"] == "timeout" and nxt["next_wait_s"] == 60 and 0.9 <= time.monotonic() - t0 < 5
    schedule = [call("wait_experiment", id=out["id"], timeout_s=0)["next_wait_s"] for _ in range(5)]
    assert schedule == [120, 240, 480, 960, 960]
    call("stop_experiment", id=out["id"], grace_s=2)


# ---- deadlines, stop, lost


def test_max_time_stops_run_as_timed_out_and_flags_first_step(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="hang", command=trainer("--mode", "hang"), workdir=str(workdir),
               max_time_s=8, first_step_timeout_s=1)  # room for slow status calls on a loaded machine
    early = status(out["id"])
    assert early["state"] == "running" and not early["first_step_overdue"] and early["time_left_s"] > 0
    time.sleep(1.3)
    mid = status(out["id"])
    assert mid["state"] == "running" and mid["first_step_overdue"] and not mid["first_step_seen"]
    late = call("wait_experiment", id=out["id"], timeout_s=30)  # the monitor on the host ends it, not status
    assert late["state"] == "timed_out" and late["first_step_overdue"] and late["time_left_s"] is None
    assert late["waited_s"] < 25 and late["exit_code"] == 130
    assert all(p["state"] == "timed_out" for p in late["processes"])
    assert any("max time of 8 s reached" in line for line in late["lines"])
    run_dir = Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "runs" / out["id"] / host_identity()
    pid = int((run_dir / "main.pid").read_text())
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2])
    assert status(out["id"])["state"] == "timed_out"  # stays recorded


def test_stop_own_session_and_refuse_foreign_ones(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="stopme", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: "rollout step begin" in Path(out["log_path"]).read_text() if Path(out["log_path"]).exists()
               else False)
    srv = libtmux.Server(socket_name=tmux_socket)
    srv.new_session(session_name="ajet_foreign", attach=False)
    with pytest.raises(ToolFailure) as err:
        call("stop_experiment", id="ajet_foreign")
    assert err.value.field == "id" and "only stops sessions it launched" in str(err.value)
    assert srv.has_session("ajet_foreign")
    stopped = call("stop_experiment", id=out["id"], grace_s=5)
    assert stopped["state"] == "stopped" and stopped["interrupted"] == ["main"] and stopped["killed"] == []
    assert stopped["session_removed"] and not srv.has_session("ajet_stopme") and srv.has_session("ajet_foreign")
    assert stopped["processes"][0]["exit_code"] == 130  # Ctrl-C reached the trainer; wrapper recorded it
    # stopping again is harmless; the name can be reused
    assert call("stop_experiment", id=out["id"])["state"] == "stopped"
    again = call("launch_experiment", name="stopme", command="true", workdir=str(workdir))
    assert again["id"] != out["id"] and wait_exit(again["id"])["state"] == "succeeded"


def test_hard_kill_after_grace_when_ctrl_c_is_ignored(tmux_socket: str, workdir: Path):
    cmd = (f"{PY} -c \"import signal,time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
           "print('up', flush=True); time.sleep(60)\"")
    out = call("launch_experiment", name="stubborn", command=cmd, workdir=str(workdir))
    wait_until(lambda: status(out["id"], max_lines=0)["state"] == "running" and Path(out["log_path"]).exists()
               and "up" in Path(out["log_path"]).read_text())
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped" and stopped["killed"] == ["main"]


def test_removed_session_and_dead_server_are_lost(tmux_socket: str, workdir: Path):
    a = call("launch_experiment", name="gone", command="sleep 60", workdir=str(workdir))
    b = call("launch_experiment", name="other", command="sleep 60", workdir=str(workdir))
    srv = libtmux.Server(socket_name=tmux_socket)
    srv.kill_session("ajet_gone")  # the pane closes: its wrapper gets SIGHUP and dies without an exit code
    wait_until(lambda: status(a["id"])["state"] == "lost")
    assert status(b["id"])["state"] == "running"
    srv.kill()
    wait_until(lambda: status(b["id"])["state"] == "lost")
    everything = call("experiment_status")["experiments"]
    assert {e["id"]: e["state"] for e in everything} == {a["id"]: "lost", b["id"]: "lost"}


def test_running_name_is_refused(tmux_socket: str, workdir: Path):
    call("launch_experiment", name="ajet_dup", command="sleep 30", workdir=str(workdir))
    with pytest.raises(ToolFailure) as err:
        call("launch_experiment", name="ajet_dup", command="sleep 30", workdir=str(workdir))
    assert err.value.field == "name" and "already running" in str(err.value)


# ---- inputs


def test_bad_inputs_are_named_and_create_nothing(tmux_socket: str, workdir: Path):
    cases = [
        ({"name": "x", "command": "true", "workdir": str(workdir / "missing")}, "workdir"),
        ({"name": "x", "command": "true", "workdir": "relative/dir"}, "workdir"),
        ({"name": "bad name!", "command": "true", "workdir": str(workdir)}, "name"),
        ({"name": "x", "workdir": str(workdir)}, "command"),
        ({"name": "x", "command": "true", "workdir": str(workdir), "env": {"BAD-KEY": "1"}}, "env.BAD-KEY"),
        ({"name": "x", "command": "true", "workdir": str(workdir), "python": "/nonexistent/python"}, "python"),
        ({"name": "x", "command": "true", "workdir": str(workdir), "first_step_pattern": "("}, "first_step_pattern"),
        ({"name": "x", "command": "true", "workdir": str(workdir), "max_time_s": 0}, "max_time_s"),
        ({"name": "x", "workdir": str(workdir), "processes": [{"role": "a b", "command": "true"}]}, "processes.0.role"),
        ({"name": "x", "workdir": str(workdir), "processes": [{"role": "a", "command": "true"},
                                                               {"role": "a", "command": "true"}]}, "processes"),
        ({"name": "x", "workdir": str(workdir), "processes": [{"role": "a", "command": "true",
                                                               "wait_for_url": "ftp://x"}]},
         "processes.0.wait_for_url"),
        ({"name": "x", "command": "true", "workdir": str(workdir), "colour": "red"}, "colour"),
    ]
    for args, field in cases:
        with pytest.raises(ToolInputError) as err:
            call("launch_experiment", **args)
        assert err.value.field == field, (args, str(err.value))
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert call("experiment_status")["experiments"] == []


def test_odd_commands_env_and_venv_are_passed_exactly(tmux_socket: str, workdir: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python").symlink_to(sys.executable)
    cmd = ("printf '%s|%s|%s\\n' \"$MY_VAR\" \"$VIRTUAL_ENV\" \"$(command -v python)\"; "
           "echo 'quotes: \"double\" and $HOME stays literal'; echo \"cwd=$PWD\"")
    out = call("launch_experiment", name="Odd-Name_1", command=cmd, workdir=str(workdir),
               python=str(venv / "bin/python"),
               env={"MY_VAR": "a b'c\"d $x"})
    assert out["session"] == "ajet_Odd-Name_1"
    lines = wait_exit(out["id"])["lines"]
    assert f"a b'c\"d $x|{venv}|{venv}/bin/python" in lines
    assert "quotes: \"double\" and $HOME stays literal" in lines and f"cwd={workdir}" in lines


# ---- multi-process


def test_processes_with_wait_for_url(tmux_socket: str, workdir: Path):
    port = free_port()
    server_cmd = (f"sleep 1; echo 'Starting swarm server on port {port}'; "
                  f"exec {PY} -m http.server {port} --bind 127.0.0.1")
    client_cmd = f"echo client-up; {trainer('--steps', '2')}"
    out = call("launch_experiment", name="swarm", workdir=str(workdir), processes=[
        {"role": "server", "command": server_cmd},
        {"role": "client", "command": client_cmd, "wait_for_url": f"http://127.0.0.1:{port}/",
         "wait_for_url_timeout_s": 30, "env": {"AJET_SWARM_URL": f"http://127.0.0.1:{port}"}},
    ])
    assert [p["role"] for p in out["processes"]] == ["server", "client"]
    early = status(out["id"])
    assert {p["role"]: p["state"] for p in early["processes"]}["client"] in ("waiting", "running")
    assert early["state"] == "running"
    client_log = Path(out["processes"][1]["log_path"])

    def client_done():
        s = status(out["id"], max_lines=0)
        return s if s["processes"][1]["state"] == "succeeded" else None

    s = wait_until(client_done, timeout=20)
    assert s["state"] == "running" and s["processes"][0]["state"] == "running"  # the server still serves
    assert s["global_step"] == 2 and s["first_step_seen"]
    text = client_log.read_text()
    assert text.index("waiting up to 30 s") < text.index("client-up")
    assert "Starting swarm server" in Path(out["processes"][0]["log_path"]).read_text()
    windows = [w.window_name for w in libtmux.Server(socket_name=tmux_socket).sessions.get(
        session_name="ajet_swarm").windows]
    assert windows == ["server", "client"]
    lines = status(out["id"], since="0,0")["lines"]
    assert any(x.startswith("[server] ") for x in lines) and any(x.startswith("[client] ") for x in lines)
    stopped = call("stop_experiment", id=out["id"], grace_s=3)
    assert stopped["state"] == "stopped"
    assert {p["role"]: p["state"] for p in stopped["processes"]} == {"server": "stopped", "client": "succeeded"}


def test_wait_for_url_gives_up_and_fails_the_experiment(tmux_socket: str, workdir: Path):
    port = free_port()
    out = call("launch_experiment", name="nourl", workdir=str(workdir), processes=[
        {"role": "server", "command": "sleep 30"},
        {"role": "client", "command": "echo never", "wait_for_url": f"http://127.0.0.1:{port}/health",
         "wait_for_url_timeout_s": 1},
    ])
    s = wait_exit(out["id"])
    assert s["state"] == "failed" and s["exit_code"] == 124
    assert "wait_for_url_gave_up" in [e["signature"] for e in s["errors"]]
    assert s["note"] and "stop_experiment" in s["note"]
    assert "never" not in Path(out["processes"][1]["log_path"]).read_text()
    call("stop_experiment", id=out["id"], grace_s=1)


# ---- registry shared across processes, concurrency


def test_registry_is_shared_with_a_new_process(tmux_socket: str, workdir: Path, tmp_path: Path):
    out = call("launch_experiment", name="shared", command=trainer("--steps", "2"), workdir=str(workdir))
    rc, res, err = call_cli("wait_experiment", {"id": out["id"], "timeout_s": 20}, env=cli_env())
    assert rc == 0, err
    assert res["state"] == "succeeded" and res["global_step"] == 2
    # and the other way round: launched by a CLI process, seen here
    rc, launched, err = call_cli("launch_experiment", {"name": "fromcli", "command": "sleep 30",
                                                       "workdir": str(workdir)}, env=cli_env())
    assert rc == 0, err
    assert status("ajet_fromcli")["state"] == "running"
    # a caller with another TMUX_TMPDIR still finds the server (socket path recorded at launch)
    rc, res, err = call_cli("experiment_status", {"id": launched["id"]}, env=cli_env(TMUX_TMPDIR=str(tmp_path)))
    assert rc == 0 and res["experiments"][0]["state"] == "running", err
    rc, res, err = call_cli("stop_experiment", {"id": launched["id"], "grace_s": 2}, env=cli_env())
    assert rc == 0 and res["state"] == "stopped", err
    rc, _, err = call_cli("launch_experiment", {"name": "x y", "command": "true", "workdir": str(workdir)},
                          env=cli_env())
    assert rc == 1 and err.count("\n") == 1 and "name" in err


def test_concurrent_launches_from_several_processes(tmux_socket: str, workdir: Path):
    env = cli_env()
    procs = []
    for name in ["c1", "c2", "c3", "same", "same"]:
        args = json.dumps({"name": name, "command": "sleep 20", "workdir": str(workdir)})
        procs.append(subprocess.Popen([sys.executable, "-m", "skill_server", "call", "launch_experiment", "--json",
                                       args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    ok = [json.loads(out) for rc, out, _ in results if rc == 0]
    failed = [err for rc, _, err in results if rc != 0]
    assert sorted(o["session"] for o in ok) == ["ajet_c1", "ajet_c2", "ajet_c3", "ajet_same"]
    assert len(failed) == 1 and "ajet_same" in failed[0]
    listed = call("experiment_status")["experiments"]
    assert sorted(e["session"] for e in listed) == ["ajet_c1", "ajet_c2", "ajet_c3", "ajet_same"]
    assert all(e["state"] == "running" for e in listed)


# ---- logs: cost follows appended bytes


def test_status_reads_only_appended_bytes_of_a_big_existing_log(tmux_socket: str, workdir: Path):
    log = workdir / "big.log"
    with log.open("w") as fh:
        for i in range(120_000):
            fh.write(f"filler line {i} ValueError-free text\n")
    size = log.stat().st_size
    assert size > 3_000_000
    out = call("launch_experiment", name="big", command="echo appended-line; sleep 30", workdir=str(workdir),
               log_path=str(log))
    wait_until(lambda: "appended-line" in log.read_text()[-200:])
    first = status(out["id"])
    assert first["skipped_bytes"] > 0 and len(first["lines"]) <= 200
    assert sum(len(x) + 1 for x in first["lines"]) <= 16 * 1024
    assert first["unscanned_bytes"] >= size - 1024 * 1024 - 100
    assert "appended-line" in first["lines"][-1]
    with log.open("a") as fh:
        fh.write("step:1 - actor/kl_loss:0.0 - training/global_step:1\n")
    second = status(out["id"])
    assert second["lines"] == ["step:1 - actor/kl_loss:0.0 - training/global_step:1"]
    assert second["skipped_bytes"] == 0 and second["unscanned_bytes"] == first["unscanned_bytes"]
    assert second["first_step_seen"] and second["global_step"] == 1
    assert int(second["cursor"]) == log.stat().st_size
    with pytest.raises(ToolInputError) as err:
        status(out["id"], since="1,2")
    assert err.value.field == "since"
    call("stop_experiment", id=out["id"], grace_s=1)


# ---- blueprint to results


def test_blueprint_launch_and_collect_results(tmux_socket: str, workdir: Path):
    val_md = workdir / "saved_val_result" / "exp.md"
    train_md = workdir / "saved_train_result" / "exp.md"
    val_md.parent.mkdir()
    train_md.parent.mkdir()
    (workdir / "exp.yaml").write_text(
        "ajet:\n  trainer_common:\n"
        "    val_print_to_markdown_file_path: saved_val_result/exp.md\n"
        "    train_print_to_markdown_file_path: saved_train_result/exp.md\n")
    bp_path = workdir / "blueprint.md"
    tpl = call("blueprint", action="template", path=str(bp_path), purpose="Fake math run",
               codebase_dir=str(workdir), venv_exe=sys.executable, yaml_path="exp.yaml",
               launch_command=trainer("--steps", "8", "--val-md", str(val_md), "--train-md", str(train_md))
               + " --conf exp.yaml",
               max_time="1.5h")
    assert tpl["ok"], tpl["problems"]
    checked = call("blueprint", action="validate", path=str(bp_path))
    assert checked["ok"] and checked["max_time_s"] == 5400 and checked["first_step_timeout_s"] == 1200
    out = call("launch_experiment", blueprint=str(bp_path))
    assert out["session"] == "ajet_fake_math_run" and out["max_time_s"] == 5400
    assert out["result_dir"] == str(workdir / "auto_agent" / "exp_results")
    assert wait_exit(out["id"])["state"] == "succeeded"
    res = call("collect_results", id=out["id"])
    assert res["state"] == "succeeded" and res["val_markdown"] == str(val_md)
    val = {m["key"]: m for m in res["val_metrics"]}
    assert val["mean_reward"]["n"] == 8 and val["mean_reward"]["best"] == 0.5 and val["mean_reward"]["first"] == 0.1
    assert res["plateau"]["mean_reward"] is True and res["plateau"]["task_pass_rate@1"] is True
    assert {m["key"] for m in res["train_metrics"]} >= {"critic/real_reward", "training/global_step"}
    results_md = Path(res["results_path"]).read_text()
    assert "| mean_reward | 8 | 0.1 | 0.5 | 0.5 | up | yes |" in results_md
    assert "**succeeded**" in results_md and out["log_path"] in results_md
    flag = Path(res["finish_flag_path"])
    assert flag == workdir / "auto_agent" / "exp_results" / "finish.flag" and flag.read_text() == ""
    leftovers = [p.name for p in flag.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_collect_results_while_running_writes_no_flag_and_lists_errors(tmux_socket: str, workdir: Path):
    cmd = "echo 'SWANLAB_API_KEY is not set in the environment.'; sleep 30"
    out = call("launch_experiment", name="partial", command=cmd, workdir=str(workdir))
    wait_until(lambda: status(out["id"], max_lines=0)["errors"])
    res = call("collect_results", id=out["id"])
    assert res["finish_flag_path"] is None and res["state"] == "running"
    assert any("still running" in n for n in res["notes"])
    assert [e["signature"] for e in res["errors"]] == ["swanlab_api_key_missing"]
    assert "swanlab_api_key_missing" in Path(res["results_path"]).read_text()
    call("stop_experiment", id=out["id"], grace_s=1)
    res = call("collect_results", id=out["id"])  # stopped: it did not finish, so no flag unless asked
    assert res["state"] == "stopped" and res["finish_flag_path"] is None
    assert any("write_finish_flag=true writes it" in n for n in res["notes"])
    assert not (Path(res["results_path"]).parent.parent / "finish.flag").exists()
    res = call("collect_results", id=out["id"], write_finish_flag=True)
    assert Path(res["finish_flag_path"]).exists()


def test_tool_errors_are_one_line(tmux_socket: str):
    for tool, args in [("experiment_status", {"id": "nope"}), ("stop_experiment", {"id": "nope"}),
                       ("collect_results", {}), ("experiment_status", {"since": "3"})]:
        with pytest.raises(SkillError) as err:
            call(tool, **args)
        assert "\n" not in str(err.value) and err.value.field in ("id", "since")


# ---- through a real MCP client


@pytest.mark.anyio
async def test_wait_experiment_through_mcp_client_with_progress(tmux_socket: str, workdir: Path):
    from mcp import Client

    from skill_server.app.mcp_server import build_server

    notes: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress, total, message):
        notes.append((progress, total, message))

    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name, read_only, destructive in [("experiment_status", True, False), ("launch_experiment", False, False),
                                             ("stop_experiment", False, True), ("wait_experiment", True, False)]:
            ann = tools[name].annotations
            assert (ann.read_only_hint, ann.destructive_hint) == (read_only, destructive), name
        launched = await client.call_tool("launch_experiment", {
            "name": "mcp", "command": trainer("--steps", "2", "--hold", "2.5"), "workdir": str(workdir)})
        assert not launched.is_error, launched.content
        exp_id = launched.structured_content["id"]
        r = await client.call_tool("wait_experiment", {"id": exp_id, "timeout_s": 20}, progress_callback=on_progress)
        assert not r.is_error, r.content
        out = r.structured_content
        assert out["reason"] == "exited" and out["state"] == "succeeded" and out["global_step"] == 2
        assert len(notes) >= 2 and all(n[1] == 20 for n in notes)
        assert notes[0][2].startswith("ajet_mcp: running") and [n[0] for n in notes] == sorted(n[0] for n in notes)
        bad = await client.call_tool("launch_experiment", {"name": "no good", "command": "true",
                                                           "workdir": str(workdir)})
        assert bad.is_error and "name" in bad.content[0].text and "\n" not in bad.content[0].text


# ---- one tmux server per state directory (issue 32: a listing never shows another workspace's sessions)


def test_each_state_directory_has_a_tmux_server_of_its_own(monkeypatch, tmp_path: Path):
    """Two workspaces (state directories) on one machine launch a session of the same name: each on its own
    socket, so a listing of one shows only its own; the default state folder keeps ``agentjet``, a socket given
    in SKILL_SERVER_TMUX_SOCKET still wins, and runs stay reachable by id on the socket they started on."""
    from skill_server.experiments.checks import default_socket, socket_name
    from tests.conftest import needs
    from tests.tmp_dirs import kill_run_processes, short_tmp_dir

    needs("tmux")
    monkeypatch.delenv("SKILL_SERVER_TMUX_SOCKET", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("SHELL", "/bin/sh")
    tmpdir = short_tmp_dir()
    monkeypatch.setenv("TMUX_TMPDIR", tmpdir)
    states = [short_tmp_dir(), short_tmp_dir()]
    sockets: list[str] = []
    try:
        for state in states:
            monkeypatch.setenv("SKILL_SERVER_STATE_DIR", state)
            assert socket_name() == default_socket() == socket_name()  # stable
            sockets.append(socket_name())
            out = call("launch_experiment", name="same", command="sleep 30", workdir=str(tmp_path))
            assert out["attach"].count(sockets[-1]) == 1, out["attach"]
        assert sockets[0] != sockets[1] and all(s.startswith("agentjet-") for s in sockets)
        for state, name in zip(states, sockets):
            listed = subprocess.run(["tmux", "-L", name, "list-sessions", "-F", "#{session_name}"],
                                    capture_output=True, text=True, timeout=30, check=True).stdout.split()
            assert listed == ["ajet_same"], (name, listed)  # its own session only
            monkeypatch.setenv("SKILL_SERVER_STATE_DIR", state)
            (only,) = call("experiment_status")["experiments"]
            stopped = call("stop_experiment", id=only["id"])
            assert stopped["state"] in ("stopped", "killed"), stopped
        monkeypatch.delenv("SKILL_SERVER_STATE_DIR")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert socket_name() == "agentjet"  # the default state folder: the name runs of older versions used
        monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", "mine")
        assert socket_name() == "mine"
    finally:
        for state, name in zip(states, sockets):
            subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, timeout=30, check=False)
            kill_run_processes(state)
        for folder in (tmpdir, *states):
            shutil.rmtree(folder, ignore_errors=True)
