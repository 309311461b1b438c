"""Run untrusted, model-generated Python in a contained child process (Linux only).

Holds `run_python(code, limits) -> SandboxResult`, the `Limits` it enforces, and
`isolation_report() -> Isolation`, which says which layers this machine grants. Code tasks
(MBPP, HumanEval) score completions only through `run_python`; generated code never runs in
the harness process. Tests: `python -m pytest tests/test_sandbox.py -q`.

How a run works: the harness writes the code to `main.py` in a fresh temporary directory and
starts this file as a trusted bootstrap (`python -I -S sandbox.py CONFIG`) in a new session.
The bootstrap enters the layers below, then `execv`s `python -I main.py`, so the untrusted code
is the session leader's own process. The harness keeps at most `max_output_bytes` per stream,
kills everything the run started once it exits or its wall-clock `timeout_s` passes, and
removes the directory.

Proof that a program ran to its end (`SandboxResult.reached_end`): a program can end with exit
status 0 without running its last lines (sys.exit, raise SystemExit, os._exit, an atexit or
excepthook that rewrites the status, a signal handler that exits), so the status alone cannot
say that the tests appended to a solution all ran. So, per run, the harness draws a random
token and puts it in a pipe whose only reader is the program (an inherited fd T; the harness
closes the write end before the program starts), and appends one line to main.py that copies
what fd T holds to fd R, a pipe the harness reads. `reached_end` is true only if R carried
exactly the token. The token is never in main.py, argv, the environment, the bootstrap's config
or any file; it exists in the harness's memory and in that pipe, nowhere else.
  * Guaranteed: a program that does not reach its last line, however it ends, cannot show the
    token unless it reads fd T itself. Reading main.py, the environment, argv,
    /proc/self/cmdline, other processes' cmdlines or the filesystem does not reveal it.
  * Not guaranteed: a program written to cheat can read fd T (its number is in main.py's last
    line) and copy the token to R itself, or make failing tests pass (objects whose __eq__ is
    always True, sys.settrace, patched builtins or test helpers): it runs in the same
    interpreter as the tests, so whatever the last line can do, it can do first. Without
    privilege_drop it may also read the harness's memory where ptrace is allowed. What this
    defeats is the accidental or lazy early exit, not an adversary aiming at this check.
  * Conservative: a program that closes or reuses fd T or R, or reads fd T without copying
    the token to R itself, fails the check even if its tests passed.

Isolated (layers are probed once per process; `isolation_report()` says which are active):
  * Limits, always: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_CORE=0, the
    wall-clock timeout, bounded captured output; stdin is /dev/null.
  * Environment, always: only PATH, HOME (the work dir), LANG, PYTHONHASHSEED and
    PYTHONDONTWRITEBYTECODE. `-I` also ignores PYTHON* variables (so PYTHONHASHSEED reaches
    only subprocesses the code starts), the user site and the script's directory.
  * Identity (root only): the code runs as a dedicated uid = gid = 2_000_000_000 + its pid, no
    supplementary groups, no capabilities, no_new_privs. It cannot signal the harness or other
    runs, and RLIMIT_NPROC (ignored for root) counts only its own processes, so a fork bomb
    stops at `max_procs`. Every process of that uid is killed, race-free through pidfds, before
    the pid is reaped, so no live process can share the uid of a later run.
  * Network (root, or non-root with user namespaces): new network and IPC namespaces, whose
    loopback is down: no socket reaches the harness, its model servers or anything else.
  * Filesystem (same condition): a private mount namespace in which every mount is read-only
    except the working directory, a fresh tmpfs of `max_disk_mb`. /tmp and /dev/shm are
    read-only too: `tempfile` falls back to the cwd, multiprocessing's locks fail.

Not isolated:
  * It is not a VM, container or seccomp filter: the whole kernel syscall surface is exposed.
  * World-readable files can be read (/etc, source trees, /proc/<pid>/cmdline of every
    process); filesystem Unix sockets with world-writable modes can still be connected to.
  * CPU time, caches and timing side channels are shared; no cgroup caps the run's total
    memory (RLIMIT_AS is per process: the ceiling is max_procs * memory_mb).
  * Without root the code keeps the harness's uid: it can signal the harness and read its
    /proc/<pid>/environ, and processes that call setsid() escape the process-group kill. Without user namespaces either, only the
    limits and the environment apply: it can also use the network and write where the user can.
  * No PID namespace: the code sees every process in /proc. If the harness itself is
    SIGKILLed, the code's process dies with it (PDEATHSIG) but its descendants may not.
  * The code runs under the first interpreter the sandbox uid can use (`Isolation.python`):
    `sys.executable`, else the system python3, which may lack the harness's packages.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

_UID_BASE = 2_000_000_000  # sandbox uid = base + pid: far above distro and subordinate-id ranges
_SETUP_FAILED = 125  # bootstrap exit code when a layer could not be entered
_DRAIN_S = 2.0  # after the kill, how long to wait for the pipes' last bytes
_KILL_S = 5.0  # how long killing a run's uid may take before the sandbox gives up
_SYSTEM_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")


@dataclass(frozen=True)
class Limits:
    """What one run may use. Per process unless the comment says otherwise."""

    timeout_s: float = 10.0  # wall clock for the whole run, then everything is SIGKILLed
    cpu_s: int = 10  # RLIMIT_CPU: SIGXCPU after cpu_s seconds of CPU, SIGKILL one second later
    memory_mb: int = 1024  # RLIMIT_AS: virtual address space, MiB
    max_procs: int = 32  # RLIMIT_NPROC for the run's uid (enforced only with privilege_drop)
    max_file_mb: int = 16  # RLIMIT_FSIZE: largest file a process may write, MiB
    max_output_bytes: int = 64_000  # bytes kept of stdout and of stderr each; the rest dropped
    max_disk_mb: int = 64  # size of the tmpfs working directory (readonly_filesystem only), MiB


@dataclass(frozen=True)
class SandboxResult:
    """How one run ended."""

    status: str  # "ok" exit 0, "error" nonzero exit, "timeout" killed at timeout_s,
    # "killed" ended by a signal (CPU or file-size limit, OOM killer, the code's own kill)
    returncode: int  # exit code, or minus the signal number (-9 after a timeout)
    stdout: str  # first max_output_bytes of stdout, decoded as UTF-8 with replacement
    stderr: str  # first max_output_bytes of stderr, decoded the same way
    seconds: float  # wall clock from start until the code exited or was killed
    truncated: bool = False  # True when stdout or stderr had more bytes than were kept
    reached_end: bool = False  # the program's last line ran: see the module docstring


@dataclass(frozen=True)
class Isolation:
    """Which layers a run gets on this machine; see the module docstring for each."""

    privilege_drop: bool  # runs as a dedicated unprivileged uid/gid (needs root)
    user_namespace: bool  # non-root: a user namespace grants the two namespace layers
    network_namespace: bool  # own network and IPC namespaces: no route anywhere
    readonly_filesystem: bool  # own mount namespace: all read-only, cwd a private tmpfs
    python: str | None  # interpreter that runs the code; None if the sandbox uid can use none
    notes: tuple[str, ...] = ()  # why each missing layer is missing


class SandboxSetupError(RuntimeError):
    """The sandbox itself failed (a layer, the interpreter, the kill): not the code's fault."""


def run_python(code: str, limits: Limits = Limits()) -> SandboxResult:
    """Run `code` as a script in a fresh sandbox and report how it ended.

    >>> run_python("print(6 * 7)").stdout
    '42\\n'
    """
    return _run(code, limits, isolation_report())


@functools.lru_cache(maxsize=1)
def isolation_report() -> Isolation:
    """Probe once per process, in a throwaway bootstrap, which layers this machine grants."""
    root = os.geteuid() == 0
    wanted = {
        "privilege_drop": root,
        "user_namespace": not root,
        "network_namespace": True,
        "readonly_filesystem": True,
    }
    pythons = list(dict.fromkeys([sys.executable, *filter(os.path.exists, _SYSTEM_PYTHONS)]))
    with tempfile.TemporaryDirectory(prefix="hybridbench-probe-") as tmp:
        script, workdir = _prepare(os.path.realpath(tmp), "import json, math, collections\n")
        cfg = {"mode": "probe", **wanted, "workdir": workdir, "script": script}
        cfg |= {"pythons": pythons, "limits": asdict(Limits())}
        done = subprocess.run(
            _bootstrap_argv(cfg),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env=_sandbox_env(workdir),
            start_new_session=True,
        )
    try:
        found = json.loads(done.stdout)
    except ValueError:
        found = {}  # the probe crashed: every layer counts as missing, and no run starts
    why = found.get("why", {})
    active = {name: ask and why.get(name) == "" for name, ask in wanted.items()}
    notes = [
        f"{name}: {why.get(name, done.stderr.strip() or 'probe failed')}"
        for name, ask in wanted.items()
        if ask and not active[name]
    ]
    if not root:
        notes.append("privilege_drop: needs root; the code runs as the harness's uid")
    if found.get("python") is None:
        notes.append(f"python: none of {pythons} runs as the sandbox uid")
    elif found["python"] != sys.executable:  # e.g. a venv whose base lives under /root
        notes.append(f"python: {sys.executable} is not usable by the sandbox uid")
    return Isolation(**active, python=found.get("python"), notes=tuple(notes))


# ---- Harness side --------------------------------------------------------------------------


def _run(code: str, limits: Limits, iso: Isolation) -> SandboxResult:
    """One run under the layers `iso` asks for (tests pass a reduced `iso` to check fallbacks)."""
    if iso.python is None:
        raise SandboxSetupError("no interpreter usable by the sandbox: " + "; ".join(iso.notes))
    if not hasattr(os, "pidfd_open"):
        raise SandboxSetupError("the sandbox needs os.pidfd_open (Linux >= 5.3, Python >= 3.9)")
    root = os.path.realpath(tempfile.mkdtemp(prefix="hybridbench-sandbox-"))
    try:
        script, workdir = _prepare(root, code)
        layers = {name: getattr(iso, name) for name in _LAYERS}
        cfg = {"mode": "run", **layers, "workdir": workdir, "script": script}
        cfg |= {"python": iso.python, "limits": asdict(limits), "parent": os.getpid()}
        return _supervise(cfg, limits)
    finally:
        _remove_tree(root)


def _prepare(root: str, code: str) -> tuple[str, str]:
    """Write the code to `root/main.py` and create the empty working directory `root/work`."""
    os.chmod(root, 0o711)  # the code may open main.py and work/ by name, not list the dir
    script, workdir = os.path.join(root, "main.py"), os.path.join(root, "work")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    os.chmod(script, 0o600)
    os.mkdir(workdir, 0o700)
    return script, workdir


def _supervise(cfg: dict, limits: Limits) -> SandboxResult:
    """Start the bootstrap, pump its output until it exits or times out, kill the rest."""
    token = secrets.token_hex(16).encode()  # kept here and in the token pipe, nowhere else
    status_r, status_w = os.pipe()  # bootstrap reports setup failures here; EOF at exec
    report_r, report_w = os.pipe()  # main.py's last line copies the token here
    token_r = _pipe_holding(token)
    child_fds = (status_w, token_r, report_w)
    start = time.monotonic()
    try:
        with open(cfg["script"], "a", encoding="utf-8") as f:
            f.write(_epilogue(token_r, report_w))
        proc = subprocess.Popen(
            _bootstrap_argv({**cfg, "status_fd": status_w}),
            pass_fds=child_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_sandbox_env(cfg["workdir"]),
            cwd=os.path.dirname(cfg["workdir"]),
            start_new_session=True,
        )
    except BaseException:
        os.close(status_r)
        os.close(report_r)
        raise
    finally:
        for fd in child_fds:  # the run's copies: EOF comes once the run has closed them
            os.close(fd)
    with proc, open(status_r, "rb") as status, open(report_r, "rb") as report:
        pipes = {
            proc.stdout.fileno(): _Capture(limits.max_output_bytes),
            proc.stderr.fileno(): _Capture(limits.max_output_bytes),
            status.fileno(): _Capture(4096),
            report.fileno(): _Capture(len(token)),
        }
        try:
            exit_fd = os.pidfd_open(proc.pid)  # readable once the code exits; does not reap it
            try:
                exited = _pump(pipes, start + limits.timeout_s, exit_fd)
            finally:
                os.close(exit_fd)
            seconds = time.monotonic() - start
        finally:
            _kill_run(proc.pid, cfg["privilege_drop"])  # before reaping: see _kill_run
        _pump(pipes, time.monotonic() + _DRAIN_S)
        returncode = proc.wait()
    out, err, setup, proof = pipes.values()
    if setup.kept:
        raise SandboxSetupError(setup.text())
    status = _status(returncode, timed_out=not exited)
    truncated = bool(out.dropped or err.dropped)
    reached_end = proof.kept == token and not proof.dropped
    return SandboxResult(
        status, returncode, out.text(), err.text(), seconds, truncated, reached_end
    )


def _pipe_holding(data: bytes) -> int:
    """Read end of a pipe that holds `data` and whose write end is already closed."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)  # far below the pipe's buffer: never blocks
    finally:
        os.close(write_fd)
    return read_fd


def _epilogue(token_fd: int, report_fd: int) -> str:
    """main.py's last line: hand the token from `token_fd` to `report_fd`. It runs only if every
    line before it ran; it binds no name and needs no import statement the code could shadow."""
    os_module = "__import__('os')"
    return f"\n{os_module}.write({report_fd}, {os_module}.read({token_fd}, 64))\n"


def _status(returncode: int, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    return "ok" if returncode == 0 else "killed" if returncode < 0 else "error"


class _Capture:
    """The first `limit` bytes of a stream; later bytes are counted and dropped."""

    def __init__(self, limit: int) -> None:
        self.kept, self.limit, self.dropped = bytearray(), limit, 0

    def add(self, chunk: bytes) -> None:
        room = max(0, self.limit - len(self.kept))
        self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


def _pump(pipes: dict[int, _Capture], deadline: float, exit_fd: int | None = None) -> bool:
    """Copy pipe bytes into `pipes` until `exit_fd` turns readable (the process exited) or,
    without one, until every pipe is at EOF. False if `deadline` passed first."""
    with selectors.DefaultSelector() as sel:
        for fd in pipes:
            sel.register(fd, selectors.EVENT_READ)
        if exit_fd is not None:
            sel.register(exit_fd, selectors.EVENT_READ)
        while exit_fd is not None or sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for key, _ in sel.select(remaining):
                if key.fd == exit_fd:
                    return True
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    pipes[key.fd].add(chunk)
                else:
                    sel.unregister(key.fd)
    return True


def _kill_run(pid: int, dropped: bool) -> None:
    """SIGKILL everything the run started. Call it before reaping `pid`: while the zombie holds
    the pid, neither its process group id nor the uid derived from it can be reused."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if dropped:  # the uid also catches processes that left the group with setsid()
        _kill_uid(_UID_BASE + pid)


def _kill_uid(uid: int) -> None:
    """SIGKILL every live process of `uid`, scanning again until none is left (fork races)."""
    give_up = time.monotonic() + _KILL_S
    while pids := [pid for pid in _pids() if _owner(pid) == uid]:
        if time.monotonic() > give_up:
            raise SandboxSetupError(f"processes {pids} of sandbox uid {uid} survived SIGKILL")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                fd = os.pidfd_open(pid)
                try:  # checked after pinning the process, so a recycled pid is never signalled
                    if _owner(pid) == uid:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                finally:
                    os.close(fd)
        time.sleep(0.005)  # let the killed exit before the next scan


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _owner(pid: int) -> int | None:
    """Real uid of a live process; None once it is gone or a zombie (a zombie runs nothing)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return None
    if fields.get("State", "Z").split()[0] in ("Z", "X"):
        return None
    return int(fields["Uid"].split()[0])


def _remove_tree(path: str) -> None:
    try:
        shutil.rmtree(path)
    except OSError:  # without root the code may have taken permissions off its own files
        for dirpath, dirnames, _ in os.walk(path):
            for name in dirnames:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(dirpath, name), 0o700)
        shutil.rmtree(path, ignore_errors=True)


def _sandbox_env(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _bootstrap_argv(cfg: dict) -> list[str]:
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), json.dumps(cfg)]


# ---- Child side: the bootstrap, trusted code that runs before the untrusted exec -----------

_LAYERS = ("privilege_drop", "user_namespace", "network_namespace", "readonly_filesystem")
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWNET = 0x20000, 0x8000000, 1 << 28, 1 << 30
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 1, 2, 4, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
# Per-mount flags a read-only remount repeats: inside a user namespace, dropping one is EPERM.
_KEPT_FLAGS = {
    "nosuid": 2,
    "nodev": 4,
    "noexec": 8,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38


def _bootstrap(cfg: dict) -> None:
    """Enter the layers, set the limits, drop privileges, then exec the untrusted code."""
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)  # closed by exec: EOF with no bytes means success
    try:
        uid = _UID_BASE + os.getpid() if cfg["privilege_drop"] else None
        if uid is not None:
            _hand_over(cfg, uid)
        failed = {name: why for name, why in _isolate(cfg, uid).items() if why}
        if failed:
            raise OSError(f"isolation layers failed: {failed}")
        _set_limits(cfg["limits"])
        if uid is not None:
            _drop_privileges(uid)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)  # no setuid binary can give privileges back
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # set after the uid change, which clears it
        if os.getppid() != cfg["parent"]:
            raise OSError("the harness exited during setup")
        os.chdir(cfg["workdir"])
        os.execv(cfg["python"], [cfg["python"], "-I", cfg["script"]])
    except BaseException as exc:
        os.write(status_fd, f"sandbox setup failed: {type(exc).__name__}: {exc}".encode())
        os._exit(_SETUP_FAILED)


def _probe(cfg: dict) -> None:
    """Try every layer without failing; print which worked and which interpreter runs code."""
    uid = _UID_BASE + os.getpid() if cfg["privilege_drop"] else None
    why = {}
    if uid is not None:  # same order as _bootstrap: files are handed over before the mounts
        why["privilege_drop"] = _attempt(lambda: _hand_over(cfg, uid))
    why |= _isolate(cfg, uid)
    if why.get("privilege_drop") == "":
        why["privilege_drop"] = _attempt(lambda: _drop_privileges(uid))
    python = next((p for p in cfg["pythons"] if _runs(p, cfg)), None)
    print(json.dumps({"why": why, "python": python}))


def _runs(python: str, cfg: dict) -> bool:
    """Whether `python` can run the probe script from the work dir as the current uid."""
    argv = [python, "-I", cfg["script"]]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(argv, cwd=cfg["workdir"], capture_output=True, timeout=60)
        return done.returncode == 0
    return False


def _hand_over(cfg: dict, uid: int) -> None:
    """Give main.py (0600) and work/ (0700) to the run's uid: no other run can read them."""
    for path in (cfg["script"], cfg["workdir"]):
        os.chown(path, uid, uid)


def _isolate(cfg: dict, uid: int | None) -> dict[str, str]:
    """Enter the namespaces `cfg` asks for, in order. Returns {layer: "" or why it failed}."""
    workdir, disk_mb = cfg["workdir"], cfg["limits"]["max_disk_mb"]
    steps: dict[str, Callable[[], None]] = {
        "user_namespace": _enter_user_namespace,
        "network_namespace": lambda: _unshare(_CLONE_NEWNET | _CLONE_NEWIPC),
        "readonly_filesystem": lambda: _private_filesystem(workdir, uid, disk_mb),
    }
    return {name: _attempt(step) for name, step in steps.items() if cfg[name]}


def _attempt(step: Callable[[], None]) -> str:
    """Run one setup step; "" if it worked, else why not."""
    try:
        step()
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return ""


def _enter_user_namespace() -> None:
    uid, gid = os.getuid(), os.getgid()
    _unshare(_CLONE_NEWUSER)
    # Map our own ids, so files keep their owner inside; setgroups must be denied before gid_map.
    for name, text in (
        ("uid_map", f"{uid} {uid} 1"),
        ("setgroups", "deny"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _private_filesystem(workdir: str, uid: int | None, disk_mb: int) -> None:
    """Make every mount read-only for this process tree, except `workdir`: a fresh tmpfs."""
    _unshare(_CLONE_NEWNS)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing below propagates to the host
    owner = "" if uid is None else f",uid={uid},gid={uid}"
    _mount("tmpfs", workdir, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={disk_mb}m,mode=0700{owner}")
    for point, options in _mount_table():
        if point == workdir or "ro" in options:
            continue
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID
        for name, flag in _KEPT_FLAGS.items():
            if name in options:
                flags |= flag
        with contextlib.suppress(FileNotFoundError):  # shadowed by a later mount: unreachable
            _mount(None, point, None, flags)


def _mount_table() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) for each line of /proc/self/mountinfo."""
    table = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            table.append((point, set(fields[5].split(","))))
    return table


def _set_limits(limits: dict) -> None:
    mib = 1 << 20
    wanted = (
        (resource.RLIMIT_CPU, limits["cpu_s"], limits["cpu_s"] + 1),
        (resource.RLIMIT_AS, limits["memory_mb"] * mib, limits["memory_mb"] * mib),
        (resource.RLIMIT_NPROC, limits["max_procs"], limits["max_procs"]),
        (resource.RLIMIT_FSIZE, limits["max_file_mb"] * mib, limits["max_file_mb"] * mib),
        (resource.RLIMIT_CORE, 0, 0),
    )
    for kind, soft, hard in wanted:
        ceiling = resource.getrlimit(kind)[1]  # without root a hard limit cannot be raised
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(kind, (soft, hard))


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise OSError("privileges were not dropped: setuid(0) still succeeds")


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return libc


def _checked(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _unshare(flags: int) -> None:
    _checked(_libc().unshare(flags), f"unshare({flags:#x})")


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    def c(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    _checked(_libc().mount(c(source), c(target), c(fstype), flags, c(data)), f"mount {target}")


def _prctl(option: int, value: int) -> None:
    _checked(_libc().prctl(option, value, 0, 0, 0), f"prctl({option})")


if __name__ == "__main__":
    _config = json.loads(sys.argv[1])
    (_probe if _config["mode"] == "probe" else _bootstrap)(_config)
