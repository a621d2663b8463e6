"""Plain sentences explaining a swarm server's status (the ``diagnosis`` of ``swarm_status``).

Each sentence relates a live number to the cap or the engine state and says what to do: at the cap,
the knob that lifts it; far below, the clients; not ROLLING, why zero is expected; episodes near their
discard timeout; a step about to end; and for a server that cannot be read, what to check next (the
engine process, the experiment that launched it, the port it was given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skill_server.agentjet.swarm_api import ENGINE_STATES, ROUTE_POOL
from skill_server.tools.swarm_status.models import FAR_BELOW_FRACTION, NEAR_TARGET_FRACTION, NEARLY_SATURATED_FRACTION

if TYPE_CHECKING:
    from skill_server.agentjet.cap import EpisodeCapResult
    from skill_server.swarm.links import ExperimentLink
    from skill_server.tools.swarm_status.models import CapConfig, ServerStatus, StepProgress, WatchStats

_NOT_ROLLING_WHY = {
    "ENGINE.OFFLINE": "no training runs: a client has to sync a config and start the engine",
    "ENGINE.BOOTING": "the trainer is starting (Ray, model load, vLLM); this can take minutes",
    "ENGINE.ROLLING_POST": "this step's target is met, so the engine hands out no new episodes and waits for the "
                           "claimed ones to end before the weight update",
    "ENGINE.WEIGHT_SYNCING": "the trainer is updating the model between steps; leaving ROLLING wiped the episode "
                             "records, and claiming resumes when the next step sets ROLLING",
    "ENGINE.WEIGHT_EXPORTING": "the trainer is exporting weights; claiming resumes when it sets ROLLING again",
}
_KNOB = {
    "max_env_worker": "max_env_worker (the engine's thread pool)",
    "train_batch_size": "train_batch_size (only train_batch_size x num_repeat loops exist per step)",
    "clients": "the clients' combined concurrency",
}


def diagnose(s: ServerStatus, cfg: CapConfig | None) -> list[str]:
    """Plain sentences relating the live numbers to the cap and the engine state, in the order they are
    said: the engine's state, the gauge against the cap, the given config against the engine's targets,
    episodes near their discard timeout, the end of the step."""
    out = _engine_state(s) + _gauge(s)
    if cfg is not None:
        out += _config_mismatch(s, cfg, s.episode_cap is not None)
    return out + _near_timeout(s) + _step_end(s)


def _rolling(s: ServerStatus) -> bool:
    return s.engine_status == "ENGINE.ROLLING"


def _ending_step(s: ServerStatus) -> StepProgress | None:
    """The step's progress when its target is nearly met, else None."""
    step = s.step_progress
    return step if step is not None and step.fraction >= NEAR_TARGET_FRACTION else None


def _engine_state(s: ServerStatus) -> list[str]:
    """A state this tool does not know, or why a state other than ROLLING holds the gauge at zero."""
    state = s.engine_status
    out: list[str] = []
    if state is not None and state not in ENGINE_STATES:
        out.append(f"Engine status {state!r} is not one this tool knows ({', '.join(ENGINE_STATES)}); "
                   "the server may be a newer or older AgentJet.")
    if state in _NOT_ROLLING_WHY:
        running = s.running_episodes
        count = f"{running} running episodes" if running is not None else "no running episodes"
        zero = "zero is expected" if state != "ENGINE.ROLLING_POST" else "the gauge falls toward zero"
        out.append(f"The engine is {state}, not ROLLING: {_NOT_ROLLING_WHY[state]}. {count.capitalize()}; {zero}.")
        if s.engine_status_detail:
            out.append(f"The server's status detail: {s.engine_status_detail}")
    return out


def _gauge(s: ServerStatus) -> list[str]:
    """The gauge against the cap while episodes are handed out; without a cap, what would give one."""
    running, cap = s.running_episodes, s.episode_cap
    if running is None:
        if s.reachable and ROUTE_POOL in s.field_errors:
            return ["The running-episode count is unknown because the rollout pool information could not be read."]
        return []
    if cap is not None and (_rolling(s) or s.engine_status is None):
        return _gauge_against_cap(s, running, cap)
    if cap is None and _rolling(s):
        return [f"{running} episodes are claimed (overwatch's gauge). Give max_env_worker (with num_repeat and "
                "train_batch_size) or yaml to relate it to the episode cap."]
    return []


def _gauge_against_cap(s: ServerStatus, running: int, cap: EpisodeCapResult) -> list[str]:
    limit = cap.episode_cap
    if running > limit:
        return [f"The gauge ({running}) is above the computed cap ({limit}): the engine runs a different "
                "config than the cap inputs describe; check max_env_worker, num_repeat and train_batch_size "
                "against the engine's yaml_backup.yaml."]
    if running >= limit or (limit >= 20 and running >= 0.95 * limit):
        binding: list[str] = list(cap.binding) or ["max_env_worker"]
        knob = " and ".join(_KNOB[b] for b in binding)
        return [f"The gauge ({running}) is at the episode cap ({limit}), which {knob} sets: more clients "
                "will not raise it.", *_lifting_advice(cap, binding)]
    if running < FAR_BELOW_FRACTION * limit:
        return [_far_below_cap(s, running, limit)]
    share = f"{running / limit:.0%}"
    if running >= NEARLY_SATURATED_FRACTION * limit:
        return [f"The gauge ({running}) is close to the cap ({limit}, {share} of it): the clients nearly saturate "
                "the engine."]
    return [f"The gauge ({running}) is below the cap ({limit}): the clients run {share} of what the engine allows. "
            "Raise each client's parallelism or start more clients to use the rest."]


def _far_below_cap(s: ServerStatus, running: int, limit: int) -> str:
    """Far below the cap: the end of a step hands out fewer episodes; otherwise the clients are the limit."""
    step = _ending_step(s)
    if step is not None:
        return (f"The gauge ({running}) is far below the cap ({limit}), but this step is nearly done "
                f"({step.done}/{step.target} {step.counter}): fewer episodes are handed out near the "
                "end of a step.")
    if running == 0:
        return (f"No episode is claimed although the engine allows {limit}: no client is running episodes on this "
                "server now. Check that the clients are started and reach this URL (AJET_SWARM_URL), and their "
                "logs for begin_episode errors.")
    held = f"; {s.running_clients} client(s) hold the claimed episodes" if s.running_clients else ""
    return (f"The gauge ({running}) is far below the cap ({limit}): the engine has room, so the "
            f"clients are the limit{held}. Raise each client's parallelism (threads / concurrent "
            "episodes) or start more clients.")


def _near_timeout(s: ServerStatus) -> list[str]:
    """Episodes idle close to their discard timeout, with the stalest as the example."""
    if not s.episodes_near_timeout:
        return []
    stale = s.stalest_episodes[0] if s.stalest_episodes else None
    example = ""
    if stale is not None and stale.idle_s is not None and stale.discard_timeout_s is not None:
        share = f", {stale.idle_fraction:.0%}" if stale.idle_fraction is not None else ""
        example = (f" (closest: {stale.episode_uuid}, idle {stale.idle_s:g}s of {stale.discard_timeout_s:g}s{share}"
                   + (f", client {stale.client_uuid}" if stale.client_uuid else "") + ")")
    return [f"{s.episodes_near_timeout} running episode(s) are close to their discard timeout{example}: "
            "the server returns an episode to the pool once it is idle past the timeout (checked every "
            "10 s) and the client's late result is dropped. A stuck client or a very slow LLM call or "
            "environment is likely; raise discard_episode_timeout in begin_episode if such waits are normal."]


def _step_end(s: ServerStatus) -> list[str]:
    """How the current step ends: soon (a weight sync is near), or by agreement rather than a count."""
    if not _rolling(s):
        return []
    step = _ending_step(s)
    method = s.sample_collection_method
    if step is not None:
        return [f"The step's target is nearly met ({step.done} of {step.target} {step.counter.replace('_', ' ')}"
                f" for {method}): a weight sync is near, and the gauge will drop to zero during it."]
    if method and "agree_sync_weight" in method:
        return [f"With {method} the step ends when the clients agree to sync weights, not at an episode count."]
    return []


def _lifting_advice(cap: EpisodeCapResult, binding: list[str]) -> list[str]:
    """The cap's own suggestions for the bounds that bind."""
    picked: list[str] = []
    for sentence in cap.suggestions:
        if ("max_env_worker" in binding and sentence.startswith("To lift the cap")) \
                or ("train_batch_size" in binding and sentence.startswith("train_batch_size=")) \
                or ("clients" in binding and sentence.startswith("The clients together")):
            picked.append(sentence)
    return picked


def _config_mismatch(s: ServerStatus, cfg: CapConfig, have_cap: bool) -> list[str]:
    out = []
    if cfg.num_repeat and s.task_expected_num_repeat and cfg.num_repeat != s.task_expected_num_repeat:
        out.append(f"num_repeat is {cfg.num_repeat} in the given config but the engine expects "
                   f"{s.task_expected_num_repeat} episodes per task: the cap above may not match the running engine.")
    if cfg.train_batch_size and s.completed_task_target and cfg.train_batch_size != s.completed_task_target:
        out.append(f"train_batch_size is {cfg.train_batch_size} in the given config but the engine's task target "
                   f"is {s.completed_task_target}.")
    if cfg.sample_collection_method and s.sample_collection_method \
            and cfg.sample_collection_method != s.sample_collection_method:
        out.append(f"The config says {cfg.sample_collection_method} but the engine uses "
                   f"{s.sample_collection_method}.")
    filled = [name for name, mine, theirs in (
        ("num_repeat", cfg.num_repeat, s.task_expected_num_repeat),
        ("train_batch_size", cfg.train_batch_size, s.completed_task_target)) if not mine and theirs]
    if filled and have_cap:
        out.append(f"{' and '.join(filled)} for the cap came from the server's published targets.")
    return out



def watch_sentences(w: WatchStats) -> list[str]:
    if not w.samples_read:
        return [f"During the {w.duration_s:g}s watch the server never answered ({w.samples} tries)."]
    text = (f"Over {w.duration_s:g}s ({w.samples_read} of {w.samples} samples read) the gauge ranged "
            f"{w.running_min}-{w.running_max} (mean {w.running_mean:g})")
    if w.completions_per_minute is not None:
        text += f", with {w.completions_per_minute:g} episodes completed per minute"
    if w.steps_advanced:
        text += f", and {w.steps_advanced} training step(s) finished"
    return [text + ".", *_silent_spells(w)]


def _silent_spells(w: WatchStats) -> list[str]:
    """A server that stopped answering and then answered again within the watch was busy, not down."""
    out = []
    answered = [i for i, x in enumerate(w.series) if x.reachable]
    for before, after in zip(answered, answered[1:]):
        if after - before > 1:
            start, end = w.series[before + 1].t_s, w.series[after].t_s
            out.append(f"The server gave no answer from {start:g}s until {end:g}s into the watch, then answered "
                       "again: it was busy (for example in a blocking /start_engine), not down.")
    return out




def busy_answered(waited_s: float, timeout_s: float) -> str:
    """A server that answered only after the first read gave up: busy, not down."""
    return (f"The server answered only after about {waited_s:g}s (a {timeout_s:g}s read alone got no answer): it "
            "accepted the connection at once, so it was alive but busy, for example in AgentJet's /start_engine, "
            "which holds the whole server for about 5 s when the experiment's backup folder already exists.")


def unreachable_advice(url: str, kind: str, links: list[ExperimentLink], timeout_s: float) -> list[str]:
    """What to check next when a server could not be read (``kind`` from ``FetchError.kind``)."""
    place = url.split("://", 1)[-1]
    port = place.rsplit(":", 1)[-1] if ":" in place.split("/", 1)[0] else ("443" if url.startswith("https") else "80")
    port = port.split("/", 1)[0]
    out: list[str] = []
    if kind == "unreachable":
        out.append(f"Nothing answers at {place}: no swarm server listens there. Check that `ajet-swarm start` runs on "
                   f"that machine with port {port} (`--swarm-port`; AgentJet's default is 10086), e.g. "
                   f"`ss -ltnp | grep :{port}` there.")
    elif kind == "busy":
        out.append(f"{place} accepted the connection but gave no answer within {timeout_s:g}s: a server listens "
                   "there, alive but busy or stuck, not down. AgentJet's /start_engine holds the whole server for "
                   "about 5 s when the experiment's backup folder already exists (every restart with the same "
                   "experiment name): retry in a few seconds. If it stays silent it is stuck: read its log, and "
                   "restart `ajet-swarm start` if it never answers.")
    elif kind == "timeout":
        out.append(f"{place} gave no complete answer within {timeout_s:g}s: the server may be overloaded or stuck, "
                   "or a tunnel or firewall holds the connection. Check the server's log; retry with a larger "
                   "timeout_s.")
    else:
        out.append(f"Something answers at {place}, but not like an AgentJet swarm server: check the port "
                   "(AgentJet's default is 10086) and that no proxy or other service holds it.")
    for link in links:
        who = f" as its {link.role} process" if link.role else ""
        text = (f"Experiment {link.id} (tmux session {link.session}, {link.state}) launched this swarm server{who}, "
                f"on port {link.port} ({link.port_source}).")
        if link.state == "running":
            text += (f" Check that process: experiment_status {{\"id\": \"{link.id}\"}} shows its state, errors "
                     "and last log lines.")
        else:
            text += " That run has ended, so its server is gone: relaunch it to read the server again."
        out.append(text)
    if not links and kind == "unreachable":
        out.append("No experiment this skill launched was given this port; if the server was started by hand, "
                   "look at that terminal or its log.")
    return out
