"""The rule registry: every rule's positive and negative case, its skip when an input is unknown, and the
reference page generated from the registry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skill_server.agentjet.refusals import CAUSE_IDS
from skill_server.app.table import get_tool
from skill_server.tools.check_config import RULES
from skill_server.tools.check_config.docs import BEGIN, END, REFERENCE, render_rules, with_rules
from skill_server.tools.check_config.registry import claimed_causes
from tests.lint_helpers import LAYERS_TAIL, SWARM_TAIL, lint, only, rules, skipped, write

HEAD = "from ajet.copilot.job import AgentJetJob\n"
BASE = 'import os\nBASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "base.yaml")\n'
YAML_NUM_REPEAT_4 = "ajet:\n  rollout:\n    num_repeat: 4\n" + SWARM_TAIL  # 4 is also AgentJet's default
LENGTHS = "max_prompt_length={}, max_response_length={}, max_model_len={}, max_response_length_in_one_turn={}"

#: A swarm client (engine cap 64) and one episode function; {body} runs after begin_episode.
CLIENT = (HEAD + "import os\nfrom ajet.tuner_lib.experimental.swarm_client import SwarmClient\n"
          "from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor\n"
          "from agent import run\nc = SwarmClient('http://localhost:10086')\n"
          "j = AgentJetJob(max_env_worker=64, num_repeat=4, batch_size=16)\n")
ROLLOUT = "def rollout(task):\n    uuid, key = c.begin_episode()\n    {body}\n"
#: an episode function that ends or aborts on every path
SAFE = ("def rollout(task):\n    uuid, key = c.begin_episode({timeout})\n    try:\n        out = run(key)\n"
        "    except Exception:\n        c.abort_episode(uuid)\n        raise\n    c.end_episode(task, uuid, out)\n"
        "fut = None\n")
POOL = "pool = PeriodicDrainThreadPoolExecutor(workers={threads}, max_parallel={threads})\npool.submit(rollout, 1)\n"

#: rule -> (positive, negative): each a dict of files; "client.py" is linted, else "base.yaml" alone.
CASES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "split-configuration": (
        {"base.yaml": YAML_NUM_REPEAT_4, "client.py": HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE, "
                                                                     "max_env_worker=256)\n"},
        {"base.yaml": YAML_NUM_REPEAT_4, "client.py": HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE, "
                                                                     "experiment_name='x')\n"}),
    "kwarg-overrides-yaml": (
        {"base.yaml": YAML_NUM_REPEAT_4, "client.py": HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE, "
                                                                     "num_repeat=8)\n"},
        {"base.yaml": YAML_NUM_REPEAT_4, "client.py": HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE, "
                                                                     "max_env_worker=64)\n"}),
    "redundant-kwarg": (  # the YAML writes 4, which equals the default: still the user's own line
        {"base.yaml": YAML_NUM_REPEAT_4, "client.py": HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE, "
                                                                     "num_repeat=4)\n"},
        {"client.py": HEAD + "j = AgentJetJob(num_repeat=4)\n"}),
    "unsupported-kwarg": ({"client.py": HEAD + "j = AgentJetJob(num_repeats=4)\n"},
                          {"client.py": HEAD + "j = AgentJetJob(num_repeat=4)\n"}),
    "kwarg-group-incomplete": ({"client.py": HEAD + "j = AgentJetJob(max_prompt_length=1000)\n"},
                               {"client.py": HEAD + f"j = AgentJetJob({LENGTHS.format(1000, 4000, 5000, 1000)})\n"}),
    "escape-hatch-has-kwarg": ({"client.py": HEAD + "j = AgentJetJob()\nj.config.ajet.rollout.num_repeat = 8\n"},
                               {"client.py": HEAD + "j = AgentJetJob()\nj.config.ajet.rollout.temperature = 0.5\n"}),
    "unknown-key": ({"client.py": HEAD + "j = AgentJetJob()\nj.config.ajet.rollout.temprature = 0.5\n"},
                    {"client.py": HEAD + "j = AgentJetJob()\nj.config.ajet.rollout.temperature = 0.5\n"}),
    "write-after-dump": (
        {"client.py": HEAD + "j = AgentJetJob()\nj.dump_job_as_yaml('a.yaml')\nj.config.ajet.rollout.top_p = 0.9\n"},
        {"client.py": HEAD + "j = AgentJetJob()\nj.config.ajet.rollout.top_p = 0.9\nj.dump_job_as_yaml('a.yaml')\n"}),
    "length-budget": ({"client.py": HEAD + f"j = AgentJetJob({LENGTHS.format(10000, 10000, 18000, 4000)})\n"},
                      {"client.py": HEAD + f"j = AgentJetJob({LENGTHS.format(10000, 10000, 20000, 4000)})\n"}),
    "lora-rules": ({"client.py": HEAD + "j = AgentJetJob(lora_rank=8)\n"},
                   {"client.py": HEAD + "j = AgentJetJob(lora_rank=8, lora_load_format='safetensors', "
                                        "layered_summon=True, lr=1e-4)\n"}),
    "batch-not-divisible-by-gpus": ({"client.py": HEAD + "j = AgentJetJob(batch_size=9, num_repeat=4, n_gpu=8)\n"},
                                    {"client.py": HEAD + "j = AgentJetJob(batch_size=10, num_repeat=4, n_gpu=8)\n"}),
    "samples-below-world-size": ({"client.py": HEAD + "j = AgentJetJob(batch_size=1, num_repeat=4, n_gpu=8)\n"},
                                 {"client.py": HEAD + "j = AgentJetJob(batch_size=2, num_repeat=4, n_gpu=8)\n"}),
    "base-yaml-missing": ({"client.py": HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE)\n"},
                          {"base.yaml": YAML_NUM_REPEAT_4, "client.py": HEAD + BASE
                           + "j = AgentJetJob(base_yaml_config=BASE)\n"}),
    "base-not-swarm": (
        {"base.yaml": "ajet:\n  rollout:\n    num_repeat: 4\n" + LAYERS_TAIL},
        {"base.yaml": YAML_NUM_REPEAT_4}),
    "interchange-not-tcp": (
        {"client.py": HEAD + "j = AgentJetJob(nnodes=2)\n"
                             "j.config.ajet.interchange_server.interchange_method = 'ipc'\n"},
        {"client.py": HEAD + "j = AgentJetJob(nnodes=2)\n"}),
    "cap-not-divisible": ({"client.py": HEAD + "j = AgentJetJob(max_env_worker=10, num_repeat=4)\n"},
                          {"client.py": HEAD + "j = AgentJetJob(max_env_worker=12, num_repeat=4)\n"}),
    "cap-limited-by-batch": ({"client.py": HEAD + "j = AgentJetJob(batch_size=8, num_repeat=4, max_env_worker=64)\n"},
                             {"client.py": HEAD + "j = AgentJetJob(batch_size=16, num_repeat=4, max_env_worker=64)\n"}),
    "tracker-threads-below-cap": (
        {"client.py": HEAD + "j = AgentJetJob(max_env_worker=64)\n"
                             "j.config.ajet.interchange_server.max_inference_tracker_threads = 16\n"},
        {"client.py": HEAD + "j = AgentJetJob(max_env_worker=64)\n"
                             "j.config.ajet.interchange_server.max_inference_tracker_threads = 64\n"}),
    "no-checkpoints": ({"client.py": HEAD + "j = AgentJetJob(total_training_steps=25)\n"
                                          "j.config.ajet.trainer_common.save_freq = 1e9\n"},
                       {"client.py": HEAD + "j = AgentJetJob(total_training_steps=25)\n"
                                          "j.config.ajet.trainer_common.save_freq = 5\n"}),
    "no-total-steps": ({"client.py": HEAD + "j = AgentJetJob()\n"},
                       {"client.py": HEAD + "j = AgentJetJob(total_training_steps=25)\n"}),
    "agentjet-refusal": ({"client.py": HEAD + "j = AgentJetJob(nnodes='2')\n"},
                         {"client.py": HEAD + "j = AgentJetJob(nnodes=2)\n"}),
    "episode-not-ended": ({"client.py": CLIENT + ROLLOUT.format(body="if task is None:\n        return\n    "
                                                                      "c.end_episode(task, uuid, run(key))")},
                          {"client.py": CLIENT + ROLLOUT.format(body="if task is None:\n        c.abort_episode(uuid)\n"
                                                                      "        return\n    "
                                                                      "c.end_episode(task, uuid, run(key))")}),
    "episode-leaks-on-exception": (
        {"client.py": CLIENT + ROLLOUT.format(body="c.end_episode(task, uuid, run(key))")},
        {"client.py": CLIENT + ROLLOUT.format(body="try:\n        out = run(key)\n    except Exception:\n"
                                                   "        c.abort_episode(uuid)\n        raise\n"
                                                   "    c.end_episode(task, uuid, out)")}),
    "engine-control-in-client": ({"client.py": CLIENT + "c.stop_engine()\n"},
                                 {"client.py": CLIENT + "c.auto_sync_train_config_and_start_engine(j, "
                                                        "force_restart=False)\n"}),
    "discard-timeout-below-episode-timeout": (
        {"client.py": CLIENT + SAFE.format(timeout="") + "fut.result(timeout=600)\n"},
        {"client.py": CLIENT + SAFE.format(timeout="discard_episode_timeout=900") + "fut.result(timeout=600)\n"}),
    "client-pool-over-cap": ({"client.py": CLIENT + SAFE.format(timeout="") + POOL.format(threads=512)},
                             {"client.py": CLIENT + SAFE.format(timeout="") + POOL.format(threads=64)}),
    "clients-bind-cap": ({"client.py": CLIENT + SAFE.format(timeout="") + POOL.format(threads=16)},
                         {"client.py": CLIENT + SAFE.format(timeout="") + POOL.format(threads=64)}),
    "logger-needs-key": ({"client.py": HEAD + "j = AgentJetJob(logging='swanlab')\n"},
                         {"client.py": HEAD + "j = AgentJetJob(logging='tensorboard')\n"}),
}

ENV = "import os\n"
#: rule -> a client where an input of the rule is known only at run time: the rule is listed in skipped.
SKIPS: dict[str, str] = {
    "kwarg-group-incomplete": ENV + HEAD + "j = AgentJetJob(max_prompt_length=int(os.environ['P']))\n",
    "length-budget": ENV + HEAD + "j = AgentJetJob(" + LENGTHS.format("int(os.environ['P'])", 1, 2, 1) + ")\n",
    "lora-rules": ENV + HEAD + "j = AgentJetJob(lora_rank=int(os.environ['R']))\n",
    "batch-not-divisible-by-gpus": ENV + HEAD + "j = AgentJetJob(nnodes=int(os.environ['N']))\n",
    "samples-below-world-size": ENV + HEAD + "j = AgentJetJob(batch_size=int(os.environ['B']))\n",
    "interchange-not-tcp": ENV + HEAD + "j = AgentJetJob(nnodes=int(os.environ['N']))\n",
    "cap-not-divisible": ENV + HEAD + "j = AgentJetJob(max_env_worker=int(os.environ['W']))\n",
    "cap-limited-by-batch": ENV + HEAD + "j = AgentJetJob(batch_size=int(os.environ['B']))\n",
    "tracker-threads-below-cap": ENV + HEAD + "j = AgentJetJob()\n"
                                              "j.config.ajet.interchange_server.max_inference_tracker_threads = "
                                              "int(os.environ['T'])\n",
    "base-not-swarm": HEAD + "j = AgentJetJob(base_yaml_config=os.environ['BASE'])\n",
    "split-configuration": HEAD + "j = AgentJetJob(base_yaml_config='missing.yaml', num_repeat=4)\n",
    "agentjet-refusal": ENV + HEAD + "j = AgentJetJob(nnodes=int(os.environ['N']))\n",
    "no-checkpoints": ENV + HEAD + "j = AgentJetJob()\nj.config.ajet.trainer_common.save_freq = os.environ['F']\n",
    "no-total-steps": ENV + HEAD + "j = AgentJetJob(total_training_steps=int(os.environ['S']))\n",
    # the episode id goes to a function this scan does not read: whether it ends the episode is unknown
    "episode-not-ended": CLIENT + "from agent import finish\n" + ROLLOUT.format(body="finish(c, uuid)"),
    "episode-leaks-on-exception": CLIENT + "from agent import finish\n" + ROLLOUT.format(body="finish(c, uuid)"),
    "engine-control-in-client": CLIENT + "c.auto_sync_train_config_and_start_engine(j, force_restart=decide())\n",
    "discard-timeout-below-episode-timeout": CLIENT + SAFE.format(timeout="")
    + "fut.result(timeout=int(os.environ['T']))\n",
    "client-pool-over-cap": CLIENT + SAFE.format(timeout="") + POOL.format(threads="int(os.environ['P'])"),
    "clients-bind-cap": CLIENT + SAFE.format(timeout="") + POOL.format(threads="int(os.environ['P'])"),
    "logger-needs-key": ENV + HEAD + "j = AgentJetJob(logging=os.environ['LOGGER'])\n",
}


def _lint_files(folder: Path, files: dict[str, str]):
    for name, text in files.items():
        write(folder, name, text)
    if "client.py" in files:
        return lint(folder / "client.py", cwd=str(folder))
    return lint(yaml=str(folder / "base.yaml"))


def test_every_rule_has_cases():
    assert set(CASES) == set(RULES)
    assert set(SKIPS) <= set(RULES)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_positive_and_negative(tmp_path, rule_id):
    positive, negative = CASES[rule_id]
    found = _lint_files(tmp_path / "positive", positive)
    hits = [f for f in found.findings if f.rule == rule_id]
    assert hits, (rule_id, [(f.rule, f.message) for f in found.findings])
    spec = RULES[rule_id]
    for f in hits:
        assert f.severity == spec.severity and f.message and f.fix and f.locations
    clean = _lint_files(tmp_path / "negative", negative)
    assert rule_id not in rules(clean), [f.message for f in clean.findings if f.rule == rule_id]


@pytest.mark.parametrize("rule_id", sorted(SKIPS))
def test_rule_is_skipped_with_the_reason_when_an_input_is_unknown(tmp_path, rule_id):
    write(tmp_path, "client.py", SKIPS[rule_id])
    r = lint(tmp_path / "client.py", cwd=str(tmp_path))
    assert rule_id not in rules(r)
    reasons = skipped(r).get(rule_id)
    assert reasons, (rule_id, skipped(r))
    assert all(reason for reason in reasons)
    assert r.counts.skipped == len(r.skipped)


def test_registry_entries_are_complete():
    functions = [spec.check for spec in RULES.values()]
    assert len(set(functions)) == len(functions)  # one function per rule
    for rule_id, spec in RULES.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule_id) and spec.id == rule_id
        assert spec.severity in ("error", "warning", "info")
        assert spec.summary.endswith(".") and "\n" not in spec.summary and len(spec.summary) <= 100
        assert len(spec.explanation) > 40 and spec.example.split("\n", 1)[0] in ("python", "yaml")
    # the ids of skill_server.agentjet.refusals (the same causes build_config refuses with)
    assert claimed_causes() >= {"unknown-kwarg", "length-group-incomplete", "token-budget", "one-turn-over-response",
                                "lora-lr-too-low", "base-yaml-absent"}


def test_claims_name_causes_that_exist_and_each_cause_is_claimed_once():
    claims = [c for spec in RULES.values() for c in spec.claims]
    assert len(claims) == len(set(claims))
    assert set(claims) <= CAUSE_IDS, set(claims) - CAUSE_IDS


def test_the_cause_catalogue_lists_exactly_the_ids_the_code_raises():
    """Every cause id written in skill_server/agentjet (first argument of Cause(...), the helpers that build
    one, or a ``cid`` variable) is in CAUSE_IDS, and every catalogued id is written somewhere."""
    import ast

    import skill_server.agentjet as package

    found: set[str] = set()

    def constants(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            return constants(node.body) + constants(node.orelse)
        assert not isinstance(node, ast.JoinedStr), "cause ids are literals"
        return []

    for source in Path(package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args and getattr(node.func, "id", None) in (
                    "Cause", "_refuse", "make", "cause"):
                found.update(constants(node.args[0]))
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "cid" for t in node.targets):
                found.update(constants(node.value))
    assert found == CAUSE_IDS


def test_reference_page_rules_are_generated_from_the_registry():
    page = REFERENCE.read_text(encoding="utf-8")
    assert with_rules(page) == page, "run `python -m skill_server.tools.check_config.docs --write`"
    block = page[page.index(BEGIN):page.index(END)]
    for rule_id, spec in RULES.items():
        assert f"### `{rule_id}`" in block and f"| [`{rule_id}`](#{rule_id}) | {spec.severity} |" in block
    assert render_rules().count("### `") == len(RULES)


def test_docs_command_regenerates_a_stale_block(capsys):
    from skill_server.tools.check_config import docs

    page = REFERENCE.read_text(encoding="utf-8")
    stale = page[:page.index(BEGIN) + len(BEGIN)] + "\n| `old-rule` | error | gone |\n" + page[page.index(END):]
    assert with_rules(stale) == page
    with pytest.raises(ValueError, match="markers"):
        with_rules("no markers here")
    assert docs.main([]) == 0 and capsys.readouterr().out == render_rules()
    assert docs.main(["--bogus"]) == 2


def test_the_tool_points_at_the_rule_reference_which_names_every_rule():
    """The rule ids live in the generated reference (the tool list's budget has no room for 27 of them)."""
    assert "split-configuration.md" in get_tool("check_config").details
    page = REFERENCE.read_text(encoding="utf-8")
    assert all(f"### `{rule_id}`" in page for rule_id in RULES)


def test_run_identity_kwargs_never_count_as_overriding_the_yaml(tmp_path):
    """experiment_name and its kin name a run: passing them over the YAML's is the intended use."""
    named = "ajet:\n  experiment_name: from_yaml\n  project_name: p\n  rollout:\n    num_repeat: 4\n" + SWARM_TAIL
    write(tmp_path, "base.yaml", named)
    client = write(tmp_path, "client.py", HEAD + BASE + "j = AgentJetJob(base_yaml_config=BASE, "
                                                        "experiment_name='run_7', project_name='p', num_repeat=8)\n")
    r = lint(client)
    over = [f for f in r.findings if f.rule in ("kwarg-overrides-yaml", "redundant-kwarg")]
    assert [(f.rule, f.values["kwarg"]) for f in over] == [("kwarg-overrides-yaml", "num_repeat")]


@pytest.mark.parametrize(("freq", "total", "said"), [
    ("-1", "25", "saves no checkpoint at all"), ("0", None, "saves no checkpoint at all"),
    ("30", "25", "saves only at the last step, so a failure before step 25")])
def test_no_checkpoints_says_what_a_resume_would_lose_and_where_to_change_it(tmp_path, freq, total, said):
    steps = f"total_training_steps={total}" if total else ""
    write(tmp_path, "client.py", HEAD + f"j = AgentJetJob({steps})\nj.config.ajet.trainer_common.save_freq = {freq}\n")
    r = lint(tmp_path / "client.py", cwd=str(tmp_path))
    f = only(r, "no-checkpoints")
    assert said in f.message and f.key == "ajet.trainer_common.save_freq"
    assert f.locations[0].line == 3 and f.locations[0].source == "write"
    assert "change the write at line 3" in f.fix and (total is None or "save_freq 5" in f.fix)


def test_a_yaml_that_saves_every_few_steps_and_stops_at_a_count_has_neither_finding(tmp_path):
    yaml = ("ajet:\n  trainer_common:\n    save_freq: 5\n    total_training_steps: 25\n" + SWARM_TAIL)
    r = lint(yaml=str(write(tmp_path, "base.yaml", yaml)))
    assert not {"no-checkpoints", "no-total-steps"} & rules(r)
    e = r.effective  # what a relaunch resumes from is in the answer, not only the absence of a finding
    assert (e.save_freq.value, e.total_training_steps.value) == (5, 25) and e.save_freq.source == "yaml"
    assert (e.checkpoint_base_dir.value, e.checkpoint_base_dir.source) == ("./saved_checkpoints", "default")
    unset = yaml.replace("25", "null").replace("save_freq: 5", "save_freq: -1")
    r = lint(yaml=str(write(tmp_path, "null.yaml", unset)))
    assert {"no-checkpoints", "no-total-steps"} <= rules(r)
    assert only(r, "no-total-steps").values["total_epochs"] == 50  # AgentJet's default, from its layers
