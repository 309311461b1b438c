"""Publish a sweep's results as a leaderboard edition: copy them compressed, regenerate the report.

    hybridbench publish results/edition2 reports/published --tasks gsm8k,mbpp,humaneval

For each task folder of SRC (run folders, its speed anchors `anchors/*/`, and `device/` rows
measured on a GPU machine): DEST/<task>/ is replaced by the task's run folders and anchors
(manifest, summary, and the records gzip-compressed with no timestamp:
`harness.core.run_folder.RunFolder.publish_to`; the readers take either) and device rows (one DEST holds and SRC lacks is
kept: GPU rows are measured elsewhere), then the report is written to DEST/<task>/report/.
A run folder DEST/<task> holds that SRC/<task> lacks would be dropped: `publish` refuses, naming
them, unless `replace` (`--replace`) says to drop them (an experiment restores the published runs
into its working copy before its first step, so its publish step drops nothing).
The router files the runs name (checkpoints and calibration files in their manifests' router
arguments) are copied into DEST/routers/, listed in DEST/routers/files.json with their sha256 and
the path the runs used. Nothing else in DEST is touched: the edition's README is written by hand
from the reports' setup and cost tables. Publishing the same runs twice gives the same bytes.
With `--readme FILE` the site's matrix (DEST/index.md) is also written into FILE's headline
block (`write_headline`), so a README that leads with the leaderboard never lags it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.core.run_folder import RunFolder, is_run
from harness.errors import UserError
from harness.files import file_sha256
from reports import blocks, write_report
from reports.load import ANCHORS, FILE_ARGS, run_dirs

DEVICE = "device"  # a task folder's rows measured on a GPU machine (JSON files)


@dataclass(frozen=True)
class Published:
    """What `publish` wrote."""

    reports: tuple[Path, ...]  # each task's report (its HTML page)
    router_files: tuple[
        str, ...
    ]  # the router files copied into DEST/routers/, as the runs named them
    missing: tuple[str, ...]  # router files the runs name that were not found (not copied)


def names_a_file(value) -> bool:
    """Whether a router argument's value is a file path: `reward:checkpoint=PATH` is, while the
    `checkpoint` a calibration file adds to citer's and query's arguments is the sha256 prefix
    of the checkpoint it was made for (a name with neither folder nor suffix)."""
    return isinstance(value, str) and ("/" in value or "." in Path(value).name)


def task_runs(src: Path) -> list[Path]:
    """A task folder's run folders and speed anchors (large-only on another machine: the speed
    ratios' denominators), the folders an edition publishes."""
    return run_dirs(src) + run_dirs(src / ANCHORS, missing_ok=True)


def missing_runs(dest: Path, src: Path) -> list[Path]:
    """The run folders and speed anchors of the published task folder `dest` with no run at
    their place in the task folder `src`: the ones `restore` copies back, and the ones
    publishing `src` over `dest` would drop."""
    if not run_dirs(dest, missing_ok=True):
        return []
    return [run for run in task_runs(dest) if not is_run(src / run.relative_to(dest))]


def publish_task(src: Path, dest: Path) -> list[str]:
    """Replace `dest` by `src`'s run folders (records compressed) and device rows; return the
    router files their manifests name."""
    runs = task_runs(src)
    if not runs:
        raise UserError(f"{src}: no run folders to publish")
    kept = {}  # the published device rows (measured elsewhere): kept unless src has its own
    if (dest / DEVICE).is_dir():
        kept = {f.name: f.read_bytes() for f in (dest / DEVICE).iterdir() if f.is_file()}
    if dest.exists():
        shutil.rmtree(dest)
    files = []
    for run in runs:
        RunFolder(run).publish_to(dest / run.relative_to(src))
        args = RunFolder(run).manifest().get("router_args") or {}
        files += [v for k, v in args.items() if k in FILE_ARGS and names_a_file(v)]
    for name, data in kept.items():
        (dest / DEVICE).mkdir(parents=True, exist_ok=True)
        (dest / DEVICE / name).write_bytes(data)
    if (src / DEVICE).is_dir():  # src's own rows replace the published ones of the same name
        shutil.copytree(src / DEVICE, dest / DEVICE, dirs_exist_ok=True)
    return files


def is_published(src: Path, dest: Path) -> bool:
    """Whether `dest` holds every run of the task folder `src` as it stands: each run's
    summary the same bytes (a run that grew or changed has a new summary). A task whose
    working copies left the tree once published (only `dest` holds runs) is published."""
    runs = task_runs(src) if run_dirs(src, missing_ok=True) else []
    if not runs:
        return bool(run_dirs(dest, missing_ok=True))
    return all(
        RunFolder(dest / r.relative_to(src)).summary_bytes() == RunFolder(r).summary_bytes()
        for r in runs
        if RunFolder(r).finished()
    )


def restore(dest: Path, src: Path) -> list[Path]:
    """Copy the runs of a published task folder `dest` that the task folder `src` lacks back
    into it (`RunFolder.copy_to`: a run resumes from them, and answers are reused from them);
    return the run folders restored."""
    restored = []
    for run in missing_runs(dest, src):
        out = src / run.relative_to(dest)
        RunFolder(run).copy_to(out)
        restored.append(out)
    return restored


def copy_router_files(names: set[str], dest: Path) -> tuple[list[str], list[str]]:
    """Copy the router files `names` into dest/routers/ as SHA12-NAME and list them in
    dest/routers/files.json beside those it lists already (other tasks' files); return (copied,
    missing)."""
    listing, missing = {}, []
    for name in sorted(names):
        path = Path(name)
        if not path.is_file():
            missing.append(name)
            continue
        digest = file_sha256(path)
        target = f"{digest[:12]}-{path.name}"
        (dest / "routers").mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / "routers" / target)
        listing[target] = {"used_as": name, "sha256": digest}
    if listing:
        index = dest / "routers" / "files.json"
        listed = json.loads(index.read_text()) if index.is_file() else {}
        listed = {k: v for k, v in listed.items() if (dest / "routers" / k).is_file()}
        merged = dict(sorted((listed | listing).items(), key=lambda kv: kv[1]["used_as"]))
        index.write_text(json.dumps(merged, indent=1) + "\n")
    return sorted(v["used_as"] for v in listing.values()), missing


HEADLINE = "<!-- headline"  # a README's headline block: from this line ...
HEADLINE_END = "<!-- /headline -->"  # ... to this one, the matrix of DEST/index.md between
MATRIX = "### Gap recovered at"  # the heading of index.md's matrix


def table_after(text: str, heading: str) -> list[str]:
    """The markdown table (its `|` lines) first found after the line starting `heading`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(heading)), None)
    if start is None:
        return []
    rows: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


def write_headline(readme: str | Path, dest: str | Path) -> bool:
    """Put the matrix of `dest`/index.md between `readme`'s headline lines (HEADLINE, then
    HEADLINE_END); return whether that changed the file."""
    matrix = table_after((Path(dest) / "index.md").read_text(encoding="utf-8"), MATRIX)
    if not matrix:
        raise UserError(f"{dest}/index.md has no matrix ({MATRIX} and a table)")
    return blocks.put(readme, HEADLINE, HEADLINE_END, matrix, f"{readme} has no headline block")


def publish(
    src: str | Path, dest: str | Path, tasks: list[str], replace: bool = False
) -> Published:
    """Publish the task folders `tasks` of `src` into `dest` (see the module docstring); a
    published run `src` lacks is a UserError before anything is written, unless `replace`."""
    src, dest = Path(src), Path(dest)
    if not tasks:
        raise UserError("no tasks to publish (--tasks)")
    missing_tasks = [t for t in tasks if not (src / t).is_dir()]
    if missing_tasks:
        raise UserError(f"{src} has no task folder {', '.join(missing_tasks)}")
    for task in [] if replace else tasks:
        dropped = [str(r.relative_to(dest / task)) for r in missing_runs(dest / task, src / task)]
        if dropped:
            shown = ", ".join(dropped[:3]) + (
                f" and {len(dropped) - 3} more" if len(dropped) > 3 else ""
            )
            raise UserError(
                f"{dest / task} holds {len(dropped)} run folder(s) {src / task} lacks ({shown}): "
                "publishing would drop them; copy them back into the working copy first "
                "(`hybridbench experiment run` restores them), or pass --replace to drop them"
            )
    files: set[str] = set()
    reports = []
    for task in tasks:
        files |= set(publish_task(src / task, dest / task))
        reports.append(dest / task / "report" / "leaderboard.html")
    write_report(dest)  # the whole site: every task's page, linked, and the index across them
    copied, missing = copy_router_files(files, dest)
    return Published(tuple(reports), tuple(copied), tuple(missing))
