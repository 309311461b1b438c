"""The sandbox's harness side: start a bootstrap, capture its output, prove its end, kill the rest.

Holds the public types (`Limits`, `SandboxResult`, `Isolation`, `SandboxSetupError`),
`run_python` (one program) and `isolation_report`, plus the pieces `harness.sandbox.tested`
reuses to run a solution and its tests as two processes: `start`, `pump`, `stop`, `result`.
How a run works and what it guarantees: `harness.sandbox`'s docstring.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from harness.sandbox import bootstrap
from harness.sandbox.bootstrap import LAYERS, UID_BASE
from harness.sandbox.rootfs import root_plan

_DRAIN_S = 2.0  # after the kill, how long to wait for the pipes' last bytes
_KILL_S = 5.0  # how long killing a run's uid may take before the sandbox gives up
_SYSTEM_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")
_PROBE_CODE = "import json, math, collections\nprint(json.dumps(math.gcd(12, 18)))\n"


@dataclass(frozen=True)
class Limits:
    """What one run may use. Per process unless the comment says otherwise."""

    timeout_s: float = 10.0  # wall clock for the whole run, then everything is SIGKILLed
    cpu_s: int = 10  # RLIMIT_CPU: SIGXCPU after cpu_s seconds of CPU, SIGKILL one second later
    memory_mb: int = 1024  # RLIMIT_AS: virtual address space, MiB
    max_procs: int = 32  # RLIMIT_NPROC for the run's uid (enforced only with privilege_drop)
    max_file_mb: int = 16  # RLIMIT_FSIZE: largest file a process may write, MiB
    max_output_bytes: int = 64_000  # bytes kept of stdout and of stderr each; the rest dropped
    max_disk_mb: int = 64  # size of the tmpfs working directory (private_root only), MiB


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
    reached_end: bool = False  # the program's last line ran: see the package docstring


@dataclass(frozen=True)
class Isolation:
    """Which layers a run gets on this machine; see the package docstring for each."""

    privilege_drop: bool  # runs as a dedicated unprivileged uid/gid (needs root)
    user_namespace: bool  # non-root: a user namespace grants the two namespace layers
    network_namespace: bool  # own network and IPC namespaces: no route anywhere
    private_root: bool  # own mount and PID namespaces: an allow-list root (rootfs.py), own /proc
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
    """Probe once per process which layers this machine grants and which interpreter runs code;
    where a namespace layer is missing, say so once on stderr (runs go on without it)."""
    root = os.geteuid() == 0
    wanted = {
        "privilege_drop": root,
        "user_namespace": not root,
        "network_namespace": True,
        "private_root": True,
    }
    why = _probe_layers(wanted)
    active = {name: ask and why.get(name) == "" for name, ask in wanted.items()}
    notes = [f"{name}: {why.get(name)}" for name, ask in wanted.items() if ask and not active[name]]
    if not root:
        notes.append("privilege_drop: needs root; the code runs as the harness's uid")
    iso = _with_python(Isolation(**active, python=None, notes=tuple(notes)))
    missing = [name for name in ("network_namespace", "private_root") if not getattr(iso, name)]
    if missing:
        print(
            f"warning: the code sandbox runs without {' and '.join(missing)} on this machine"
            f" ({'; '.join(iso.notes)}); code is scored under the other layers only",
            file=sys.stderr,
        )
    return iso


def _probe_layers(wanted: dict[str, bool]) -> dict[str, str]:
    """{layer: "" if a throwaway bootstrap could enter it, else why not}."""
    with tempfile.TemporaryDirectory(prefix="hybridbench-probe-") as tmp:
        script, workdir = prepare(os.path.realpath(tmp), "")
        cfg = {"mode": "probe", **wanted, "workdir": workdir, "script": script}
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
        return json.loads(done.stdout)["why"]
    except (ValueError, KeyError):  # the probe crashed: every layer counts as missing
        return dict.fromkeys(wanted, done.stderr.strip()[-500:] or "probe failed")


def _with_python(iso: Isolation) -> Isolation:
    """`iso` with the first interpreter that runs a probe program under its layers. Where none
    runs inside the private root, the private root counts as missing and the search goes on
    without it."""
    pythons = list(dict.fromkeys([sys.executable, *filter(os.path.exists, _SYSTEM_PYTHONS)]))
    failures = []
    for python in pythons:
        candidate = replace(iso, python=python)
        try:
            ran = _run(_PROBE_CODE, Limits(), candidate)
        except SandboxSetupError as exc:
            failures.append(f"{python}: {exc}")
            continue
        if ran.status == "ok" and ran.stdout == "6\n":
            if python == sys.executable:
                return candidate
            note = f"python: {sys.executable} does not run in the sandbox"
            return replace(candidate, notes=(*iso.notes, note))
        failures.append(f"{python}: {ran.status} {ran.stderr.strip()[-300:]}")
    if iso.private_root:
        note = f"private_root: no interpreter starts in it ({'; '.join(failures)})"
        return _with_python(replace(iso, private_root=False, notes=(*iso.notes, note)))
    note = f"python: none of {pythons} runs as the sandbox uid ({'; '.join(failures)})"
    return replace(iso, python=None, notes=(*iso.notes, note))


def _run(code: str, limits: Limits, iso: Isolation) -> SandboxResult:
    """One run under the layers `iso` asks for (tests pass a reduced `iso` to check fallbacks)."""
    check_usable(iso)
    root = os.path.realpath(tempfile.mkdtemp(prefix="hybridbench-sandbox-"))
    try:
        child = start(run_config(root, code, limits, iso), limits)
        try:
            exited = pump_until_exit(child, child.start + limits.timeout_s)
            seconds = time.monotonic() - child.start
        finally:
            stop([child])
        return result(child, timed_out=not exited, seconds=seconds)
    finally:
        remove_tree(root)


def check_usable(iso: Isolation) -> None:
    """Raise SandboxSetupError if no run can start on this machine."""
    if iso.python is None:
        raise SandboxSetupError("no interpreter usable by the sandbox: " + "; ".join(iso.notes))
    if not hasattr(os, "pidfd_open"):
        raise SandboxSetupError("the sandbox needs os.pidfd_open (Linux >= 5.3, Python >= 3.9)")


def run_config(
    root: str, code: str, limits: Limits, iso: Isolation, hide: tuple[str, ...] = ()
) -> dict:
    """The bootstrap's config for running `code` from `root` (written there as main.py). With
    private_root, folders in `hide` are also covered where they are inside the new root."""
    script, workdir = prepare(root, code)
    layers = {name: getattr(iso, name) for name in LAYERS}
    cfg = {"mode": "run", **layers, "workdir": workdir, "script": script, "python": iso.python}
    if iso.private_root:
        try:
            plan = root_plan(iso.python)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise SandboxSetupError(f"sandbox setup failed: {exc}") from None
        cfg["newroot"] = os.path.join(root, "root")
        os.mkdir(cfg["newroot"], 0o700)  # a mount point, in the run's mount namespace only
        cfg |= {"python": plan.executable, "root": plan.as_config()}
        cfg["hide"] = [os.path.realpath(folder) for folder in hide]
    return cfg | {"limits": asdict(limits), "parent": os.getpid()}


def prepare(root: str, code: str) -> tuple[str, str]:
    """Write the code to `root/main.py` and create the empty working directory `root/work`."""
    os.chmod(root, 0o711)  # the code may open main.py and work/ by name, not list the dir
    script, workdir = os.path.join(root, "main.py"), os.path.join(root, "work")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    os.chmod(script, 0o600)
    os.mkdir(workdir, 0o700)
    return script, workdir


class Capture:
    """The first `limit` bytes of a stream (a pipe `pump` reads); later bytes are counted and
    dropped."""

    def __init__(self, limit: int) -> None:
        self.kept, self.limit, self.dropped = bytearray(), limit, 0

    def add(self, chunk: bytes) -> None:
        room = max(0, self.limit - len(self.kept))
        self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


@dataclass
class Child:
    """One started bootstrap: its process, the pipes the harness reads and its secret token."""

    proc: subprocess.Popen  # the bootstrap, then (after exec) the code itself
    token: bytes  # the run's proof-of-end token: here and in the token pipe, nowhere else
    out: Capture  # stdout
    err: Capture  # stderr
    setup: Capture  # the bootstrap's setup failure, empty when setup worked
    proof: Capture  # what main.py's last line copied from the token pipe
    dropped: bool  # runs as its own uid: killing it also kills every process of that uid
    start: float  # time.monotonic() just before the start
    pipes: dict[int, Capture] = field(default_factory=dict)  # every capture above, by its fd


def start(cfg: dict, limits: Limits, pass_fds: tuple[int, ...] = ()) -> Child:
    """Append the proof-of-end line to cfg's script and start its bootstrap. `pass_fds` are
    inherited by the code (the caller closes its own copies)."""
    token = secrets.token_hex(16).encode()  # kept here and in the token pipe, nowhere else
    status_r, status_w = os.pipe()  # bootstrap reports setup failures here; EOF at exec
    report_r, report_w = os.pipe()  # main.py's last line copies the token here
    token_r = pipe_holding(token)
    child_fds = (status_w, token_r, report_w)
    begin = time.monotonic()
    try:
        with open(cfg["script"], "a", encoding="utf-8") as f:
            f.write(_epilogue(token_r, report_w))
        proc = subprocess.Popen(
            _bootstrap_argv({**cfg, "status_fd": status_w}),
            pass_fds=child_fds + tuple(pass_fds),
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
    captures = (Capture(limits.max_output_bytes), Capture(limits.max_output_bytes))
    setup, proof = Capture(4096), Capture(len(token))
    child = Child(proc, token, *captures, setup, proof, cfg["privilege_drop"], begin)
    fds = (proc.stdout.fileno(), proc.stderr.fileno(), status_r, report_r)
    child.pipes = dict(zip(fds, (child.out, child.err, child.setup, child.proof), strict=True))
    return child


def pump_until_exit(
    child: Child, deadline: float, others: dict[int, Capture] | None = None
) -> bool:
    """Capture `child`'s pipes (and `others`) until it exits; False if `deadline` passed first."""
    exit_fd = os.pidfd_open(child.proc.pid)  # readable once the code exits; does not reap it
    try:
        return pump({**child.pipes, **(others or {})}, deadline, exit_fd)
    finally:
        os.close(exit_fd)


def stop(children: list[Child]) -> None:
    """Kill every process the runs started, read their pipes' last bytes, reap and close."""
    try:
        for child in children:
            _kill_run(child.proc.pid, child.dropped)  # before reaping: see _kill_run
    finally:
        every = {fd: c for child in children for fd, c in child.pipes.items()}
        pump(every, time.monotonic() + _DRAIN_S)
        for child in children:
            child.proc.wait()
            child.proc.stdout.close()  # through their file objects: closed once, never again
            child.proc.stderr.close()
            for fd in list(child.pipes)[2:]:  # status and report: plain fds
                os.close(fd)


def result(child: Child, timed_out: bool, seconds: float) -> SandboxResult:
    """How a stopped child's run ended; SandboxSetupError if its bootstrap failed."""
    if child.setup.kept:
        raise SandboxSetupError(child.setup.text())
    returncode = child.proc.returncode
    status = _status(returncode, timed_out)
    truncated = bool(child.out.dropped or child.err.dropped)
    reached_end = child.proof.kept == child.token and not child.proof.dropped
    out, err = child.out.text(), child.err.text()
    return SandboxResult(status, returncode, out, err, seconds, truncated, reached_end)


def pipe_holding(data: bytes) -> int:
    """Read end of a pipe that holds `data` (up to 1 MiB) and whose write end is closed."""
    read_fd, write_fd = os.pipe()
    try:
        if len(data) > 1 << 16:  # a pipe holds 64 KiB unless asked for more (up to 1 MiB)
            try:
                fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, len(data))
            except OSError as e:
                raise SandboxSetupError(f"{len(data)} bytes do not fit in a pipe: {e}") from None
        os.write(write_fd, data)  # fits in the pipe's buffer: never blocks
    except BaseException:
        os.close(read_fd)
        raise
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


def pump(
    pipes: dict[int, Capture],
    deadline: float,
    exit_fd: int | None = None,
    done: Callable[[], bool] = lambda: False,
) -> bool:
    """Copy pipe bytes into `pipes` until `exit_fd` turns readable (the process exited), `done()`
    holds or, without an `exit_fd`, every pipe is at EOF. False if `deadline` passed first."""
    with selectors.DefaultSelector() as sel:
        for fd in pipes:
            sel.register(fd, selectors.EVENT_READ)
        if exit_fd is not None:
            sel.register(exit_fd, selectors.EVENT_READ)
        while (exit_fd is not None or sel.get_map()) and not done():
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
        _kill_uid(UID_BASE + pid)


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


def remove_tree(path: str) -> None:
    """Remove a run's folder, even where the code took permissions off its own files."""
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
    """The bootstrap runs as a script, isolated from the harness's paths (see bootstrap.py)."""
    return [sys.executable, "-I", "-S", os.path.abspath(bootstrap.__file__), json.dumps(cfg)]
