"""Hostile scripts and files: huge integers, deep expressions, FIFOs and devices. A result or a clean error,
never a traceback or a hang, and nothing of the script ever runs."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skill_server.core.errors import ToolInputError
from skill_server.core.models import MAX_JSON_INT
from tests.conftest import call_cli
from tests.lint_helpers import LAYERS_TAIL, lint, only, rules, skipped, write

HEAD = "import os\nfrom ajet.copilot.job import AgentJetJob\n"


@pytest.mark.parametrize("expr", ["10 ** 400", "1" + "0" * 400, "-(10 ** 400)", "2 ** 4000 * 3", "1e400"])
def test_integers_beyond_float_range_never_crash(tmp_path, expr):
    script = write(tmp_path, "client.py", HEAD + f"BIG = {expr}\njob = AgentJetJob(max_env_worker=BIG, num_repeat=7, "
                                                 f"batch_size=BIG, n_gpu=BIG, lr=BIG)\n")
    r = lint(script)
    assert r.effective.episode_cap.value is None and r.effective.episode_cap.unresolved
    assert r.model_dump_json()  # serialisable
    if "e" not in expr and not expr.startswith("-"):
        big = eval(expr)  # noqa: S307 - the test's own literal, to compare with
        assert r.effective.max_env_worker.value == big
        assert any(f"outside 1..{MAX_JSON_INT}" in reason for reason in skipped(r).get("tracker-threads-below-cap", []))
        assert rules(r) >= {"cap-not-divisible"}  # the remainder is still computed exactly
        assert only(r, "cap-not-divisible").values["max_env_worker"] == big


def test_integers_too_large_for_any_config_are_left_unknown(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "A = 2 ** 3000\nB = A * A * A\njob = AgentJetJob(max_env_worker=B)\n")
    r = lint(script)
    assert r.effective.max_env_worker.value is None
    assert "larger than any config value" in r.effective.max_env_worker.unresolved


def test_a_base_yaml_with_huge_numbers(tmp_path):
    write(tmp_path, "base.yaml", f"ajet:\n  rollout:\n    max_env_worker: {10 ** 30}\n    num_repeat: 7\n"
                                 "  data:\n    train_batch_size: 1e400\n  enable_swarm_mode: true\n"
                                 "  enable_interchange_server: true\n" + LAYERS_TAIL)
    r = lint(yaml=str(tmp_path / "base.yaml"))
    assert r.effective.max_env_worker.value == 10 ** 30 and "cap-not-divisible" in rules(r)
    assert r.effective.episode_cap.value is None


@pytest.mark.parametrize("body", [
    "x = " + "1 + " * 900 + "1\njob = AgentJetJob(num_repeat=x)\n",
    "x = " + "[" * 90 + "]" * 90 + "\njob = AgentJetJob(compute_madness_checklist=x)\n",
    "job = AgentJetJob()\njob.config" + ".a" * 900 + " = 1\n",
    "job = AgentJetJob()\n" + "".join(f"def f{i}():\n    f{i + 1}()\n" for i in range(300))
    + "def f300():\n    job.config.ajet.rollout.top_p = 1.0\nf0()\njob.dump_job_as_yaml('x')\n",
    "".join(f"v{i} = v{i - 1} + 1\n" if i else "v0 = 1\n" for i in range(2000))
    + "job = AgentJetJob(num_repeat=v1999)\n",
])
def test_deep_or_long_expressions_are_bounded(tmp_path, body):
    script = write(tmp_path, "client.py", HEAD + body)
    r = lint(script)
    assert r.model_dump_json()
    assert len(r.constructions) == 1


def test_a_too_deep_expression_says_so(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "x = " + "1 + " * 100 + "1\njob = AgentJetJob(num_repeat=x)\n")
    kwarg = lint(script).constructions[0].kwargs[0]
    assert not kwarg.resolved and "nests deeper than" in kwarg.unresolved


def test_a_script_nested_beyond_the_parser_is_a_clear_error(tmp_path):
    script = write(tmp_path, "client.py", "x = " + "1 + " * 20000 + "1\n")
    with pytest.raises(ToolInputError) as info:
        lint(script)
    assert info.value.field == "script" and "cannot be parsed" in str(info.value)


def test_fifo_and_device_are_not_regular_files(tmp_path):
    fifo = tmp_path / "client.py"
    os.mkfifo(fifo)
    with pytest.raises(ToolInputError, match="not a regular file"):
        lint(fifo)
    with pytest.raises(ToolInputError, match="not a regular file"):
        lint(yaml=str(fifo))
    device = tmp_path / "null.py"
    try:
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")  # the FIFO cases above still ran
    with pytest.raises(ToolInputError, match="not a regular file"):
        lint(device)
    with pytest.raises(ToolInputError) as info:
        lint(tmp_path / "null.py", cwd=str(fifo))
    assert info.value.field == "cwd"


def test_a_sibling_module_that_is_a_fifo_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "knobs.py")
    script = write(tmp_path, "client.py", HEAD + "from knobs import N\njob = AgentJetJob(num_repeat=N)\n")
    kwarg = lint(script).constructions[0].kwargs[0]
    assert not kwarg.resolved and "not a module next to the script" in kwarg.unresolved


def test_a_sibling_module_that_does_not_parse_is_a_note(tmp_path):
    write(tmp_path, "knobs.py", "N = (\n")
    script = write(tmp_path, "client.py", HEAD + "from knobs import N\njob = AgentJetJob(num_repeat=N)\n")
    r = lint(script)
    assert not r.constructions[0].kwargs[0].resolved
    assert any("knobs.py" in note and "not valid Python" in note for note in r.notes)


def test_import_cycles_between_sibling_modules(tmp_path):
    write(tmp_path, "a.py", "from b import Y\nX = Y\n")
    write(tmp_path, "b.py", "from a import X\nY = X\n")
    script = write(tmp_path, "client.py", HEAD + "from a import X\njob = AgentJetJob(num_repeat=X)\n")
    r = lint(script)
    assert not r.constructions[0].kwargs[0].resolved


def test_hostile_script_through_the_cli(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(max_env_worker=10 ** 400, nnodes='2')\n"
                                                 "job.config" + ".x" * 500 + " = 1\n")
    code, out, err = call_cli("check_config", {"script": str(script)})
    assert code == 0, err
    assert "agentjet-refusal" in {f["rule"] for f in out["findings"]}
    code, out, err = call_cli("check_config", {"script": str(tmp_path / "x\udcff.py")})
    assert code in (1, 2) and out is None and err.count("\n") == 1


# --- property: any mix of values in any kwarg gives a result, never a traceback -------------------------

_ATOMS = st.one_of(
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30).map(repr),
    st.sampled_from(["10 ** 400", "2 ** 64", "1e400", "-1e400", "float('nan')", "0", "-1", "True", "None", "''",
                     "'2'", "os.getenv('X', '8')", "os.environ['Y']", "args.n", "[1, 'a']", "{'k': 1}", "__file__",
                     "undefined_name", "(lambda: 3)()", "b'x'", "1j", "..."]),
    st.floats(allow_nan=False).map(repr),
    st.text(max_size=8).map(repr),
)
_EXPRS = st.recursive(_ATOMS, lambda inner: st.one_of(
    st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]), inner).map(" ".join),
    st.tuples(st.sampled_from(["int", "float", "str", "min", "len"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
    st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
), max_leaves=6)
_KWARGS = st.dictionaries(st.sampled_from(["max_env_worker", "num_repeat", "batch_size", "n_gpu", "nnodes",
                                           "max_prompt_length", "max_response_length", "max_model_len",
                                           "max_response_length_in_one_turn", "lora_rank", "lr", "swarm_mode",
                                           "num_repeats", "model"]), _EXPRS, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kwargs=_KWARGS)
def test_any_kwarg_values_give_a_result(tmp_path, kwargs):
    call = ", ".join(f"{k}=({v})" for k, v in kwargs.items())
    script = write(tmp_path, "client.py", HEAD + "import argparse\nargs = argparse.ArgumentParser().parse_args()\n"
                   f"job = AgentJetJob({call})\njob.config.ajet.rollout.top_p = ({call!r})\n")
    r = lint(script)
    assert r.model_dump_json() and len(r.constructions) == 1
