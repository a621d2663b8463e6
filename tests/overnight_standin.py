"""A stand-in for a verl trainer on an overnight run (a GPU trainer cannot run here): what the night's tests and
the trial workspace launch.

What it reproduces of verl, as AgentJet runs it (``trainer.resume_mode: auto``):

* at its start it looks in its checkpoint directory (``<checkpoint_base_dir>/<project_name>/<experiment_name>``,
  verl's ``default_local_dir``, from the ``--conf`` YAML's ``ajet`` keys relative to its working directory, or
  ``--ckpt``) for the newest ``global_step_N`` folder; when there is one it prints verl's
  ``Load from checkpoint folder: <path>`` and continues with step N+1, else it trains from scratch;
* one ``step:N - key:value - ...`` line per step (``critic/score/mean`` rises to a peak at ``--peak`` then falls a
  little; ``actor/pg_loss``, ``timing_s/step``, ``training/global_step``), and every ``--save-freq`` steps a
  ``global_step_N`` folder with verl's ``local_global_step_folder: <path>`` line; it exits 0 after ``--total``;
* on its first start only (its count of starts is kept in ``--starts``), after step ``--hang-after`` an NCCL
  collective timeout (the watchdog line NCCL prints) and then it hangs with its process alive, as a hung rank
  does; a later start redoes the steps after the checkpoint it loaded, with slightly different values.

``--never-steps`` prints start-up lines every half second and never reaches a first step (a run stuck before
step 1 that keeps logging). Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--conf", help="the run's YAML: checkpoint_base_dir, project_name, experiment_name")
    p.add_argument("--ckpt", help="the checkpoint directory (verl's default_local_dir), instead of --conf's")
    p.add_argument("--starts", required=True, help="a file counting this stand-in's starts")
    p.add_argument("--total", type=int, default=12)
    p.add_argument("--save-freq", type=int, default=3)
    p.add_argument("--hang-after", type=int, default=5)
    p.add_argument("--peak", type=int, default=8)
    p.add_argument("--step-s", type=float, default=0.2)
    p.add_argument("--never-steps", action="store_true")
    return p.parse_args(argv)


def checkpoint_dir(conf: str) -> str:
    """``<checkpoint_base_dir>/<project_name>/<experiment_name>`` as AgentJet makes verl's default_local_dir (each key
    read from its line of the YAML, AgentJet's defaults otherwise)."""
    with open(conf) as handle:
        text = handle.read()

    def key(name: str, default: str) -> str:
        found = re.search(rf"^\s*{name}:\s*['\"]?([^'\"\s#]+)", text, re.MULTILINE)
        return found.group(1) if found else default

    return os.path.join(key("checkpoint_base_dir", "./saved_checkpoints"), key("project_name", "ajet_default_project"),
                        key("experiment_name", "read_yaml_name"))


def score(step: int, peak: int, start: int) -> float:
    """The reward at ``step``: up to the peak, then a little down; each start's values differ a little."""
    base = 0.05 * step if step <= peak else 0.05 * peak - 0.02 * (step - peak)
    return round(base + 0.001 * (start - 1), 4)


def main(argv: list[str]) -> int:
    a = _args(argv)
    starts = 1
    if os.path.exists(a.starts):
        with open(a.starts) as handle:
            starts = int(handle.read()) + 1
    with open(a.starts, "w") as handle:
        handle.write(str(starts))
    if a.never_steps:
        while True:
            print("(TaskRunner pid=7) waiting for the rollout workers to register ...", flush=True)
            time.sleep(0.5)
    ckpt = os.path.abspath(a.ckpt or checkpoint_dir(a.conf))
    os.makedirs(ckpt, exist_ok=True)
    done = [int(n.rsplit("_", 1)[1]) for n in os.listdir(ckpt) if n.startswith("global_step_")
            and n.rsplit("_", 1)[1].isdigit()]
    first = max(done) if done else 0
    if first:
        print(f"Load from checkpoint folder: {os.path.join(ckpt, f'global_step_{first}')}", flush=True)
    else:
        print("Training from scratch", flush=True)
    for step in range(first + 1, a.total + 1):
        time.sleep(a.step_s)
        print(f"(TaskRunner pid=7) step:{step} - critic/score/mean:{score(step, a.peak, starts)} - actor/pg_loss:"
              f"{round(0.5 - 0.01 * step, 4)} - timing_s/step:{a.step_s} - training/global_step:{step}", flush=True)
        if step % a.save_freq == 0:
            folder = os.path.join(ckpt, f"global_step_{step}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "model.pt"), "w") as handle:
                handle.write(f"weights of step {step}")
            with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as handle:
                handle.write(str(step))
            print(f"local_global_step_folder: {folder}", flush=True)
        if step == a.hang_after and starts == 1:
            print("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran "
                  "for 600000 milliseconds before timing out.", flush=True)
            time.sleep(3600)
    print(f"Training finished at step {a.total}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
