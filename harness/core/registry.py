"""Registries of plugins: names resolved lazily to classes, from three places.

    ROUTERS = Registry("router", {"random": "routers.baselines:RandomRouter"}, "hybridbench.routers")
    cls, entry = ROUTERS.resolve("random")                  # a built-in name
    cls, entry = ROUTERS.resolve("margin")                  # an entry point of an installed package
    cls, entry = ROUTERS.resolve("mypkg.routers:MyRouter")  # an import path, anywhere on sys.path
    entry.where()        # "built-in" | "entry point of margin-router 0.1.0" | "import path (...)"
    entry.provenance()   # what a run manifest records: class path, origin, package, version

A package extends hybridbench without a fork by declaring entry points in its pyproject.toml:

    [project.entry-points."hybridbench.routers"]
    margin = "margin_router.router:MarginRouter"

Nothing is imported until a name is resolved: listing the names reads only package metadata, so
a broken plugin breaks only the command that names it, with one error line.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.errors import UserError

BUILT_IN, ENTRY_POINT, IMPORT_PATH = "built-in", "entry point", "import path"
HOME = "hybridbench"  # the distribution that ships the built-ins


@dataclass(frozen=True)
class Entry:
    """Where one name of a registry comes from."""

    name: str  # what a command line takes: a registered name, or the import path itself
    target: str  # "package.module:Class" the name resolves to
    origin: str  # BUILT_IN, ENTRY_POINT or IMPORT_PATH
    package: str = ""  # the distribution that provides it; "" for a module in none
    version: str = ""  # its version; a module in no distribution: its __version__ or file digest
    shadowed: bool = False  # an entry point whose name a built-in (or an earlier one) already has

    def where(self) -> str:
        """Where the name came from, for listings and messages."""
        made = f"{self.package} {self.version}".strip()
        if self.origin == ENTRY_POINT:
            return f"entry point of {made}" + (" (shadowed: not used)" if self.shadowed else "")
        if self.origin == IMPORT_PATH:
            return f"import path ({made or 'version unknown'})"
        return BUILT_IN

    def provenance(self) -> dict:
        """What a run records of it: the class path and the version of what provided it."""
        return {
            "class": self.target,
            "origin": self.origin,
            "package": self.package,
            "version": self.version,
        }


def is_import_path(name: str) -> bool:
    """'package.module:Class' (a registered name never holds a colon)."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr)


class Registry:
    """Names of one kind of plugin ("router", "task"): `builtins` (name -> "module:Class"), then
    the entry points of `group`, then any import path."""

    def __init__(self, kind: str, builtins: dict[str, str], group: str):
        self.kind, self.builtins, self.group = kind, builtins, group

    def entries(self) -> list[Entry]:
        """Every registered name: the built-ins (in their table's order), then the installed
        packages' entry points (sorted), each marked `shadowed` when its name is already taken."""
        out = [Entry(n, t, BUILT_IN, HOME, _version(HOME)) for n, t in self.builtins.items()]
        taken = set(self.builtins)
        for ep in sorted(metadata.entry_points(group=self.group), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            package = dist.metadata["Name"] if dist is not None else ""
            version = dist.version if dist is not None else ""
            out.append(Entry(ep.name, ep.value, ENTRY_POINT, package, version, ep.name in taken))
            taken.add(ep.name)
        return out

    def names(self) -> list[str]:
        """The names a command line can take (import paths aside)."""
        return [e.name for e in self.entries() if not e.shadowed]

    def entry(self, name: str) -> Entry:
        """The entry of `name` (not imported yet); an unknown name lists the valid ones."""
        if name in self.builtins:
            return Entry(name, self.builtins[name], BUILT_IN, HOME, _version(HOME))
        if is_import_path(name):
            return Entry(name, name, IMPORT_PATH)
        found = [e for e in self.entries() if e.name == name and not e.shadowed]
        if not found:
            raise UserError(
                f"unknown {self.kind} {name!r}; valid {self.kind}s: {', '.join(self.names())} "
                f"(or an import path package.module:Class)"
            )
        return found[0]

    def resolve(self, name: str) -> tuple[type, Entry]:
        """(the class `name` names, its entry); one UserError line when it cannot be imported."""
        entry = self.entry(name)
        module_name, _, attr = entry.target.partition(":")
        label = name if entry.origin != ENTRY_POINT else f"{name} ({entry.where()})"
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a plugin's import error, said in one line
            raise UserError(f"{self.kind} {label}: cannot import {module_name}: {_said(e)}") from e
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise UserError(f"{self.kind} {label}: {module_name} has no {attr!r}")
        if not isinstance(obj, type):
            raise UserError(f"{self.kind} {label}: {entry.target} is not a class")
        if entry.origin == IMPORT_PATH:
            package, version = _provider(module)
            entry = Entry(name, entry.target, IMPORT_PATH, package, version)
        return obj, entry


def changes(old: dict | None, new: dict) -> str:
    """One line naming each plugin (role -> `Entry.provenance()`) whose class or version differs
    between a run's manifest (`old`) and this invocation (`new`), '' when none does: said on
    stderr when a run is resumed, not an error.

    'note: since this run began, its router changed: m:Margin pkg 1.0 -> m:Margin pkg 1.1 ...'
    """

    def text(p: dict) -> str:
        return " ".join(str(p.get(k) or "") for k in ("class", "package", "version") if p.get(k))

    moved = [
        f"its {role} {text(then)} -> {text(now)}"
        for role, now in new.items()
        if (then := (old or {}).get(role))
        and (then.get("class"), then.get("version")) != (now["class"], now["version"])
    ]
    if not moved:
        return ""
    return f"note: since this run began, {'; '.join(moved)} (its records come from both)"


def _said(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@functools.cache
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()  # top-level import name -> distributions


def _provider(module) -> tuple[str, str]:
    """(distribution, version) of an imported module; a module in no distribution (a file on
    sys.path): ("", its `__version__`, else "sha256:" and the first 12 hex digits of its file),
    so that a change to it still shows when a run resumes."""
    top = module.__name__.split(".")[0]
    dists = _distributions().get(top) or []
    if dists:
        return dists[0], _version(dists[0])
    version = getattr(sys.modules.get(top), "__version__", None) or getattr(
        module, "__version__", None
    )
    if version:
        return "", str(version)
    path = getattr(module, "__file__", None)
    if path and Path(path).is_file():
        return "", "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    return "", ""
