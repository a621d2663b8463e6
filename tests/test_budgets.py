"""What an assistant reads before its first call, measured with a real tokenizer (o200k_base), and the
generated tool reference that carries what the lean schemas leave out.

The token tests need Node 22 and js-tiktoken from the npm registry the first time (cached after that,
as the packaging tests' tools are).
"""

from __future__ import annotations

import re

from skill_server.app import tool_docs
from skill_server.app.mcp_server import EXPLAIN_GAUGE, INSTRUCTIONS, RUN_BLUEPRINT
from skill_server.app.table import TOOLS, TOOLS_BY_NAME
from tests.conftest import REPO, cli_env
from tests.tokens import count_tokens, skill_body, tool_token_table

#: every tool's name, title, description, annotations, input and output schema, as tools/list sends them
TOOL_LIST_BUDGET = 12_000
#: SKILL.md's body (the spec's ceiling is about 5,000 tokens; ours is half of it)
SKILL_BODY_BYTES = 10 * 1024


def test_the_tool_list_fits_its_token_budget():
    table = tool_token_table(cli_env())
    assert set(table) == {spec.name for spec in TOOLS}
    print("\n[tokens] tool: all / without the output schema")
    for name, (whole, without_output) in table.items():
        print(f"[tokens] {name}: {whole} / {without_output}")
    total = sum(whole for whole, _ in table.values())
    print(f"[tokens] all tools: {total} / {sum(w for _, w in table.values())} (budget {TOOL_LIST_BUDGET})")
    assert total <= TOOL_LIST_BUDGET


def test_skill_md_body_fits_its_budget():
    body = skill_body()
    (tokens,) = count_tokens([body])
    print(f"\n[tokens] SKILL.md body: {len(body.encode())} bytes, {tokens} tokens")
    assert len(body.encode()) <= SKILL_BODY_BYTES


def test_the_tool_reference_is_generated_from_the_table():
    page = tool_docs.REFERENCE.read_text(encoding="utf-8")
    assert page == tool_docs.render_reference(), "run `python -m skill_server.app.tool_docs --write`"
    for spec in TOOLS:
        assert f"## `{spec.name}`" in page
        section = page.split(f"## `{spec.name}`", 1)[1].split("\n## ", 1)[0]
        arguments = section.split("Result:", 1)[0]
        base = re.search(r"Every field of \[`(\w+)`\]\(#(\w+)\)", arguments)
        inherited = _object_section(page, base.group(1)) if base else ""
        for name in spec.input_type.model_fields:  # every argument, shared or not: here or in the linked base
            assert f"- `{name}`" in arguments or f"- `{name}`" in inherited, (spec.name, name)


def _object_section(page: str, name: str) -> str:
    """The lines the reference gives a shared object (its fields), from its heading to the next one."""
    head = f"### `{name}`"
    assert head in page, name
    return re.split(r"\n#{2,3} ", page.split(head, 1)[1], maxsplit=1)[0]


def test_docs_command_prints_and_refuses_unknown_options(capsys):
    assert tool_docs.main([]) == 0 and capsys.readouterr().out == tool_docs.render_reference()
    assert tool_docs.main(["--bogus"]) == 2


def test_the_wait_back_off_is_written_once():
    """The schedule lives in wait_experiment's constant, rendered into references/tools.md; the rest point."""
    schedule = re.compile(r"30 s, 1(?: min)?, 2(?: min)?, 4")
    assert schedule.search(tool_docs.backoff_text())
    texts = {"SKILL.md": (REPO / "SKILL.md").read_text(), "prompts": RUN_BLUEPRINT + EXPLAIN_GAUGE + INSTRUCTIONS}
    texts |= {page.name: page.read_text() for page in (REPO / "references").glob("*.md") if page.name != "tools.md"}
    texts |= {spec.name: spec.description + spec.details for spec in TOOLS}
    assert [name for name, text in texts.items() if schedule.search(text)] == []


# --- what one answer costs: each script-reading tool on every tutorial client ---------------------------------

#: The tutorial clients (tests/fixtures/clients): every script a tool reads in one call.
CLIENT_SCRIPTS = sorted(p for p in (REPO / "tests" / "fixtures" / "clients").rglob("*.py"))
#: check_config's default (compact) answer: in bytes and in tokens, the first screen an assistant reads.
CHECK_CONFIG_BYTES, CHECK_CONFIG_TOKENS = 7 * 1024, 2_000
#: detail=full: every location and value, each block once (it was 23 KB for a 17-line script, effective twice).
CHECK_CONFIG_FULL_BYTES = 20 * 1024
EPISODE_CAP_BYTES = 5 * 1024
#: build_config: the YAML is the answer (AgentJet's whole dump); everything around it stays small, and comes first.
BUILD_CONFIG_BESIDES_YAML = 6 * 1024


def _answer(tool: str, arguments: dict) -> dict | None:
    from skill_server.core.errors import ToolInputError

    try:
        return TOOLS_BY_NAME[tool].invoke(arguments).model_dump(mode="json")
    except ToolInputError:
        return None  # a script this tool refuses (for example one with unknown settings) answers with one line


def test_each_tools_answer_on_the_tutorial_clients_is_sized_for_an_assistant():
    import json

    texts: list[str] = []
    for script in CLIENT_SCRIPTS:
        compact = _answer("check_config", {"script": str(script)})
        full = _answer("check_config", {"script": str(script), "detail": "full"})
        assert compact is not None and full is not None
        text = json.dumps(compact)
        texts.append(text)
        assert len(text) <= CHECK_CONFIG_BYTES, (script.name, len(text))
        assert len(json.dumps(full)) <= CHECK_CONFIG_FULL_BYTES, (script.name, len(json.dumps(full)))
        assert "effective" not in compact and all("locations" not in f for f in compact["findings"])
        constructions = full["constructions"] or []
        assert all(c["effective"] is None for c in constructions[:1])  # the top-level effective, not twice
        cap = _answer("episode_cap", {"script": str(script)})
        assert cap is None or len(json.dumps(cap)) <= EPISODE_CAP_BYTES, (script.name, len(json.dumps(cap)))
        built = _answer("build_config", {"script": str(script)})
        if built is not None:
            around = {k: v for k, v in built.items() if k != "yaml"}
            assert len(json.dumps(around)) <= BUILD_CONFIG_BESIDES_YAML, (script.name, len(json.dumps(around)))
            assert list(built)[-1] == "yaml"  # the summary and warnings come before AgentJet's whole dump
    tokens = count_tokens(texts)
    print("\n[answer] check_config tokens per tutorial client:", dict(zip((s.name for s in CLIENT_SCRIPTS), tokens)))
    assert max(tokens) <= CHECK_CONFIG_TOKENS


def test_no_fix_names_a_key_another_finding_flags_as_unknown():
    """A fix names the corrected key or leaves a misspelt one out; only the unknown-key finding itself names it."""
    from tests.lint_helpers import lint

    for script in CLIENT_SCRIPTS:
        r = lint(script)
        bad = {f.key for f in r.findings if f.rule == "unknown-key" and f.values and f.values.get("closest") is not None
               or f.rule == "unknown-key" and f.values and "closest" in f.values}
        for f in r.findings:
            if f.rule != "unknown-key":
                assert not [k for k in bad if k and k in f.fix], (script.name, f.rule, f.fix)


def test_every_policy_field_says_what_it_does_in_full_in_the_reference_and_in_short_in_the_tool_list():
    """RunPolicy (launch_experiment's policy, a blueprint's [exp_policy]): each field's whole line is in
    references/tools.md; the tool list carries its first sentence, short."""
    from skill_server.app.published import first_sentence, input_schema
    from skill_server.experiments.models import LaunchInput, RunPolicy

    page = tool_docs.REFERENCE.read_text(encoding="utf-8")
    section = page.split("`RunPolicy`:", 1)[1].split("\n\n`", 1)[0]
    published = input_schema(LaunchInput.model_json_schema())["$defs"]["RunPolicy"]["properties"]
    for name, field in RunPolicy.model_fields.items():
        text = field.description or ""
        assert len(text.split(". ")) >= 2, name  # what it does, then its default and what it never does
        assert f"- `{name}` (" in section and text in section, name
        assert published[name]["description"] == first_sentence(text) and len(first_sentence(text)) <= 120, name
    words = {name: field.description for name, field in RunPolicy.model_fields.items()}
    assert "transient" in published["on_error"]["description"] and "never resumed" in words["on_error"]
    assert "600 s" in published["stall_floor_s"]["description"] and "nccl_error" in words["stall_floor_s"]
