"""build_config from a client script: the YAML the engine will run, through the same construction steps as the
kwargs form, with what static analysis cannot resolve listed instead of guessed; refusals through both front ends."""

from __future__ import annotations

import pytest
from mcp import Client

from skill_server.app.mcp_server import build_server
from skill_server.app.table import TOOLS_BY_NAME
from skill_server.core.errors import ToolInputError
from tests.conftest import call_cli

SCRIPT = """\
import os
from ajet import AgentJetJob

job = AgentJetJob(algorithm="grpo", n_gpu=8, num_repeat=int(os.environ.get("N", "6")), batch_size=32,
                  max_env_worker=96, base_yaml_config="base.yaml")
job.config.ajet.rollout.temperature = 0.7
"""
BASE = ("ajet:\n  rollout:\n    top_p: 0.8\nhydra:\n  searchpath:\n  - file://ajet/default_config\n"
        "  - file://ajet/default_config/verl\ndefaults:\n- verl_default\n- ajet_default\n- _self_\n")


def build(**arguments):
    return TOOLS_BY_NAME["build_config"].invoke(arguments)


def test_a_script_builds_what_its_kwargs_and_writes_build(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "base.yaml").write_text(BASE)
    r = build(script=str(tmp_path / "train.py"), cwd=str(tmp_path))
    by_hand = build(kwargs={"algorithm": "grpo", "n_gpu": 8, "num_repeat": 6, "batch_size": 32, "max_env_worker": 96},
                    base_yaml="base.yaml", set={"ajet.rollout.temperature": 0.7}, cwd=str(tmp_path))
    assert r.yaml == by_hand.yaml and r.base.path == str(tmp_path / "base.yaml") and r.unknown == []
    assert "top_p: 0.8" in r.yaml and "temperature: 0.7" in r.yaml and "num_repeat: 6" in r.yaml
    assert any("environment variable N is unset" in w for w in r.warnings)
    assert r.summary == (f"Built the YAML AgentJetJob dumps for AgentJet 0.1.0 (c68c154f) from {tmp_path / 'train.py'}"
                         f"'s AgentJetJob (line 4): 5 kwargs and 1 write over {tmp_path / 'base.yaml'}. 1 warning "
                         "(see warnings).")
    assert by_hand.summary.startswith("Built the YAML AgentJetJob dumps for AgentJet 0.1.0 (c68c154f) from the "
                                      "kwargs given: 5 kwargs and 1 write")
    # kwargs and set given with the script apply over it
    again = build(script=str(tmp_path / "train.py"), cwd=str(tmp_path), kwargs={"max_env_worker": 48},
                  set={"ajet.rollout.top_k": 5})
    assert "max_env_worker: 48" in again.yaml and "top_k: 5" in again.yaml and "temperature: 0.7" in again.yaml


def test_what_is_known_only_at_run_time_is_listed_and_the_dump_still_returned(tmp_path):
    script = tmp_path / "argv.py"
    script.write_text("import sys\nfrom ajet import AgentJetJob\n"
                      "job = AgentJetJob(num_repeat=4, max_env_worker=int(sys.argv[1]))\n")
    r = build(script=str(script))
    assert [u.key for u in r.unknown] == ["ajet.rollout.max_env_worker"] and "sys.argv" in r.unknown[0].reason
    assert "1 value known only at run time (ajet.rollout.max_env_worker): the YAML shows the base value there." \
        in r.summary and "\n" not in r.summary
    assert "max_env_worker: 128" in r.yaml  # the base value, as the summary says
    filled = build(script=str(script), kwargs={"max_env_worker": 32})
    assert filled.unknown == [] and "max_env_worker: 32" in filled.yaml


def test_a_script_agentjet_refuses_is_refused_with_agentjets_cause(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("from ajet import AgentJetJob\njob = AgentJetJob(grpo_n=4)\n")
    with pytest.raises(ToolInputError) as err:
        build(script=str(script))
    assert err.value.field == "kwargs.grpo_n" and "unexpected keyword argument 'grpo_n'" in str(err.value)


@pytest.mark.parametrize("text, words", [
    ("x = 1\n", "script: has no AgentJetJob(...) construction to build from"),
    ("from ajet import AgentJetJob\na = AgentJetJob(num_repeat=4)\nb = AgentJetJob(num_repeat=8)\n",
     "script: builds 2 AgentJetJobs (lines 2, 3)"),
    ("from ajet import AgentJetJob\nimport sys\na = AgentJetJob(base_yaml_config=sys.argv[1])\n",
     "give base_yaml"),
])
def test_scripts_it_cannot_build_from_are_one_line_errors(tmp_path, text, words):
    (tmp_path / "s.py").write_text(text)
    code, out, err = call_cli("build_config", {"script": str(tmp_path / "s.py")})
    assert code == 1 and out is None and err.count("\n") == 1 and words in err, err


@pytest.mark.anyio
async def test_the_mcp_client_gets_the_summary_first_and_the_same_refusal(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "base.yaml").write_text(BASE)
    missing = {"script": str(tmp_path / "train.py"), "base_yaml": str(tmp_path / "nope.yaml")}
    _, _, err = call_cli("build_config", missing)
    assert err.startswith("build_config: base_yaml: ")
    async with Client(build_server()) as client:
        ok = await client.call_tool("build_config", {"script": str(tmp_path / "train.py"), "cwd": str(tmp_path)})
        bad = await client.call_tool("build_config", missing)
    assert not ok.is_error and next(iter(ok.structured_content)) == "summary"
    assert bad.is_error and bad.content[0].text == f"Error executing tool build_config: " \
        f"{err.removeprefix('build_config: ').strip()}"


#: Writes check_config finds would raise at run time (unknown-key with an access error): build_config refuses
#: each, at the same line; writes whose key is right build.
ACCESS = {
    "job.config.ajet.rollout.multi_turn.max_steps = 12": ("AttributeError: 'dict' object has no attribute "
                                                          "'max_steps'", "multi_turn['max_steps']"),
    "job.config.ajet.rollout['temperature'] = 0.7": ("TypeError: 'AjetRollout' object does not support item "
                                                     "assignment", "job.config.ajet.rollout.temperature"),
    "job.config.ajet.rollout.multi_turn['max_steps'] = 12": (None, None),
    "job.config.ajet.rollout.temperature = 0.7": (None, None),
}


@pytest.mark.parametrize("line", sorted(ACCESS))
def test_build_config_refuses_exactly_where_check_config_finds_the_script_raises(tmp_path, line):
    from tests.lint_helpers import lint

    script = tmp_path / "client.py"
    script.write_text(f"from ajet import AgentJetJob\njob = AgentJetJob(num_repeat=4)\n{line}\n")
    raised, fix = ACCESS[line]
    found = [f for f in lint(script).findings if f.values and f.values.get("access_error")]
    assert [(f.locations[0].line, f.values["access_error"]) for f in found] == \
        ([(3, raised.split(":")[0])] if raised else [])
    if raised is None:
        assert "12" in build(script=str(script)).yaml or "0.7" in build(script=str(script)).yaml
        return
    with pytest.raises(ToolInputError) as refused:
        build(script=str(script))
    assert refused.value.field == "script" and "line 3" in refused.value.message
    assert raised in refused.value.message and fix in refused.value.message


def test_writes_the_engine_never_gets_are_said_not_dropped_silently(tmp_path):
    script = tmp_path / "client.py"
    script.write_text("from ajet import AgentJetJob\njob = AgentJetJob(num_repeat=4)\njob.num_repeat = 8\n"
                      "job.dump_job_as_yaml('out.yaml')\njob.config.ajet.rollout.temperature = 0.3\n")
    r = build(script=str(script))
    assert "num_repeat: 4" in r.yaml and "temperature: 0.3" not in r.yaml
    assert any(w.startswith("line 5 writes ajet.rollout.temperature after dump_job_as_yaml() at line 4") and
               "write-after-dump" in w for w in r.warnings)
    assert any(w.startswith("line 3: job.num_repeat = ... changes only the job's copy") for w in r.warnings)
