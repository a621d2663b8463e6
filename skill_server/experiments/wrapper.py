"""The bash wrapper each experiment process runs in its tmux window.

The tool types one short line (``bash '<run_dir>/<role>.sh'``) into the window's shell; the wrapper then
changes directory, exports the environment explicitly, optionally waits (bounded) for a URL to answer,
runs the command through ``bash -c`` with all output appended to the log via ``tee``, and writes the
command's exit status to ``<role>.exit`` atomically. Ctrl-C reaches the command (same foreground process
group); the wrapper traps INT only to survive long enough to record the status.
"""

from __future__ import annotations

import shlex
from pathlib import Path

MARK = "[agentjet-swarm-skill]"

# Runs with the MCP server's interpreter (stdlib only). Any HTTP answer below 500 counts as "up";
# proxies are bypassed because the URL is normally the swarm server on this host.
_GATE_PY = """\
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


def render(*, exp_id: str, role: str, run_dir: Path, workdir: str, env: dict[str, str], path_prepend: str | None,
           virtual_env: str | None, command: str, log_path: str, gate_url: str | None, gate_timeout_s: int,
           gate_python: str) -> str:
    q = shlex.quote
    lines = [
        f"# {MARK} wrapper for experiment {exp_id}, process {role}. Generated; do not edit.",
        f"__ajs_run={q(str(run_dir))}",
        f"__ajs_log={q(log_path)}",
        f"__ajs_role={q(role)}",
        'echo $$ > "$__ajs_run/$__ajs_role.pid"',
        "__ajs_finish() {",
        '  printf \'%s\\n\' "$1" > "$__ajs_run/$__ajs_role.exit.tmp" && '
        'mv -f "$__ajs_run/$__ajs_role.exit.tmp" "$__ajs_run/$__ajs_role.exit"',
        '  exit "$1"',
        "}",
        f"__ajs_note() {{ printf '{MARK} %s\\n' \"$*\" | tee -a \"$__ajs_log\"; }}",
        "trap ':' INT",
        'mkdir -p -- "$(dirname -- "$__ajs_log")" || __ajs_finish 126',
        f"cd -- {q(workdir)} || {{ __ajs_note {q('cannot cd to ' + workdir)}; __ajs_finish 126; }}",
    ]
    for key, value in env.items():
        lines.append(f"export {key}={q(value)}")
    if path_prepend:
        lines.append(f'export PATH={q(path_prepend)}:"$PATH"')
    if virtual_env:
        lines.append(f"export VIRTUAL_ENV={q(virtual_env)}")
    if gate_url:
        gave_up = f"wait_for_url gave up after {gate_timeout_s} s: {gate_url}"
        lines += [
            ': > "$__ajs_run/$__ajs_role.gate"',
            f"__ajs_note {q(f'waiting up to {gate_timeout_s} s for {gate_url}')}",
            f"if ! {q(gate_python)} - {q(gate_url)} {int(gate_timeout_s)} <<'AJS_GATE_EOF'",
            _GATE_PY.rstrip("\n"),
            "AJS_GATE_EOF",
            "then",
            f"  __ajs_note {q(gave_up)}",
            "  __ajs_finish 124",
            "fi",
        ]
    lines += [
        f"__ajs_note \"start $(date -u +%Y-%m-%dT%H:%M:%SZ) role={role} cwd=$PWD\"",
        ': > "$__ajs_run/$__ajs_role.started"',
        f'bash -c {q(command)} 2>&1 | tee -i -a "$__ajs_log"',
        "__ajs_code=${PIPESTATUS[0]}",
        '__ajs_note "exit code $__ajs_code"',
        '__ajs_finish "$__ajs_code"',
    ]
    return "\n".join(lines) + "\n"


def typed_line(bash: str, script: Path) -> str:
    """What is typed into the window's shell (valid in bash, zsh, fish and sh)."""
    return f"{shlex.quote(bash)} {shlex.quote(str(script))}"
