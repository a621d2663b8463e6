"""What the benches that time fresh processes share: their environment and their CPU clock.

Not a benchmark. ``fresh_env`` gives both sides of a comparison what an installed program has: compiled
bytecode. ``pip install`` compiles an installed package's modules, and an editable install or a copied skill
folder writes ``__pycache__`` on its first run; a development environment that sets PYTHONDONTWRITEBYTECODE
would instead make every run of our process compile its ~200 modules from source, while the yardstick's
(Hydra's, in site-packages) come precompiled. The caches go to a temporary folder (PYTHONPYCACHEPREFIX, which
both sides then use alike), so the checkout stays clean; run each command once before timing it.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def fresh_env(repo: Path, pycache: Path) -> dict[str, str]:
    """The environment of a timed child: the checkout importable, bytecode cached under ``pycache``."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def child_cpu_s() -> float:
    """CPU seconds (user + system) of the finished child processes so far: what a shared machine's load
    changes least."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
