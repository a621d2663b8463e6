"""The bash wrapper each experiment process runs as its tmux pane's command.

It records its pid, changes directory, exports the environment explicitly, optionally waits (bounded)
for a URL to answer, runs the command through ``bash -c`` with all output appended to the log via
``tee``, and writes the command's exit status to ``<role>.exit`` atomically (and, in case the disk is
full, to the tmux option ``@ajs_exit_<role>`` of its session, kept in the server's memory; the pane's
dead status has it too). SIGINT and SIGTERM reach
the command (same process group); the wrapper traps them only to live long enough to record the
status. Every value is shell-quoted; the command itself is passed as one quoted ``bash -c`` argument.
"""

from __future__ import annotations

import shlex

from .protocol import LOG_MARK, RUN_MARKER
from .rundir import EXIT, PID

# Runs with the host agent's interpreter (stdlib only). Any HTTP answer below 500 counts as "up";
# proxies are bypassed because the URL is normally the swarm server of this experiment.
GATE_PY = """\
import sys, time, urllib.error, urllib.request
url, limit = sys.argv[1], float(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
deadline = time.monotonic() + limit
while True:
    try:
        with opener.open(url, timeout=5):
            sys.exit(0)
    except urllib.error.HTTPError as err:
        if err.code < 500:
            sys.exit(0)
    except Exception:
        pass
    if time.monotonic() >= deadline:
        sys.exit(1)
    time.sleep(0.5)
"""


def render(exp_id: str, role: str, run_dir: str, workdir: str, env: dict[str, str], path_prepend: str | None,
           virtual_env: str | None, command: str, log_path: str, gate_url: str | None, gate_timeout_s: int,
           python: str) -> str:
    """The wrapper script of one process (the run's max time is enforced by its monitor, ``monitor``)."""
    q = shlex.quote
    lines = [
        "# %s wrapper for experiment %s, process %s. Generated; do not edit." % (LOG_MARK, exp_id, role),
        "__ajs_run=" + q(run_dir),
        "__ajs_log=" + q(log_path),
        "__ajs_role=" + q(role),
        'echo $$ > "$__ajs_run/$__ajs_role%s"' % PID,
        "__ajs_finish() {",
        '  { printf \'%%s\\n\' "$1" > "$__ajs_run/$__ajs_role%(exit)s.tmp" && '
        'mv -f "$__ajs_run/$__ajs_role%(exit)s.tmp" "$__ajs_run/$__ajs_role%(exit)s"; } 2>/dev/null || '
        'rm -f "$__ajs_run/$__ajs_role%(exit)s.tmp"' % {"exit": EXIT},
        # The exit code survives a full disk: tmux keeps it in memory (a session option of the pane's
        # session, read by observe when the file is missing) besides the pane's own dead status. Bounded:
        # a hung tmux server must not keep the wrapper from exiting.
        '  if [ -n "$TMUX_PANE" ]; then __ajs_t=; command -v timeout >/dev/null 2>&1 && __ajs_t="timeout 10"; '
        '$__ajs_t tmux set-option -t "$TMUX_PANE" %s "$1" >/dev/null 2>&1; fi' % exit_option(role),
        '  exit "$1"',
        "}",
        "__ajs_note() { printf '%s %%s\\n' \"$*\" | tee -a \"$__ajs_log\"; }" % LOG_MARK,
        "trap ':' INT TERM",
        'mkdir -p -- "$(dirname -- "$__ajs_log")" || __ajs_finish 126',
        "cd -- %s || { __ajs_note %s; __ajs_finish 126; }" % (q(workdir), q("cannot cd to " + workdir)),
    ]
    for key, value in env.items():
        lines.append("export %s=%s" % (key, q(value)))
    if path_prepend:
        lines.append('export PATH=%s:"$PATH"' % q(path_prepend))
    if virtual_env:
        lines.append("export VIRTUAL_ENV=" + q(virtual_env))
    if gate_url:
        gave_up = "wait_for_url gave up after %d s: %s" % (gate_timeout_s, gate_url)
        lines += [
            ': > "$__ajs_run/$__ajs_role.gate"',  # the markers: ``rundir.MARKERS``
            "__ajs_note " + q("waiting up to %d s for %s" % (gate_timeout_s, gate_url)),
            "if ! %s - %s %d <<'AJS_GATE_EOF'" % (q(python), q(gate_url), int(gate_timeout_s)),
            GATE_PY.rstrip("\n"),
            "AJS_GATE_EOF",
            "then",
            "  __ajs_note " + q(gave_up),
            "  __ajs_finish 124",
            "fi",
        ]
    lines += [
        '__ajs_note "start $(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ) role=%s cwd=$PWD"' % role,
        ': > "$__ajs_run/$__ajs_role.started"',
        'bash -c %s 2>&1 | tee -i -a "$__ajs_log"' % q(command),
        "__ajs_code=${PIPESTATUS[0]}",
        '__ajs_note "exit code $__ajs_code"',
        '__ajs_finish "$__ajs_code"',
    ]
    return "\n".join(lines) + "\n"


def exit_option(role: str) -> str:
    """The tmux user option (of the run's session) where the wrapper leaves ``role``'s exit code."""
    return "@ajs_exit_" + role


def pane_argv(exp_id: str, role: str, script: str) -> list[str]:
    """The pane's command: the wrapper under bash, with the run marker in its initial environment."""
    return ["env", "%s=%s/%s" % (RUN_MARKER, exp_id, role), "bash", script]
