"""The facts one host reported, as the judge reads them: the probe's JSON lines and nvidia-smi's answers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from skill_server.gpus.models import GpuHost

#: nvidia-smi's extra query: each GPU's compute capability and the driver's version
DRIVER_FIELDS = ("index", "compute_cap", "driver_version")
_CUDA_VERSION = re.compile(r"CUDA Version:\s*(\d+\.\d+)")


@dataclass
class Driver:
    """The driver's version and the newest CUDA it runs, and each GPU's compute capability."""

    version: str | None = None
    cuda: str | None = None
    capabilities: dict[int, str] = field(default_factory=dict)
    error: str | None = None


@dataclass
class HostFacts:
    """Everything one place (a host, or a node of an allocation) said."""

    lines: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    #: the probe printed its last line (else it was cut: missing facts are unknown)
    complete: bool = False
    #: why the probe gave no usable output (it could not start, the host agent failed it)
    error: str | None = None
    gpus: GpuHost | None = None
    driver: Driver | None = None

    def one(self, section: str, name: str) -> dict[str, Any] | None:
        found = self.lines.get((section, name))
        return found[-1] if found else None

    def many(self, section: str, name: str) -> list[dict[str, Any]]:
        return list(self.lines.get((section, name), ()))

    def named(self, section: str, prefix: str) -> dict[str, dict[str, Any]]:
        """The last line of every name in ``section`` that starts with ``prefix`` (prefix removed)."""
        return {name[len(prefix):]: found[-1] for (sect, name), found in self.lines.items()
                if sect == section and name.startswith(prefix) and found}


def parse_probe(stdout: str) -> HostFacts:
    """The probe's JSON lines (anything else, such as a login banner, is skipped)."""
    facts = HostFacts()
    for raw in stdout.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or not isinstance(line.get("section"), str) or not isinstance(
                line.get("name"), str):
            continue
        key = (line["section"], line["name"])
        facts.lines.setdefault(key, []).append(line)
        if key == ("probe", "done"):
            facts.complete = True
    return facts


def parse_driver(query_stdout: str | None, plain_stdout: str | None, error: str | None) -> Driver:
    """``--query-gpu=index,compute_cap,driver_version`` lines and the plain table's "CUDA Version"."""
    driver = Driver(error=error)
    for line in (query_stdout or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(DRIVER_FIELDS) or not parts[0].isdigit():
            continue
        if re.fullmatch(r"\d+\.\d+", parts[1]):
            driver.capabilities[int(parts[0])] = parts[1]
        if re.fullmatch(r"[\d.]+", parts[2]):
            driver.version = parts[2]
    found = _CUDA_VERSION.search(plain_stdout or "")
    driver.cuda = found.group(1) if found else None
    return driver


def version_tuple(text: str | None, parts: int = 2) -> tuple[int, ...] | None:
    """``'12.4.1'`` -> ``(12, 4)``; None when the text does not start with numbers."""
    if not text:
        return None
    found = re.match(r"(\d+(?:\.\d+)*)", text.strip())
    if not found:
        return None
    numbers = tuple(int(x) for x in found.group(1).split("."))[:parts]
    return numbers if len(numbers) == parts else None
