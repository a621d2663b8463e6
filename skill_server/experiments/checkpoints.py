"""Checkpoints of a run: the ``global_step_N`` folders in its checkpoint directory, through the host layer.

The directory comes from the run's YAML (``runconfig``); the listing is the host agent's bounded walk
(``hosts.agent.checkpoints``), asked in the same round trip as the rest of a status call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skill_server.experiments.models import CheckpointInfo, CheckpointList
from skill_server.experiments.progress import iso
from skill_server.hosts import client

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import CheckpointsReply

#: How deep below the directory ``global_step_N`` folders are looked for, and how many entries a walk may see.
MAX_DEPTH = 3
MAX_ENTRIES = 20_000
#: Newest checkpoints listed.
LIMIT = 50


def listing_op(config: dict[str, Any]) -> tuple[str, client.Op[CheckpointsReply]] | None:
    """(host, agent op) listing the run's checkpoints, or None when its directory is unknown."""
    directory = config.get("checkpoint_dir")
    host = config.get("host")
    if not isinstance(directory, str) or not isinstance(host, str):
        return None
    return host, client.checkpoints(directory, max_depth=MAX_DEPTH, max_entries=MAX_ENTRIES, limit=LIMIT)


def unknown(config: dict[str, Any]) -> CheckpointList:
    """The answer when the directory is not known (says why)."""
    notes = [str(n) for n in config.get("notes") or []]
    reason = "no checkpoint directory in the run's YAML" + (f" ({'; '.join(notes)})" if notes else "")
    return CheckpointList(host=None, directory=None, source=None, checkpoints=[], more=0, latest=None,
                          truncated=False, reason=reason)


def from_answer(config: dict[str, Any], result: client.Result) -> CheckpointList:
    """The listing from the agent's answer to ``listing_op`` (an absent directory is an empty list: nothing
    saved yet)."""
    base = dict(host=config.get("host"), directory=config.get("checkpoint_dir"),
                source=config.get("checkpoint_source"))
    note = config.get("checkpoint_note")
    answer = client.answer(result, client.checkpoints)
    if not answer["ok"]:
        if answer["kind"] == "not_found":
            return CheckpointList(**base, checkpoints=[], more=0, latest=None, truncated=False,
                                  reason="the directory does not exist yet: no checkpoint saved so far"
                                  + (f"; {note}" if note else ""))
        return CheckpointList(**base, checkpoints=[], more=0, latest=None, truncated=False,
                              reason=f"could not be listed: {answer['error']}")
    items = []
    for raw in answer["checkpoints"]:
        try:
            items.append(CheckpointInfo(step=int(raw["step"]), path=str(raw["path"]), size_bytes=int(raw["size"]),
                                        files=int(raw["files"]), modified_at=iso(float(raw["mtime"])),
                                        partial=bool(raw["partial"])))
        except (KeyError, TypeError, ValueError, OverflowError, OSError):
            continue
    return CheckpointList(**base, checkpoints=items, more=answer["more"], latest=answer["latest"],
                          truncated=answer["truncated"], reason=note)
