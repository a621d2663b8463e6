"""A run's lineage: its attempts in order, the one answer to "the chain of this id".

A run launched with a resume policy (``policy.on_error`` or ``on_stall`` set to ``resume``) is relaunched by its
monitor on its host with nobody calling (``hosts.agent.policy``): each attempt is its own run, ``<id>.r2``,
``<id>.r3``..., registered (``attempts.take_up``) with the lineage of the first attempt and its number in it
(the registry's ``lineage`` and ``attempt`` columns). Every tool that follows a resumed run asks here: status
tells the chain, wait and watch follow it to its newest attempt, stop stops what of it is alive, collect_results
says which attempt its results cover. Results merged over a lineage build on ``Lineage.attempts``.
"""

from __future__ import annotations

from dataclasses import dataclass

from skill_server.experiments.store import Registry, Row

#: Most attempts of one lineage a tool follows (the host agent follows as many: ``rundir.MAX_CHAIN``).
MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class Lineage:
    """The registered attempts of one lineage, first attempt first."""

    id: str  # the first attempt's id
    attempts: tuple[Row, ...]

    @property
    def ids(self) -> list[str]:
        return [row.id for row in self.attempts]

    @property
    def newest(self) -> Row | None:
        return self.attempts[-1] if self.attempts else None

    def index(self, exp_id: str) -> int | None:
        return next((i for i, row in enumerate(self.attempts) if row.id == exp_id), None)

    def before(self, exp_id: str) -> list[Row]:
        """The attempts before ``exp_id``, oldest first."""
        i = self.index(exp_id)
        return list(self.attempts[:i]) if i is not None else []

    def after(self, exp_id: str) -> list[Row]:
        """The attempts after ``exp_id``, oldest first."""
        i = self.index(exp_id)
        return list(self.attempts[i + 1:]) if i is not None else []

    def previous(self, exp_id: str) -> str | None:
        earlier = self.before(exp_id)
        return earlier[-1].id if earlier else None

    def next(self, exp_id: str) -> str | None:
        later = self.after(exp_id)
        return later[0].id if later else None


def of(reg: Registry, row: Row) -> Lineage:
    """The lineage ``row`` belongs to, as the registry knows it now (``row`` alone when it was never resumed)."""
    attempts = tuple(reg.lineage(row.lineage)) if row.lineage else ()
    if not any(a.id == row.id for a in attempts):
        attempts = tuple(sorted([*attempts, row], key=lambda a: (a.attempt, a.seq)))
    return Lineage(row.lineage or row.id, attempts)


def links(reg: Registry, rows: list[Row]) -> dict[str, tuple[str | None, str | None]]:
    """Run id -> (the attempt before it, the attempt after it) for each of ``rows``, in one query."""
    chains = reg.lineage_ids(list(dict.fromkeys(row.lineage or row.id for row in rows)))
    out: dict[str, tuple[str | None, str | None]] = {}
    for row in rows:
        ids = chains.get(row.lineage or row.id) or [row.id]
        i = ids.index(row.id) if row.id in ids else None
        out[row.id] = (None, None) if i is None else (ids[i - 1] if i > 0 else None,
                                                      ids[i + 1] if i + 1 < len(ids) else None)
    return out
