"""A run folder: the one module that names, locks, writes and reads a run's files.

    folder = RunFolder("runs/gsm8k-oracle")
    with folder.lock():                      # one writer: a second one ends with a UserError
        manifest = folder.start(identity, new_fields)  # create, or resume the same run
        done = folder.repair()               # example id -> last scored record
        with folder.appender() as append:
            append(record)                   # one JSON line, flushed and fsync'ed
        folder.write_summary(summary)
    run = folder.read()                      # Run: manifest, scored records, failed count

The folder holds
  manifest.json     what ran: the run's identity (task, split, router, decoding, models), its
                    environment and one entry per invocation in `sessions` (harness.evaluation.runner)
  records.jsonl     one `ExampleRecord` a line, appended as each example is scored; a published
                    run holds records.jsonl.gz instead (`hybridbench publish`), read the same way
  summary.json      `harness.metrics.quality.summarize` over the records, written at the end
  writer.lock       while a process writes the folder: its process id, host and start time

Damage (one policy for every reader): a last line cut short (a crash, a kill, a full disk) is
dropped, and its example is decoded again on resume; a damaged line anywhere else is a UserError
naming the file and line. A full disk while writing is a UserError too: what was written before
stays, the manifest is replaced atomically or not at all, and the same command resumes.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.core.records import ExampleRecord
from harness.errors import UserError

MANIFEST = "manifest.json"
RECORDS, RECORDS_GZ = "records.jsonl", "records.jsonl.gz"
SUMMARY = "summary.json"
LOCK = "writer.lock"
COST_LOG = "cost.jsonl"  # a training folder's log: one line per invocation of its command
# what an edition keeps of a run (`hybridbench publish`)
PUBLISHED = (MANIFEST, SUMMARY, RECORDS_GZ)


@dataclass(frozen=True)
class Run:
    """What a finished or partial run folder holds, read once."""

    path: Path  # the run folder
    manifest: dict  # manifest.json
    records: list[dict]  # the last scored record of each example id, in file order
    n_failed: int  # example ids with no scored record, only failed ones


@dataclass(frozen=True)
class Holder:
    """Who holds a run folder's lock (the contents of writer.lock)."""

    pid: int  # its process id
    host: str  # the machine it runs on
    since: str  # when it took the lock, local time with its UTC offset

    def text(self) -> str:
        return f"process {self.pid} on {self.host} since {self.since}"


def is_run(path: str | Path) -> bool:
    """Whether `path` is a run folder (it holds a manifest)."""
    return (Path(path) / MANIFEST).is_file()


def runs_below(paths) -> list[Path]:
    """Every run folder at or below each of `paths` (folders), sorted."""
    found = set()
    for p in map(Path, paths):
        found |= {m.parent for m in p.rglob(MANIFEST)} if p.is_dir() else set()
    return sorted(found)


def finished_runs(root: str | Path) -> list[RunFolder]:
    """The run folders below `root` that hold a summary, in the order of their summaries' paths."""
    return [RunFolder(p.parent) for p in sorted(Path(root).rglob(SUMMARY))]


def records_in(path: str | Path) -> dict[str, dict]:
    """example id -> last scored record, of a run folder or of a records file a user names
    (plain or gzip-compressed); a missing one is a UserError."""
    path = Path(path)
    if path.is_dir():
        return RunFolder(path).done()
    if not path.is_file() and path.name == RECORDS and (path.parent / RECORDS_GZ).is_file():
        path = path.parent / RECORDS_GZ  # a published run's, named as a working run's
    if not path.is_file():
        raise UserError(f"records file not found: {path} (made by hybridbench run)")
    return {r["example_id"]: r for r in _read_lines(path) if not r.get("error")}


def _read_lines(path: Path) -> list[dict]:
    """The records of one file under the damage policy (module docstring)."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read()
    else:
        text = path.read_text(encoding="utf-8")
    raw = text.split("\n")
    rows = []
    for i, line in enumerate(raw, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(raw):  # the last line, cut short: its example is decoded again
                continue
            raise UserError(
                f"{path}:{i} is a damaged record (not JSON); remove that line and run the "
                "same command again to decode its example again"
            ) from None
    return rows


def _is_full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


def _append_line(f, text: str) -> None:
    """Write one line and make it durable (a test simulates a full disk here)."""
    f.write(text)
    f.flush()
    os.fsync(f.fileno())


def _nan_to_none(obj):
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


@dataclass(frozen=True)
class RunFolder:
    """A run folder on disk (it need not exist yet). Reading never writes; writing is for the
    holder of `lock()`."""

    path: Path  # the folder

    def __init__(self, path: str | Path):
        object.__setattr__(self, "path", Path(path))

    # --- reading ---------------------------------------------------------------------------

    def exists(self) -> bool:
        return is_run(self.path)

    def manifest(self) -> dict:
        """manifest.json; a missing or damaged one is a UserError."""
        return self._json(MANIFEST)

    def summary(self) -> dict | None:
        """summary.json, or None when the run has not finished one."""
        return self._json(SUMMARY) if (self.path / SUMMARY).is_file() else None

    def finished(self) -> bool:
        """Whether a run of the folder has ended and written its summary."""
        return (self.path / SUMMARY).is_file()

    def records_file(self) -> Path | None:
        """records.jsonl, else records.jsonl.gz (a published run); None when it has neither."""
        return next(
            (p for p in (self.path / n for n in (RECORDS, RECORDS_GZ)) if p.is_file()), None
        )

    @property
    def records_path(self) -> Path:
        """The plain records file, where a run appends (it need not exist yet)."""
        return self.path / RECORDS

    def lines(self) -> list[dict]:
        """Every record in file order, failed ones and repeats included (the damage policy in
        the module docstring); [] when there is no records file."""
        path = self.records_file()
        return [] if path is None else _read_lines(path)

    def done(self) -> dict[str, dict]:
        """example id -> its last scored record (failed records are left out)."""
        return {r["example_id"]: r for r in self.lines() if not r.get("error")}

    def failed(self) -> list[dict]:
        """The last failed record of each example id that has no scored one."""
        lines = self.lines()
        good = {r["example_id"] for r in lines if not r.get("error")}
        bad = {r["example_id"]: r for r in lines if r.get("error") and r["example_id"] not in good}
        return list(bad.values())

    def read(self) -> Run:
        """The manifest and records; a folder without both is a UserError."""
        if not self.exists():
            raise UserError(f"{self.path} is not a run folder: {MANIFEST} not found")
        if self.records_file() is None:
            raise UserError(f"{self.path} is not a run folder: {RECORDS} not found")
        return Run(self.path, self.manifest(), list(self.done().values()), len(self.failed()))

    def summary_bytes(self) -> bytes | None:
        """summary.json as stored (a run that grew or changed has other bytes); None if none."""
        path = self.path / SUMMARY
        return path.read_bytes() if path.is_file() else None

    def publish_to(self, dest: str | Path) -> RunFolder:
        """Copy the run into `dest` (created) as an edition keeps it: manifest, summary and the
        records gzip-compressed with mtime 0 and no file name, so that the same run gives the
        same bytes (records compressed already are copied as they are)."""
        out = RunFolder(dest)
        out.path.mkdir(parents=True, exist_ok=True)
        for name in (MANIFEST, SUMMARY):
            if (self.path / name).is_file():
                shutil.copy2(self.path / name, out.path / name)
        src = self.records_file()
        if src is not None and src.name == RECORDS:
            with src.open("rb") as fin, (out.path / RECORDS_GZ).open("wb") as raw:
                with gzip.GzipFile(
                    filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9
                ) as fout:
                    shutil.copyfileobj(fin, fout)
        elif src is not None:
            shutil.copy2(src, out.path / RECORDS_GZ)
        return out

    def copy_to(self, dest: str | Path) -> RunFolder:
        """Copy the files an edition keeps (`PUBLISHED`) that the run has into `dest` (created):
        a run resumes from them, and answers are reused from them."""
        out = RunFolder(dest)
        out.path.mkdir(parents=True, exist_ok=True)
        for name in PUBLISHED:
            if (self.path / name).is_file():
                shutil.copy2(self.path / name, out.path / name)
        return out

    def holder(self) -> Holder | None:
        """Who wrote the lock file (held or left behind); None when there is none."""
        return _holder(self.path / LOCK)

    def _json(self, name: str) -> dict:
        path = self.path / name
        if not path.is_file():
            raise UserError(f"{self.path} is not a run folder: {name} not found")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise UserError(f"{path}: bad JSON ({e})") from None

    # --- writing (the lock's holder) ---------------------------------------------------------

    def start(self, identity: dict, fields: Callable[[], dict]) -> dict:
        """The manifest of the run `identity` describes: the folder's, when it holds the same
        run (every key of `identity` equal), else a new one of `identity` and `fields()` (what
        only a new run records: its environment, when it started). A folder holding another
        run is a UserError."""
        if self.exists():
            old = self.manifest()
            diff = [k for k in identity if old.get(k) != identity[k]]
            if diff:
                raise UserError(
                    f"{self.path} holds a different run ({', '.join(diff)} differ); use another --out"
                )
            return old
        self.path.mkdir(parents=True, exist_ok=True)
        manifest = {**identity, **fields()}
        self.write_manifest(manifest)
        return manifest

    def write_manifest(self, manifest: dict) -> None:
        self._write_json(MANIFEST, manifest)

    def write_summary(self, summary: dict) -> None:
        self._write_json(SUMMARY, summary)

    def repair(self) -> dict[str, dict]:
        """Rewrite the records without failed records, repeats and a cut last line, so that a
        resumed file has one line per example; return `done()`. A published run's compressed
        records are written out as a plain records file, which is read from then on."""
        done = self.done()
        if self.records_file() is not None:
            self.write_records(done.values())
        return done

    def write_records(self, records) -> None:
        """Replace the records with `records`, one JSON line each, atomically."""
        text = "".join(json.dumps(r) + "\n" for r in records)
        self._replace(RECORDS, text)

    def keep_copy(self, tag: str) -> Path:
        """A copy of the records file beside it, named with `tag` (e.g. before a rescore)."""
        src = self.records_file()
        if src is None:
            raise UserError(f"{self.path} has no records to copy")
        dest = src.with_name(f"{src.name}.{tag}")
        try:
            shutil.copy2(src, dest)
        except OSError as e:
            dest.unlink(missing_ok=True)
            raise self._full(e, dest.name) from None
        return dest

    @contextmanager
    def appender(self) -> Iterator[Callable[[ExampleRecord | dict], None]]:
        """`append(record)`: one `ExampleRecord` (or its JSON form) as one line, flushed and
        fsync'ed before it returns. A full disk is a UserError; the line it cut is dropped when
        the run resumes."""
        self.path.mkdir(parents=True, exist_ok=True)
        with (self.path / RECORDS).open("a", encoding="utf-8") as f:

            def append(record: ExampleRecord | dict) -> None:
                row = record.to_json() if isinstance(record, ExampleRecord) else record
                try:
                    _append_line(f, json.dumps(row) + "\n")
                except OSError as e:
                    raise self._full(e, RECORDS) from None

            yield append

    def _write_json(self, name: str, obj: dict) -> None:
        """Atomic: a crash leaves the old file or the new one, never half of one. NaN is written
        as null so strict JSON readers accept the file."""
        text = json.dumps(_nan_to_none(obj), indent=2, sort_keys=True, default=str) + "\n"
        self._replace(name, text)

    def _replace(self, name: str, text: str) -> None:
        tmp = self.path / f"{name}.tmp"
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path / name)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise self._full(e, name) from None

    def _full(self, e: OSError, name: str) -> Exception:
        if not _is_full(e):
            return e
        return UserError(
            f"{self.path}: the disk is full (writing {name}); what was written before is kept: "
            "free some space and run the same command again to resume"
        )

    # --- the lock ----------------------------------------------------------------------------

    @contextmanager
    def lock(self, say: Callable[[str], None] | None = None) -> Iterator[Holder]:
        """Hold the folder's lock for the block: one writer per run folder (`folder_lock`)."""
        with folder_lock(self.path, say) as me:
            yield me


def _holder(path: Path) -> Holder | None:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        return Holder(int(d["pid"]), str(d["host"]), str(d["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def folder_lock(folder: str | Path, say: Callable[[str], None] | None = None) -> Iterator[Holder]:
    """Hold `folder`'s lock for the block (a run folder's, or a sweep folder's while the sweep
    runs): held by another live process, a UserError naming it; left by a process that is gone,
    taken over, and `say` (default: stderr) is told so. The lock is an advisory `flock` on the
    folder's writer.lock, which the kernel releases when its process ends however it ends."""
    say = say or (lambda text: print(text, file=sys.stderr))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            held = _holder(path)
            who = held.text() if held else "another process"
            raise UserError(
                f"{folder} is being written by {who}; wait for it to end or use another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: take the new one
    try:
        left = _holder(path)
        if left is not None:
            say(f"{folder}: took over the lock left by {left.text()}, which has ended")
        me = Holder(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        text = json.dumps({"pid": me.pid, "host": me.host, "since": me.since}) + "\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode(), 0)
        except OSError as e:
            if not _is_full(e):
                raise
            raise UserError(
                f"{folder}: the disk is full (writing {LOCK}); free some space"
            ) from None
        yield me
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
