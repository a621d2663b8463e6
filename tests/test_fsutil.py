"""Writes that only create or replace regular files, reads that never block or overrun, all under tmp_path.

Devices are made with mknod inside the test's own temp dir (never the system's), FIFOs with mkfifo,
and the interrupted writer is a real process killed with SIGKILL in the middle of its write.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skill_server.core.errors import SkillError, ToolFailure, ToolInputError
from skill_server.core.fsutil import TEMP_PREFIX, read_text_bounded, resolve_path, write_bytes_atomic, write_text_atomic
from tests.conftest import REPO, cli_env
from tests.tmp_dirs import short_tmp_dir


def char_device(path: Path) -> Path:
    """A character device like /dev/zero (1, 5), created under the test's temp dir."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD (root)")
    return path


def unix_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


@pytest.fixture
def specials(tmp_path):
    """Every kind of non-regular file, plus symlinks to them."""
    made = {
        "device": char_device(tmp_path / "zero"),
        "fifo": tmp_path / "pipe",
        "directory": tmp_path / "folder",
        "socket": tmp_path / "sock",
    }
    os.mkfifo(made["fifo"])
    made["directory"].mkdir()
    sock = unix_socket(made["socket"])
    for name in ("device", "fifo", "directory"):
        link = tmp_path / f"link-to-{name}"
        link.symlink_to(made[name])
        made[f"link-to-{name}"] = link
    made["dangling"] = tmp_path / "dangling"
    made["dangling"].symlink_to(tmp_path / "nothing-here")
    yield made
    sock.close()


KIND_WORDS = {"device": "character device", "fifo": "FIFO", "directory": "directory", "socket": "socket",
              "link-to-device": "character device", "link-to-fifo": "FIFO", "link-to-directory": "directory",
              "dangling": "does not exist"}


@pytest.mark.parametrize("kind", list(KIND_WORDS))
@pytest.mark.parametrize("overwrite", [False, True])
def test_writes_never_replace_anything_but_a_regular_file(specials, kind, overwrite):
    path = specials[kind]
    before = os.lstat(path)
    with pytest.raises(ToolFailure) as err:
        write_text_atomic(path, "replacement\n", overwrite=overwrite, field="output_path")
    assert KIND_WORDS[kind] in str(err.value) and err.value.field == "output_path"
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    real.chmod(0o600)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    with pytest.raises(ToolFailure, match="exists, and this write only creates new files"):
        write_text_atomic(link, "new\n")
    assert write_text_atomic(link, "new\n", overwrite=True) == link
    assert link.is_symlink() and real.read_text() == "new\n" and stat.S_IMODE(real.stat().st_mode) == 0o600


def test_create_replace_and_no_clobber(tmp_path):
    target = tmp_path / "a" / "b" / "out.yaml"
    assert write_text_atomic(target, "one\n") == target
    assert target.read_text() == "one\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    with pytest.raises(ToolFailure, match="exists"):
        write_text_atomic(target, "two\n")
    write_text_atomic(target, "two\n", overwrite=True)
    assert target.read_text() == "two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.yaml"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_bytes_are_written_with_the_same_guarantees(specials, overwrite, tmp_path):
    png = bytes(range(256)) * 4
    target = tmp_path / "plots" / "a.png"
    assert write_bytes_atomic(target, png) == target and target.read_bytes() == png
    write_bytes_atomic(target, png[::-1], overwrite=True)
    assert target.read_bytes() == png[::-1]
    before = os.lstat(specials["fifo"])
    with pytest.raises(ToolFailure, match="FIFO"):
        write_bytes_atomic(specials["fifo"], png, overwrite=overwrite)
    assert os.lstat(specials["fifo"]).st_ino == before.st_ino


@pytest.mark.parametrize("make_path, needle, error", [
    (lambda d: d / ("x" * 256 + ".yaml"), "file name is 261 bytes, over the 255-byte limit", ToolInputError),
    (lambda d: d / ("é" * 128), "file name is 256 bytes", ToolInputError),
    (lambda d: Path("/proc/self/skill-test.yaml"), "under /proc, a kernel view", ToolInputError),
    (lambda d: Path("/sys/kernel/skill-test"), "under /sys", ToolInputError),
    (lambda d: str(d / "a\x00b"), "NUL character", ToolInputError),
    (lambda d: d / "file.txt" / "child.yaml", "not a directory", ToolFailure),
])
def test_impossible_paths_are_clear_errors(tmp_path, make_path, needle, error):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(error) as err:
        write_text_atomic(make_path(tmp_path), "text\n", overwrite=True, field="path")
    assert needle in str(err.value) and err.value.field == "path" and "\n" not in str(err.value)


def test_a_read_only_directory_is_a_clear_error():
    """Root ignores permission bits, so as root the write runs in a forked child that became ``nobody``."""
    base = Path(short_tmp_dir("ajs-ro-"))  # reachable by an unprivileged user
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        locked.chmod(0o555)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what happened through the pipe, never return into pytest
            try:
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                try:
                    write_text_atomic(locked / "out.yaml", "x", field="output_path")
                    outcome = "written"
                except SkillError as exc:
                    outcome = f"{type(exc).__name__} {exc}"
                except BaseException as exc:  # anything else is the failure this test looks for
                    outcome = f"UNEXPECTED {type(exc).__name__} {exc}"
                os.write(write_end, outcome.encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            outcome = pipe.read().decode()
        os.waitpid(pid, 0)
        assert outcome.startswith("ToolFailure output_path: cannot write "), outcome
        assert "Permission denied" in outcome and list(locked.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- temp files of an interrupted write ------------------------------------------------------------

STUCK_WRITER = """
import os, sys, time
from skill_server.core import fsutil
os.fsync = lambda fd: (sys.stdout.write("writing\\n"), sys.stdout.flush(), time.sleep(600))
fsutil.write_text_atomic(sys.argv[1], "x" * 3_000_000, overwrite=True)
"""


def start_stuck_writer(target: Path) -> subprocess.Popen[str]:
    """A real writer that stops inside write_text_atomic, after its temp file has all its bytes."""
    proc = subprocess.Popen([sys.executable, "-c", STUCK_WRITER, str(target)], stdout=subprocess.PIPE, text=True,
                            cwd=REPO, env=cli_env())
    assert proc.stdout and proc.stdout.readline() == "writing\n"
    return proc


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_leftovers_of_a_killed_writer_are_cleaned_by_the_next_write(tmp_path):
    live = start_stuck_writer(tmp_path / "a.yaml")
    dead = start_stuck_writer(tmp_path / "b.yaml")
    try:
        assert len(temp_files(tmp_path)) == 2
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=30)
        lookalike = tmp_path / ".ajs-tmp-notes.txt"  # not a name this module makes
        lookalike.write_text("mine")
        write_text_atomic(tmp_path / "c.yaml", "new\n")
        left = temp_files(tmp_path)
        assert lookalike in left and len(left) == 2  # the live writer's temp file and the look-alike stay
        assert any(p.stat().st_size == 3_000_000 for p in left)
    finally:
        live.kill()
        live.wait(timeout=30)
    write_text_atomic(tmp_path / "d.yaml", "new\n")
    assert temp_files(tmp_path) == [tmp_path / ".ajs-tmp-notes.txt"]


# --- bounded reads ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "socket", "link-to-fifo", "link-to-device"])
def test_reads_refuse_anything_but_a_regular_file_without_blocking(specials, kind):
    with pytest.raises(ToolInputError) as err:
        read_text_bounded(specials[kind], field="yaml", max_bytes=1024)
    text = str(err.value)
    assert KIND_WORDS[kind] in text and "not a regular file" in text and "not found" not in text
    assert err.value.field == "yaml"


def test_a_fifo_with_a_writer_is_still_refused(tmp_path):
    fifo = tmp_path / "fed"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"yes > '{fifo}'"], stdout=subprocess.DEVNULL)
    try:
        with pytest.raises(ToolInputError, match="FIFO"):
            read_text_bounded(fifo, field="yaml", max_bytes=1024)
    finally:
        writer.kill()
        writer.wait(timeout=30)


def test_missing_files_name_the_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ToolInputError) as err:
        read_text_bounded("sub/absent.yaml", field="yaml", max_bytes=10)
    assert str(err.value) == f"yaml: file not found: {tmp_path}/sub/absent.yaml"
    (tmp_path / "gone").symlink_to(tmp_path / "absent")
    with pytest.raises(ToolInputError, match="symbolic link to a file that does not exist"):
        read_text_bounded("gone", field="yaml", max_bytes=10)


def test_reads_stop_at_the_bound(tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 2048)
    with pytest.raises(ToolInputError, match="2048 bytes, over the 1024-byte limit for client scripts"):
        read_text_bounded(big, field="script", max_bytes=1024, what="client scripts")
    path, text = read_text_bounded(big, field="script", max_bytes=4096)
    assert path == big and text == "a" * 2048
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ToolInputError, match="not UTF-8"):
        read_text_bounded(tmp_path / "latin1.txt", field="script", max_bytes=100)


def test_proc_files_are_read_within_the_bound():
    """Kernel files report size 0; the read is still bounded by max_bytes."""
    with pytest.raises(ToolInputError, match="grew past the 16-byte limit"):
        read_text_bounded("/proc/self/status", field="f", max_bytes=16)


def test_resolve_path_states_its_base(tmp_path):
    assert resolve_path("x/../y.yaml", field="f", base=tmp_path) == tmp_path / "y.yaml"
    assert resolve_path(str(tmp_path / "z"), field="f", base="/elsewhere") == tmp_path / "z"
    assert resolve_path("~/q", field="f") == Path.home() / "q"
    for bad, needle in (("a\x00", "NUL"), ("  ", "empty path")):
        with pytest.raises(ToolInputError, match=needle):
            resolve_path(bad, field="f")


def test_a_fifo_given_to_a_tool_is_not_a_regular_file_and_nothing_hangs(tmp_path):
    """Through a real tool and the CLI: swarm_status reading a FIFO as its yaml."""
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "skill_server", "call", "swarm_status", f"yaml={fifo}",
                           "url=http://127.0.0.1:9"], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          timeout=60, check=False)
    assert time.monotonic() - started < 60
    assert proc.returncode == 1 and f"yaml: {fifo} is a FIFO (named pipe), not a regular file" in proc.stderr


def test_a_missing_file_named_the_way_scp_names_a_host_s_file_says_the_tools_read_this_machine(tmp_path: Path):
    """``gpu1:~/exp/exp.yaml`` given to a tool that reads local files (check_config, build_config, episode_cap):
    the refusal says it is a file on that ssh host and how to bring it here; a plain missing file says no more."""
    for given in ("gpu1:~/exp/exp.yaml", "gpu1:/srv/exp.yaml", "user@gpu-1.lab:/srv/e.yaml", "gpu1:/$(touch x)'"):
        with pytest.raises(ToolInputError) as err:
            read_text_bounded(tmp_path / given, field="yaml", max_bytes=1024)
        host = given.split(":", 1)[0]
        # the command to paste is quoted for a shell: a name with $( ) or quotes runs nothing here
        assert f"ssh host {host!r}" in str(err.value) and f"scp {shlex.quote(given)} ." in str(err.value), err.value
        assert err.value.field == "yaml"
    with pytest.raises(ToolInputError) as err:
        read_text_bounded(tmp_path / "plain.yaml", field="yaml", max_bytes=1024)
    assert "ssh host" not in str(err.value) and "file not found: " in str(err.value)
