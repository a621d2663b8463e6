"""How many episodes a client script runs at once, read statically: the one bound ``episode_cap {script}``
and ``check_config`` both fold into the cap, with the line it comes from.

The bound is the thread pool that runs the episodes (``script.pools``: a ``ThreadPoolExecutor``, AgentJet's
``PeriodicDrainThreadPoolExecutor`` / ``BoundedThreadPoolExecutor``, ``run_episodes_until_all_complete``).
Which pool runs them follows from what it is given to run (``script.episodes``: a function that calls
``begin_episode``). When no pool is seen to run episodes, a script with exactly one pool is taken to run
them on it (said as an assumption). Several candidate pools, or one whose size is known only at run time,
leave the bound unknown, and the answer says why; nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from skill_server.analysis.script.model import Pool, ScriptScan

#: What every client bound assumes (a script is read as one client).
ONE_EPISODE_PER_THREAD = "each thread runs one episode at a time"
ONLY_CLIENT = "this script is the only client (give client_parallelism for several)"


@dataclass
class ClientBound:
    """The client's concurrency: ``threads`` (None: unknown, ``why`` says so) and the pool it comes from."""

    threads: int | None
    why: str = ""
    pool: Pool | None = None
    file: str = ""  # the script's file name, for places
    assumes: list[str] = field(default_factory=list)
    role_known: bool = False  # the pool is seen to run episodes (not only assumed to)

    @property
    def line(self) -> int | None:
        return self.pool.line if self.pool is not None else None

    @property
    def place(self) -> str:
        """``client.py:37 (PeriodicDrainThreadPoolExecutor: 64 threads)``."""
        if self.pool is None:
            return self.file
        size = f"{self.threads} threads" if self.threads is not None else "size unknown"
        return f"{self.file}:{self.pool.line} ({self.pool.callee}: {size})"


def client_bound(scan: ScriptScan | None) -> ClientBound:
    """The episodes the script runs at once, or why that is not known statically."""
    if scan is None:
        return ClientBound(None, "no client script was read")
    name = Path(scan.path).name
    roles = scan.episodes.pool_roles if scan.episodes is not None else {}
    claims = bool(scan.episodes and scan.episodes.claims)
    running = [p for p in scan.pools if roles.get(p.line) == "episodes"]
    candidates = running or [p for p in scan.pools if roles.get(p.line) != "other"]
    if not candidates:
        why = ("the script builds no thread pool this tool recognises (ThreadPoolExecutor, AgentJet's "
               "PeriodicDrainThreadPoolExecutor)")
        if not claims:
            why += " and claims no episode itself (no begin_episode): its episodes run in code not read here"
        return ClientBound(None, why, file=name)
    if len(candidates) > 1:
        listed = "; ".join(f"line {p.line}: {p.threads if p.threads else 'unknown'}" for p in candidates)
        what = "run episodes" if running else "could run the episodes"
        known = [p.threads for p in candidates if p.threads]
        total = f" (together at most {sum(known)})" if running and len(known) == len(candidates) else ""
        return ClientBound(None, f"the script builds {len(candidates)} thread pools that {what} ({listed}){total}; "
                           "which bound holds at once is not known statically", file=name)
    pool = candidates[0]
    if pool.threads is None:
        return ClientBound(None, f"the client's pool at {name}:{pool.line} ({pool.callee}) has an unknown size: "
                           f"{pool.why}", pool, name, role_known=bool(running))
    assumes = [ONE_EPISODE_PER_THREAD, ONLY_CLIENT, *pool.assumes]
    if not running:
        assumes.insert(0, "this pool runs the episodes (what it runs is not seen to claim one)")
    return ClientBound(pool.threads, "", pool, name, assumes, role_known=bool(running))
