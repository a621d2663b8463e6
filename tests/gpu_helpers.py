"""The stand-in nvidia-smi set up for a node (shared by the GPU and Ray tests and benches)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from tests.conftest import REPO

FAKE_SMI = REPO / "tests" / "fixtures" / "fake_nvidia_smi.py"
A100 = "NVIDIA A100-SXM4-80GB"


def install_fake_smi(bin_dir: Path, state: dict) -> Path:
    """A bin directory whose nvidia-smi is the stand-in, with its state file and a device directory that
    holds one character device per GPU (``nvidia<N>``, made with mknod: the numbers of /dev/null, so
    opening one does nothing) for "GPU processes" to hold open."""
    bin_dir.mkdir(parents=True)
    # a copy, not a link: a node with its own /tmp cannot see a checkout that lives under /tmp (as CI's does)
    shutil.copy2(FAKE_SMI, bin_dir / "nvidia-smi")
    dev = bin_dir.parent / "dev"
    dev.mkdir()
    for i in range(len(state.get("gpus", [])) if os.getuid() == 0 else 0):  # mknod needs root
        os.mknod(dev / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(dev / f"nvidia{i}", 0o666)
    (bin_dir / "nvidia-smi.json").write_text(json.dumps({**state, "device_dir": str(dev)}))
    return dev
