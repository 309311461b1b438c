"""Copy a sweep's results into reports/published/ as a leaderboard edition, and regenerate it.

    python scripts/publish_edition.py results/edition2 reports/published --tasks gsm8k,mbpp,humaneval

For each task folder of SRC (run folders, its speed anchors `anchors/*/`, and `device/` rows
measured on a GPU machine): DEST/<task>/ is replaced by the task's run folders and anchors
(manifest.json, summary.json, and the records
gzip-compressed with no timestamp, records.jsonl.gz: the readers take either), then
`hybridbench report` writes DEST/<task>/report/. The router files the runs name (checkpoints and
calibration files in their manifests' router arguments) are copied into DEST/routers/, listed
in DEST/routers/files.json with their sha256 and the path the runs used. Nothing else in DEST
is touched: the edition's README is written by hand from the reports' setup and cost tables.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere without installing the package

RUN_FILES = ("manifest.json", "summary.json")
FILE_ARGS = ("path", "checkpoint", "calibration")  # router arguments that name a file


def names_a_file(value) -> bool:
    """Whether a router argument's value is a file path: `reward:checkpoint=PATH` is, while the
    `checkpoint` a calibration file adds to citer's and query's arguments is the sha256 prefix
    of the checkpoint it was made for (a name with neither folder nor suffix)."""
    return isinstance(value, str) and ("/" in value or "." in Path(value).name)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def compress(src: Path, dst: Path) -> None:
    """gzip with mtime 0 and no file name: the same input gives the same bytes."""
    with src.open("rb") as fin, dst.open("wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as fout:
            shutil.copyfileobj(fin, fout)


def publish_task(src: Path, dest: Path) -> list[str]:
    """Replace `dest` by `src`'s run folders (records compressed) and device rows; return the
    router files their manifests name."""
    from reports.load import ANCHORS, run_dirs

    runs = run_dirs(src)
    if not runs:
        raise SystemExit(f"{src}: no run folders")
    if (src / ANCHORS).is_dir():  # large-only on another machine: the speed ratios' denominators
        runs += run_dirs(src / ANCHORS)
    if dest.exists():
        shutil.rmtree(dest)
    files = []
    for run in runs:
        out = dest / run.relative_to(src)
        out.mkdir(parents=True)
        for name in RUN_FILES:
            if (run / name).is_file():
                shutil.copy2(run / name, out / name)
        compress(run / "records.jsonl", out / "records.jsonl.gz")
        args = json.loads((run / "manifest.json").read_text()).get("router_args") or {}
        files += [v for k, v in args.items() if k in FILE_ARGS and names_a_file(v)]
    if (src / "device").is_dir():
        shutil.copytree(src / "device", dest / "device")
    return files


def main(argv: list[str] | None = None) -> int:
    from reports import write_report

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="folder of task folders (e.g. results/edition2)")
    ap.add_argument("dest", help="published folder (e.g. reports/published)")
    ap.add_argument("--tasks", required=True, help="comma-separated task folders to publish")
    args = ap.parse_args(argv)
    src, dest = Path(args.src), Path(args.dest)
    files: set[str] = set()
    for task in (t.strip() for t in args.tasks.split(",") if t.strip()):
        files |= set(publish_task(src / task, dest / task))
        html = write_report(dest / task, dest / task / "report")
        print(f"{dest / task}: {html}")
    listing = {}
    for name in sorted(files):
        path = Path(name)
        if not path.is_file():
            print(f"warning: {name} (named by a run) not found; not copied", file=sys.stderr)
            continue
        digest = sha256(path)
        target = f"{digest[:12]}-{path.name}"
        (dest / "routers").mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / "routers" / target)
        listing[target] = {"used_as": name, "sha256": digest}
    if listing:
        (dest / "routers" / "files.json").write_text(json.dumps(listing, indent=1) + "\n")
        print(f"{dest / 'routers'}: {len(listing)} router files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
