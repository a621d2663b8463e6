"""Blueprints that live on an ssh host: read, checked and launched there in one call.

One real OpenSSH server on loopback for the node ``node1`` (tests/sshd.py), in its own PID and mount
namespaces with its own /tmp (``private_tmp``), as a separate machine has: a file written into the node's
/tmp is not on this machine, and this test's own temporary folders (pytest's, under /tmp) are not on the
node. The node's files are made on the node itself (``node_exec``), never through the tool under test.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.hosts.ssh import close_masters
from tests.conftest import call_cli, cli_env
from tests.experiment_helpers import FAKE, call
from tests.sshd import LoopbackSshd

NODE = "node1"


@pytest.fixture(scope="module")
def node():
    if os.getuid() != 0:
        pytest.skip("a node with its own /tmp needs mount namespaces (root); CI runs as root")
    server = LoopbackSshd((NODE,), one_per_node=True, private_tmp=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def remote(node: LoopbackSshd, monkeypatch: pytest.MonkeyPatch):
    client = Path(tempfile.mkdtemp(prefix="c", dir=node.root))  # short: control sockets live under it
    (client / "home").mkdir()
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(node.config))
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(client / "s"))
    monkeypatch.setenv("HOME", str(client / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", f"ajb-{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield node
    close_masters()


def on_node(sshd: LoopbackSshd, script: str, *args: str) -> str:
    """Run a shell script on the node itself (its /tmp), arguments as $1...; its stdout."""
    done = sshd.node_exec(NODE, ["sh", "-c", script, "sh", *args])
    assert done.returncode == 0, done.stderr
    return done.stdout


def node_blueprint(sshd: LoopbackSshd, steps: int = 2) -> Path:
    """A blueprint in a folder of the node's own /tmp whose paths are relative to that folder: the code base
    ``code`` (its YAML beside the command), results in ``code/results``. Returns its path on the node."""
    top = Path("/tmp") / f"ajb-{uuid.uuid4().hex[:8]}" / "exp"
    text = "\n".join([
        "# Night run", "",
        "## [exp_purpose]", "- content: Night run on the node", "",
        "## [exp_codebase_dir]", "- content: code", "",
        "## [exp_venv_exe]", "- content: /usr/bin/python3", "",
        "## [exp_yaml_path]", "- content: exp.yaml", "",
        "## [exp_launch_command]", f"- content: python3 {FAKE.name} --steps {steps} --delay 0.1 --conf exp.yaml", "",
        "## [exp_result_dir]", "- content: results", "",
        "## [exp_max_time]", "- content: 30 min; first step within 5 min", "",
        "## [exp_policy]", '- content: {"on_error": "resume", "errors": ["nccl_error"], "on_stall": "resume"}', "",
    ])
    # the trainer too is the node's own copy: this checkout may be in this machine's /tmp, which the node cannot see
    on_node(sshd, 'mkdir -p "$1/code" && printf "ajet:\\n  experiment_name: night\\n" > "$1/code/exp.yaml" && '
                  'printf "%s\\n" "$2" > "$1/blueprint.md" && printf "%s" "$3" > "$1/code/$4"', str(top), text,
            FAKE.read_text(), FAKE.name)
    assert not top.exists()  # on the node only
    return top / "blueprint.md"


def test_a_blueprint_only_on_the_host_is_validated_and_launched_there_by_its_host_path(remote: LoopbackSshd):
    blueprint = node_blueprint(remote)
    top = blueprint.parent
    for arguments in ({"path": f"{NODE}:{blueprint}"}, {"path": str(blueprint), "host": NODE}):
        checked = call("blueprint", action="validate", **arguments)
        assert checked["ok"], checked["problems"]
        assert checked["path"] == f"{NODE}:{blueprint}" and checked["summary"].startswith(f"The blueprint {NODE}:")
        assert checked["resolved"] == {"exp_codebase_dir": str(top / "code"), "exp_venv_exe": "/usr/bin/python3",
                                       "exp_yaml_path": str(top / "code" / "exp.yaml"),
                                       "exp_result_dir": str(top / "code" / "results")}
        assert {(p["field"], p["severity"]) for p in checked["problems"]} == {
            ("exp_codebase_dir", "warning"), ("exp_yaml_path", "warning"), ("exp_result_dir", "warning")}
    out = call("launch_experiment", blueprint=f"{NODE}:{blueprint}")
    assert out["host"] == NODE and out["session"] == "ajet_night_run_node" and out["max_time_s"] == 1800
    assert out["first_step_timeout_s"] == 300 and out["result_dir"] == str(top / "code" / "results")
    assert out["log_path"] == str(top / "code" / "results" / out["id"] / "ajet_night_run_node.log")
    done = call("wait_experiment", id=out["id"], timeout_s=40)
    assert done["state"] == "succeeded" and done["global_step"] == 2 and done["host"] == NODE
    assert "training finished" in on_node(remote, 'cat "$1"', out["log_path"])
    assert not Path(out["log_path"]).exists()  # the log is on the node


def test_a_home_path_on_the_host_is_the_hosts_home(remote: LoopbackSshd):
    """``~`` in the blueprint's path and in its sections is the node's home, expanded there."""
    folder = f"bp-{uuid.uuid4().hex[:6]}"
    on_node(remote, 'mkdir -p "$1/code" && touch "$1/code/exp.yaml" && printf "%s\\n" "$2" > "$1/bp.md"',
            str(remote.home / folder), "\n".join(["[exp_purpose]", "home run", "[exp_codebase_dir]", f"~/{folder}/code",
                               "[exp_venv_exe]", "/usr/bin/python3", "[exp_yaml_path]", "exp.yaml",
                               "[exp_launch_command]", "true", "[exp_result_dir]", "out", "[exp_max_time]", "1h"]))
    checked = call("blueprint", action="validate", path=f"{NODE}:~/{folder}/bp.md")
    assert checked["ok"], checked["problems"]
    assert checked["path"] == f"{NODE}:{remote.home / folder / 'bp.md'}"
    assert checked["resolved"]["exp_codebase_dir"] == str(remote.home / folder / "code")


def test_a_blueprint_whose_paths_exist_only_here_is_refused_naming_the_host(remote: LoopbackSshd, tmp_path: Path):
    code = tmp_path / "code"  # this machine's /tmp: not on the node
    code.mkdir()
    (code / "exp.yaml").write_text("ajet: {}\n")
    blueprint = tmp_path / "blueprint.md"
    call("blueprint", action="template", path=str(blueprint), purpose="only here", codebase_dir=str(code),
         venv_exe="/usr/bin/python3", yaml_path=str(code / "exp.yaml"), launch_command="true", max_time="1h")
    assert call("blueprint", action="validate", path=str(blueprint))["ok"]  # fine for a run here
    with pytest.raises(ToolInputError) as err:  # a plain path with host is read on the host: not there
        call("launch_experiment", blueprint=str(blueprint), host=NODE)
    assert err.value.field == "blueprint" and "\n" not in err.value.message
    assert f"blueprint not found on {NODE}: {blueprint}" in err.value.message
    assert f"give 'local:{blueprint}' to read it here" in err.value.message
    with pytest.raises(ToolInputError) as err:  # read here, checked on the node: its paths are not there
        call("launch_experiment", blueprint=f"local:{blueprint}", host=NODE)
    message = err.value.message
    assert err.value.field == "blueprint" and "\n" not in message
    assert f"[exp_codebase_dir] directory does not exist on {NODE}: {code}; it exists on this machine" in message
    assert f"[exp_yaml_path] YAML file does not exist on {NODE}" in message
    checked = call("blueprint", action="validate", path=f"local:{blueprint}", host=NODE)
    assert not checked["ok"] and checked["path"] == str(blueprint)
    assert {p["field"] for p in checked["problems"] if p["severity"] == "error"} == {"exp_codebase_dir",
                                                                                       "exp_yaml_path"}
    assert all(NODE in p["message"] for p in checked["problems"] if p["severity"] == "error")
    assert [e for e in call("experiment_status")["experiments"] if e["session"] == "ajet_only_here"] == []


def test_hostile_host_paths_are_refused_in_one_line_naming_the_field(remote: LoopbackSshd):
    top = Path(on_node(remote, 'd=$(mktemp -d /tmp/ajh-XXXXXX) && mkfifo "$d/fifo.md" && mkdir "$d/dir.md" && '
                               'head -c 300000 /dev/zero | tr "\\0" "x" > "$d/big.md" && echo "$d"').strip())
    refused = {
        f"{NODE}:{top}/../etc/bp.md": "'..' is not taken",
        f"{NODE}:~/'exp'/bp.md": "without quotes",
        f'{NODE}:"{top}/bp.md"': "without quotes",
        f"{NODE}:$HOME/bp.md": "no shell expands",
        f"{NODE}:~/`id`/bp.md": "no shell expands",
        f"{NODE}:{top}/fifo.md": f"not a regular file on {NODE}: {top}/fifo.md",
        f"{NODE}:{top}/dir.md": f"not a regular file on {NODE}",
        f"{NODE}:{top}/big.md": "over the 256 KiB limit",
        f"{NODE}:./bp.md": "give an absolute path on node1",
    }
    for value, words in refused.items():
        for tool, arguments, field in (("launch_experiment", {"blueprint": value}, "blueprint"),
                                       ("blueprint", {"action": "validate", "path": value}, "path")):
            with pytest.raises(ToolInputError) as err:
                call(tool, **arguments)
            assert err.value.field == field and words in err.value.message, (value, err.value.message)
            assert "\n" not in err.value.message
    with pytest.raises(ToolInputError) as err:  # the same with the host given apart
        call("launch_experiment", blueprint="$HOME/bp.md", host=NODE)
    assert err.value.field == "blueprint" and "no shell expands" in err.value.message
    rc, _, err_text = call_cli("launch_experiment", {"blueprint": f"{NODE}:{top}/fifo.md"}, env=cli_env())
    assert rc == 1 and err_text.count("\n") == 1 and "blueprint" in err_text and "not a regular file" in err_text
    assert on_node(remote, 'ls "$1"', str(top)).split() == ["big.md", "dir.md", "fifo.md"]  # nothing created


def test_an_unreachable_host_is_named_and_nothing_is_read_elsewhere(remote: LoopbackSshd, tmp_path: Path):
    (tmp_path / "bp.md").write_text("[exp_purpose]\nx\n")
    with pytest.raises(ToolFailure) as err:
        call("launch_experiment", blueprint=f"down:{tmp_path / 'bp.md'}")
    assert err.value.field == "blueprint" and "host 'down' is unreachable" in str(err.value)
    assert "\n" not in str(err.value)
