"""What a sandboxed run's root filesystem holds: an allow-list, built once per interpreter.

    root_plan(python) -> RootPlan    # handed to the bootstrap, which mounts it (bootstrap.py)

A run with `private_root` starts in an empty tmpfs, mounted read-only, that holds only:
  * the interpreter's own binary (a virtual environment's base interpreter: no venv);
  * its standard library, with any site-packages folder in it covered by an empty folder, so no
    installed package (the benchmarks' data among them) is visible;
  * the folders of the shared libraries it loads (found once, by importing every extension
    module of its standard library in a child and reading that child's memory map) and the
    dynamic loader its binary names;
  * the symbolic links on the way to those (a merged /usr's /lib, /lib64) and at the top of /;
  * added by the bootstrap for each run: /dev/{null,zero,full,random,urandom} and /dev/fd links,
    a fresh /proc of the run's own PID namespace, the run's main.py (read-only) and its work
    directory (a private tmpfs, the only writable place).
Everything is mounted at its host path, read-only, nosuid. Nothing else of the host exists there:
no checkout, virtual environment, cache, home, /tmp, /etc or other process.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass

# Run by the interpreter itself, outside the sandbox: where its files are. Loading every
# extension module of the standard library maps every shared library a solution can load.
_LIST_FILES = r"""
import importlib, json, os, sys, sysconfig
paths = sysconfig.get_paths()
dynload = os.path.join(paths["platstdlib"], "lib-dynload")
for name in sorted(os.listdir(dynload)) if os.path.isdir(dynload) else []:
    if name.endswith(".so"):
        try:
            importlib.import_module(name.split(".")[0])
        except Exception:
            pass
with open("/proc/self/maps") as f:
    mapped = sorted({line.split(maxsplit=5)[5].strip() for line in f if " /" in line})
base = getattr(sys, "_base_executable", sys.executable) or sys.executable
print(json.dumps({
    "executable": os.path.realpath(base),
    "stdlib": [paths["stdlib"], paths["platstdlib"]],
    "packages": sorted({paths["purelib"], paths["platlib"]}),
    "mapped": mapped,
}))
"""
_PT_INTERP = 3  # ELF program header type: the path of the dynamic loader


@dataclass(frozen=True)
class RootPlan:
    """What the bootstrap mounts into a run's new root (every path is the host's own)."""

    executable: str  # the interpreter's real path: what the run execs
    links: tuple[tuple[str, str], ...]  # (path, target): symbolic links made, in this order
    binds: tuple[str, ...]  # real paths of folders and files bound read-only
    empty: tuple[str, ...]  # folders inside `binds` covered by an empty tmpfs (site-packages)

    def as_config(self) -> dict:
        """The plan as the bootstrap's JSON config reads it."""
        links = [list(pair) for pair in self.links]
        return {"links": links, "binds": list(self.binds), "empty": list(self.empty)}


@functools.lru_cache(maxsize=8)
def root_plan(python: str) -> RootPlan:
    """The allow-list for running `python` (OSError or ValueError where it cannot be listed)."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    argv = [python, "-I", "-S", "-c", _LIST_FILES]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    if done.returncode != 0:
        raise OSError(f"{python} could not list its files: {done.stderr.strip()[-500:]}")
    found = json.loads(done.stdout)
    executable = found["executable"]
    links: dict[str, str] = {}
    for name in sorted(os.listdir("/")):  # the loader's cache names /lib/... on a merged /usr
        if os.path.islink(f"/{name}"):
            links[f"/{name}"] = os.readlink(f"/{name}")
    loader = _loader(executable)
    wanted = {executable, *found["stdlib"]}
    wanted |= {os.path.dirname(p) for p in found["mapped"] if os.path.isfile(p)} - {
        os.path.dirname(executable)
    }
    if loader:
        wanted.add(_resolve(loader, links))
    binds = _outermost(sorted(_resolve(path, links) for path in wanted if os.path.exists(path)))
    inside = [os.path.realpath(p) for p in found["packages"]]
    empty = sorted(p for p in inside if os.path.isdir(p) and _under(p, binds))
    return RootPlan(executable, tuple(links.items()), tuple(binds), tuple(empty))


def _loader(executable: str) -> str | None:
    """The dynamic loader a 64-bit little-endian ELF binary names (PT_INTERP); None if none."""
    with open(executable, "rb") as f:
        head = f.read(64)
        if head[:6] != b"\x7fELF\x02\x01":
            return None
        offset = int.from_bytes(head[32:40], "little")
        size, count = int.from_bytes(head[54:56], "little"), int.from_bytes(head[56:58], "little")
        for index in range(count):
            f.seek(offset + index * size)
            entry = f.read(size)
            if int.from_bytes(entry[:4], "little") == _PT_INTERP:
                f.seek(int.from_bytes(entry[8:16], "little"))
                return f.read(int.from_bytes(entry[32:40], "little")).rstrip(b"\0").decode()
    return None


def _resolve(path: str, links: dict[str, str]) -> str:
    """`path` with every symbolic link on the way followed, each link recorded in `links`.

    _resolve("/lib64/ld-linux-x86-64.so.2", links) -> "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    links gaining "/lib64" -> "usr/lib64" and "/usr/lib64/ld-linux-x86-64.so.2" -> "../lib/..."
    """
    parts, current = path.strip("/").split("/"), "/"
    for _ in range(1000):  # a bound on links followed: a loop of links ends here
        if not parts:
            return current
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, part)
        if os.path.islink(step):
            target = links.setdefault(step, os.readlink(step))
            parts = [*target.strip("/").split("/"), *parts]
            current = "/" if target.startswith("/") else current
        else:
            current = step
    raise ValueError(f"too many symbolic links in {path}")


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _outermost(paths: list[str]) -> list[str]:
    """`paths` without those inside another of them (sorted, so a folder comes before its
    contents)."""
    kept: list[str] = []
    for path in paths:
        if not _under(path, kept):
            kept.append(path)
    return kept
