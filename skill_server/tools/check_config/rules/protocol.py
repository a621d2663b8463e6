"""Rules on the swarm client itself: the episode protocol (begin, then end or abort on every path), calls that
stop or restart the engine every client shares, the client's own concurrency against the engine's cap, and
its per-episode timeout against the server's patience. All read statically (``analysis.script.episodes``,
``analysis.concurrency``); nothing is run.
"""

from __future__ import annotations

from collections.abc import Iterator

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.analysis.script.episodes import DEFAULT_DISCARD_TIMEOUT_S
from skill_server.analysis.script.model import EpisodeProtocol, Leak
from skill_server.analysis.values import is_num, show
from skill_server.tools.check_config.context import CAP_INPUTS, LintContext
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.registry import Report, rule

#: A pool this many times the engine's cap only queues (the rest wait in begin_episode's retries).
FAR_ABOVE = 2


def _protocol(ctx: LintContext) -> EpisodeProtocol | None:
    scan = ctx.session.scan
    return scan.episodes if scan is not None else None


def _at(ctx: LintContext, *lines: int | None) -> list[Location]:
    return [Location(file=ctx.script_file, line=line) for line in lines if line]


def _skip_handoffs(ctx: LintContext, rule_id: str, protocol: EpisodeProtocol) -> None:
    for h in protocol.handoffs:
        ctx.skip(rule_id, f"{h.function}() hands the episode begun at line {h.begin_line} to {h.callee}() (line "
                 f"{h.line}), which is not in this script: whether that ends or aborts it is not known")


def _leaks(ctx: LintContext, rule_id: str, exceptional: bool) -> Iterator[Leak]:
    protocol = _protocol(ctx)
    if protocol is None or not protocol.claims:
        return
    _skip_handoffs(ctx, rule_id, protocol)
    chosen: dict[tuple[str, int], Leak] = {}  # one finding per begun episode: a swallowed exception first
    for leak in protocol.leaks:
        if (leak.path == "exception") != exceptional:
            continue
        ident = (leak.function, leak.begin_line)
        if ident not in chosen or (leak.raised_at is not None and chosen[ident].raised_at is None):
            chosen[ident] = leak
    yield from chosen.values()


ABORT_FIX = ("wrap the work after begin_episode in try/except that calls abort_episode(episode_uuid) and then "
             "re-raises or logs (or end it in a finally block), so every path ends or aborts the episode")


@rule("episode-not-ended", "error", "A path leaves a begun episode neither ended nor aborted.", """
    Every begin_episode must be followed, on every path, by end_episode (the result) or abort_episode (give
    it back). A return, or the end of the function, with the episode still claimed leaves it holding one of
    the engine's worker loops until its discard_episode_timeout runs out, and the step waits for it; so
    does claiming a second episode before the first is closed. Checked per function, following if/else,
    loops, try and return; a call of one of the script's own functions that ends or aborts counts, and an
    episode id handed to code this scan does not read is not judged (skipped, with why).""", swarm_only=True,
      example="""
python
uuid, key = client.begin_episode()                               # before: returns with the episode claimed
if task is None: return
uuid, key = client.begin_episode()                               # after
if task is None: client.abort_episode(uuid); return""")
def episode_not_ended(ctx: LintContext, run: Run) -> Iterator[Report]:
    for leak in _leaks(ctx, "episode-not-ended", exceptional=False):
        how = {"return": f"returns at line {leak.line}", "end": f"reaches its end (line {leak.line})",
               "again": f"claims another episode at line {leak.line}"}[leak.path]
        yield Report(None, f"{leak.function}() begins an episode at line {leak.begin_line} and {how} without "
                     "end_episode or abort_episode: the episode stays claimed until its discard_episode_timeout, "
                     "holding an engine worker loop", _at(ctx, leak.begin_line, leak.line),
                     {"function": leak.function, "begin_line": leak.begin_line, "line": leak.line, "path": leak.path},
                     f"call abort_episode(episode_uuid) (or end_episode) before line {leak.line}; {ABORT_FIX}")


@rule("episode-leaks-on-exception", "warning", "An exception after begin_episode leaves the episode claimed.", """
    Any call between begin_episode and end_episode can raise (the agent, the reward, the network). When
    nothing catches it with an abort_episode, or a handler swallows it (except: pass) without ending or
    aborting, the claimed episode holds an engine worker loop until its discard_episode_timeout (240 s by
    default), and the step waits for it. AgentJet's own tutorial client has this shape.""", swarm_only=True,
      example="""
python
try:                                                  # before: except: pass keeps the episode claimed
    uuid, key = client.begin_episode(); out = run(task, key); client.end_episode(task, uuid, out)
except Exception: pass
uuid, key = client.begin_episode()                    # after
try: out = run(task, key)
except Exception: client.abort_episode(uuid); raise
client.end_episode(task, uuid, out)""")
def episode_leaks_on_exception(ctx: LintContext, run: Run) -> Iterator[Report]:
    for leak in _leaks(ctx, "episode-leaks-on-exception", exceptional=True):
        if leak.raised_at is not None:
            what = (f"an exception at line {leak.raised_at} is caught and the function goes on to line {leak.line} "
                    "without ending or aborting it")
            lines = (leak.begin_line, leak.raised_at)
        else:
            what = f"an exception from line {leak.line} leaves the function with it still claimed"
            lines = (leak.begin_line, leak.line)
        yield Report(None, f"{leak.function}() begins an episode at line {leak.begin_line}; {what}: it holds an engine "
                     "worker loop until its discard_episode_timeout", _at(ctx, *lines),
                     {"function": leak.function, "begin_line": leak.begin_line,
                      "raised_at": leak.raised_at or leak.line}, ABORT_FIX)


@rule("engine-control-in-client", "warning", "The client stops or force-restarts the engine every client shares.", """
    All swarm clients are peers: stop_engine() from any of them ends the training for all, and
    auto_sync_train_config_and_start_engine(..., force_restart=True) (or sync_train_code_from_dir with it)
    restarts the engine under the others, dropping their claimed episodes. Fine in a client that owns the
    run alone and means it; a hazard in one of several, or at the end of a loop that finishes early.
    A force_restart that is true only when an environment variable or option says so is reported with that
    condition; one known only at run time is skipped.""", swarm_only=True, example="""
python
client.stop_engine()          # before: ends everyone's training when this client's loop ends
# after: leave the engine running; stop it from the one place that owns the run""")
def engine_control_in_client(ctx: LintContext, run: Run) -> Iterator[Report]:
    protocol = _protocol(ctx)
    if protocol is None:
        return
    for call in protocol.engine_calls:
        if call.force is None:
            message = (f"line {call.line} calls stop_engine(): the engine stops for every client, and their claimed "
                       "episodes are dropped")
            fix = "remove it unless this client owns the run alone and means to end the training"
        elif not call.force.resolved:
            ctx.skip("engine-control-in-client", f"force_restart of {call.call}() at line {call.line} is known only "
                     f"at run time ({call.force.describe_unresolved()})")
            continue
        else:
            when = "" if call.force.value and not call.force.assumes else " when " + " or ".join(
                f"environment variable {a.name} is set" if a.kind == "env" else f"option {a.name} is given"
                if a.kind == "cli" else a.name for a in call.force.assumes)
            message = (f"line {call.line} calls {call.call}(..., force_restart={call.force.text}){when}: a running "
                       "engine is restarted under every client, dropping their claimed episodes")
            fix = "pass force_restart only from the one client that owns the run (and only to change its config)"
        yield Report(None, message, _at(ctx, call.line), {"call": call.call, "line": call.line}, fix)


@rule("discard-timeout-below-episode-timeout", "warning", "The client waits longer for an episode than the server "
      "keeps it claimed.", """
    begin_episode(discard_episode_timeout=T) (240 s by default in AgentJet's swarm client) is how long the
    server keeps a claimed episode without activity before it reverts it to the pool. A client that waits
    longer than T for one episode (future.result(timeout=...), asyncio.wait_for, or an agent run as a
    subprocess with timeout=...) can lose an episode that is still working: the server reverts it, and the
    end_episode that follows is refused ('has expired ... use a larger discard_episode_timeout').""",
      swarm_only=True, example="""
python
uuid, key = client.begin_episode()                        # before: 240 s, while the agent may run 600 s
subprocess.run(agent_cmd, timeout=600)
uuid, key = client.begin_episode(discard_episode_timeout=660)   # after""")
def discard_timeout_below_episode_timeout(ctx: LintContext, run: Run) -> Iterator[Report]:
    protocol = _protocol(ctx)
    if protocol is None or not protocol.claims or not protocol.timeouts:
        return
    short = _outlasted(ctx, protocol)
    timeouts = {t.line: t for t in protocol.timeouts}
    for (line, patience), claims in short.items():
        t = timeouts[line]
        seconds = t.seconds.value
        default = " (AgentJet's swarm client default)" if all(
            c.discard_timeout is None for c in protocol.claims if c.line in claims) else ""
        at = ", ".join(str(c) for c in claims)
        yield Report(None, f"begin_episode at line {at} keeps an episode {show(patience)} s without activity "
                     f"(discard_episode_timeout={show(patience)}{default}), but the client waits up to "
                     f"{show(seconds)} s at line {line} ({t.what}): a quiet episode is reverted before the client "
                     "gives up, and its end_episode is then refused", _at(ctx, claims[0], line),
                     {"discard_episode_timeout": patience, "client_timeout": seconds, "claims": claims},
                     f"pass discard_episode_timeout={_above(seconds)} (or more) to begin_episode at line {at}, or "
                     "shorten the client's own timeout")


def _outlasted(ctx: LintContext, protocol: EpisodeProtocol) -> dict[tuple[int, float], list[int]]:
    """(the longest timeout's line, the patience it outlasts) -> the claims it outlasts; unknown values skipped."""
    rule_id = "discard-timeout-below-episode-timeout"
    for t in protocol.timeouts:
        if not (t.seconds.resolved and is_num(t.seconds.value)):
            ctx.skip(rule_id, f"the timeout at line {t.line} is not a number known statically "
                     f"({t.seconds.describe_unresolved() if not t.seconds.resolved else show(t.seconds.value)})")
    short: dict[tuple[int, float], list[int]] = {}
    for claim in protocol.claims:
        given = claim.discard_timeout
        if given is not None and not (given.resolved and is_num(given.value)):
            ctx.skip(rule_id, f"discard_episode_timeout at line {claim.line} is not known statically")
            continue
        patience = given.value if given is not None else DEFAULT_DISCARD_TIMEOUT_S
        waits = [t for t in protocol.timeouts if t.seconds.resolved and is_num(t.seconds.value)
                 and (not t.functions or claim.function in t.functions) and t.seconds.value > patience]
        if waits:
            longest = max(waits, key=lambda t: t.seconds.value)
            short.setdefault((longest.line, patience), []).append(claim.line)
    return short


def _above(seconds: float) -> int:
    """The client's timeout with a minute of margin, in whole seconds."""
    return int(seconds) + 60


def _cap_and_bound(ctx: LintContext, run: Run, rule_id: str) -> tuple[int, int] | None:
    """(the engine's cap, this client's bound), or None after recording why they cannot be compared."""
    bound = ctx.client_bound
    if ctx.session.scan is None or (bound.threads is None and bound.pool is None and not
                                    (ctx.session.scan.pools or [])):
        return None  # no pool at all: nothing of the client's own to compare
    if bound.threads is None:
        ctx.skip(rule_id, f"the client's own concurrency is unknown: {bound.why}")
        return None
    facts = ctx.episode_cap(run, rule_id)
    return (facts.episode_cap, bound.threads) if facts is not None else None


@rule("client-pool-over-cap", "warning", "The client's pool is far larger than the engine's episode cap.", """
    The engine runs at most its episode cap at once, whatever the clients ask for. Threads of a client pool
    beyond it wait in begin_episode's retries ('No available episodes to claim') and hold the client's
    memory and connections; with several clients the overflow multiplies. Reported at twice the cap or
    more; the fix sizes the pool to the cap (or raises the engine's cap, see episode_cap's target).""",
      swarm_only=True, example="""
python
PeriodicDrainThreadPoolExecutor(workers=512, max_parallel=256)   # before: engine cap 64
PeriodicDrainThreadPoolExecutor(workers=64, max_parallel=64)     # after""")
def client_pool_over_cap(ctx: LintContext, run: Run) -> Iterator[Report]:
    pair = _cap_and_bound(ctx, run, "client-pool-over-cap")
    if pair is None:
        return
    cap, threads = pair
    if threads < FAR_ABOVE * cap:
        return
    bound = ctx.client_bound
    yield Report(KEYS["max_env_worker"], f"the client's pool ({bound.place}) runs up to {threads} episodes, "
                 f"{threads / cap:.1f}x the engine's cap of {cap}: {threads - cap} of its threads only wait to claim "
                 "an episode", [*_at(ctx, bound.line), *ctx.locate(run, *CAP_INPUTS)],
                 {"client_parallelism": threads, "engine_cap": cap},
                 f"size the pool to {cap} at line {bound.line} (what the engine runs at once), or raise the engine's "
                 f"cap (episode_cap with target={threads} gives the fewest engine changes)")


@rule("clients-bind-cap", "info", "This client runs fewer episodes at once than the engine allows.", """
    overwatch's gauge counts the episodes all clients hold. With this client alone it tops out at the
    client's own concurrency (its pool), below the engine's episode cap; that is by design when more
    clients join. The finding names the pool's line and the engine's cap, so the gauge's number is never a
    mystery.""", swarm_only=True, example="""
python
PeriodicDrainThreadPoolExecutor(workers=256, max_parallel=128)   # engine cap 256: the gauge stops at 128
PeriodicDrainThreadPoolExecutor(workers=256, max_parallel=256)   # or run two such clients""")
def clients_bind_cap(ctx: LintContext, run: Run) -> Iterator[Report]:
    pair = _cap_and_bound(ctx, run, "clients-bind-cap")
    if pair is None:
        return
    cap, threads = pair
    if threads >= cap:
        return
    bound = ctx.client_bound
    clients = -(-cap // threads)
    yield Report(None, f"this client runs at most {threads} episodes at once ({bound.place}), below the engine's cap "
                 f"of {cap}: alone, it holds the gauge at {threads}", _at(ctx, bound.line),
                 {"client_parallelism": threads, "engine_cap": cap},
                 f"to use the engine's {cap}, raise the pool to {cap} at line {bound.line} or run {clients} such "
                 "clients")
