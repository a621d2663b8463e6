"""What an assistant reads before its first call, measured with a real tokenizer (o200k_base), and the
generated tool reference that carries what the lean schemas leave out.

The token tests need Node 22 and js-tiktoken from the npm registry the first time (cached after that,
as the packaging tests' tools are).
"""

from __future__ import annotations

import re

from skill_server.app import tool_docs
from skill_server.app.mcp_server import EXPLAIN_GAUGE, INSTRUCTIONS, RUN_BLUEPRINT
from skill_server.app.table import TOOLS
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
