"""The control runs a sweep folder still needs so that every router is paired at a matched share.

    hybridbench controls results/edition2/gsm8k        # lines "CONTROL P", one per run to add

Each router is compared with its control (`random` for token routers, `random_query` for query
routers: `reports.tables.control_of`) at a realized large-token share within MATCH (2
points). A calibrated router realizes a share of its own on test, and a control's realized share
differs from its p by chance, so an experiment (`hybridbench experiment run`) asks `needed` which
control runs to add and runs them, a few rounds until every router is matched.

How it aims. The router rows with no control run (nor small-only / large-only, the controls at
p = 0 and 1) within MATCH of their share are taken in order of share and grouped, each group
spanning at most SPAN (1.5 points), so that one control run serves every router of a group: one
control run per group, aimed at the group's middle s. Its p is interpolated between the two
control runs whose realized shares bracket s (p = s x asked / realized of the nearest run when
none bracket it, p = s when there is none): a control's realized share is not proportional to p
(random_query realizes less than its p where large's answers are shorter than small's, and how
much less depends on p), so a ratio taken far from s, or pooled over all runs, aims wide. A
control lands within about 1-2 points of its aim, so the middle of a 1.5-point group leaves each
of its routers matched most of the time. A p that a control run already has is not asked again
(that share cannot be reached by asking again). A control run started and not finished (an
experiment stopped in it) comes first, so that it is resumed. Reads files only.

Rows of one folder may cover different numbers of examples (an edition whose headline rows run on
the whole split and its other rows on the first 200): each run's target is the example count it
was asked for (its manifest's limit), and a router row is matched only by a control run whose
target is at least its own, so that the pair covers the row's examples. A control run asked
again at a larger target resumes its folder (the first examples are not decoded again).

The rows paired are each router's rows at the sweep's grid of shares (`reports.load.on_grid`):
a row aimed at another row's share (entropy aimed at learned's 0.179) is there to be compared
with that row, and asks for no control of its own.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.run_folder import RunFolder
from harness.errors import UserError
from reports.load import load_runs, on_grid
from reports.tables import CONTROL_ROUTERS, ENDS, UNCOMPARED, control_of
from reports.text import MATCH

SPAN = 0.015  # the widest group of router shares one control run is aimed at (see above)
BOUNDS = ("oracle", "speculative")  # bounds, not routing policies under test: no control


def with_targets(df):
    """`df` with `examples_done` (decoded or failed) and `target` (examples asked for) per row,
    each run's manifest read once: the target is its manifest's limit, else (no limit recorded,
    or rows without a folder) the folder's fullest run's count; 0 for rows with no counts."""
    if "target" in df:
        return df
    if "n" not in df:
        return df.assign(target=0)
    failed = df["n_failed"].fillna(0) if "n_failed" in df else 0
    done = df["n"].fillna(0) + failed
    fullest = done.max() if len(done) else 0
    if "limit" in df:  # rows that carry their limit (as the tests' frames do)
        limits = list(df["limit"])
    elif "path" in df:
        limits = [RunFolder(p).manifest().get("limit") if p else None for p in df["path"]]
    else:
        limits = [None] * len(df)
    target = [fullest if lim is None or lim != lim else lim for lim in limits]  # (NaN: none)
    return df.assign(examples_done=done, target=target)


def unfinished(df, routers=CONTROL_ROUTERS) -> list[tuple[str, float]]:
    """[(control, p)] for the runs of `routers` (default the controls) in `df` started but not
    finished: fewer examples decoded (or failed) than the run was asked for (`with_targets`).
    An experiment stopped mid-row resumes them here: their p is a setting a control run already
    has, so `needed` does not ask for it again, and their share so far counts as the share they
    aim at."""
    if "n" not in df or not len(df):
        return []
    df = with_targets(df)
    controls = df.router.isin(routers) & (df.examples_done < df.target)
    return [
        (r, round(float(p), 3))
        for r, p in zip(df.router[controls], df.setting_value[controls], strict=True)
    ]


def aim(runs, s: float) -> float:
    """The p for a control aimed at share `s`, from its `runs` (rows with setting_value = p and
    large_token_share): interpolated between the nearest runs below and above `s`, else the
    nearest run's asked / realized ratio, else `s`."""
    if not len(runs):
        return s
    share, p = runs.large_token_share.astype(float), runs.setting_value.astype(float)
    below, above = share[share <= s], share[share > s]
    if len(below) and len(above):
        lo, hi = below.idxmax(), above.idxmin()
        if p[hi] > p[lo]:
            return p[lo] + (s - share[lo]) * (p[hi] - p[lo]) / (share[hi] - share[lo])
    near = (share - s).abs().idxmin()
    return s * p[near] / share[near]


def aimed_value(runs, s: float) -> float:
    """`aim`, kept within (0, 1] and rounded as a run's setting is asked (3 decimals)."""
    return round(min(max(float(aim(runs, s)), 0.001), 1.0), 3)


def pairs_of(routers) -> dict[str, tuple[str, ...]]:
    """{control: routers paired with it} for the routers under test among `routers` (not the
    ends, the controls themselves or the bounds); `random` first."""
    pairs: dict[str, list[str]] = {}
    for router in dict.fromkeys(routers):
        if router not in (*UNCOMPARED, *BOUNDS):
            pairs.setdefault(control_of(router), []).append(router)
    order = sorted(pairs, key=lambda c: (c != "random", c))
    return {c: tuple(pairs[c]) for c in order}


def needed(df, pairs: dict[str, tuple[str, ...]] | None = None) -> list[tuple[str, float]]:
    """[(control, p)] for the rows of `df` (reports.load.load_runs) that no control run matches,
    after the control runs still unfinished (`unfinished`). `pairs`: {control: the routers it is
    paired with}; default every router of `df` with its own control (`pairs_of`)."""
    df = with_targets(df)
    out = unfinished(df)
    if not len(df):
        return out
    subject = on_grid(df)  # a row aimed at another row's share is not paired with a control
    for control, routers in (pairs if pairs is not None else pairs_of(df.router)).items():
        runs = df[(df.router == control) & (df.large_token_share > 0)]
        # each target in turn, largest first: its rows matched by control runs covering it
        for target in sorted(set(df[df.router.isin(routers) & subject].target), reverse=True):
            full = df[df.target >= target]
            have_p = {round(float(p), 3) for p in runs[runs.target >= target].setting_value}
            # (a control run started but with nothing decoded yet has no share: NaN matches none)
            shares = list(full[full.router.isin([control, *ENDS])].large_token_share.dropna())
            mine = df[df.router.isin(routers) & (df.target == target) & subject]
            alone = sorted(
                float(s)
                for s in mine.large_token_share.dropna()
                if all(abs(s - r) > MATCH for r in shares)
            )
            while alone:
                group = [s for s in alone if s - alone[0] <= SPAN]
                alone = alone[len(group) :]
                s = (group[0] + group[-1]) / 2
                p = aimed_value(runs, s)
                if p not in have_p and (control, p) not in out:
                    out.append((control, p))
    return out


def needed_in(folder: str | Path, pairs: dict[str, tuple[str, ...]] | None = None):
    """`needed` for the runs of a sweep folder ([] for a folder with no run yet)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder (a sweep's folder: one run folder per row)")
    df = load_runs(folder)
    return needed(df, pairs) if len(df) else []
