"""Code-shape gates that are not style: no function above a cyclomatic complexity of 25 (radon's measure)
unless a ``# one piece: <why>`` comment on its ``def`` line, or the line above, says why it must stay whole.

ruff and mypy run from ``.ci/run``; this is here because the rule needs the reason next to the code.
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[1] / "skill_server"
MAX_COMPLEXITY = 25
REASON = "# one piece:"



def _too_complex() -> list[str]:
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        blocks = cc_visit(text)
        stack = list(blocks)
        while stack:
            block = stack.pop()  # radon lists methods both on their class and on their own
            stack.extend(getattr(block, "closures", []) or [])
            if block.complexity <= MAX_COMPLEXITY or type(block).__name__ == "Class":
                continue
            around = " ".join(lines[max(0, block.lineno - 2): block.lineno])
            if REASON in around:
                continue
            found.add(f"{path.relative_to(ROOT.parent)}:{block.fullname} ({block.complexity})")
    return sorted(found)


def test_no_function_is_too_complex_without_a_reason():
    found = _too_complex()
    assert not found, (f"above complexity {MAX_COMPLEXITY}: split them, or say why one must stay whole with "
                       f"'{REASON} ...' on or above its def line: " + "; ".join(found))
