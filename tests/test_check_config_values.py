"""What check_config resolves statically, what it leaves unknown (and why), safe consolidation, refusals."""

from __future__ import annotations

import textwrap

import pytest

from skill_server.agentjet.identity import agentjet_label
from skill_server.analysis.script import scan_script
from skill_server.tools.build_config.tool import BuildConfigInput, build_config
from tests.lint_helpers import LAYERS_TAIL, SWARM_TAIL, lint, only, rules, skipped, write

HEAD = "import os\nimport argparse\nfrom ajet.copilot.job import AgentJetJob\n"


def kwargs_of(tmp_path, body: str, files: dict[str, str] | None = None):
    for name, text in (files or {}).items():
        write(tmp_path, name, text)
    script = write(tmp_path, "client.py", HEAD + body)
    return {k.name: k.value for k in scan_script(script).constructions[0].kwargs.values()}


@pytest.mark.parametrize("expr, value, how", [
    ('os.getenv("N", "4")', "4", "env-default"),
    ('int(os.getenv("N", "4"))', 4, "env-default"),
    ('int(os.environ.get("N", 4)) * 2', 8, "env-default"),
    ('os.environ.get("N") or "fallback"', "fallback", "env-default"),
    ('os.getenv("N")', None, "env-default"),
    ('64 if os.getenv("BIG") == "1" else 32', 32, "env-default"),
    ("min(2 ** 6, 100)", 64, "arithmetic"),
    ("K", 7, "constant"),
    ('f"run_{K}"', "run_7", "constant"),
])
def test_resolved_expressions(tmp_path, expr, value, how):
    got = kwargs_of(tmp_path, f"K = 7\njob = AgentJetJob(num_repeat={expr})\n")["num_repeat"]
    assert got.resolved and got.value == value and got.how == how
    if how == "env-default":
        assert got.assumes and got.assumes[0].kind == "env"


@pytest.mark.parametrize("expr, why", [
    ('os.environ["N"]', "environment variable N (read with os.environ[...], which has no default)"),
    ("int(sys.argv[1])", "a command-line argument (sys.argv), known only at run time"),
    ("random.randint(1, 8)", "random is the imported module random, which is not read statically"),
    ("n", "n is a loop variable (line 5)"),
    ("10 ** 5000", "an integer larger than any config value"),
])
def test_unresolved_expressions_say_why(tmp_path, expr, why):
    body = "import sys, random\nfor n in range(3):\n    pass\n" + f"job = AgentJetJob(num_repeat={expr})\n"
    got = kwargs_of(tmp_path, body)["num_repeat"]
    assert not got.resolved and got.value is None and got.why == why


def test_argparse_options(tmp_path):
    body = '''
parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default="16")
parser.add_argument("-n", "--grpo-n", dest="repeat", type=int, default=4)
parser.add_argument("--lr", type=float, default="3e-6")
parser.add_argument("--fast", action="store_true")
parser.add_argument("--model", required=True)
parser.add_argument("name")
parser.set_defaults(repeat=6)
args, rest = parser.parse_known_args()
job = AgentJetJob(batch_size=args.batch_size, num_repeat=args.repeat, lr=args.lr, swarm_mode=args.fast,
                  model=args.model, experiment_name=args.name, backbone=args.missing, logging=rest[0])
'''
    got = kwargs_of(tmp_path, body)
    assert (got["batch_size"].value, got["batch_size"].how) == (16, "cli-default")
    assert got["batch_size"].assumes[0].name == "--batch-size"
    assert got["num_repeat"].value == 6 and got["num_repeat"].assumes[0].name == "--grpo-n"
    assert got["lr"].value == 3e-6 and got["swarm_mode"].value is False
    assert got["model"].why == "option --model is required (no default)"
    assert got["experiment_name"].why == "positional argument name is given on the command line"
    assert got["backbone"].why == "no argparse option of the script stores missing"
    assert not got["logging"].resolved and "did not recognise" in got["logging"].why


def test_a_registered_unit_teaches_the_evaluator_a_library(tmp_path):
    """Adding a library is adding a unit: the core and the other units stay as they are."""
    from skill_server.analysis.script import registry
    from skill_server.analysis.script.model import Prov

    def settings_value(site, node):
        if len(node.args) != 1:
            return None  # not its case: the core goes on (and finds nothing)
        key, prov = site.eval(node.args[0])
        return {"workers": 96}.get(key), Prov("constant", prov.assumes)

    registry.call("settings.value")(settings_value)
    try:
        got = kwargs_of(tmp_path, 'import settings\njob = AgentJetJob(max_env_worker=settings.value("workers"), '
                                  'num_repeat=settings.value())\n')
    finally:
        registry.CALLS.pop("settings.value")
    assert (got["max_env_worker"].value, got["max_env_worker"].how) == (96, "constant")
    assert got["num_repeat"].why == "settings is the imported module settings, which is not read statically"


def test_a_function_called_once_passes_its_argument(tmp_path):
    body = '''
def make(n, workers=64, *, name="run"):
    return AgentJetJob(num_repeat=n, max_env_worker=workers, experiment_name=name)

job = make(8)
'''
    got = kwargs_of(tmp_path, body)
    assert (got["num_repeat"].value, got["max_env_worker"].value, got["experiment_name"].value) == (8, 64, "run")


def test_imported_constants_and_dataclasses_from_modules_next_to_the_script(tmp_path):
    files = {
        "conf/__init__.py": "",
        "conf/knobs.py": "from .base import POOL\nREPEAT = 2 * 3\nWORKERS = POOL\n",
        "conf/base.py": "import os\nPOOL = int(os.getenv('POOL', '96'))\n",
        "cfgs.py": "from dataclasses import dataclass, field\nSIZE = 24\n\n@dataclass\nclass Cfg:\n"
                   "    batch: int = SIZE\n    tags: list = field(default_factory=lambda: ['a'])\n",
    }
    body = ("from conf.knobs import REPEAT, WORKERS\nimport cfgs\nfrom cfgs import Cfg\n"
            "cfg = Cfg()\njob = AgentJetJob(num_repeat=REPEAT, max_env_worker=WORKERS, batch_size=cfg.batch, "
            "compute_madness_checklist=cfgs.Cfg().tags, n_gpu=cfgs.SIZE // 3)\n")
    got = kwargs_of(tmp_path, body, files)
    assert (got["num_repeat"].value, got["num_repeat"].how) == (6, "imported constant")
    assert (got["max_env_worker"].value, got["max_env_worker"].how) == (96, "env-default")
    assert (got["batch_size"].value, got["batch_size"].how) == (24, "dataclass default")
    assert got["compute_madness_checklist"].value == ["a"] and got["n_gpu"].value == 8


def test_modules_that_are_not_next_to_the_script_are_not_read(tmp_path):
    got = kwargs_of(tmp_path, "from somewhere_else import N\nimport numpy\n"
                              "job = AgentJetJob(num_repeat=N, batch_size=numpy.int64(3))\n")
    assert got["num_repeat"].why == "somewhere_else is not a module next to the script (only those are read)"
    assert not got["batch_size"].resolved


def test_importing_code_never_runs_it(tmp_path):
    marker = tmp_path / "ran"
    files = {"side.py": f"open({str(marker)!r}, 'w').write('x')\nN = 4\n"}
    got = kwargs_of(tmp_path, f"import side\nopen({str(tmp_path / 'ran2')!r}, 'w')\n"
                              "job = AgentJetJob(num_repeat=side.N)\n", files)
    assert got["num_repeat"].value == 4
    assert not marker.exists() and not (tmp_path / "ran2").exists()


# --- the effective values: source, set_by, assumptions, unknowns ------------------------------------


def test_yaml_values_have_source_yaml_even_when_equal_to_the_default(tmp_path):
    write(tmp_path, "base.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n    max_env_worker: 128\n", SWARM_TAIL)
    script = write(tmp_path, "client.py", "import os\nfrom ajet.copilot.job import AgentJetJob\n"
                   "job = AgentJetJob(base_yaml_config=os.path.join(os.path.dirname(__file__), 'base.yaml'))\n")
    e = lint(script).effective
    for name, line in (("num_repeat", 3), ("max_env_worker", 4)):
        value = getattr(e, name)
        assert (value.value, value.source, value.location.line) == ({"num_repeat": 4, "max_env_worker": 128}[name],
                                                                   "yaml", line)
        assert value.location.file == str(tmp_path / "base.yaml")
    assert e.train_batch_size.source == "default" and e.train_batch_size.location is None  # bundled: no file


def test_dynamic_kwargs_make_every_kwarg_key_unknown(tmp_path):
    script = write(tmp_path, "client.py", HEAD + textwrap.dedent("""\
        args = argparse.ArgumentParser().parse_args()
        kwargs = {k: v for k, v in vars(args).items() if v is not None}
        job = AgentJetJob(**kwargs, max_env_worker=64)
        job.config.ajet.rollout.temperature = args.temperature
        """))
    r = lint(script)
    c = r.constructions[0]
    assert c.dynamic_kwargs == ["**kwargs"]
    e = r.effective
    assert e.max_env_worker.value == 64
    assert e.num_repeat.value is None and "**kwargs at line 6 may pass num_repeat" in e.num_repeat.unresolved
    assert "no argparse option of the script stores temperature" in e.unresolved["ajet.rollout.temperature"]
    assert r.findings == [] and "cap-not-divisible" in skipped(r)


def test_unresolved_base_path_is_not_replaced_by_defaults(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(base_yaml_config=os.environ['CFG'], "
                                                 "num_repeat=4)\n")
    r = lint(script)
    assert r.findings == []
    info = r.constructions[0].base_yaml
    assert (info.state, info.anchor, info.exists) == ("unresolved", "unresolved", False)
    e = r.effective
    assert e.max_env_worker.value is None and "known only at run time" in e.max_env_worker.unresolved
    assert e.num_repeat.value == 4
    assert "os.environ[...]" in e.unresolved["(base YAML)"]


def test_a_base_that_is_a_fifo_is_not_a_regular_file(tmp_path):
    import os

    os.mkfifo(tmp_path / "base.yaml")
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(base_yaml_config="
                                                 "os.path.join(os.path.dirname(__file__), 'base.yaml'))\n")
    f = only(lint(script), "base-yaml-missing")
    assert "is not a regular file" in f.message


# --- consolidation ----------------------------------------------------------------------------------


def test_consolidation_arguments_build_the_config_and_no_fix_copies_a_misspelt_key(tmp_path):
    base = write(tmp_path, "game.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n    max_env_worker: 64\n", SWARM_TAIL)
    script = write(tmp_path, "client.py", HEAD + textwrap.dedent("""\
        HERE = os.path.dirname(os.path.abspath(__file__))
        job = AgentJetJob(base_yaml_config=os.path.join(HERE, "game.yaml"), max_env_worker=int(os.getenv("W", "128")),
                          batch_size=32, ensure_new_experiment=True, num_repeats=4)
        job.config.ajet.rollout.temperature = 0.6
        job.config.ajet.rollout.temprature = 0.6
        """))
    result = lint(script)
    split = only(result, "split-configuration")
    assert only(result, "unknown-key").key == "ajet.rollout.temprature"
    assert "temprature" not in split.fix
    args = split.values["build_config_arguments"]
    assert args == {"base_yaml": str(base), "kwargs": {"max_env_worker": 128, "batch_size": 32},
                    "set": {"ajet.rollout.temperature": 0.6}}  # no output_path: nothing proposed in the user's tree
    assert [s.split(" (")[0] for s in split.values["build_config_left_out"]] == [
        "ensure_new_experiment", "kwarg num_repeats", "write ajet.rollout.temprature"]
    assert split.values["build_config_missing"] == [] and "W" in split.values["build_config_assumes"][0]
    built = build_config(BuildConfigInput(**args))
    assert built.written is None and "max_env_worker: 128" in built.yaml and "temperature: 0.6" in built.yaml


def test_consolidation_with_an_unresolved_kwarg_is_null(tmp_path):
    write(tmp_path, "game.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n", SWARM_TAIL)
    script = write(tmp_path, "client.py", HEAD + textwrap.dedent("""\
        job = AgentJetJob(base_yaml_config=os.path.join(os.path.dirname(__file__), "game.yaml"),
                          max_env_worker=int(os.environ["W"]))
        job.set_workflow(object)
        """))
    split = only(lint(script), "split-configuration")
    assert split.values["build_config_arguments"] is None
    missing = split.values["build_config_missing"]
    assert missing[0] == ("kwarg max_env_worker (line 5): int(os.environ[\"W\"]): environment variable W (read with "
                          "os.environ[...], which has no default)")
    assert missing[1] == "job.set_workflow(object) (line 6): sets ajet.rollout.user_workflow at run time"
    assert "<" not in str(split.values)


def test_locations_name_each_key_once_even_on_one_line(tmp_path):
    """One location per file, line and key: two kwargs on one line are two places to change."""
    write(tmp_path, "game.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n", SWARM_TAIL)
    script = write(tmp_path, "client.py", HEAD + 'BASE = os.path.join(os.path.dirname(__file__), "game.yaml")\n'
                   "job = AgentJetJob(base_yaml_config=BASE, max_env_worker=64, batch_size=32)\n")
    split = only(lint(script), "split-configuration")
    assert [(loc.line, loc.key, loc.source) for loc in split.locations][:2] == [
        (5, "ajet.rollout.max_env_worker", "kwarg"), (5, "ajet.data.train_batch_size", "kwarg")]


# --- fixes never repeat what the script already does --------------------------------------------------


def test_fixes_change_what_the_script_already_passes(tmp_path):
    write(tmp_path, "base.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n" + LAYERS_TAIL)
    script = write(tmp_path, "client.py", HEAD + textwrap.dedent("""\
        job = AgentJetJob(base_yaml_config=os.path.join(os.path.dirname(__file__), "base.yaml"), swarm_mode=True,
                          nnodes=2, num_repeat=4)
        job.num_repeat = 8
        job.config.ajet.trainer_common.nnodes = 1
        """))
    r = lint(script)
    mirror = next(f for f in r.findings if f.rule == "unknown-key" and f.values.get("attribute") == "num_repeat")
    assert "already passes num_repeat=4 at line 5" in mirror.fix and "pass num_repeat" not in mirror.fix
    hatch = only(r, "escape-hatch-has-kwarg")
    assert hatch.values["kwarg_passed"] is True and "already passes nnodes=2 at line 5" in hatch.fix
    assert [loc.source for loc in hatch.locations] == ["write", "kwarg"]
    swarm = only(r, "base-not-swarm")
    assert swarm.values == {"enable_interchange_server": False, "composes_swarm_defaults": False}
    assert "swarm_mode" not in swarm.fix and "do not add ajet_swarm_default" in swarm.fix
    write(tmp_path, "other.py", HEAD + "job = AgentJetJob(base_yaml_config=os.path.join(os.path.dirname(__file__), "
                                       "'base.yaml'))\njob.num_repeat = 8\n")
    r = lint(tmp_path / "other.py")
    label = agentjet_label(r.agentjet)
    assert label == "AgentJet 0.1.0 (c68c154f)"  # the newest bundled release, named in every fix with a kwarg
    assert f"kwarg swarm_mode=True of {label}" in only(r, "base-not-swarm").fix
    mirror = only(r, "unknown-key")
    assert f"pass num_repeat=8 to AgentJetJob instead (a kwarg of {label})" in mirror.fix


# --- AgentJet's refusals ----------------------------------------------------------------------------


HYDRA = "hydra:\n  searchpath:\n    - file://ajet/default_config\n    - file://ajet/default_config/verl\n"


@pytest.mark.parametrize("yaml_text, rule, causes", [
    # ids and exceptions changed with the versioned knowledge (c68c154f): the same causes build_config refuses
    ("ajet:\n  rollout:\n    num_repeat: 4\n" + HYDRA + "defaults:\n  - verl_default\n  - ajet_default\n"
     "  - ajet_swarm_default\n  - _self_\n", "agentjet-refusal",
     {("defaults-includes-swarm-default", "ConfigCompositionException")}),
    ("ajet:\n  rollout:\n    num_repeat: 4\n" + HYDRA + "defaults:\n  - verl_default\n  - my_layer\n  - _self_\n",
     "agentjet-refusal", {("defaults-entry-missing", "MissingConfigException")}),
    # no defaults (KeyError 'defaults' first) and no hydra block (KeyError 'hydra' once defaults is there)
    ("ajet:\n  rollout:\n    num_repeat: 4\n", "agentjet-refusal",
     {("base-without-defaults", "KeyError"), ("base-without-hydra", "KeyError")}),
    ("ajet:\n  rollout:\n    num_repeat: 4\n" + HYDRA + "defaults:\n  - verl_default\n  - _self_\n", "agentjet-refusal",
     {("missing-key", "AttributeError")}),
    ("ajet:\n  trainer_common:\n    nnodes: '2'\n" + SWARM_TAIL, "agentjet-refusal",
     {("nnodes-not-a-number", "TypeError")}),
    ("ajet:\n  data:\n    max_prompt_length: '500'\n    max_response_length: '2000'\n  rollout:\n"
     "    max_model_len: '3000'\n    max_response_length_in_one_turn: '300'\n" + SWARM_TAIL, "length-budget",
     # '500' + '2000' <= '3000' and '300' <= '2000' compare text: both false (AgentJet stops at the first)
     {("token-budget", "AssertionError"), ("one-turn-over-response", "AssertionError")}),
    ("ajet:\n  data:\n    max_prompt_length: '500'\n    max_response_length: '2000'\n  rollout:\n"
     "    max_model_len: '9000'\n    max_response_length_in_one_turn: '300'\n" + SWARM_TAIL, "length-budget",
     {("one-turn-over-response", "AssertionError")}),  # '300' <= '2000' is false as text
    ("ajet:\n  backbone: trinity\n" + SWARM_TAIL, "agentjet-refusal", {("trinity-backbone", "NotImplementedError")}),
])
def test_refusal_causes_are_findings(tmp_path, yaml_text, rule, causes):
    write(tmp_path, "base.yaml", yaml_text)
    (tmp_path / "my_layer.yaml").write_text("ajet:\n  rollout:\n    num_repeat: 8\n")  # beside the base: not searched
    r = lint(yaml=str(tmp_path / "base.yaml"))
    refusals = [f for f in r.findings if f.rule in ("agentjet-refusal", "length-budget", "lora-rules")]
    assert {f.rule for f in refusals} == {rule}
    assert {(f.values["cause"], f.values["exception"]) for f in refusals} == causes
    label = agentjet_label(r.agentjet)
    for f in refusals:
        assert f.locations[0].file == str(tmp_path / "base.yaml")
        assert label in f.message and f.values["exception"] in f.message
        if f.values["cause"] != "defaults-includes-swarm-default":
            assert "ajet_swarm_default" not in f.fix
        if f.values["cause"] == "base-without-defaults":
            assert f.locations[0].line is None  # no defaults line to point at
        elif f.values["cause"] in ("defaults-includes-swarm-default", "defaults-entry-missing", "missing-key"):
            assert f.locations[0].line == yaml_text.splitlines().index("defaults:") + 1


@pytest.mark.parametrize("yaml_text", [
    "ajet:\n  rollout:\n    num_repeat: 4\n" + HYDRA + "defaults:\n  - verl_default\n  - ajet_swarm_default\n",
    "ajet:\n  rollout:\n    num_repeat: 4\n" + HYDRA + "defaults:\n  - verl_default\n  - my_layer\n  - _self_\n",
])
def test_a_base_agentjet_refuses_to_compose_leaves_its_values_unknown(tmp_path, yaml_text):
    write(tmp_path, "base.yaml", yaml_text)
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(base_yaml_config=os.path.join("
                                                 "os.path.dirname(__file__), 'base.yaml'), max_env_worker=64)\n")
    r = lint(script)
    assert rules(r) == {"agentjet-refusal"}
    info = r.constructions[0].base_yaml
    assert (info.state, info.exists) == ("refused", True)
    e = r.effective
    assert e.num_repeat.value is None and "refuses to compose" in e.num_repeat.unresolved
    assert e.max_env_worker.value == 64 and "(base YAML)" in e.unresolved
    assert "cap-not-divisible" in skipped(r) and "split-configuration" in skipped(r)


def test_golden_refusals_are_findings_with_agentjets_own_exception():
    """The real AgentJetJob runs at c68c154f that raise on a base: the linter reports the same exception."""
    from tests.agentjet_fixtures import GOLDENS, goldens

    cases = [c for c in goldens() if c.get("expect_error") and c["base_yaml"]]
    assert len(cases) >= 3
    for case in cases:
        r = lint(yaml=str(GOLDENS / case["base_yaml"]))
        expected = case["expect_error"]
        found = [f for f in r.findings if f.values.get("exception") == expected["type"]]
        assert found, (case["id"], [(f.rule, f.message) for f in r.findings])
        assert any(f.values.get("exception_message") == expected["message"] for f in found), case["id"]


def test_lengths_of_mixed_types_fail_with_type_error(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(max_prompt_length=os.getenv('P', '500'), "
                                                 "max_response_length=2000, max_model_len=3000, "
                                                 "max_response_length_in_one_turn=300)\n")
    r = lint(script)
    f = only(r, "length-budget")  # cause token-budget: str + int raises before any comparison
    assert f.values["exception"] == "TypeError" and "can only concatenate str" in f.message
    assert [loc.line for loc in f.locations] == [4, 4, 4] and "agentjet-refusal" not in rules(r)
    assert "give the lengths as ints" in f.fix and "max_prompt_length is '500' (a str)" in f.fix


# --- a config object followed to where it is made: callers, helpers, self.config, dataclass defaults ---------

COCKTAIL_CONFIG = '''
import os
from dataclasses import dataclass, field


@dataclass
class CocktailV2Config:
    total_batch_size: int = 32
    grpo_n: int = 8
    schedule_type: str = "linear"
    max_env_worker: int = 64 * 8
    result_dir: str = "./cocktail_results_v2"
    experiment_name: str = "cocktail_rl_v2"
    madness: list = field(default_factory=lambda: ["nonsense"])


def cocktail_v2_config_from_env() -> CocktailV2Config:
    cfg = CocktailV2Config()
    schedule = os.getenv("COCKTAIL_RATIO_SCHEDULE")
    if schedule is not None:
        cfg.schedule_type = schedule
    result_dir = os.getenv("COCKTAIL_RESULT_DIR")
    if result_dir is not None:
        cfg.result_dir = result_dir
    return cfg
'''
COCKTAIL_RUNNER = '''
class CocktailSwarmRunner:
    def __init__(self, config):
        self.config = config
        self.swarm_worker = None

    def build_ajet_job(self):
        return None

    def run(self):
        job = self.build_ajet_job()
        return job
'''
COCKTAIL_CLIENT = '''
from ajet.copilot.job import AgentJetJob

from tutorial.example_cocktail_rl_v2.cocktail_v2_config import CocktailV2Config, cocktail_v2_config_from_env
from tutorial.example_cocktail_rl_v2.cocktail_v2_runner import CocktailSwarmRunner


def build_cocktail_ajet_job(cfg: CocktailV2Config) -> AgentJetJob:
    return AgentJetJob(num_repeat=cfg.grpo_n, batch_size=cfg.total_batch_size, max_env_worker=cfg.max_env_worker,
                       experiment_name=cfg.result_dir, compute_madness_checklist=list(cfg.madness))


class AppWorldRunner(CocktailSwarmRunner):
    def __init__(self, v2_config: CocktailV2Config):
        super().__init__(v2_config)
        self.env_url = "http://127.0.0.1:8080"

    def build_ajet_job(self):
        return build_cocktail_ajet_job(self.config)


def main():
    cfg = cocktail_v2_config_from_env()
    AppWorldRunner(cfg).run()
'''


def cocktail_checkout(root, client: str = COCKTAIL_CLIENT):
    """AgentJet's cocktail tutorial in its shape: a config dataclass and its factory, a runner base class, the
    driver client; imported by package path, as when run with python -m from the checkout."""
    folder = root / "tutorial" / "example_cocktail_rl_v2"
    write(folder, "cocktail_v2_config.py", COCKTAIL_CONFIG)
    write(folder, "cocktail_v2_runner.py", COCKTAIL_RUNNER)
    return write(folder, "train_appworld_as_swarm_client_0.py", client)


def test_the_cocktail_tutorial_gets_its_cap_through_callers_self_config_and_the_factory(tmp_path):
    r = lint(cocktail_checkout(tmp_path / "AgentJet"))
    e = r.effective
    assert (e.num_repeat.value, e.train_batch_size.value, e.max_env_worker.value) == (8, 32, 512)
    assert e.episode_cap.value == 256 and rules(r) == {"cap-limited-by-batch", "no-total-steps"}
    # the factory changes result_dir and schedule_type: those follow the environment, the cap inputs do not
    assumption = ("cocktail_v2_config_from_env() changes only result_dir and schedule_type of the object it returns, "
                  "and no other code changes this")
    assert assumption in e.num_repeat.assumes and assumption in e.episode_cap.assumes
    kwargs = {k.name: k for k in r.constructions[0].kwargs}
    assert kwargs["compute_madness_checklist"].value == ["nonsense"]
    name = kwargs["experiment_name"]
    assert name.value is None and "changed by cocktail_v2_config_from_env()" in name.unresolved
    assert any("cocktail_v2_config was read from" in n and "python -m" in n for n in r.notes)


def test_a_parameter_is_unknown_when_its_callers_disagree_or_pass_run_time_values(tmp_path):
    two = COCKTAIL_CLIENT.replace("    AppWorldRunner(cfg).run()\n", "    AppWorldRunner(cfg).run()\n"
                                  "    other = CocktailV2Config(grpo_n=4)\n    AppWorldRunner(other).run()\n")
    kwargs = {k.name: k for k in lint(cocktail_checkout(tmp_path / "a", two)).constructions[0].kwargs}
    assert kwargs["num_repeat"].value is None and "differs between the AppWorldRunner objects" in \
        kwargs["num_repeat"].unresolved
    # two callers of a helper: the same value agrees, different ones do not
    body = ("def make(n):\n    return AgentJetJob(num_repeat=n)\n\n"
            "a = make(8)\nb = make(8)\n")
    assert kwargs_of(tmp_path / "b", body)["num_repeat"].value == 8
    differ = kwargs_of(tmp_path / "c", body.replace("b = make(8)", "b = make(6)"))["num_repeat"]
    assert not differ.resolved and differ.why == "the callers of make() pass different values for n (lines 7 and 8)"
    runtime = kwargs_of(tmp_path / "d", "import json\n" + body.replace("b = make(8)", "b = make(json.load(f))"))
    assert not runtime["num_repeat"].resolved and "n of make() is json.load(f) at line" in runtime["num_repeat"].why
