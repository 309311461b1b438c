"""The sandbox's child side: trusted code that enters the isolation layers, then execs the code.

Started by the harness as a script, `python -I -S bootstrap.py CONFIG` (CONFIG: JSON), in a new
session, so it must stay runnable alone: the standard library only, no import of the package it
sits in. In "run" mode it enters the layers the config asks for, sets the limits, drops to the
run's uid and `execv`s `python -I main.py`; a setup failure is written to the status fd and ends
with exit code `SETUP_FAILED`. In "probe" mode it tries every layer without failing and prints,
as JSON, which worked (`harness.sandbox.isolation_report`).

With `private_root` the process tree is three deep: this bootstrap (outside the new PID
namespace: the harness's child, which ends as the code ends, with its exit status or signal),
the namespace's init (pid 1: builds the root filesystem from `cfg["root"]`, pivots into it, then
only reaps; when it exits the kernel kills everything left in the namespace), and the code (pid
2: limits, new uid, exec). What the root holds: `harness.sandbox.rootfs`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import resource
import signal
import sys
from collections.abc import Callable

UID_BASE = 2_000_000_000  # sandbox uid = base + pid: far above distro and subordinate-id ranges
SETUP_FAILED = 125  # exit code when a layer could not be entered
LAYERS = ("privilege_drop", "user_namespace", "network_namespace", "private_root")
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x20000, 0x8000000, 1 << 28
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 1 << 30
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 4096, 8192, 16384, 1 << 18
_MNT_DETACH = 2
_READ_ONLY = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID  # a bind mount made read-only
_DEVICES = ("null", "zero", "full", "random", "urandom")  # the /dev a run sees, and these links:
_DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "fd/0", "stdout": "fd/1", "stderr": "fd/2"}
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38


def bootstrap(cfg: dict) -> None:
    """Enter the layers, then exec the untrusted code (under a namespace's init with
    private_root)."""
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)  # closed by exec: EOF with no bytes means success
    try:
        uid = UID_BASE + os.getpid() if cfg["privilege_drop"] else None
        if uid is not None:
            _hand_over(cfg, uid)
        failed = {name: why for name, why in _isolate(cfg).items() if why}
        if failed:
            raise OSError(f"isolation layers failed: {failed}")
        if cfg["private_root"]:  # this process stays: it dies with the harness, init with it
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != cfg["parent"]:
            raise OSError("the harness exited during setup")
        if cfg["private_root"]:
            _mirror(_start_init(cfg, uid, status_fd))
        _exec_code(cfg, uid)
    except BaseException as exc:
        _fail(status_fd, exc)


def _fail(status_fd: int, exc: BaseException) -> None:
    with contextlib.suppress(OSError):
        os.write(status_fd, f"sandbox setup failed: {type(exc).__name__}: {exc}".encode())
    os._exit(SETUP_FAILED)


def _exec_code(cfg: dict, uid: int | None) -> None:
    """Set the limits, drop privileges and become the code."""
    _set_limits(cfg["limits"])
    if uid is not None:
        _drop_privileges(uid)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)  # no setuid binary can give privileges back
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # set after the uid change, which clears it
    os.chdir(cfg["workdir"])
    os.execv(cfg["python"], [cfg["python"], "-I", cfg["script"]])


def _start_init(cfg: dict, uid: int | None, status_fd: int) -> int:
    """Fork the new PID namespace's init, which builds the root and starts the code; return the
    code's wait status (or init's, if init ended first)."""
    exit_r, exit_w = os.pipe()  # init writes the code's wait status here
    init = os.fork()
    if init == 0:
        try:
            os.close(exit_r)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            _prctl(_PR_SET_DUMPABLE, 0)  # the code cannot ptrace or read its init
            _enter_root(cfg, uid)
            code = os.fork()
            if code == 0:
                _exec_code(cfg, uid)
        except BaseException as exc:
            _fail(status_fd, exc)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # nor interrupt it (without privilege_drop)
        _close_all_but(exit_w)  # the code's pipes reach EOF as soon as the code is gone
        os.write(exit_w, _reap_until(code).to_bytes(4, "big"))
        os._exit(0)  # the kernel now kills whatever the code left in the namespace
    _close_all_but(exit_r)
    with os.fdopen(exit_r, "rb") as f:
        told = f.read(4)
    init_status = os.waitpid(init, 0)[1]
    return int.from_bytes(told, "big") if len(told) == 4 else init_status


def _reap_until(pid: int) -> int:
    """As init: reap every child (orphans come to init) until `pid` ends; its wait status."""
    while True:
        done, status = os.waitpid(-1, 0)
        if done == pid:
            return status


def _close_all_but(keep: int) -> None:
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def _mirror(status: int) -> None:
    """End this process the way the code ended: its exit code, or its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default action does not end a process
    os._exit(os.waitstatus_to_exitcode(status))


def probe(cfg: dict) -> None:
    """Try every layer without failing; print which worked."""
    uid = UID_BASE + os.getpid() if cfg["privilege_drop"] else None
    why = {}
    if uid is not None:  # same order as bootstrap: files are handed over before the mounts
        why["privilege_drop"] = _attempt(lambda: _hand_over(cfg, uid))
    why |= _isolate(cfg)
    if why.get("privilege_drop") == "":
        why["privilege_drop"] = _attempt(lambda: _drop_privileges(uid))
    print(json.dumps({"why": why}))


def _hand_over(cfg: dict, uid: int) -> None:
    """Give main.py (0600) and work/ (0700) to the run's uid: no other run can read them."""
    for path in (cfg["script"], cfg["workdir"]):
        os.chown(path, uid, uid)


def _isolate(cfg: dict) -> dict[str, str]:
    """Enter the namespaces `cfg` asks for, in order. Returns {layer: "" or why it failed}."""
    steps: dict[str, Callable[[], None]] = {
        "user_namespace": _enter_user_namespace,
        "network_namespace": lambda: _unshare(_CLONE_NEWNET | _CLONE_NEWIPC),
        "private_root": _enter_mount_and_pid_namespaces,
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


def _enter_mount_and_pid_namespaces() -> None:
    """A private mount namespace (nothing propagates to the host) and a PID namespace, which
    the next child (init) enters."""
    _unshare(_CLONE_NEWNS | _CLONE_NEWPID)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)


def _enter_root(cfg: dict, uid: int | None) -> None:
    """As the namespace's init: build the run's root filesystem and pivot into it."""
    new, plan, workdir = cfg["newroot"], cfg["root"], cfg["workdir"]
    _mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
    for path, target in plan["links"]:
        os.makedirs(new + os.path.dirname(path), exist_ok=True)
        os.symlink(target, new + path)
    for path in plan["binds"]:
        _bind(path, new + path, _READ_ONLY | _MS_NODEV)
    for folder in plan["empty"] + cfg.get("hide", []):
        if os.path.isdir(new + folder):  # a folder reachable in the new root: cover it
            flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV
            _mount("tmpfs", new + folder, "tmpfs", flags, "size=4k,mode=0555")
    os.mkdir(new + "/dev", 0o755)
    for name in _DEVICES:  # device nodes: read-only mounts still let a device be written
        _bind(f"/dev/{name}", f"{new}/dev/{name}", _READ_ONLY | _MS_NOEXEC)
    for name, target in _DEV_LINKS.items():
        os.symlink(target, f"{new}/dev/{name}")
    _bind(cfg["script"], new + cfg["script"], _READ_ONLY | _MS_NODEV)
    os.mkdir(new + workdir, 0o700)
    owner = "" if uid is None else f",uid={uid},gid={uid}"
    disk = f"size={cfg['limits']['max_disk_mb']}m,mode=0700{owner}"
    _mount("tmpfs", new + workdir, "tmpfs", _MS_NOSUID | _MS_NODEV, disk)
    os.mkdir(new + "/proc", 0o555)
    _mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount(None, new, None, _READ_ONLY | _MS_NODEV)
    os.chdir(new)
    _checked(_libc().pivot_root(b".", b"."), "pivot_root")
    _checked(_libc().umount2(b".", _MNT_DETACH), "detaching the host's root")
    os.chdir("/")


def _bind(source: str, target: str, flags: int) -> None:
    """Mount `source` (a folder or a file) at `target`, created for it, with `flags`."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
    _mount(source, target, None, _MS_BIND)
    _mount(None, target, None, flags)


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
    libc.pivot_root.argtypes = [ctypes.c_char_p] * 2
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
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
    (probe if _config["mode"] == "probe" else bootstrap)(_config)
