"""What an assistant reads before its first call, in o200k_base tokens (js-tiktoken, through Node 22).

Not a test (``tests/test_budgets.py`` holds the budgets): prints the real ``tools/list`` result a real MCP
client receives from the real server, per tool (whole, and without its output schema), then SKILL.md's
body and every reference page. Needs the npm registry the first time (cached after that).

    python bench/tokens.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.tokens import count_tokens, skill_body, tool_token_table  # noqa: E402


def main() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    table = tool_token_table(env)
    width = max(len(name) for name in table)
    print(f"{'tool':<{width}}  {'all':>6}  {'no output schema':>16}")
    for name, (whole, without_output) in table.items():
        print(f"{name:<{width}}  {whole:>6}  {without_output:>16}")
    print(f"{'total':<{width}}  {sum(w for w, _ in table.values()):>6}  {sum(w for _, w in table.values()):>16}")
    pages = {"SKILL.md (body)": skill_body()}
    pages |= {f"references/{p.name}": p.read_text(encoding="utf-8") for p in sorted((REPO / "references").glob("*.md"))}
    counts = count_tokens(list(pages.values()))
    print()
    for (name, text), tokens in zip(pages.items(), counts, strict=True):
        print(f"{name:<36} {len(text.encode()):>7} bytes  {tokens:>6} tokens")


if __name__ == "__main__":
    main()
