"""The Slurm backend's pure parts, without a cluster: sbatch's options from the ``slurm`` argument, the batch
script (bash -n), Slurm's EXIT:SIGNAL read as a shell would say it, and the argument checks of a launch."""

from __future__ import annotations

import subprocess

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.hosts.agent import slurm
from skill_server.hosts.agent.files import AgentError
from tests.experiment_helpers import call


def test_options_come_from_the_slurm_argument_and_the_max_time():
    argv = slurm.options({"partition": "gpu", "nodes": 2, "gpus_per_node": 4, "cpus_per_task": 16, "mem": "64G",
                          "account": "lab", "qos": "high", "extra_args": ["--constraint=a100"]},
                         "ajet_x-1", "/runs/x", 3601)
    assert argv == ["--parsable", "--job-name=ajet_x-1", "--output=/runs/x/job.out", "--chdir=/runs/x", "--time=61",
                    "--nodes=2", "--partition=gpu", "--account=lab", "--qos=high", "--mem=64G", "--cpus-per-task=16",
                    "--gres=gpu:4", "--constraint=a100"]
    assert slurm.options({}, "x", "/r", 30)[4:6] == ["--time=1", "--nodes=1"]  # a minute at least


@pytest.mark.parametrize("arg", ["--output=/tmp/o", "-J", "--wrap=true", "--chdir=/", "-Jname", "-o path",
                                 "--time=UNLIMITED", "-t10", "-t 10", "--job=other", "--ti=5", "-vJname", "-e/tmp/e",
                                 "-D/", "--out=/tmp/o"])
def test_extra_args_may_not_set_what_the_tool_sets(arg: str):
    with pytest.raises(AgentError) as err:
        slurm.options({"extra_args": [arg]}, "x", "/r", 60)
    assert err.value.field == "slurm.extra_args"


@pytest.mark.parametrize("arg", ["--time-min=5", "--constraint=a100", "-p gpu", "-w node1", "-N2", "--exclusive",
                                 "-vv", "--begin=now+1hour"])
def test_extra_args_that_set_nothing_of_the_tool_s_are_passed_on(arg: str):
    assert slurm.options({"extra_args": [arg]}, "x", "/r", 60)[-1] == arg


def test_a_short_form_is_refused_through_the_tool_naming_the_field(tmp_path):
    with pytest.raises(ToolInputError) as err:
        call("launch_experiment", name="short", command="true", workdir=str(tmp_path),
             slurm={"extra_args": ["-Jother"]})
    assert err.value.field == "slurm.extra_args" and "-Jother sets -J" in str(err.value)


@pytest.mark.parametrize("ray", [None, "/venv/bin/ray"])
def test_the_batch_script_is_valid_bash(ray: str | None):
    script = slurm.render("ajet_x-1", "/runs/it's here", ["server", "client"], ray=ray, python="/venv/bin/python")
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


@pytest.mark.parametrize("text, code", [("0:0", 0), ("7:0", 7), ("0:9", 137), ("0:15", 143), ("", None),
                                        ("x:y", None)])
def test_exit_status_reads_exit_and_signal(text: str, code: int | None):
    assert slurm.exit_status(text) == code


@pytest.mark.parametrize("arguments, field", [
    ({"slurm": {}, "require_free_gpus": 0.9}, "require_free_gpus"),
    ({"slurm": {}, "command": None, "processes": [{"role": "a", "command": "true", "host": "gpu9"}]},
     "processes.0.host"),
    ({"slurm": {"mem": "lots"}}, "slurm.mem"),
    ({"slurm": {"extra_args": ["constraint=a100"]}}, "slurm.extra_args.0"),
])
def test_launch_refuses_what_slurm_cannot_do_before_asking_any_host(arguments: dict, field: str, tmp_path):
    base = {"name": "refused", "command": "true", "workdir": str(tmp_path)}
    with pytest.raises(ToolInputError) as err:
        call("launch_experiment", **{**base, **arguments})
    assert err.value.field == field
