"""The sandbox's child side: trusted code that enters the isolation layers, then execs the code.

Started by the harness as a script, `python -I -S bootstrap.py CONFIG` (CONFIG: JSON), in a new
session, so it must stay runnable alone: the standard library only, no import of the package it
sits in. In "run" mode it enters the layers the config asks for, sets the limits, drops to the
run's uid and `execv`s `python -I main.py`; a setup failure is written to the status fd and ends
with exit code `SETUP_FAILED`. In "probe" mode it tries every layer without failing and prints,
as JSON, which worked and which interpreter can run code (`harness.sandbox.isolation_report`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Callable

UID_BASE = 2_000_000_000  # sandbox uid = base + pid: far above distro and subordinate-id ranges
SETUP_FAILED = 125  # exit code when a layer could not be entered
LAYERS = ("privilege_drop", "user_namespace", "network_namespace", "readonly_filesystem")
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


def bootstrap(cfg: dict) -> None:
    """Enter the layers, set the limits, drop privileges, then exec the untrusted code."""
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)  # closed by exec: EOF with no bytes means success
    try:
        uid = UID_BASE + os.getpid() if cfg["privilege_drop"] else None
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
        os._exit(SETUP_FAILED)


def probe(cfg: dict) -> None:
    """Try every layer without failing; print which worked and which interpreter runs code."""
    uid = UID_BASE + os.getpid() if cfg["privilege_drop"] else None
    why = {}
    if uid is not None:  # same order as bootstrap: files are handed over before the mounts
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
    workdir, disk_mb, hide = cfg["workdir"], cfg["limits"]["max_disk_mb"], cfg.get("hide", [])
    steps: dict[str, Callable[[], None]] = {
        "user_namespace": _enter_user_namespace,
        "network_namespace": lambda: _unshare(_CLONE_NEWNET | _CLONE_NEWIPC),
        "readonly_filesystem": lambda: _private_filesystem(workdir, uid, disk_mb, hide),
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


def _private_filesystem(workdir: str, uid: int | None, disk_mb: int, hide: list[str]) -> None:
    """Make every mount read-only for this process tree, except `workdir`: a fresh tmpfs. Each
    folder in `hide` is covered by an empty read-only tmpfs: its files cannot be opened."""
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
    for folder in hide:
        flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV
        _mount("tmpfs", folder, "tmpfs", flags, "size=4k,mode=0555")


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
    (probe if _config["mode"] == "probe" else bootstrap)(_config)
