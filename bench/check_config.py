"""check_config on a generated 5,000-line swarm client, against merely ``ast.parse``-ing the same file.

Not a test: prints figures measured in one run (this machine is shared and noisy). The script has a
dataclass config, module constants, many helper functions and classes, one AgentJetJob construction
fed from the dataclass, post-construction writes through aliases, a dump and a sync. Each repeat runs
the whole tool (AgentJet's defaults composed and loaded, the base YAML composed, every rule), in-process
after one warm-up call; the first (cold) call is printed too. Target: median under 0.5 s.

The CLI: a fresh ``python -m skill_server call check_config`` process (what an assistant without MCP runs)
against a fresh process that only reads and ``ast.parse``-s the same script, medians of interleaved runs, in
wall time and in CPU time (what the machine's load changes least), both with their bytecode compiled as an
install has it (``bench/fresh.py``). Goal: under 2.5x.

    python bench/check_config.py
"""

from __future__ import annotations

import ast
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fresh import child_cpu_s, fresh_env  # noqa: E402  (bench/fresh.py)

from skill_server.tools.check_config import CheckConfigInput, check_config  # noqa: E402  (the package, whatever its layout)

LINES = 5000
REPEATS = 7
PROCESS_RUNS = 9
TARGET_S = 0.5

HEADER = '''"""Generated swarm client for the check_config benchmark."""
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from ajet.copilot.job import AgentJetJob
from ajet.tuner_lib.experimental.swarm_client import SwarmClient

HERE = Path(__file__).resolve().parent
BASE_YAML = str(HERE / "bench_base.yaml")
LENGTHS = {"max_prompt_length": 3000, "max_response_length": 15000, "max_model_len": 18000,
           "max_response_length_in_one_turn": 4096}


@dataclass
class RunConfig:
    grpo_n: int = 4
    batch: int = 32
    workers: int = 4 * 32
    temperature: float = 0.9
    madness: list = field(default_factory=lambda: ["nonsense"])

'''

HELPER = '''
def reward_{i}(answer, reference, weights=(0.5, 0.5)):
    """Score variant {i}."""
    total = 0.0
    for w, part in zip(weights, (answer, reference)):
        if part and isinstance(part, str):
            total += w * len(part.strip()) / (1 + len(reference or ""))
        else:
            total -= w
    data = {{"id": {i}, "score": total, "tags": [t for t in ("a", "b") if t in answer]}}
    return max(0.0, min(1.0, data["score"]))

'''

CLASS = '''
class Agent{i}:
    def __init__(self, name="agent{i}"):
        self.name = name
        self.history = []

    def step(self, observation):
        self.history.append(observation)
        return reward_{i}(str(observation), self.name)

'''

FOOTER = '''

def build_job(cfg: RunConfig):
    job = AgentJetJob(
        base_yaml_config=BASE_YAML,
        experiment_name="bench",
        num_repeat=cfg.grpo_n,
        batch_size=cfg.batch,
        max_env_worker=cfg.workers,
        compute_madness_checklist=cfg.madness,
        **LENGTHS,
    )
    rollout = job.config.ajet.rollout
    rollout.temperature = cfg.temperature
    rollout.multi_turn["max_steps"] = 8
    setattr(job.config.ajet.trainer_common, "save_freq", 50)
    return job


def main():
    cfg = RunConfig()
    job = build_job(cfg)
    job.dump_job_as_yaml(str(HERE / "resolved.yaml"))
    SwarmClient(os.environ.get("AJET_SWARM_URL", "http://localhost:10086")).auto_sync_train_config_and_start_engine(job)


if __name__ == "__main__":
    main()
'''

BASE = """ajet:
  enable_swarm_mode: true
  enable_interchange_server: true
  rollout:
    max_inference_tracker_threads_note: 1
  trainer_common:
    save_freq: 20
hydra:
  searchpath:
    - file://ajet/default_config
    - file://ajet/default_config/verl
defaults:
  - verl_default
  - ajet_default
  - _self_
"""


def generate(lines: int) -> str:
    parts = [HEADER]
    i = 0
    body_lines = lines - HEADER.count("\n") - FOOTER.count("\n")
    count = 0
    while count < body_lines:
        chunk = HELPER.format(i=i) + (CLASS.format(i=i) if i % 3 == 0 else "")
        parts.append(chunk)
        count += chunk.count("\n")
        i += 1
    parts.append(FOOTER)
    return "".join(parts)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fresh_processes(script: Path, pycache: Path) -> None:
    """The CLI against a process that reads and parses the script, both started fresh, interleaved, with their
    bytecode compiled as an install has it (``bench/fresh.py``)."""
    env = fresh_env(REPO, pycache)
    argv = {"cli": [sys.executable, "-m", "skill_server", "call", "check_config", "--json",
                    json.dumps({"script": str(script)})],
            "parse": [sys.executable, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", str(script)]}
    times: dict[str, list[float]] = {name: [] for name in argv}
    cpu: dict[str, list[float]] = {name: [] for name in argv}
    for cmd in argv.values():  # compiles the bytecode and warms the file cache
        subprocess.run(cmd, capture_output=True, cwd=script.parent, env=env, check=False)
    for _ in range(PROCESS_RUNS):
        for name, cmd in argv.items():
            used = child_cpu_s()
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, cwd=script.parent, env=env, check=False)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(child_cpu_s() - used)
            assert done.returncode == 0, done.stderr.decode()[-2000:]
    cli, parse = statistics.median(times["cli"]), statistics.median(times["parse"])
    cli_cpu, parse_cpu = statistics.median(cpu["cli"]), statistics.median(cpu["parse"])
    print(f"fresh process (bytecode cached), median of {PROCESS_RUNS}: python -m skill_server call check_config "
          f"{cli * 1000:.0f} ms, "
          f"python + ast.parse {parse * 1000:.0f} ms: {cli / parse:.2f}x (goal < 2.5x); CPU {cli_cpu * 1000:.0f} ms "
          f"against {parse_cpu * 1000:.0f} ms: {cli_cpu / parse_cpu:.2f}x")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bench_client.py"
        script.write_text(generate(LINES))
        (Path(tmp) / "bench_base.yaml").write_text(BASE)
        n_lines = script.read_text().count("\n")
        inp = CheckConfigInput(script=str(script))

        cold = timed(lambda: check_config(inp))
        result = check_config(inp)
        parse_times, check_times = [], []
        for _ in range(REPEATS):  # interleaved, so both see the same machine load
            parse_times.append(timed(lambda: ast.parse(script.read_text())))
            check_times.append(timed(lambda: check_config(inp)))
        parse_s = statistics.median(parse_times)
        check_s = statistics.median(check_times)
        print(f"script: {n_lines} lines, {script.stat().st_size // 1024} KiB; findings: "
              f"{sorted({f.rule for f in result.findings})}; skipped checks: {len(result.skipped)}")
        print(f"ast.parse only:   median {parse_s * 1000:7.1f} ms  (of {REPEATS})")
        print(f"check_config:     median {check_s * 1000:7.1f} ms  (of {REPEATS}); first call {cold * 1000:.1f} ms")
        print(f"ratio check_config / ast.parse: {check_s / parse_s:.2f}x")
        verdict = "OK" if check_s < TARGET_S else "OVER"
        print(f"target < {TARGET_S:.1f} s: {verdict}")
        fresh_processes(script, Path(tmp) / "pycache")


if __name__ == "__main__":
    main()
