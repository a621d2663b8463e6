"""Property-based and adversarial arguments for every tool in the table, through both front ends.

Generic over ``skill_server.app.table.TOOLS``: values are derived from each tool's published input schema,
so tools and fields added later are covered without editing this file. Every call must give a result
that serialises, or one clean ``SkillError`` line; any other exception is a crash, a call still running
after ``HANG_S`` a hang. Three passes:

1. a deterministic hostile corpus, every value into every field (huge and negative numbers, NaN, odd
   and invalid unicode, quotes and ``$``, deep nesting, FIFOs, a character device, directories and
   dangling links made under the test's temp dir, kernel paths);
2. hypothesis, schema-derived arguments mixed with the same hostile values;
3. a sample of the corpus through the real CLI and one real MCP stdio session, checking after each
   call that the server still answers the next one.

Safety: the tools run with a private tmux server and state dir, in a temp working directory. Fields
whose names say they hold a command or an interpreter only ever get fixed safe values (``true``,
``sleep 1``); generated text never contains shell metacharacters, path separators or ``~``. The
corpus's own shell payloads only ``touch`` canary files in the temp dir, and the test fails if one
appears (a quoting bug).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skill_server.app.table import TOOLS, ToolSpec
from skill_server.core.errors import SkillError
from tests.conftest import cli_env
from tests.schema_walk import branches, resolve
from tests.swarm_standin import SwarmStandin, SwarmState

#: No call of these passes may take longer: durations in the arguments are kept to a few seconds.
HANG_S = 30.0
#: The CLI and MCP passes start processes; a call there may take a little longer.
FRONT_END_HANG_S = 120.0
#: Extra address space a tool may use before a hostile file (a /dev/zero clone) counts as a crash.
MEMORY_HEADROOM = 1024 * 1024 * 1024
EXAMPLES_PER_TOOL = 60
COMMAND_WORDS = ("command", "cmd", "shell")
INTERPRETER_NAMES = ("python", "venv_exe", "exp_venv_exe", "interpreter")
SAFE_COMMANDS = ("true", "sleep 1")
#: Generated text: any letter, digit or punctuation except what a shell, a path or a section marker reads.
SAFE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"),
                                           blacklist_characters="/~$`;|&()<>[]{}\\'\"*?!#\n\r\t="),
                    max_size=24)


def is_command_field(name: str) -> bool:
    return any(word in name.lower() for word in COMMAND_WORDS)


def is_interpreter_field(name: str) -> bool:
    return name.lower() in INTERPRETER_NAMES


def is_duration_field(name: str) -> bool:
    return name.endswith("_s")


# --------------------------------------------------------------------------------- the hostile world

@dataclass
class World:
    """Files, servers and payloads the hostile values point at, all under one temp dir."""

    root: Path
    canaries: Path
    paths: dict[str, str] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)
    experiment_id: str = "no-such-run"  # a finished run of this test, so id-taking tools go past the lookup
    launches: int = 0

    def fresh_name(self) -> str:
        self.launches += 1
        return f"ajet_prop_{self.launches}"

    def strings(self) -> list[str]:
        c = self.canaries
        return [
            "", " ", "a" * 5000, "nul\x00inside", "\x00", "\ud800", "lone \udcff surrogate", "\U0001F600 emoji",
            "\u202eright-to-left", "e\u0301 combining", "\ufeffbom", "'", '"', "\\", "$HOME", "${PATH}",
            f"$(touch {c}/dollar)", f"`touch {c}/backtick`", f"'; touch {c}/quote; '", f'"; touch {c}/dquote; "',
            "line\nbreak", "..", "../../..", "-rf", "--help", "%s%n", "{}", "[]", "null", "(a+)+$",
            "http://127.0.0.1:1", "ftp://x", "ajet_x", "no-such-run",
            *self.paths.values(), *self.urls,
        ]

    def numbers(self) -> list[Any]:
        return [0, -1, 1, 2, 7, 2**31, 2**53 - 1, 2**53, 2**63, -(2**63), 10**400, 0.5, -0.0, 1e308, 5e-324,
                float("nan"), float("inf"), float("-inf"), True, False]

    def structures(self) -> list[Any]:
        deep_list: Any = 1
        deep_dict: Any = 1
        for _ in range(40):
            deep_list, deep_dict = [deep_list], {"k": deep_dict}
        return [None, [], {}, [1, "a", None], {"": 1}, {"\ud800": 1}, {"k" * 300: 1}, deep_list, deep_dict,
                list(range(10_000)), {"a": [{"b": [{"c": "$HOME"}]}]}]

    def everything(self) -> list[Any]:
        return self.strings() + self.numbers() + self.structures()


def make_world(root: Path) -> World:
    canaries = root / "canaries"
    canaries.mkdir(parents=True)
    world = World(root=root, canaries=canaries)
    files = root / "files"
    files.mkdir()
    fifo = files / "fifo.yaml"
    os.mkfifo(fifo)
    device = files / "zero.yaml"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        device = fifo  # without CAP_MKNOD, a second FIFO stands in for the device
    folder = files / "folder"
    folder.mkdir()
    (files / "link-to-device").symlink_to(device)
    (files / "dangling").symlink_to(files / "nothing")
    regular = files / "config.yaml"
    regular.write_text("ajet:\n  rollout: {max_env_worker: 8, num_repeat: 2}\n  data: {train_batch_size: 4}\n")
    (files / "deep.yaml").write_text("ajet: " + "[" * 3000 + "]" * 3000 + "\n")
    (files / "big.txt").write_bytes(b"x" * (5 * 1024 * 1024))
    (files / "binary.py").write_bytes(bytes(range(256)) * 4)
    (files / "script.py").write_text("from ajet import AgentJetJob\njob = AgentJetJob(num_repeat=4)\n")
    world.paths = {
        "fifo": str(fifo), "device": str(device), "folder": str(folder), "link": str(files / "link-to-device"),
        "dangling": str(files / "dangling"), "regular": str(regular), "deep": str(files / "deep.yaml"),
        "big": str(files / "big.txt"), "binary": str(files / "binary.py"), "script": str(files / "script.py"),
        "new": str(files / "new" / "out.md"), "long-name": str(files / ("n" * 300 + ".yaml")),
        "proc-read": "/proc/self/status", "proc-write": "/proc/self/ajs-never.yaml",
        "nul": str(files / "a\x00b"), "relative": "relative/out.yaml",
    }
    return world


# --------------------------------------------------------------------------------- calling a tool

@dataclass
class Tally:
    cases: int = 0
    results: int = 0
    clean_errors: int = 0
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    by_tool: Counter[str] = field(default_factory=Counter)
    fifos: list[str] = field(default_factory=list)  # opened for writing after a hang, to free a stuck reader

    def line(self, label: str) -> str:
        return (f"{label}: {self.cases} cases, {self.results} results, {self.clean_errors} clean errors, "
                f"{len(self.crashes)} crashes, {len(self.hangs)} hangs")


def call_guarded(spec: ToolSpec, arguments: Any, tally: Tally) -> None:
    """Invoke on a worker thread; classify the outcome. A hang is abandoned (daemon thread) and counted."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            result = spec.invoke(arguments)
            json.dumps(spec.dump(result))
            box["ok"] = True
        except SkillError as exc:
            box["error"] = exc
        except BaseException as exc:  # the thing this suite exists to catch
            box["crash"] = exc

    tally.cases += 1
    tally.by_tool[spec.name] += 1
    worker = threading.Thread(target=run, name=f"prop-{spec.name}", daemon=True)
    worker.start()
    worker.join(HANG_S)
    shown = _short(arguments)
    if worker.is_alive():
        tally.hangs.append(f"{spec.name} {shown}")
        release_fifo_readers(tally.fifos)
        worker.join(5)
    elif "crash" in box:
        exc = box["crash"]
        tally.crashes.append(f"{spec.name} {shown}: {type(exc).__name__}: {str(exc)[:200]}")
    elif "error" in box:
        message = str(box["error"])
        if not message.strip() or "\n" in message or "Traceback" in message:
            tally.crashes.append(f"{spec.name} {shown}: error message not one clean line: {message[:200]!r}")
        else:
            tally.clean_errors += 1
    else:
        tally.results += 1


def release_fifo_readers(fifos: list[str]) -> None:
    """A reader blocked opening a FIFO of the world gets end-of-file, so its thread can finish."""
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting


@contextmanager
def memory_capped() -> Iterator[None]:
    """Cap this process's address space for the duration, so a tool reading a device until memory runs
    out raises MemoryError (a counted crash) instead of starving the machine; restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    cap = in_use + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 240 else text[:237] + "..."


# --------------------------------------------------------------------------------- schema-derived values

def benign_value(name: str, node: dict[str, Any], defs: dict[str, Any], world: World) -> Any:
    """A plausible valid value for one field, so that a hostile value elsewhere reaches the tool's code."""
    lowered = name.lower()
    if is_command_field(lowered):
        return "true"
    if is_interpreter_field(lowered):
        return sys.executable
    for b in branches(node, defs):
        if "enum" in b:
            return b["enum"][0]
        kind = b.get("type")
        if kind == "string":
            if lowered in ("workdir", "cwd", "result_dir", "codebase_dir"):
                return str(world.root / "work")
            if "url" in lowered:
                return world.urls[0]
            if lowered == "id":
                return world.experiment_id
            if lowered == "name":
                return "ajet_prop"
            if lowered == "script":
                return world.paths["script"]
            if lowered in ("yaml", "base_yaml", "yaml_path"):
                return world.paths["regular"]
            return "main" if "pattern" in b else "value"
        if kind == "integer":
            return max(b.get("minimum", 1), min(2, b.get("maximum", 2)))
        if kind == "number":
            return 1
        if kind == "boolean":
            return False
        if kind == "array":
            item = b.get("items", {})
            return [benign_value(name, item, defs, world)] if item else []
        if kind == "object" or "properties" in b:
            obj = resolve(b, defs)
            return {k: benign_value(k, v, defs, world) for k, v in obj.get("properties", {}).items()
                    if k in obj.get("required", ())}
    return None


def baseline(spec: ToolSpec, world: World) -> dict[str, Any]:
    """Required fields plus name-recognised plausible ones (command, workdir, url...), all benign."""
    schema = spec.input_schema
    defs = schema.get("$defs", {})
    props = schema.get("properties", {})
    out = {k: benign_value(k, v, defs, world) for k, v in props.items() if k in schema.get("required", ())}
    wanted = ["command", "workdir", "action", "name", "script"] + (["url"] if "url" in props else ["id"])
    for key in wanted:
        if key in props and key not in out:
            out[key] = benign_value(key, props[key], defs, world)
    return out


def fresh(arguments: Any, world: World, varied: tuple[Any, ...] = ()) -> Any:
    """A new run name for each call (unless the name is what varies), so launches are not refused as busy."""
    if isinstance(arguments, dict) and arguments.get("name") == "ajet_prop" and varied != ("name",):
        return {**arguments, "name": world.fresh_name()}
    return arguments


def field_paths(schema: dict[str, Any]) -> list[tuple[tuple[Any, ...], str, dict[str, Any]]]:
    """(path, leaf name, schema) of every field, nested objects and list items included."""
    defs = schema.get("$defs", {})
    found = []

    def walk(obj: dict[str, Any], prefix: tuple[Any, ...], depth: int) -> None:
        for name, prop in obj.get("properties", {}).items():
            found.append((prefix + (name,), name, prop))
            if depth >= 2:
                continue
            for b in branches(prop, defs):
                if "properties" in b:
                    walk(b, prefix + (name,), depth + 1)
                elif b.get("type") == "array" and isinstance(b.get("items"), dict):
                    item = resolve(b["items"], defs)
                    if "properties" in item:
                        walk(item, prefix + (name, 0), depth + 1)

    walk(schema, (), 0)
    return found


def with_value(base: dict[str, Any], spec: ToolSpec, path: tuple[Any, ...], value: Any, world: World) -> dict[str, Any]:
    """``base`` with ``value`` placed at ``path`` (containers built from benign values on the way)."""
    schema = spec.input_schema
    defs = schema.get("$defs", {})
    args = json.loads(json.dumps(base))
    node: Any = args
    obj_schema = schema
    for i, step in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(step, str):
            prop = obj_schema.get("properties", {}).get(step, {})
            if isinstance(nxt, int):
                item = next((resolve(b["items"], defs) for b in branches(prop, defs) if b.get("type") == "array"),
                            {})
                node[step] = [benign_value(step, item, defs, world) or {}]
                obj_schema = item
            else:
                obj = next((b for b in branches(prop, defs) if "properties" in b), {})
                if not isinstance(node.get(step), dict):
                    node[step] = benign_value(step, obj, defs, world) or {}
                obj_schema = obj
            node = node[step]
        else:
            node = node[step]
    node[path[-1]] = value
    return args


def hostile_values_for(name: str, world: World) -> list[Any]:
    if is_command_field(name):
        return [*SAFE_COMMANDS, *world.numbers(), *world.structures()]
    if is_interpreter_field(name):
        return [sys.executable, world.paths["fifo"], world.paths["folder"], "/nonexistent/python",
                *world.numbers(), *world.structures()]
    values = world.everything()
    if is_duration_field(name):  # keep the corpus quick: no value waits longer than a few seconds
        values = [v for v in values if not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                            and 5 < v <= 3600)]
    return values


def value_strategy(name: str, node: dict[str, Any], defs: dict[str, Any], world: World, depth: int = 0,
                   hostile: bool = True) -> Any:
    """Schema-conforming values; with ``hostile``, mixed with the hostile pool and values of the wrong type."""
    lowered = name.lower()
    if is_command_field(lowered):
        return st.sampled_from(SAFE_COMMANDS)
    if is_interpreter_field(lowered):
        return st.sampled_from([sys.executable, "/nonexistent/python", world.paths["fifo"]])
    options = []
    for b in branches(node, defs):
        kind = b.get("type")
        if "enum" in b:
            options.append(st.sampled_from(b["enum"]))
        elif kind == "string":
            plausible = benign_value(name, b, defs, world)
            options.append(SAFE_TEXT if hostile else st.sampled_from([plausible, *world.paths.values()]))
            options.append(st.sampled_from(list(world.paths.values()) + world.urls + [plausible]))
        elif kind == "integer":
            low, high = b.get("minimum", -10), b.get("maximum", 10**6)
            if is_duration_field(lowered):
                high = min(high, 2)
            options.append(st.integers(min_value=low, max_value=max(low, min(high, 10**6))))
        elif kind == "number":
            low = b.get("exclusiveMinimum", b.get("minimum", 0))
            high = 2.0 if is_duration_field(lowered) else b.get("maximum", 1e6)
            options.append(st.floats(min_value=low, max_value=max(low, high), allow_nan=False,
                                     exclude_min="exclusiveMinimum" in b))
        elif kind == "boolean":
            options.append(st.booleans())
        elif kind == "array" and depth < 2:
            item = b.get("items", {})
            options.append(st.lists(value_strategy(name, item, defs, world, depth + 1, hostile) if item else st.none(),
                                    min_size=b.get("minItems", 0), max_size=max(b.get("minItems", 0), 4)))
        elif (kind == "object" or "properties" in b) and depth < 2:
            options.append(object_strategy(resolve(b, defs), defs, world, depth + 1, hostile))
        elif kind == "null":
            options.append(st.none())
    if hostile or not options:
        pool = hostile_values_for(lowered, world)
        if is_duration_field(lowered):
            pool = [v for v in pool if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 5 or v != v]
        options.append(st.sampled_from(pool))
    return st.one_of(*options)


def object_strategy(obj: dict[str, Any], defs: dict[str, Any], world: World, depth: int = 0,
                    hostile: bool = True) -> Any:
    props = obj.get("properties", {})
    required = [k for k in props if k in obj.get("required", ())]
    optional = [k for k in props if k not in required]
    return st.fixed_dictionaries(
        {k: value_strategy(k, props[k], defs, world, depth, hostile) for k in required},
        optional={k: value_strategy(k, props[k], defs, world, depth, hostile) for k in optional},
    )


def arguments_strategy(spec: ToolSpec, world: World) -> Any:
    """Half plausible argument sets (to reach the tool's own code), half laced with hostile values."""
    schema = spec.input_schema
    defs = schema.get("$defs", {})
    return st.one_of(object_strategy(schema, defs, world, hostile=False), object_strategy(schema, defs, world))


# --------------------------------------------------------------------------------- fixtures

#: Stand-ins for the two programs tools run on a host that must never act for real here: ``ray`` (a
#: generated ``ray_cluster start`` would otherwise start a real Ray head on the machine's network) and
#: ``nvidia-smi`` (a generated ``kill_gpu_processes`` must never meet a real GPU process). The ray
#: stand-in answers ``--version`` like Ray 2.60 and refuses everything else; the nvidia-smi stand-in
#: fails the way a machine with a broken driver does.
STAND_INS = {
    "ray": 'case "$1" in --version) echo "ray, version 2.60.0";; *) echo "stand-in ray: not started" >&2; exit 1;; '
           "esac\n",
    "nvidia-smi": 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n',
}


@pytest.fixture
def world(tmp_path, private_tmux, monkeypatch):
    """The hostile world, a temp working directory, and no route to anything real."""
    w = make_world(tmp_path / "world")
    (w.root / "work").mkdir()
    monkeypatch.chdir(w.root)
    # a home of the world's own: defaults such as ray_cluster's workdir "~" write there, not into the session's
    (w.root / "home").mkdir()
    monkeypatch.setenv("HOME", str(w.root / "home"))
    stand_ins = tmp_path / "stand-ins"
    stand_ins.mkdir()
    for name, body in STAND_INS.items():
        (stand_ins / name).write_text("#!/bin/sh\n" + body)
        (stand_ins / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_ins}{os.pathsep}{os.environ['PATH']}")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setenv("AJET_SWARM_URL", f"http://127.0.0.1:{closed_port}")
    hostile_state = SwarmState(raw={"/get_current_batch_rollout_pool_information":
                                    b'{"completed_tasks": "\\u00b2", "running_episode_details": [1]}'})
    with SwarmStandin() as good, SwarmStandin(hostile_state) as bad:
        w.urls = [f"http://127.0.0.1:{closed_port}", good.url, bad.url]
        w.experiment_id = finished_run(w)
        yield w
    assert not list(w.canaries.iterdir()), f"a shell payload ran: {list(w.canaries.iterdir())}"


def finished_run(w: World) -> str:
    """Launch ``true`` through the table and wait until the registry sees it end."""
    from skill_server.app.table import TOOLS_BY_NAME

    launched = TOOLS_BY_NAME["launch_experiment"].invoke(
        {"name": "ajet_prop_done", "command": "true", "workdir": str(w.root / "work")})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = TOOLS_BY_NAME["experiment_status"].invoke({"id": launched.id}).model_dump()
        if json.dumps(listed).find('"state": "running"') < 0:
            return launched.id
        time.sleep(0.2)
    raise AssertionError("the `true` run never ended")


def report(tally: Tally, label: str, capture: pytest.CaptureFixture[str]) -> None:
    with capture.disabled():
        sys.stderr.write(f"\n[properties] {tally.line(label)}\n")
    assert not tally.crashes, "\n".join(tally.crashes[:20])
    assert not tally.hangs, "\n".join(tally.hangs[:20])


# --------------------------------------------------------------------------------- 1. the corpus

@pytest.mark.parametrize("spec", TOOLS, ids=[t.name for t in TOOLS])
def test_every_field_of_every_tool_against_the_hostile_corpus(spec, world, capsys):
    tally = Tally(fifos=[world.paths["fifo"], world.paths["device"]])
    base = baseline(spec, world)
    with memory_capped():
        call_guarded(spec, fresh(base, world), tally)
        for path, name, _ in field_paths(spec.input_schema):
            for value in hostile_values_for(name, world):
                call_guarded(spec, fresh(with_value(base, spec, path, value, world), world, path), tally)
        for whole in ([], "text", None, {"unknown_argument": 1}, {**base, "unknown_argument": 1}):
            call_guarded(spec, fresh(whole, world), tally)
    report(tally, f"corpus {spec.name}", capsys)
    assert tally.cases > len(field_paths(spec.input_schema)) * 10


# --------------------------------------------------------------------------------- 2. hypothesis

@pytest.mark.parametrize("spec", TOOLS, ids=[t.name for t in TOOLS])
def test_generated_arguments_give_a_result_or_a_clean_error(spec, world, capsys):
    tally = Tally(fifos=[world.paths["fifo"], world.paths["device"]])

    @settings(max_examples=EXAMPLES_PER_TOOL, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(arguments_strategy(spec, world))
    def check(arguments: dict[str, Any]) -> None:
        call_guarded(spec, fresh(arguments, world), tally)

    with memory_capped():
        check()
    report(tally, f"hypothesis {spec.name}", capsys)
    assert tally.cases >= EXAMPLES_PER_TOOL // 2


# --------------------------------------------------------------------------------- 3. real front ends

def front_end_sample(world: World) -> list[tuple[str, Any]]:
    """A few hostile calls per tool, the same for the CLI and the MCP session."""
    picks: list[tuple[str, Any]] = []
    for spec in TOOLS:
        base = baseline(spec, world)
        fields = field_paths(spec.input_schema)
        picks.append((spec.name, fresh(base, world)))
        picks.append((spec.name, {**base, "unknown_argument": 1}))
        for index, (path, name, _) in enumerate(fields[:4]):
            values = [v for v in hostile_values_for(name, world) if _json_sendable(v)]
            value = values[(index * 7) % len(values)]
            picks.append((spec.name, fresh(with_value(base, spec, path, value, world), world, path)))
    return picks


def _json_sendable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False).encode("utf-8")
        return True
    except (ValueError, UnicodeEncodeError):
        return False


#: Runs ``python -m skill_server ...`` with its address space capped (see ``memory_capped``).
CAPPED_SKILL_SERVER = ("import resource, runpy, sys; limit = int(sys.argv.pop(1)); "
                       "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
                       "sys.argv[0] = 'skill_server'; runpy.run_module('skill_server', run_name='__main__')")
CHILD_MEMORY = 2 * 1024 * 1024 * 1024


def front_end_env() -> dict[str, str]:
    return cli_env() | {k: os.environ[k] for k in ("TMUX_TMPDIR", "SKILL_SERVER_TMUX_SOCKET",
                                                   "SKILL_SERVER_STATE_DIR", "AJET_SWARM_URL", "SHELL")}


def test_a_sample_through_the_real_cli(world, capsys):
    tally = Tally()
    env = front_end_env()
    for name, arguments in front_end_sample(world):
        tally.cases += 1
        try:
            proc = subprocess.run([sys.executable, "-c", CAPPED_SKILL_SERVER, str(CHILD_MEMORY), "call", name,
                                   "--json", json.dumps(arguments)], capture_output=True, text=True,
                                  cwd=world.root, env=env, timeout=FRONT_END_HANG_S, check=False)
        except subprocess.TimeoutExpired:
            tally.hangs.append(f"{name} {_short(arguments)}")
            continue
        if proc.returncode == 0:
            json.loads(proc.stdout)
            tally.results += 1
        elif proc.returncode in (1, 2) and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr \
                and proc.stdout == "":
            tally.clean_errors += 1
        else:
            tally.crashes.append(f"{name} {_short(arguments)}: exit {proc.returncode}: {proc.stderr[-300:]}")
    report(tally, "real CLI", capsys)


@pytest.mark.anyio
async def test_a_sample_through_a_real_mcp_session_which_keeps_answering(world, capfd):
    from mcp import Client, StdioServerParameters

    tally = Tally()
    params = StdioServerParameters(command=sys.executable, args=["-c", CAPPED_SKILL_SERVER, str(CHILD_MEMORY)],
                                   cwd=str(world.root), env=front_end_env())
    probe = {"max_env_worker": 512, "grpo_n": 8, "train_batch_size": 32}
    async with Client(params) as client:
        for name, arguments in front_end_sample(world):
            tally.cases += 1
            started = time.monotonic()
            result = await client.call_tool(name, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            if result.is_error:
                if "\n" in text or "Traceback" in text or "internal error" in text:
                    tally.crashes.append(f"{name} {_short(arguments)}: {text[:300]}")
                else:
                    tally.clean_errors += 1
            else:
                tally.results += 1
            if time.monotonic() - started > FRONT_END_HANG_S:
                tally.hangs.append(f"{name} {_short(arguments)}")
            after = await client.call_tool("episode_cap", probe)  # the server answers the next call
            assert not after.is_error and after.structured_content["episode_cap"] == 256
    report(tally, "real MCP session", capfd)
