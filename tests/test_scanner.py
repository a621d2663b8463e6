"""The fast error-signature scanner (hosts/agent/scanner.py): needles that every match needs, lines counted like
the patterns count them, and healthy output that never reaches a pattern."""

from __future__ import annotations

import random
import re
from re import _constants as sre_c  # type: ignore[attr-defined]  # the parser's opcodes (tests only)
from re import _parser as sre_parse  # type: ignore[attr-defined]

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skill_server.core.text import shorten
from skill_server.experiments import logs
from skill_server.experiments.signatures import SIGNATURES, monitor_rows
from skill_server.hosts.agent import scanner

#: A verl step line as AgentJet's trainer prints it (bench/status.py's keys): healthy, about 2 KB.
STEP_KEYS = (["critic/llm_call_cnt", "critic/madness_rate", "critic/success_rate", "critic/real_reward",
              "actor/entropy", "perf/mfu/actor_infer", "actor/pg_loss", "actor/kl_loss", "actor/kl_coef",
              "actor/grad_norm", "actor/lr", "perf/mfu/actor", "perf/max_memory_allocated_gb"]
             + [f"critic/{g}/{s}" for g in ("score", "rewards", "advantages", "returns")
                for s in ("mean", "max", "min")]
             + [f"timing_s/{s}" for s in ("gen", "old_log_prob", "ref", "adv", "update_actor", "step")]
             + ["perf/total_num_tokens", "perf/time_per_step", "perf/throughput", "training/epoch"])
HEALTHY = [
    "(TaskRunner pid=48213) step:12 - "
    + " - ".join(f"{k}:{0.001 * n - 0.004:.6f}" for n, k in enumerate(STEP_KEYS)) + " - training/global_step:12",
    "2026-05-26 17:07:12.482 | INFO     | ajet.task_rollout.native_parallel_worker:run:212 - episode 3f2a claimed",
    "(TaskRunner pid=4821) Rollout progress (812.5 tokens/s): [0-5]:3 threads  //  [finished]:12 threads",
    "Received workflow output for episode 3f2a (Reward: 0.5)",
    "[validate_config] All configuration checks passed successfully!",
    "Changed engine status to ENGINE.ROLLING",
    "INFO 05-26 17:07:13 [gpu_model_runner.py:1234] Loading weights took 4.12 seconds",
    "Training Progress:  12%|#2        | 3/25 [00:41<05:01, 13.70s/it]",
    "2026-05-26 17:07:12.482 | INFO     | ajet.swarm.server:poll_loop:88 - 12 clients connected, engine ENGINE.ROLLING",
]


# ---- needles are necessary: every line a pattern can match holds one


def _language(node: tuple, limit: int = 256) -> set[str] | None:
    """The finite set of strings one parsed item matches, or None (infinite, or too many)."""
    op, arg = node
    if op is sre_c.LITERAL:
        return {chr(arg)}
    if op is sre_c.AT:
        return {""}
    if op is sre_c.IN and all(o is sre_c.LITERAL for o, _ in arg):
        return {chr(a) for _, a in arg}
    if op is sre_c.SUBPATTERN:
        return _seq_language(list(arg[3]), limit)
    if op is sre_c.BRANCH:
        out: set[str] = set()
        for branch in arg[1]:
            part = _seq_language(list(branch), limit)
            if part is None:
                return None
            out |= part
        return out if len(out) <= limit else None
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and arg[1] <= 1:
        body = _seq_language(list(arg[2]), limit)
        if body is None:
            return None
        return body | ({""} if arg[0] == 0 else set())
    return None


def _seq_language(items: list, limit: int) -> set[str] | None:
    out = {""}
    for item in items:
        part = _language(item, limit)
        if part is None:
            return None
        out = {a + b for a in out for b in part}
        if len(out) > limit:
            return None
    return out


def _covered(items: list, needles: list[str]) -> bool:
    """Whether every match of this sequence contains one of the needles (lowercased, as the scanner looks)."""
    run: list[tuple] = []
    for item in items + [None]:  # runs of items with a finite language, each judged as a whole
        language = _language(item) if item is not None else None
        if language is not None:
            run.append(item)
            continue
        if run:
            strings = _seq_language(run, 4096)
            if strings and all(any(n in s.lower() for n in needles) for s in strings):
                return True
            run = []
        if item is not None and _item_covered(item, needles):
            return True
    return False


def _item_covered(node: tuple, needles: list[str]) -> bool:
    op, arg = node
    if op is sre_c.SUBPATTERN:
        return _covered(list(arg[3]), needles)
    if op is sre_c.BRANCH:
        return all(_covered(list(branch), needles) for branch in arg[1])
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and arg[0] >= 1:
        return _covered(list(arg[2]), needles)
    return False


@pytest.mark.parametrize("sig", SIGNATURES, ids=lambda s: s.name)
def test_every_match_of_a_signature_holds_one_of_its_needles(sig):
    assert sig.needles, "every signature needs needles, or its pattern runs on every line of every log"
    needles = [n.lower() for n in sig.needles]
    assert all(n.isascii() for n in needles)
    assert _covered(list(sre_parse.parse(sig.pattern, sig.flags)), needles), (
        f"{sig.name}: some line the pattern matches may hold none of {sig.needles}")


def test_healthy_output_reaches_no_pattern():
    """Selective needles: what healthy runs print on every line holds none (not 'inf' of actor_infer, not 'loss')."""
    for line in HEALTHY:
        found = [(s.name, n) for s in SIGNATURES for n in s.needles if n.lower() in line.lower()]
        assert found == [], line


# ---- lines are counted like the patterns count them


def _naive(text: str) -> dict[str, tuple[int, str, str]]:
    """Each signature's pattern on every line, the slow way."""
    out: dict[str, tuple[int, str, str]] = {}
    for line in text.split("\n"):
        for sig in SIGNATURES:
            if sig.regex.search(line):
                kept = shorten(line.strip(), scanner.MAX_LINE)
                count, first, _ = out.get(sig.name, (0, kept, kept))
                out[sig.name] = (count + 1, first, kept)
    return out


def test_the_scanner_finds_what_every_pattern_finds_on_every_line():
    rng = random.Random(1234)
    pieces = HEALTHY + [s.example for s in SIGNATURES] + [
        "actor/pg_loss: nan", "Train Loss:  NaN", "grad_norm:-INF", "Killed", "  Killed  ", "oom-killer invoked",
        "NCCL operation ALLREDUCE timed out", "ValueError", "x ValueError: y", "\x00\xff binary \u00e9\u4e2d",
        "(Worker pid=2) RuntimeError: " + "x" * 3000, "error: lowercase only", "no module named flash_attn",
    ]
    table = scanner.Table(monitor_rows())
    for _ in range(40):
        text = "\n".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))
        assert table.scan(text) == _naive(text)


def test_a_signature_without_needles_still_scans_every_line():
    table = scanner.Table([{"name": "boom", "pattern": r"^BOOM \d+$", "flags": "", "needles": []}])
    assert table.scan("a\nBOOM 1\nb\nBOOM 22\n") == {"boom": (2, "BOOM 1", "BOOM 22")}
    folded = scanner.Table([{"name": "x", "pattern": r"hello", "flags": "i", "needles": ["HeLLo"]}])
    assert folded.scan("say HELLO\nhello\n") == {"x": (2, "say HELLO", "hello")}


def test_clip_is_the_servers_shorten_rule():
    for text in ("", "short", "x" * 400, "y" * 401, "abc" * 1000, "\u4e2d" * 999):
        for limit in (0, 2, 3, 4, 10, 400):
            assert scanner.clip(text, limit) == shorten(text, limit)


def test_the_server_scan_uses_the_same_table_and_keeps_the_first_line():
    state = logs.ScanState(offsets=[0])
    logs.scan_text("ValueError: first\nok\nKeyError: second\n", state, None, role="main", now=1.0)
    hit = state.errors["python_exception"]
    assert hit == {"count": 2, "line": "KeyError: second", "role": "main", "first_line": "ValueError: first"}
    assert re.search(logs.signature_table().signatures[0].regex.pattern, SIGNATURES[0].example)


# ---- one pass over each chunk finds every line a needle-by-needle scan finds


def _reference_scan(rows: list[dict], text: str) -> list[tuple[str, tuple[int, str, str]]]:
    """The scan as it was specified before the one-pass finder, written the slow and obvious way: every line
    (bytes, ASCII-lowered) is checked for every needle; the rows whose needles it holds try their expression on
    it, in the order the table first lists those needles, then rows; rows without needles run on every line
    after that. The tallies in the order they were first counted."""
    sigs = [scanner.Signature(row) for row in rows]
    by_needle: dict[bytes, list] = {}
    for sig in sigs:
        for needle in sig.needles:
            if sig not in by_needle.setdefault(needle, []):
                by_needle[needle].append(sig)
    out: dict[str, list] = {}

    def tally(name: str, line: str) -> None:
        kept = scanner.clip(line.strip())
        if name in out:
            out[name][0] += 1
            out[name][2] = kept
        else:
            out[name] = [1, kept, kept]

    for raw_line in text.encode("utf-8", "replace").split(b"\n"):
        low = raw_line.lower()
        line = raw_line.decode("utf-8", "replace")
        tried: list = []
        for needle, owners in by_needle.items():
            if needle in low:
                tried += [sig for sig in owners if sig not in tried]
        for sig in tried:
            if sig.regex.search(line):
                tally(sig.name, line)
    for line in text.split("\n"):
        for sig in sigs:
            if not sig.needles and sig.regex.search(line):
                tally(sig.name, line)
    return [(name, (c, first, last)) for name, (c, first, last) in out.items()]


def _scan(rows: list[dict], text: str) -> list[tuple[str, tuple[int, str, str]]]:
    return list(scanner.Table(rows).scan(text).items())


#: Bytes that needles of generated tables are made of: few, so needles overlap, share anchors and recur.
_NEEDLE_ALPHABET = "abcnrx:_+ -"
_needle = st.text(alphabet=_NEEDLE_ALPHABET, min_size=1, max_size=6)
_row_pattern = st.sampled_from([r"a", r"[a-z]+:", r"^\S", r"x$", r"(?:b|c)n", r"\d", r"nan|inf", r".+"])


@st.composite
def _tables(draw) -> list[dict]:
    rows = []
    for i in range(draw(st.integers(1, 7))):
        needles = draw(st.lists(_needle, max_size=4))
        pattern = draw(st.one_of(_row_pattern, _needle.map(re.escape)))
        rows.append({"name": f"row{i}", "pattern": pattern, "flags": draw(st.sampled_from(["", "i"])),
                     "needles": needles})
    return rows


@st.composite
def _texts(draw, needles: list[str]) -> str:
    """Lines of needles in any case (touching, overlapping, cut short), the needles' alphabet, other text."""
    piece = st.one_of(
        st.sampled_from(needles or ["x"]).map(lambda n: n.upper() if len(n) % 2 else n),
        st.sampled_from(needles or ["x"]).flatmap(lambda n: st.integers(0, len(n)).map(lambda k: n[:k])),
        st.text(alphabet=_NEEDLE_ALPHABET + "AN\t", max_size=8),
        st.text(max_size=4),
        st.sampled_from(["\u00e9\u4e2d", "\udcff", "K\u212aill"]),
    )
    lines = draw(st.lists(st.lists(piece, max_size=6).map("".join), max_size=12))
    return "\n".join(lines)


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(st.data())
def test_the_one_pass_scan_finds_what_a_needle_by_needle_scan_finds(data):
    """Random tables (needles that overlap and share bytes, rows with and without needles, in any case) over
    random text: the same rows, counts, first and last lines, in the same order, as the reference scan."""
    rows = data.draw(_tables())
    needles = [n for row in rows for n in row["needles"]]
    text = data.draw(_texts(needles))
    assert _scan(rows, text) == _reference_scan(rows, text)


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(st.lists(st.one_of(st.sampled_from(HEALTHY + [s.example for s in SIGNATURES] + [
    "actor/pg_loss: nan", "grad_norm:-INF", "x: +inf", "  Killed", "NCCL error", "Could not connect to Ray",
    "Unable to connect to swarm server.", "ENGINE.CANNOT_CONNECT", "CUDA out of memory", "cudart", "driver"]),
    st.text(max_size=30)), max_size=50))
def test_the_project_table_finds_what_a_needle_by_needle_scan_finds(pieces):
    text = "\n".join(pieces)
    assert _scan(monitor_rows(), text) == _reference_scan(monitor_rows(), text)


def test_overlapping_needles_are_each_found():
    """One pass reports an occurrence and moves past it: a needle that starts inside it is still looked for."""
    rows = [{"name": "long", "pattern": "xab", "flags": "", "needles": ["xab"]},
            {"name": "inner", "pattern": "abc", "flags": "", "needles": ["abc"]},
            {"name": "same_start", "pattern": "xa", "flags": "", "needles": ["xa"]}]
    table = scanner.Table(rows)
    assert table.needles.expression is not None and not table.needles.one_by_one, "all three in the one pass"
    assert _scan(rows, "xabc\nabc\n") == _reference_scan(rows, "xabc\nabc\n")
    assert {name for name, _ in _scan(rows, "xabc")} == {"long", "inner", "same_start"}


def test_an_empty_needle_makes_its_row_run_on_every_line():
    table = scanner.Table([{"name": "e", "pattern": r"^\d+$", "flags": "", "needles": ["", "zz"]}])
    assert table.scan("12\nab\n7") == {"e": (2, "12", "7")}


# ---- indented lines: where real tools indent them

#: pip 24's report of a failed flash-attn build: the build's own output six spaces in, under "╰─>".
PIP_BUILD_FAILURE = """\
Collecting flash-attn==2.8.3
  Downloading flash_attn-2.8.3.tar.gz (8.4 MB)
  Preparing metadata (setup.py) ... error
  error: subprocess-exited-with-error

  × python setup.py egg_info did not run successfully.
  │ exit code: 1
  ╰─> [12 lines of output]
      Traceback (most recent call last):
        File "<string>", line 2, in <module>
        File "<pip-setuptools-caller>", line 34, in <module>
        File "/tmp/pip-install-3f2a/flash-attn_5c1e/setup.py", line 198, in <module>
          CUDAExtension(
        File "/venv/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 1076, in CUDAExtension
          library_dirs += library_paths(cuda=True)
        File "/venv/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 1207, in library_paths
          if (not os.path.exists(_join_cuda_home(lib_dir)) and
        File "/venv/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 2416, in _join_cuda_home
          raise OSError('CUDA_HOME environment variable is not set. '
      OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.
      sh: 1: nvcc: not found
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed
"""

#: uv's report of the same failure: the build backend's stderr, six spaces in, after "[stderr]".
UV_BUILD_FAILURE = "\n".join([
    "  × Failed to build `flash-attn==2.8.3`",
    "  ├─▶ The build backend returned an error",
    "  ╰─▶ Call to `setuptools.build_meta:__legacy__.build_wheel` failed (exit status: 1)",
    "",
    "      [stderr]",
    "      Traceback (most recent call last):",
    '        File "<string>", line 14, in <module>',
    "      RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compile PyTorch "
    "(12.4). Please make sure to use the same CUDA versions.",
    "",
    "      hint: This usually indicates a problem with the package or the build environment.",
]) + "\n"

#: Python 3.11's report of an exception group: each sub-exception's lines after "| ".
EXCEPTION_GROUP = """\
  + Exception Group Traceback (most recent call last):
  |   File "/work/client.py", line 9, in <module>
  |     raise ExceptionGroup("episodes failed", [ValueError("bad reward"), KeyError("task")])
  | ExceptionGroup: episodes failed (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | ValueError: bad reward
    +---------------- 2 ----------------
    | KeyError: 'task'
    +------------------------------------
"""


def _hits(text: str) -> dict[str, tuple[int, str, str]]:
    table = scanner.Table(monitor_rows())
    found = table.scan(text)
    assert found == _naive(text)  # the fast scan agrees with every pattern on every line
    return found


def test_exceptions_indented_by_pip_uv_and_exception_groups_are_found():
    pip = _hits(PIP_BUILD_FAILURE)
    assert pip["python_exception"][:2] == (1, "OSError: CUDA_HOME environment variable is not set. Please set it to "
                                              "your CUDA install root.")
    assert pip["cuda_home_not_set"][0] == 2  # the raising source line and the exception
    assert pip["nvcc_missing"][0] == 1
    assert pip["command_not_found"][1] == "sh: 1: nvcc: not found"  # dash's form, indented
    uv = _hits(UV_BUILD_FAILURE)
    assert uv["python_exception"][0] == 1 and uv["cuda_home_mismatch"][0] == 1
    assert uv["flash_attn_build_failed"][1] == "× Failed to build `flash-attn==2.8.3`"
    group = _hits(EXCEPTION_GROUP)
    assert group["python_exception"][0] == 2  # both sub-exceptions (the group's own line names no ...Error)
    assert group["python_exception"][2] == "| KeyError: 'task'"


def test_indented_lines_that_are_not_exceptions_are_not_taken_for_one():
    """Traceback frames and source lines, pip's own framing and a YAML-ish key stay unmatched."""
    text = "\n".join([
        '        File "/x/setup.py", line 198, in <module>',
        "          raise OSError('CUDA_HOME environment variable is not set. '",
        "          CUDAExtension(",
        "  │ exit code: 1",
        "      [end of output]",
        "    error_handler: ValueErrorHandler()",
        "    ValueError(",
    ])
    assert "python_exception" not in _hits(text)
