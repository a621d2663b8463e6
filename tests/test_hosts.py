"""The host layer without ssh: destinations, ssh option building, the agent's files, commands and protocol."""

from __future__ import annotations

import ast
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.experiments.states import ProcFacts, process_state, run_state
from skill_server.hosts import LOCAL, HostUnreachable, client, get_host, normalise, result_of
from skill_server.hosts import ssh as ssh_mod
from skill_server.hosts.agent import files, ops, program
from skill_server.hosts.agent.protocol import PROTOCOL_VERSION

AGENT_DIR = Path(files.__file__).parent


# ---- destinations


@pytest.mark.parametrize("value", ["node1", "user@10.0.0.5", "ssh://user@h:2222", "ssh://h", "ssh://u@[::1]:22",
                                   "gpu-1.cluster.local", "me@host.example"])
def test_destinations_ssh_accepts(value: str):
    assert normalise(value, field="host") == value


@pytest.mark.parametrize("value", ["-oProxyCommand=x", "-F/etc/passwd", "a b", "node1\n", "x\ty", "", "@h", "u@",
                                   "a@-x", "ssh://-x", "ssh://-u@h", "ssh://h:123456", "$(id)", "a;b", "`id`",
                                   "n\x00", "h" * 256])
def test_destinations_that_could_be_options_or_carry_shell_syntax_are_refused(value: str):
    with pytest.raises(ToolInputError) as err:
        normalise(value, field="processes.2.host")
    assert err.value.field == "processes.2.host" and "\n" not in str(err.value)


def test_local_is_this_machine():
    assert normalise(None, field="host") == normalise("local", field="host") == LOCAL
    assert get_host("local").is_local and not get_host("node9").is_local


# ---- ssh options and messages


def test_ssh_options_are_batch_mode_with_timeout_and_multiplexing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    short = Path(os.path.realpath("/tmp")) / f"ajsh{os.getpid()}"
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(short))
    config = tmp_path / "cfg"
    config.write_text("Host x\n")
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(config))
    try:
        argv = ssh_mod.ssh_options()
        joined = " ".join(argv)
        assert argv[1:3] == ["-F", str(config)] and "BatchMode=yes" in argv and "ControlMaster=auto" in argv
        assert f"ControlPath={short}/ssh/%C" in argv and "ConnectTimeout=" in joined and "ControlPersist=" in joined
        assert "StrictHostKeyChecking" not in joined  # never weakened
        assert stat.S_IMODE(os.stat(short / "ssh").st_mode) == 0o700
    finally:
        import shutil

        shutil.rmtree(short, ignore_errors=True)
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(tmp_path / "missing"))
    with pytest.raises(Exception, match="SKILL_SERVER_SSH_CONFIG"):
        ssh_mod.ssh_options()


def test_control_path_falls_back_to_a_short_private_dir_or_turns_multiplexing_off(monkeypatch: pytest.MonkeyPatch,
                                                                                   tmp_path: Path):
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(tmp_path / ("long" * 20)))
    fallback = Path(os.path.realpath("/tmp")) / f"ajsf{os.getpid()}"
    monkeypatch.setattr(ssh_mod, "FALLBACK_CONTROL_DIR", str(fallback))
    try:
        assert ssh_mod.control_dir() == str(fallback)
        os.chown(fallback, 65534, 65534)  # someone else's directory is never used
        assert ssh_mod.control_dir() is None
        argv = ssh_mod.ssh_options()
        assert "ControlMaster=no" in argv and "ControlPath=none" in argv
    finally:
        os.rmdir(fallback)


def test_ssh_errors_keep_ssh_words_and_say_what_to_do():
    msg = ssh_mod.describe_ssh_error("Warning: Permanently added '[h]:22' (ED25519) to the list of known hosts.\n"
                                     "root@h: Permission denied (publickey).\n")
    assert msg.startswith("root@h: Permission denied (publickey).") and "ssh-agent" in msg
    assert "known_hosts" in ssh_mod.describe_ssh_error("No ED25519 host key is known for h and you have requested "
                                                       "strict checking.\nHost key verification failed.\n")
    assert ssh_mod.describe_ssh_error("") == "ssh failed without a message"


def test_attach_commands_quote_paths(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SKILL_SERVER_SSH_CONFIG", raising=False)
    attach = ["tmux", "-S", "/t/a b/sock", "attach", "-t", "ajet_x"]  # what the tmux backend says attaches
    assert get_host("local").terminal_command(attach) == "tmux -S '/t/a b/sock' attach -t ajet_x"
    quoted = "'\"'\"'/t/a b/sock'\"'\"'"  # the path's quotes, quoted again for the remote shell
    assert get_host("gpu1").terminal_command(attach) == f"ssh -t gpu1 'tmux -S {quoted} attach -t ajet_x'"
    assert get_host("gpu1").terminal_command(["tmux", "-S", "/t/s", "attach", "-t", "ajet_x"]) == \
        "ssh -t gpu1 'tmux -S /t/s attach -t ajet_x'"


def test_attach_command_names_the_ssh_config_by_its_absolute_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The user types it in another directory than the server's: a relative config path would not be found."""
    (tmp_path / "my config").write_text("Host gpu1\n  HostName 127.0.0.1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # ssh -G below: nothing of the user's ~/.ssh is read
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", "my config")
    assert get_host("gpu1").terminal_command(["tmux", "-S", "/t/s", "attach", "-t", "ajet_x"]) == \
        f"ssh -t -F '{tmp_path}/my config' gpu1 'tmux -S /t/s attach -t ajet_x'"
    assert ssh_mod.configured_hostname("gpu1") == "127.0.0.1"  # ssh -G reads the same file


# ---- the agent's files


def test_reads_refuse_fifos_and_devices_without_blocking(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    dev = tmp_path / "zero"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    for path in (fifo, dev, tmp_path):
        t0 = time.monotonic()
        with pytest.raises((files.AgentError, OSError)):
            files.read_range(str(path), 0, 10)
        assert time.monotonic() - t0 < 2
    assert files.read_appended(str(fifo), 0, 100, True)["text"] == ""
    regular = tmp_path / "log"
    regular.write_bytes(b"a\nb\npartial")
    assert files.read_range(str(regular), -3, 10) == (11, b"ial")
    assert files.read_appended(str(regular), 0, 100, False) == {"text": "a\nb\n", "end": 4, "skipped": 0,
                                                                "reset": False}
    assert files.read_appended(str(regular), 0, 100, True)["text"] == "a\nb\npartial"


def test_writes_create_or_replace_regular_files_only(tmp_path: Path):
    target = tmp_path / "sub" / "results.md"
    assert files.write_atomic(str(target), b"one", replace=False) == str(target)
    with pytest.raises(files.AgentError, match="never replaces"):
        files.write_atomic(str(target), b"two", replace=False)
    os.chmod(target, 0o600)
    files.write_atomic(str(target), b"two", replace=True)
    assert target.read_bytes() == b"two" and stat.S_IMODE(target.stat().st_mode) == 0o600
    fifo, dev, link = tmp_path / "fifo", tmp_path / "null", tmp_path / "link"
    os.mkfifo(fifo)
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    link.symlink_to(target)
    for path in (fifo, dev, link, tmp_path / "sub"):
        with pytest.raises(files.AgentError, match="not a regular file"):
            files.write_atomic(str(path), b"x", replace=True)
    assert stat.S_ISCHR(dev.lstat().st_mode) and stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink()
    stale = tmp_path / "sub" / f".results.md.abc{files.TEMP_SUFFIX}"
    stale.write_text("left by a killed write")
    old = time.time() - 2 * files.STALE_TEMP_S
    os.utime(stale, (old, old))
    files.write_atomic(str(target), b"three", replace=True)
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["results.md"]


# ---- the agent's commands and protocol


@pytest.mark.needs("pgrep")
def test_run_is_bounded_in_time_and_output_and_kills_the_group():
    done = ops.handle({"v": PROTOCOL_VERSION, "ops": [
        {"op": "run", "argv": ["sh", "-c", "sleep 31.7 & echo started; wait"], "timeout_s": 1},
        {"op": "run", "argv": ["python3", "-c", "print('x' * 5000)"], "max_output": 1024},
        {"op": "run", "argv": ["no-such-program-ajs"]},
        {"op": "run", "argv": ["cat"], "stdin": "a 'b' $c\n"},
    ]})["results"]
    assert done[0]["timed_out"] and done[0]["returncode"] is None and done[0]["stdout"] == "started\n"
    assert done[1]["truncated"] and len(done[1]["stdout"]) == 1024
    assert done[2]["returncode"] is None and "not found" in done[2]["error"]
    assert done[3]["stdout"] == "a 'b' $c\n"
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", "^sleep 31.7$"], capture_output=True,
                          check=False).returncode == 1  # none left


def test_each_client_function_builds_the_request_the_agent_reads():
    """The wire, op by op (protocol version 3): what each client function sends, keys in order."""
    proc = {"role": "main", "command": "true", "workdir": "/w", "workdir_field": "workdir", "env": {},
            "log_path": "m.log", "log_field": "log_path", "wait_for_url": None, "wait_for_url_timeout_s": 0}
    tmux = {"kind": "tmux", "options": {"socket_name": "agentjet", "replace_pids": [7]}}
    launch = client.launch("x-1", "ajet_x", backend=tmux, python=None, workdir="/w", result_dir="r",
                           max_time_s=60, deadline_grace_s=5, procs=[proc])
    launched = {"op": "launch", "exp_id": "x-1", "session": "ajet_x", "dry_run": True, "backend": tmux,
                "python": None, "workdir": "/w", "result_dir": "r", "max_time_s": 60, "deadline_grace_s": 5,
                "procs": [proc]}
    handle = {"kind": "tmux", "socket_path": "/s", "session": "ajet_x", "session_id": "$1"}
    cases = [
        (client.ping(), {"op": "ping"}),
        (client.run(["nvidia-smi", "-L"], timeout_s=20, max_output=1024),
         {"op": "run", "argv": ["nvidia-smi", "-L"], "timeout_s": 20, "max_output": 1024}),
        (client.run(["cat"], timeout_s=5.0, stdin="x", cwd="/t", env={"A": "1"}, max_output=2048),
         {"op": "run", "argv": ["cat"], "timeout_s": 5.0, "stdin": "x", "cwd": "/t", "env": {"A": "1"},
          "max_output": 2048}),
        (client.read("/p", 11, offset=-11, text=True),
         {"op": "read", "path": "/p", "offset": -11, "length": 11, "text": True}),
        (client.write("/p", text="t", replace=True), {"op": "write", "path": "/p", "text": "t", "replace": True}),
        (client.write("/p", data=b"\0", replace=True), {"op": "write", "path": "/p", "data": "AA==", "replace": True}),
        (launch.check, launched),
        (launch.start, {**launched, "dry_run": False}),
        (client.discard("x-1", handle), {"op": "discard", "exp_id": "x-1", "handle": handle}),
        (client.observe([{"run_dir": "/r", "role": "main", "pid": 5, "start": "9", "log_path": "/l",
                          "reads": [{"offset": 0, "budget": 10}], "handle": handle}], heal=True),
         {"op": "observe", "procs": [{"run_dir": "/r", "role": "main", "pid": 5, "start": "9", "log_path": "/l",
                                      "reads": [{"offset": 0, "budget": 10}], "handle": handle}], "heal": True}),
        (client.stop("x-1", "/r", handle, grace_s=1.0, procs=[{"role": "main", "pid": None, "start": None}]),
         {"op": "stop", "exp_id": "x-1", "run_dir": "/r", "handle": handle, "grace_s": 1.0,
          "procs": [{"role": "main", "pid": None, "start": None}]}),
        (client.checkpoints("/c", max_depth=3, max_entries=20000, limit=50),
         {"op": "checkpoints", "path": "/c", "max_depth": 3, "max_entries": 20000, "limit": 50}),
        (client.reclaim_gpus([3, 4], 10.0), {"op": "reclaim_gpus", "pids": [3, 4], "grace_s": 10.0}),
        (client.stat(["/a", "~/b"]), {"op": "stat", "paths": ["/a", "~/b"]}),
        (client.wrap_up("/r", {"id": "x-1"}, png=None, flag=False),
         {"op": "wrap_up", "result_dir": "/r", "doc": {"id": "x-1"}, "flag": False}),
        (client.wrap_up("/r", {"id": "x-1"}, png=b"\x89PNG", flag=True),
         {"op": "wrap_up", "result_dir": "/r", "doc": {"id": "x-1"}, "flag": True, "png": "iVBORw=="}),
    ]
    for op, wire in cases:
        assert json.dumps(op.request) == json.dumps(wire)
    assert {op.request["op"] for op, _ in cases} == set(ops.OPS)
    with pytest.raises(ValueError):
        client.write("/p", replace=True)


def test_client_answers_are_typed_and_failures_become_tool_errors(tmp_path: Path):
    target = tmp_path / "a.txt"
    write, read, missing = (client.write(str(target), text="hello", replace=False),
                            client.read(str(target), 100, text=True), client.read(str(tmp_path / "nope"), 1))
    results = get_host(LOCAL).call([write, read, missing])
    assert write.expect(results[0])["path"] == str(target)
    answer = read.answer(results[1])
    assert answer["ok"] and answer["size"] == 5 and answer["text"] == "hello"
    failed = missing.answer(results[2])
    assert not failed["ok"] and failed["kind"] == "not_found"
    with pytest.raises(ToolInputError) as err:
        missing.expect(results[2], field="yaml_path")
    assert err.value.field == "yaml_path" and "file not found" in str(err.value)
    with pytest.raises(ToolFailure):
        missing.expect(results[2])
    assert result_of(HostUnreachable("h", "down")) == {"ok": False, "error": "host 'h' is unreachable: down",
                                                       "field": None, "kind": "unreachable"}


def test_stat_says_what_each_path_is_without_opening_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A directory, a runnable and a plain regular file, a FIFO (never opened: stat cannot block on it), a
    dangling link, a path through a file; ``~`` is the agent's own home."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "exe").write_text("#!/bin/sh\n")
    (tmp_path / "exe").chmod(0o755)
    (tmp_path / "plain").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    asked = ["~", "~/exe", str(tmp_path / "plain"), str(tmp_path / "fifo"), str(tmp_path / "dangling"),
             str(tmp_path / "plain" / "under"), str(tmp_path / "a" / ".." / "exe")]
    op = client.stat(asked)
    reply = op.expect(get_host(LOCAL).call([op])[0])
    assert [(p["path"], p["kind"], p["executable"]) for p in reply["paths"]] == [
        (str(tmp_path), "dir", False), (str(tmp_path / "exe"), "file", True), (str(tmp_path / "plain"), "file", False),
        (str(tmp_path / "fifo"), "other", False), (str(tmp_path / "dangling"), "missing", False),
        (str(tmp_path / "plain" / "under"), "missing", False), (str(tmp_path / "exe"), "file", True)]
    too_many = ops.handle({"v": PROTOCOL_VERSION, "ops": [{"op": "stat", "paths": ["/"] * 65}]})["results"][0]
    assert not too_many["ok"] and too_many["field"] == "paths"


def test_one_bad_op_costs_only_its_own_result():
    reply = ops.handle({"v": PROTOCOL_VERSION, "ops": [{"op": "nope"}, {"op": "read"}, {"op": "ping"},
                                                       {"op": "read", "path": 5, "length": 1}, "junk"]})
    results = reply["results"]
    assert [r["ok"] for r in results] == [False, False, True, False, False]
    assert "unknown operation" in results[0]["error"] and "'path' is required" in results[1]["error"]
    assert ops.handle({"v": 999, "ops": []})["error"].startswith("bad request")
    assert ops.handle(["not", "a", "dict"])["error"].startswith("bad request")


def test_agent_sources_are_stdlib_only_and_python_3_8_syntax():
    stdlib = sys.stdlib_module_names
    for path in AGENT_DIR.glob("*.py"):
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in stdlib for a in node.names), path.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in stdlib or node.module == "__future__", (path.name, node.module)
    assert set(program.MODULES) | {"__init__"} == {p.stem for p in AGENT_DIR.glob("*.py")}
    assert not set(program.BOOTSTRAP) & set("'\"\\$`")


NONCE = "0123abcd"


def _framed_reply(stdout: bytes) -> dict:
    """The one reply of a framed exchange (after the bootstrap's ready line)."""
    ready, head, body = stdout.split(b"\n", 2)
    assert ready == f"{program.READY} {NONCE}".encode() and head.startswith(f"{program.FRAME} {NONCE} ".encode())
    return json.loads(body)


def _bootstrap(payload: bytes, request: dict, env: dict[str, str], python: str = sys.executable) -> dict:
    proc = subprocess.run([python, "-I", "-S", "-c", program.BOOTSTRAP, *program.bootstrap_argv(NONCE)],
                          capture_output=True, timeout=60, env=env, check=False,
                          input=payload + program.frame(NONCE, json.dumps(request).encode()))
    assert proc.returncode == 0, proc.stderr
    return _framed_reply(proc.stdout)


def test_the_shipped_program_installs_once_per_version_and_answers(tmp_path: Path):
    env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    request = {"v": PROTOCOL_VERSION, "ops": [{"op": "ping"}]}
    first = _bootstrap(ssh_mod.program.ssh_payload(NONCE), request, env)
    assert first["results"][0]["state_dir"] == str(tmp_path / "state")
    installed = list((tmp_path / "state" / "agent").iterdir())
    assert len(installed) == 1 and (installed[0] / "ajs_agent" / "ops.py").is_file()
    again = _bootstrap(ssh_mod.program.ssh_payload(NONCE), request, env)
    assert again["results"][0]["ok"] and list((installed[0] / "ajs_agent" / "__pycache__").iterdir())
    blocked = {**env, "SKILL_SERVER_STATE_DIR": str(tmp_path / "blocked")}
    (tmp_path / "blocked").mkdir()
    (tmp_path / "blocked" / "agent").write_text("not a directory")  # cannot install: loads in memory instead
    assert _bootstrap(ssh_mod.program.ssh_payload(NONCE), request, blocked)["results"][0]["ok"]
    standalone = tmp_path / "agent.py"
    standalone.write_text(program.program_text())
    proc = subprocess.run([sys.executable, str(standalone)], input=json.dumps(request).encode(), capture_output=True,
                          timeout=60, env=env, check=False)
    assert json.loads(proc.stdout)["results"][0]["ok"]


def test_the_installed_agent_never_loads_typing(tmp_path: Path):
    """Every host call starts the agent: the wire types exist for type checkers only, so it pays nothing for them."""
    env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    _bootstrap(ssh_mod.program.ssh_payload(NONCE), {"v": PROTOCOL_VERSION, "ops": [{"op": "ping"}]}, env)
    (installed,) = (tmp_path / "state" / "agent").iterdir()
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from ajs_agent import ops; "
             "ops.handle({'v': ops.PROTOCOL_VERSION, 'ops': [{'op': 'ping'}, {'op': 'observe', 'procs': []}]}); "
             "print('typing' in sys.modules)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(installed)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("where", ["xdg", "home"])
def test_stage_one_finds_the_state_directory_by_the_protocol_rule(tmp_path: Path, where: str):
    """Stage one runs before the package exists on the host: its copy of the rule must agree with it."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    if where == "xdg":
        env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    expected = tmp_path / ("xdg" if where == "xdg" else "home/.local/state") / "agentjet-swarm-skill"
    reply = _bootstrap(ssh_mod.program.ssh_payload(NONCE), {"v": PROTOCOL_VERSION, "ops": [{"op": "ping"}]}, env)
    assert reply["results"][0]["state_dir"] == str(expected)
    assert [p.name for p in (expected / "agent").iterdir()] and "SKILL_SERVER_STATE_DIR" not in program._STAGE_ONE


def _python38() -> str | None:
    """A Python 3.8 on this machine (the oldest the host agent supports), or None."""
    found = [shutil.which("python3.8")] + sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for candidate in filter(None, found):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.stdout.strip() == "(3, 8)":
            return candidate
    return None


def test_the_agent_answers_on_python_3_8(tmp_path: Path):
    python = _python38()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    (tmp_path / "w").mkdir()
    ops_ = [{"op": "ping"}, {"op": "run", "argv": ["echo", "hi"]},
            {"op": "write", "path": str(tmp_path / "w" / "f.txt"), "text": "x", "replace": True},
            {"op": "read", "path": str(tmp_path / "w" / "f.txt"), "length": 10, "text": True},
            {"op": "checkpoints", "path": str(tmp_path)},
            {"op": "launch", "exp_id": "py38", "session": "ajet_py38", "socket_name": "ajs-py38", "dry_run": True,
             "replace_pids": [], "python": None, "workdir": str(tmp_path / "w"), "result_dir": ".",
             "max_time_s": 60, "deadline_grace_s": 5,
             "procs": [{"role": "main", "command": "true", "workdir": str(tmp_path / "w"), "workdir_field": "workdir",
                        "env": {}, "log_path": "main.log", "log_field": "log_path", "wait_for_url": None,
                        "wait_for_url_timeout_s": 0}]},
            {"op": "observe", "sockets": [str(tmp_path / "nosock")], "procs": []},
            {"op": "reclaim_gpus", "pids": [2**22 + 7], "grace_s": 0}]
    request = json.dumps({"v": PROTOCOL_VERSION, "ops": ops_}).encode()
    for _ in range(2):  # installing, then installed
        proc = subprocess.run([python, "-I", "-S", "-c", program.BOOTSTRAP, *program.bootstrap_argv(NONCE)],
                              capture_output=True, timeout=60, env=env, check=False,
                              input=ssh_mod.program.ssh_payload(NONCE) + program.frame(NONCE, request))
        results = _framed_reply(proc.stdout)["results"]
        assert [r["ok"] for r in results] == [True] * len(ops_), (proc.stderr, results)
    assert results[0]["version"][:2] == [3, 8] and results[1]["stdout"] == "hi\n" and results[3]["text"] == "x"
    standalone = tmp_path / "agent.py"
    standalone.write_text(program.program_text())
    proc = subprocess.run([python, str(standalone)], input=request, capture_output=True, timeout=60, env=env,
                          check=False)
    assert [r["ok"] for r in json.loads(proc.stdout)["results"]][:2] == [True, True]


# ---- states


def test_states_come_from_liveness_exit_codes_and_markers():
    f = ProcFacts
    assert process_state(None) == "unreachable"
    assert process_state(f(alive=True, exit_code=None)) == "running"
    assert process_state(f(alive=True, exit_code=None, markers=frozenset({"gate"}))) == "waiting"
    assert process_state(f(alive=False, exit_code=None)) == "lost"
    assert process_state(f(alive=False, exit_code=130, markers=frozenset({"stopped"}))) == "stopped"
    assert process_state(f(alive=False, exit_code=None, markers=frozenset({"timedout"}))) == "timed_out"
    assert process_state(f(alive=False, exit_code=2)) == "failed"
    assert process_state(f(alive=False, exit_code=0, markers=frozenset({"survivors"}))) == "running"
    assert process_state(f(alive=None, exit_code=None)) == "lost"  # its backend could not tell, nothing else does
    assert process_state(f(alive=True, exit_code=None, markers=frozenset({"queued"}))) == "waiting"
    assert run_state(["succeeded", "succeeded"], [0, 0]) == ("succeeded", 0, None)
    assert run_state(["stopped", "succeeded"], [130, 0]) == ("stopped", 130, None)
    assert run_state(["running", "unreachable"], [None, None])[0] == "unreachable"
    assert run_state(["failed", "running"], [3, None])[:2] == ("failed", 3)
    assert run_state(["timed_out", "stopped"], [130, None])[0] == "timed_out"


# ---- any input: a result or a clean error


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_as_a_host_is_accepted_or_refused_by_name(value: str):
    try:
        assert normalise(value, field="host") in (value, LOCAL)
    except ToolInputError as err:
        assert err.field == "host" and "\n" not in err.message.replace(repr(value), "")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.integers(min_value=1, max_value=4))
def test_any_text_as_a_cursor_is_accepted_or_refused_by_name(text: str, n: int):
    from skill_server.experiments.queries import parse_cursor

    try:
        offsets = parse_cursor(text, n, "since")
        assert len(offsets) == n and all(0 <= o <= 2**62 for o in offsets)
    except ToolInputError as err:
        assert err.field == "since"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "host", "command", "workdir", "max_time_s", "processes", "env",
                                        "first_step_pattern", "bogus"]), json_values, max_size=5))
def test_any_launch_arguments_validate_or_name_a_field(arguments: dict):
    from skill_server.app.table import TOOLS_BY_NAME

    try:
        TOOLS_BY_NAME["launch_experiment"].validate(arguments)
    except ToolInputError as err:
        assert err.field or "\n" not in str(err)


def test_hosts_answer_an_agent_that_is_not_there():
    reply = ops.handle({"v": PROTOCOL_VERSION, "ops": [{"op": "observe", "procs": [
        {"run_dir": "/nonexistent", "role": "main", "pid": 2**22 + 7, "start": "1", "log_path": "/nonexistent/log",
         "reads": [{"offset": 0, "budget": 100}], "handle": {"kind": "tmux", "socket_path": "/nonexistent/sock"}}]}]}
    )["results"][0]
    assert reply["ok"] and reply["healed"] == []
    assert reply["procs"][0] == {"alive": False, "exit_code": None, "exit_source": None, "elapsed_s": None,
                                 "markers": [], "final": True, "size": None,
                                 "reads": [{"text": "", "end": 0, "skipped": 0, "reset": False}]}
