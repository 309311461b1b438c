"""`hybridbench submit`: a router evaluated against a published edition, on the same examples, and
placed on its leaderboard with paired verdicts against the published rows.

    hybridbench submit --router margin --edition reports/published/gsm8k --out runs/submit-gsm8k

1. Checks that this submission can be paired with the edition's rows, and refuses with the
   reason when not: the task and split (its examples here must be the edition's: the same ids),
   the models (sha256 of each weight file), the decoding (every DecodeConfig field) and the
   backend of each model; a different backend version is noted, not refused.
2. Calibrates a score router (`routers.score.ScoreRouter`) on the calib split
   (OUT/calibration.json, `hybridbench calibrate`), then runs it at each of the edition's target
   shares on the edition's examples (OUT/runs/, one `hybridbench run` folder per share). A router
   that is no score router runs its own sweep settings at those shares (`sweep_settings`).
3. Adds a matched control (`random`; `random_query` for a query router) only where the edition
   has none, nor small-only or large-only, within 2 points of a row's realized large-token share.
4. Decodes a large-only speed anchor on this machine (OUT/anchors/; --anchor-limit examples), so
   that every throughput ratio stays within one machine.
5. Writes OUT/board/ (the edition's run folders and the new ones, linked), its leaderboard
   OUT/report/ (`hybridbench report`: the new rows among the published ones), with the
   submission's verdicts at its top, also in OUT/submission.md and OUT/submission.json: each new
   row against its matched control and against the best published router at the same share
   (within 2 points), paired by example id with 95% bootstrap intervals, the exact test's p and
   its Holm-adjusted p (the rule of `harness.metrics.verdicts`).

Every step resumes: run folders resume per example and a calibration file is reused, so the same
command continues an interrupted submission.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from harness.backends.engine import backend_kinds, decode_config, engine_from_args
from harness.backends.machine import machine_id
from harness.backends.model_spec import ModelSpec
from harness.core.loop import DecodeConfig
from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.evaluation.runner import evaluate
from harness.evaluation.spec import DECODE_FIELDS, MODEL_FIELDS, RunSpec
from harness.evaluation.submit_verdicts import NEW, verdict_tables, write_section
from harness.evaluation.sweep import router_settings, setting_name
from reports import load_runs, write_report
from reports.load import asked_share, grid_shares, run_dirs
from reports.tables import ENDS
from reports.text import MATCH
from routers import get_router, router_class, router_entry
from routers.score import ScoreRouter
from tasks import get_task, task_ref

# Calibrates a score router: `harness.training.calibrate.calibrate(spec, records, engine)`, handed
# in by the command line (training sits above evaluation).
Calibrate = Callable[[RunSpec, str | None, object], int]


@dataclass(frozen=True)
class SubmitSpec:
    """One `hybridbench submit`: a router, the edition it is placed on, and this machine's pair."""

    router: str  # router name, import path or entry point
    edition: str  # a published task folder (its run folders)
    out: str  # the submission folder (created, or resumed)
    router_args: Mapping = field(default_factory=dict)  # the router's fixed arguments
    task: str | None = None  # must be the edition's task (None: it)
    split: str | None = None  # must be the edition's split (None: it)
    calib_limit: int | None = None  # a score router calibrated on the first N calib examples
    calib_records: str | None = None  # small-only records over calib (answers reused)
    anchor_limit: int = 48  # large-only speed anchor on the first N examples (0: none)
    # decoding: None takes the edition's (another value is refused)
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    models: ModelSpec = ModelSpec(batch="auto")  # the pair; must be the edition's weights

    def __post_init__(self):
        object.__setattr__(self, "router_args", dict(self.router_args))


@dataclass(frozen=True)
class Edition:
    """What a published task folder fixed, read from its run manifests."""

    folder: Path  # the task folder, e.g. reports/published/gsm8k
    task: str  # task name, as its runs record it
    task_ref: str  # the name that builds the task here (a registered name, or its class path)
    task_args: dict  # its arguments
    split: str  # the split its rows ran on
    split_seed: int  # the split's seed
    example_ids: tuple[str, ...]  # the examples every row ran (its large-only row's)
    decode: dict  # DecodeConfig fields as manifests record them (no eos ids)
    models: dict  # role -> {"source", "sha256", "backend"} of its large-only row
    backends: dict  # role -> backend kind ("llama.cpp", "hf", "remote")
    dtype: str  # the transformers dtype (what an hf backend computes in)
    shares: tuple[float, ...]  # its grid's target shares (`reports.load.grid_shares`)


def read_edition(folder: str | Path) -> Edition:
    """The edition of a published task folder; one error line when it is none."""
    folder = Path(folder)
    manifests = {d: RunFolder(d).manifest() for d in run_dirs(folder)}
    large = [d for d, m in manifests.items() if m.get("router") == "large"]
    if not large:
        raise UserError(f"{folder} is not a published task folder: it has no large-only run")
    m = manifests[large[0]]
    for key in ("task", "task_args", "split", "split_seed", "decode"):
        values = {json.dumps(x.get(key), sort_keys=True) for x in manifests.values()}
        if len(values) > 1:
            raise UserError(f"{folder}: its runs differ in {key}; pairing needs one edition")
    # the edition's shares: its grid's (a row aimed at another row's share, a matched control
    # such as entropy at 0.224, is one or two routers' and off it) that its share routers ran at
    settings = [(x["router"], x.get("router_args") or {}) for x in manifests.values()]
    ran = {asked_share(a) for _, a in settings if "target_share" in a}
    shares = {s for s in grid_shares(settings) if s in ran}
    if not shares:
        raise UserError(f"{folder}: no row of it ran at a target share (target_share=)")
    ids = tuple(sorted(RunFolder(large[0]).done()))
    models = {
        role: {
            k: (m.get("models") or {}).get(role, {}).get(k, "")
            for k in ("source", "sha256", "backend")
        }
        for role in ("small", "large")
    }
    sources = m.get("model_sources") or {}
    ref = task_ref(m)
    return Edition(
        folder,
        m["task"],
        ref,
        m.get("task_args") or {},
        m["split"],
        m["split_seed"],
        ids,
        m["decode"],
        models,
        sources.get("backends") or {},
        sources.get("dtype", ""),
        tuple(sorted(shares)),
    )


def _differ(what: str, here, there) -> UserError:
    return UserError(
        f"{what} differs from the edition's: {here} here, {there} there; "
        "its rows could not be paired with this submission's"
    )


def check_request(ed: Edition, spec: RunSpec, task, asked: tuple[str | None, str | None]) -> None:
    """Refuse, before loading a model, what cannot match: the task and split `asked` (None: the
    edition's), examples, decoding, backends (and the dtype of a transformers model)."""
    asked_task, asked_split = asked
    if asked_task and asked_task not in (ed.task, ed.task_ref):
        raise _differ("the task", asked_task, ed.task)
    if asked_split and asked_split != ed.split:
        raise _differ("the split", asked_split, ed.split)
    here = sorted(ex.id for ex in task.split(ed.split, seed=ed.split_seed)[: len(ed.example_ids)])
    if tuple(here) != ed.example_ids:
        odd = sorted(set(ed.example_ids) ^ set(here))
        raise UserError(
            f"task {ed.task}'s first {len(ed.example_ids)} {ed.split} examples here are not the "
            f"edition's (e.g. {odd[0] if odd else '?'}): its data or split differ"
        )
    decode = asdict(decode_config(spec, stop=tuple(task.stop)))
    decode.pop("eos_ids", None)
    # a field the edition predates counts as its default (the decoding the edition ran)
    there = {**{f.name: f.default for f in fields(DecodeConfig)}, **ed.decode}
    for key in sorted(decode):
        if json.dumps(decode[key]) != json.dumps(there.get(key)):
            raise _differ(f"decoding ({key})", decode[key], there.get(key))
    kinds = backend_kinds(spec)
    for role in ("small", "large"):
        if ed.backends.get(role) and kinds[role] != ed.backends[role]:
            raise _differ(f"{role}'s backend", kinds[role], ed.backends[role])
    if "hf" in kinds.values() and ed.dtype and spec.dtype != ed.dtype:
        raise _differ("the dtype of the transformers models", spec.dtype, ed.dtype)


def check_models(ed: Edition, engine) -> list[str]:
    """Refuse models whose weights differ from the edition's (sha256); notes on what differs
    but is not refused (a backend's version)."""
    infos, notes = engine.model_infos(), []
    for role in ("small", "large"):
        mine, theirs = infos[role], ed.models[role]
        if not theirs["sha256"]:
            raise UserError(f"the edition records no sha256 of its {role} model: nothing to match")
        if mine.get("sha256") != theirs["sha256"]:
            raise _differ(
                f"the {role} model (sha256)",
                (mine.get("sha256") or "unknown")[:12],
                f"{theirs['sha256'][:12]} ({theirs['source']})",
            )
        if (mine.get("backend") or "") != theirs["backend"]:
            notes.append(
                f"{role}'s backend is {mine.get('backend')} here, {theirs['backend']} "
                "in the edition (same weights and decoding)"
            )
    return notes


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._=+-" else "-" for c in name)


class Submission:
    """One submission's folder and the runs it makes (see the module docstring)."""

    def __init__(self, spec: SubmitSpec, base: RunSpec, ed: Edition, engine, calibrate: Calibrate):
        self.spec, self.ed, self.engine, self.calibrate = spec, ed, engine, calibrate
        self.base = base  # every run's: the edition's task, split and decoding, these models
        self.out = Path(spec.out)
        self.cls = router_class(spec.router)

    def calibration(self, fixed: dict) -> dict:
        """A score router's fixed arguments with its calibration file (made once, on calib)."""
        if not issubclass(self.cls, ScoreRouter):
            return fixed
        path = self.out / "calibration.json"
        if path.is_file():
            cal = json.loads(path.read_text())
            given = {k: v for k, v in fixed.items() if k != self.cls.checkpoint_arg}
            mine = {
                k: v for k, v in cal.get("router_args", {}).items() if k != self.cls.checkpoint_arg
            }
            if cal.get("router_class") != router_entry(self.spec.router).target or mine != given:
                raise UserError(f"{path} calibrates another router or setting; use another --out")
            print(f"{path}: reused", file=sys.stderr)
        else:
            spec = self.base.with_(
                out=path, limit=self.spec.calib_limit, split="calib", router_args=fixed
            )
            self.calibrate(spec, self.spec.calib_records, self.engine)
        return {**fixed, "calibration": _recorded(path)}

    def run(self, router: str, router_args: dict, folder: Path, limit: int) -> Path:
        """One `hybridbench run` into `folder` (resumed if it exists) on the shared engine."""
        built = get_router(router, router_args)
        for role, backend in built.backends(self.engine).items():  # e.g. a reward model
            if role not in self.engine.backends:
                self.engine.add(role, backend)
        spec = self.base.with_(router=router, router_args=router_args, limit=limit, out=folder)
        if evaluate(spec, engine=self.engine).n_failed:
            raise UserError(
                f"{folder}: some examples failed (see its records); run the same command again "
                "to retry them"
            )
        return folder

    def rows(self) -> list[Path]:
        fixed = self.calibration(dict(self.spec.router_args))
        n = len(self.ed.example_ids)
        out = []
        for setting in router_settings(self.spec.router, list(self.ed.shares), fixed):
            name = f"{_safe(self.spec.router)}__{setting_name(setting)}"
            out.append(
                self.run(self.spec.router, {**fixed, **setting}, self.out / "runs" / name, n)
            )
        return out

    def controls(self, rows: list[Path]) -> list[Path]:
        """Matched controls where neither the edition nor an earlier control has one within
        MATCH of a row's share: p aimed at the row's share, aimed again once if it missed."""
        query = (RunFolder(rows[0]).summary() or {}).get("query_large_share")
        control = "random" if query is None else "random_query"  # a query router's: per prompt
        edition = load_runs(self.ed.folder)
        pool = list(edition.loc[edition["router"].isin([control, *ENDS]), "large_token_share"])
        added = []
        for row in rows:
            aim = _share(row)
            p = aim
            for _ in range(2):
                if math.isnan(aim) or any(abs(s - aim) <= MATCH for s in pool):
                    break
                p = round(min(1.0, max(0.0, p)), 3)
                folder = self.out / "runs" / f"{control}__p={p!r}"
                added.append(self.run(control, {"p": p}, folder, len(self.ed.example_ids)))
                pool.append(_share(folder))
                p += aim - pool[-1]  # the miss, corrected once
        return added

    def anchor(self) -> Path | None:
        """Large-only on the edition's first --anchor-limit examples, on this machine."""
        if not self.spec.anchor_limit:
            return None
        folder = self.out / "anchors" / f"{machine_id()}-submission"
        return self.run("large", {}, folder, self.spec.anchor_limit)


def make_board(out: Path, edition: Path, rows: list[Path]) -> Path:
    """OUT/board: links to the edition's run folders and anchors, and to the new runs,
    relative, so that the folder stays whole when the checkout holding it moves."""
    board = out / "board"
    shutil.rmtree(board, ignore_errors=True)
    (board / "anchors").mkdir(parents=True)
    for d in run_dirs(edition):
        _link(d, board / d.name)
    for d in [
        *run_dirs(edition / "anchors", missing_ok=True),
        *run_dirs(out / "anchors", missing_ok=True),
    ]:
        _link(d, board / "anchors" / d.name)
    for d in rows:
        _link(d, board / f"{NEW}{d.name}")
    return board


def _link(target: Path, link: Path) -> None:
    """A symbolic link at `link` to `target`, by a path relative to the link's folder."""
    here = link.parent.resolve()
    os.symlink(os.path.relpath(target.resolve(), here), link)


def _share(folder: Path) -> float:
    share = (RunFolder(folder).summary() or {}).get("large_token_share")
    return math.nan if share is None else float(share)


def submit(spec: SubmitSpec, calibrate: Calibrate) -> int:
    """`hybridbench submit` (see the module docstring)."""
    ed = read_edition(spec.edition)
    task = get_task(ed.task_ref, **ed.task_args)
    asked = {k: getattr(spec, k) for k in DECODE_FIELDS}
    decode = {k: ed.decode[k] if v is None else v for k, v in asked.items()}
    base = RunSpec(
        task=ed.task_ref,
        router=spec.router,
        out=spec.out,
        task_args=ed.task_args,
        split=ed.split,
        split_seed=ed.split_seed,
        **decode,
        **{k: getattr(spec.models, k) for k in MODEL_FIELDS},
    )
    check_request(ed, base, task, (spec.task, spec.split))
    router_class(spec.router)  # an unknown or broken router: refused before loading models
    engine = engine_from_args(base)
    notes = check_models(ed, engine)
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    sub = Submission(spec, base, ed, engine, calibrate)
    rows = sub.rows()
    controls = sub.controls(rows)
    anchor = sub.anchor()
    facts = {
        "router": spec.router,
        "router_class": router_entry(spec.router).provenance(),
        "edition": str(ed.folder),
        "task": ed.task,
        "split": ed.split,
        "n": len(ed.example_ids),
        "shares": list(ed.shares),
        "checked": ["task", "split", "examples", "decoding", "backends", "models (sha256)"],
        "notes": notes,
        "rows": [str(r) for r in rows],
        "controls_added": [str(c) for c in controls],
        "anchor": str(anchor) if anchor else None,
    }
    report = write_submission(sub.out, ed, facts)
    print(sub.out / "submission.md")
    print(report)
    return 0


def write_submission(out: Path, ed: Edition, facts: dict) -> Path:
    """OUT/board, its report OUT/report (returned), the verdicts, OUT/submission.json (`facts`
    and the verdict tables) and OUT/submission.md, from the run folders `facts` lists."""
    board = make_board(out, ed.folder, [Path(p) for p in facts["rows"] + facts["controls_added"]])
    report = write_report(board, out / "report")
    tables = verdict_tables(board, facts["router"])
    facts = {**facts, "verdicts": [asdict(t) for t in tables]}
    (out / "submission.json").write_text(json.dumps(facts, indent=1) + "\n")
    write_section(out, report, ed, tables, facts["notes"])
    return report


def rewrite(edition: str, out: str) -> int:
    """`hybridbench submit --verdicts-only`: a submission already run, its board, report and
    verdicts written again from its run folders and the edition's (no model loaded, nothing
    decoded): what a newer verdict rule or a changed edition page needs."""
    path = Path(out) / "submission.json"
    if not path.is_file():
        raise UserError(f"{path} not found: --verdicts-only rewrites a submission already run")
    facts = {k: v for k, v in json.loads(path.read_text()).items() if k != "verdicts"}
    ed = read_edition(edition)
    if (facts["task"], facts["split"]) != (ed.task, ed.split):
        raise UserError(
            f"{out} was submitted to {facts['task']}/{facts['split']}, not to "
            f"{ed.task}/{ed.split} ({edition})"
        )
    missing = [p for p in facts["rows"] + facts["controls_added"] if not Path(p).is_dir()]
    if missing:
        raise UserError(f"{missing[0]}: run folder not found (run from where it was submitted)")
    report = write_submission(Path(out), ed, facts)
    print(Path(out) / "submission.md")
    print(report)
    return 0


def _recorded(path: Path) -> str:
    """`path` as the runs record it (a run's identity): relative to the working directory when
    beneath it, so a submission inside a checkout resumes from another checkout of it (the same
    `--out`, run from its root), else absolute."""
    full = path.resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)
