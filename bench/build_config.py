"""build_config against Hydra's own ``compose`` of the same three layers (what AgentJetJob spends its time on).

Not a test: prints ratios measured in one run (this machine is shared and noisy; runs are interleaved and
medians reported). hydra-core is a test dependency, so this needs the test extras.

* in-process: one ``build_config`` call (bundled release; and an install given as ``agentjet_root``, after
  a first cold call that reads it) against one Hydra ``compose`` of ajet_swarm_default. Goal <= 0.1x.
* CLI: a fresh ``python -m skill_server call build_config`` process against a fresh process that imports
  Hydra and composes, in wall time and in CPU time (what the machine's load changes least), both with their
  bytecode compiled as an install has it (``bench/fresh.py``). Goal <= 0.4x (issue 28: under 0.55x).

    python bench/build_config.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fresh import child_cpu_s, fresh_env  # noqa: E402  (bench/fresh.py)

from skill_server.agentjet.release import clear_cache, newest_bundled  # noqa: E402
from skill_server.tools.build_config.tool import BuildConfigInput, build_config  # noqa: E402

REPEATS = 30
PROCESS_RUNS = 7
KWARGS = {"num_repeat": 6, "max_env_worker": 126, "experiment_name": "bench"}


def write_checkout(root: Path) -> Path:
    """An AgentJet tree with the bundled release's layers and the test fixtures' stand-in modules."""
    import yaml

    from tests.agentjet_fixtures import LAYER_FILES, write_reference_checkout

    release = newest_bundled()
    for rel in LAYER_FILES.values():
        found = release.config_file(rel, raw=True)
        assert found is not None
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(yaml.safe_dump(found.raw, sort_keys=False))
    return write_reference_checkout(root, layers=False)


def hydra_compose(config_dir: Path) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        compose(config_name="ajet_swarm_default")


def median_time(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def in_process(checkout: Path) -> None:
    config_dir = checkout / "ajet" / "default_config"
    old = os.getcwd()
    os.chdir(checkout)  # the swarm default's relative search paths, as AgentJet runs from the checkout root
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hydra_compose(config_dir)  # warm-up: imports
            build_config(BuildConfigInput(kwargs=KWARGS))
            clear_cache()
            start = time.perf_counter()
            build_config(BuildConfigInput(kwargs=KWARGS, agentjet_root=str(checkout)))
            cold = time.perf_counter() - start
            hydra, bundled, install = [], [], []
            for _ in range(REPEATS):  # interleaved so that machine noise hits all three alike
                hydra.append(median_time(lambda: hydra_compose(config_dir), 1))
                bundled.append(median_time(lambda: build_config(BuildConfigInput(kwargs=KWARGS)), 1))
                install.append(median_time(lambda: build_config(
                    BuildConfigInput(kwargs=KWARGS, agentjet_root=str(checkout))), 1))
    finally:
        os.chdir(old)
    h, b, i = statistics.median(hydra), statistics.median(bundled), statistics.median(install)
    print(f"in-process, median of {REPEATS}: Hydra compose {h * 1000:.1f} ms")
    print(f"  build_config, bundled release       {b * 1000:.1f} ms = {b / h:.3f}x Hydra (goal <= 0.1x)")
    print(f"  build_config, agentjet_root (cached) {i * 1000:.1f} ms = {i / h:.3f}x Hydra (goal <= 0.1x)")
    print(f"  build_config, agentjet_root, first call (reads the install) {cold * 1000:.1f} ms = {cold / h:.2f}x")


def fresh_processes(checkout: Path, pycache: Path) -> None:
    env = fresh_env(REPO, pycache)
    ours = [sys.executable, "-m", "skill_server", "call", "build_config", "--json", json.dumps({"kwargs": KWARGS})]
    hydra = [sys.executable, "-W", "ignore", "-c",
             "import sys; from hydra import compose, initialize_config_dir\n"
             "with initialize_config_dir(config_dir=sys.argv[1], version_base=None):\n"
             "    compose(config_name='ajet_swarm_default')\n", str(checkout / "ajet" / "default_config")]
    times: dict[str, list[float]] = {"ours": [], "hydra": []}
    cpu: dict[str, list[float]] = {"ours": [], "hydra": []}
    for argv in (ours, hydra):  # compiles both sides' bytecode (bench/fresh.py) and warms the file cache
        subprocess.run(argv, capture_output=True, cwd=checkout, env=env, check=False)
    for _ in range(PROCESS_RUNS):
        for name, argv in (("ours", ours), ("hydra", hydra)):
            used = child_cpu_s()
            start = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, cwd=checkout, env=env, check=False)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(child_cpu_s() - used)
            assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    o, h = statistics.median(times["ours"]), statistics.median(times["hydra"])
    oc, hc = statistics.median(cpu["ours"]), statistics.median(cpu["hydra"])
    bare = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], env=env, check=False), PROCESS_RUNS)
    print(f"fresh process (bytecode cached), median of {PROCESS_RUNS}: python -m skill_server call build_config "
          f"{o * 1000:.0f} ms, "
          f"python + import hydra + compose {h * 1000:.0f} ms: {o / h:.2f}x (goal <= 0.4x; issue 28: < 0.55x); "
          f"CPU {oc * 1000:.0f} ms against {hc * 1000:.0f} ms: {oc / hc:.2f}x")
    print(f"  (a bare `python -c pass` takes {bare * 1000:.0f} ms here)")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        checkout = write_checkout(Path(tmp) / "AgentJet")
        in_process(checkout)
        fresh_processes(checkout, Path(tmp) / "pycache")


if __name__ == "__main__":
    main()
