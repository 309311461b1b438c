"""The quality tables of a task page: the quality goal, the paired verdicts, the runs, the
routers' curve metrics and the transfer runs, each a `Table` of text cells.

Every table here reads one `TaskRuns` (a task's runs, loaded once, with the settings of its
routers written for reading) and is a pure function of it:

    >>> task = TaskRuns.of(add_speed(load_runs("reports/published/mbpp")))
    >>> goal_table(task).rows[0]
    ('speculative', 'fixed k', '0.229', '0.545 [0.475, 0.615]', '105.0%', 'better', ...)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

import pandas as pd

from harness.core.run_folder import RunFolder
from harness.metrics import verdicts
from harness.metrics.frontier import aiq, apgr, cpt, pgr
from reports.load import REFERENCES, RUN_ORDER, at_grid, decoded, flag
from reports.plots import reference
from reports.text import (
    COMPARISON_HEADER,
    GOAL_SHARE,
    MATCH,
    comparison_cells,
    constant_args,
    constants_note,
    n_mark,
    nearest_share,
    num,
    pct,
    quality_cell,
    ratio_cells,
    setting_text,
)

GB = 1e9
CONTROLS = {"query": "random_query"}  # the control of each router; the others: `random`
CONTROL_ROUTERS = ("random", *CONTROLS.values())
UNCOMPARED = (*REFERENCES, *CONTROL_ROUTERS)  # rows that are not compared to a control
ENDS = ("small", "large")  # the controls at shares 0 and 1: the same policies
EMPTY = "No runs for this table in this folder."


def control_of(router: str) -> str:
    """The control a router is paired with at a matched share."""
    return CONTROLS.get(router, "random")


@dataclass(frozen=True)
class Table:
    """A table as text cells, rendered to both Markdown and HTML."""

    title: str  # section heading
    header: tuple[str, ...]  # column names
    rows: tuple[tuple[str, ...], ...]  # formatted cells, one tuple per row
    note: str = ""  # a line under the table: its order, arguments its rows share
    marks: bool = False  # the first cell of a row starts with a router name (HTML: its glyph)
    wrap: bool = False  # HTML: let number cells wrap too (a matrix of short phrases)


@dataclass(frozen=True)
class TaskRuns:
    """One task's runs as the tables read them (`TaskRuns.of`)."""

    runs: pd.DataFrame  # the task's own runs (speed columns added: reports.load.add_speed)
    transfer: pd.DataFrame  # runs of routers trained on another task
    routers: pd.DataFrame  # `router_metrics` of `runs`
    constants: dict  # router -> the arguments all its runs share (reports.text.constant_args)
    records: dict = field(default_factory=dict, compare=False)  # run path -> its records, read once
    pairs: dict = field(default_factory=dict, compare=False)  # run path -> its Pairing (`pairing`)

    @classmethod
    def of(cls, df: pd.DataFrame) -> TaskRuns:
        """Split a task's runs into its own and transfer runs, and compute what tables share
        (each run's references on its own examples: `own_references`, whose reads of the
        records are kept for the pairings)."""
        records: dict = {}
        df = own_references(df, records)
        moved = df["transfer"].fillna(False).astype(bool) if "transfer" in df else None
        own = df[~moved] if moved is not None else df
        transfer = df[moved] if moved is not None else df.iloc[:0]
        args = {}
        for r, a in zip(df["router"], df["router_args"], strict=True):
            args.setdefault(r, []).append(json.loads(a))
        return cls(own, transfer, router_metrics(own), constant_args(args), records)

    @property
    def all_runs(self) -> pd.DataFrame:
        return pd.concat([self.runs, self.transfer]) if len(self.transfer) else self.runs

    def setting(self, r) -> str:
        """Row `r`'s setting for reading, without the arguments all its router's runs share."""
        args = json.loads(r["router_args"])
        shared = self.constants.get(r["router"], {})
        return setting_text(args, [k for k in args if k not in shared])

    def scores(self, path: str) -> list[dict]:
        if path not in self.records:
            self.records[path] = RunFolder(path).lines()
        return self.records[path]

    def pairing(self, r) -> Pairing:
        """Run `r` (a router's, not a control's) paired with its control (`pair`), its p
        adjusted over the page's family: every such pair of the task's own and transfer runs."""
        if not self.pairs:
            rows = self.all_runs[~self.all_runs["router"].isin(UNCOMPARED)]
            raw = {
                path: pair(r, self.runs, self)
                for path, (_, r) in zip(rows["path"], rows.iterrows(), strict=True)
            }
            adjusted = verdicts.family([p.comparison for p in raw.values()])
            for (path, p), c in zip(raw.items(), adjusted, strict=True):
                self.pairs[path] = replace(p, comparison=c)
        return self.pairs[r["path"]]

    def references(self) -> tuple[float, float]:
        """Small-only's and large-only's mean quality (NaN where missing)."""
        return reference(self.runs, "small", "quality"), reference(self.runs, "large", "quality")


def is_transfer(r) -> bool:
    return flag(r, "transfer")


def own_references(df: pd.DataFrame, records: dict | None = None) -> pd.DataFrame:
    """`df` with `ref_small` and `ref_large`: small-only's and large-only's mean quality on the
    examples each run scored, and `on_fewer`: whether it scored fewer than they did. A run that
    scored as many examples as they did has the task's references (every run of a task takes
    the first n examples of its split, the same for all); a run on fewer examples (a row of an
    earlier edition's n beside references on the whole split) has theirs on its own examples,
    so its gap recovered compares like with like. NaN where a reference is missing or several
    runs of it disagree in n. `records` (run path -> its records) caches what is read."""
    records = {} if records is None else records

    q_small, q_large = reference(df, "small", "quality"), reference(df, "large", "quality")
    df = df.assign(ref_small=q_small, ref_large=q_large, on_fewer=False)
    refs = {}
    for ref in ("small", "large"):
        runs = df[(df["router"] == ref) & df["n"].map(decoded)]
        refs[ref] = runs.iloc[0] if len(runs) == 1 else None
    if any(v is None for v in refs.values()) or len({int(v["n"]) for v in refs.values()}) > 1:
        return df
    n_refs = int(refs["small"]["n"])
    fewer = df["n"].map(decoded) & (df["n"].fillna(0).astype(int) < n_refs)
    if not fewer.any():
        return df
    df.loc[fewer, "on_fewer"] = True
    metric = str(refs["small"]["metric"])

    def scores(path: str) -> dict[str, float]:
        if path not in records:
            records[path] = RunFolder(path).lines()
        return verdicts.example_scores(records[path], metric)

    by_ref = {k: scores(v["path"]) for k, v in refs.items()}
    for i in df.index[fewer]:
        ids = scores(df.at[i, "path"]).keys()
        for ref, col in (("small", "ref_small"), ("large", "ref_large")):
            own = [by_ref[ref][x] for x in ids if x in by_ref[ref]]
            df.at[i, col] = sum(own) / len(own) if len(own) == len(ids) else math.nan
    return df


def gap(r) -> float:
    """Run `r`'s gap recovered, against small-only and large-only on its own examples."""
    return pgr(r["quality"], r["ref_small"], r["ref_large"])


def router_label(r) -> str:
    """A row's router, marked when it was trained on another task."""
    return f"{r['router']} (transfer)" if is_transfer(r) else r["router"]


def router_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Per non-reference router of one task: APGR on both share axes, CPT(50/80%) and AIQ,
    best APGR (token) first.

    The references are the mean qualities of the task's `small` and `large` runs; every metric is
    NaN when either is missing (see `harness.metrics.frontier` for the definitions). A router
    whose runs scored fewer examples than the references (`own_references`) is read through each
    run's gap recovered on its own examples, at that gap on the references' scale.
    """
    q_small, q_large = reference(df, "small", "quality"), reference(df, "large", "quality")
    rows = []
    for router, g in df[~df["router"].isin(REFERENCES)].groupby("router"):
        g = g[g["n"].map(decoded)]  # a run with no example yet has no quality and no share
        tok, call, q = g["large_token_share"], g["large_call_share"], g["quality"]
        refs_ok = not (math.isnan(q_small) or math.isnan(q_large))
        mixed = "on_fewer" in g and g["on_fewer"].any()
        if mixed and refs_ok:  # runs on different examples: each run's gap on its own ones,
            # its quality put on the references' scale for AIQ, the curves through those
            gaps = [gap(r) for _, r in g.iterrows()]
            q = pd.Series([q_small + x * (q_large - q_small) for x in gaps], index=g.index)
        if not len(g):  # nothing measured: not the random line that empty curves would give
            rows.append({"router": router, "settings": 0})
            continue
        rows.append(
            {
                "router": router,
                "settings": len(g),
                "apgr_token": apgr(tok, q, q_small, q_large),
                "apgr_call": apgr(call, q, q_small, q_large),
                "cpt50": cpt(tok, q, q_small, q_large, 0.5),
                "cpt80": cpt(tok, q, q_small, q_large, 0.8),
                "aiq": aiq([*tok, 0.0, 1.0], [*q, q_small, q_large], (0.0, 1.0))
                if refs_ok
                else math.nan,
            }
        )
    out = pd.DataFrame(
        rows, columns=["router", "settings", "apgr_token", "apgr_call", "cpt50", "cpt80", "aiq"]
    )
    key = out["apgr_token"].fillna(-math.inf)
    return (
        out.assign(_k=-key).sort_values(["_k", "router"]).drop(columns="_k").reset_index(drop=True)
    )


def ordered_runs(df: pd.DataFrame, routers: pd.DataFrame) -> pd.DataFrame:
    """Large-only, small-only, then the routers by APGR (token), each router's runs by the
    large-token share they realized; transfer runs last."""
    rank = {r: i for i, r in enumerate(("large", "small", *routers["router"]))}
    last = len(rank) + 1
    df = df.assign(
        _rank=[
            rank.get(r, len(rank)) + (last if is_transfer(row) else 0)
            for r, (_, row) in zip(df["router"], df.iterrows(), strict=True)
        ]
    )
    df = df.sort_values(["_rank", *(k for k in RUN_ORDER if k in df.columns)], na_position="last")
    return df.drop(columns="_rank")


@dataclass(frozen=True)
class Pairing:
    """A run against its control's run at the nearest large-token share."""

    control: str  # the control run ('random p = 0.1'), or why there is none
    control_share: str  # its large-token share, '(not matched)' beyond MATCH
    n: int | None  # examples both scored; None: no control run
    comparison: verdicts.Comparison  # the paired test (`verdicts.NOTHING` when there is none)

    @property
    def verdict(self) -> str:  # better | worse | no difference | —
        return self.comparison.verdict


def pair(r, controls: pd.DataFrame, task: TaskRuns) -> Pairing:
    """Run `r` paired with the run of its control (`control_of`) in `controls` whose share is
    nearest; small-only and large-only are every control's end points (random at p = 0 and 1).
    Its p is its own (a family of one): `TaskRuns.pairing` adjusts the page's together."""
    control = control_of(r["router"])
    if not decoded(r.get("n")):  # nothing to pair yet
        return Pairing("nothing decoded yet", "—", 0, verdicts.NOTHING)
    pool = controls[controls["router"].isin([control, *ENDS])]
    near, gap = nearest_share(pool, r["large_token_share"])
    matched = gap <= MATCH
    if not (matched or (pool["router"] == control).any()):  # an end alone must be matched
        return Pairing(f"no {control} run", "—", None, verdicts.NOTHING)
    c = pool.loc[near]
    d = verdicts.compare_records(task.scores(r["path"]), task.scores(c["path"]), r["metric"])
    setting = "—" if c["router"] in ENDS else task.setting(c)
    return Pairing(
        c["router"] if setting == "—" else f"{c['router']} {setting}",
        num(c["large_token_share"]) + ("" if matched else " (not matched)"),
        d.n,
        d,
    )


def goal_runs(df: pd.DataFrame) -> list:
    """Per router (its transfer runs apart), its best run at a large-token share <= GOAL_SHARE
    among its runs at the sweep's grid shares (`grid_shares`: a row aimed at another row's share
    would give a router one more draw at the maximum), any of its runs where it has none there
    (the oracle's run whatever its share), best first: by quality, or, where some run scored
    fewer examples than the references (`own_references`), by the gap each run recovers on its
    own examples."""
    mixed = "on_fewer" in df and df["on_fewer"].any()
    df = df.assign(_k=-(df.apply(gap, axis=1).fillna(-math.inf) if mixed else df["quality"]))
    best = []
    on_grid = at_grid(df)
    transfer = df["router"].where(~df.apply(is_transfer, axis=1), df["router"] + " (transfer)")
    for _, g in df[~df["router"].isin(REFERENCES)].groupby(transfer):
        if g["router"].iloc[0] != "oracle":
            g = g[g["large_token_share"] <= GOAL_SHARE]
        if on_grid[g.index].any():  # its runs at the grid's shares: aimed rows are no more draws
            g = g[on_grid[g.index]]
        if len(g):
            best.append(g.sort_values(["_k", "run"]).iloc[0])
    best.sort(key=lambda r: (r["_k"], router_label(r)))  # PGR's order where there is a gap
    return [r.drop("_k") for r in best]


def goal_table(task: TaskRuns) -> Table:
    """The quality goal, per router: its best run at a large-token share <= GOAL_SHARE, the gap
    it recovers (on its own examples, n given where fewer than the references'), its verdict
    against its control and its speed relative to large-only's."""
    rows = []
    for r in goal_runs(task.all_runs):
        vs = "control" if r["router"] in CONTROL_ROUTERS else task.pairing(r).verdict
        rows.append(
            (
                router_label(r),
                pct(gap(r)) + n_mark(int(r["n"]) if r.get("on_fewer") else 0),
                vs,
                num(r["large_token_share"]),
                quality_cell(r),
                *ratio_cells(r),
                task.setting(r),
            )
        )
    # the answer's columns first: on a phone the table scrolls sideways from the left
    header = (
        "router",
        "gap recovered",
        "vs control",
        "large token share",
        "quality [95% CI]",
        "× large-only, measured",
        "× large-only, modeled",
        "setting",
    )
    title = f"Quality goal: the most of the gap at <= {GOAL_SHARE:.0%} large tokens"
    note = (
        "Sorted by gap recovered, best first. Each router's runs at the sweep's grid of shares "
        "only, where it has any (a row aimed at another row's share is no extra draw). "
        + constants_note(task.constants, rows)
    )
    return Table(title, header, tuple(rows), note.strip(), marks=True)


def runs_table(task: TaskRuns) -> Table:
    """The leaderboard proper: one row per run, references first, then routers by APGR."""
    apgr_of = {
        r: (a, c)
        for r, a, c in zip(
            task.routers["router"],
            task.routers["apgr_token"],
            task.routers["apgr_call"],
            strict=True,
        )
    }
    rows = []
    for _, r in ordered_runs(task.runs, task.routers).iterrows():
        a_tok, a_call = apgr_of.get(r["router"], (math.nan, math.nan))
        rows.append(
            (
                r["router"],
                task.setting(r),
                f"{int(r['n'])}" + (f" ({int(r['n_failed'])} failed)" if r["n_failed"] else ""),
                quality_cell(r),
                num(r["large_token_share"]),
                num(r["large_call_share"]),
                num(a_tok),
                num(a_call),
                num(r.get("bytes_total", math.nan) / GB, 2),
                num(r.get("bytes_large", math.nan) / GB, 2),
            )
        )
    header = (
        "router",
        "setting",
        "n",
        "quality [95% CI]",
        "large token share",
        "large call share",
        "APGR (token)",
        "APGR (call)",
        "GB moved/example",
        "of which large",
    )
    note = (
        "Large-only and small-only first, then the routers by APGR (token), best first; a "
        "router's runs by the large-token share they realized. "
        + constants_note(task.constants, rows)
    )
    return Table("Runs", header, tuple(rows), note.strip(), marks=True)


def routers_table(task: TaskRuns) -> Table:
    """One row per router: its curve's APGR on both axes, CPT(50%), CPT(80%) and AIQ."""
    rows = tuple(
        (
            r["router"],
            str(r["settings"]),
            num(r["apgr_token"]),
            num(r["apgr_call"]),
            pct(r["cpt50"]),
            pct(r["cpt80"]),
            num(r["aiq"]),
        )
        for _, r in task.routers.iterrows()
    )
    header = ("router", "settings", "APGR (token)", "APGR (call)", "CPT(50%)", "CPT(80%)", "AIQ")
    return Table("Routers", header, rows, "Sorted by APGR (token), best first.", marks=True)


def paired_table(
    task: TaskRuns, transfer: bool = False, title: str = "Paired vs control at the same share"
) -> Table:
    """Every router's run (`transfer`: every transfer run) against its control's run at the
    nearest large-token share, paired, the controls always the task's own runs."""
    df = task.transfer if transfer else task.runs
    rows = []
    for _, r in df[~df["router"].isin(UNCOMPARED)].iterrows():
        p = task.pairing(r)
        share = num(r["large_token_share"]) if decoded(r.get("n")) else "—"
        n = "—" if p.n is None else str(p.n)
        rows.append(
            (
                r["router"],
                task.setting(r),
                share,
                p.control,
                p.control_share,
                n,
                *comparison_cells(p.comparison),
            )
        )
    header = (
        "router",
        "setting",
        "large token share",
        "control",
        "its share",
        "paired n",
        *COMPARISON_HEADER,
    )
    note = "By router, then large-token share. " + constants_note(task.constants, rows)
    return Table(title, header, tuple(rows), note.strip(), marks=True)


def transfer_table(task: TaskRuns) -> Table:
    """Runs of routers trained on another task."""
    rows = tuple(
        (
            r["router"],
            task.setting(r),
            str(r.get("router_trained_on") or "—"),
            f"{int(r['n'])}",
            quality_cell(r),
            num(r["large_token_share"]),
            num(r["large_call_share"]),
        )
        for _, r in task.transfer.sort_values(["router", "large_token_share", "run"]).iterrows()
    )
    header = (
        "router",
        "setting",
        "trained on",
        "n",
        "quality [95% CI]",
        "large token share",
        "large call share",
    )
    note = "By router, then large-token share."
    return Table("Transfer: routers trained on another task", header, rows, note, marks=True)
