"""The control runs a sweep folder still needs so that every router is paired at a matched share.

Each router is compared with its control (`random` for token routers, `random_query` for the
query router: reports.leaderboard.CONTROLS) at a realized large-token share within MATCH (2
points). A calibrated router realizes a share of its own on test, and a control's realized
share differs from its p by chance, so scripts/issue14_runs.sh asks this script which control
runs to add and runs them, a few rounds until every router is matched:

    python scripts/matched_controls.py results/edition2/gsm8k      # lines "ROUTER P"

The router rows with no control run (or small-only / large-only, the controls at p = 0 and 1)
within MATCH of their share are taken in order of share and grouped, each group spanning at most
SPAN (1.5 points), so that one control run serves every router of a group: one line per group,
the control aimed at the group's middle s. Its p is interpolated between the two control runs
whose realized shares bracket s (p = s x asked / realized of the nearest run when none bracket
it, p = s when there is none): a control's realized share is not proportional to p (random_query
on mbpp realized 0.55 of its p at p = 0.1 and 0.80 at 0.6, since large's answers are shorter
than small's), so a ratio taken far from s, or pooled over all runs, aims wide (three rounds
missed mbpp's query 0.35 that way). A control lands within about 1-2 points of its aim (mbpp's
four random controls: 0.3-2.2), so the middle of a 1.5-point group leaves each of its routers
matched most of the time. A p that a control run already has is not printed again (that share
cannot be reached by asking again). A control run started and not finished (the chain stopped
in it) is printed first, so that the chain resumes it. Reads files only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKEN_ROUTERS = ("entropy", "confidence", "reward", "citer")
QUERY_ROUTERS = ("query",)
SPAN = 0.015  # the widest group of router shares one control run is aimed at (see above)


def unfinished(df) -> list[tuple[str, float]]:
    """[(control, p)] for the control runs of `df` started but not finished: fewer examples
    decoded (or failed) than the folder's fullest run, every row covering the same examples. A
    chain stopped mid-row resumes them here: their p is a setting a control run already has, so
    `needed` does not print it again, and their share so far counts as the share they aim at."""
    from reports.leaderboard import CONTROL_ROUTERS

    if "n" not in df or not len(df):
        return []
    failed = df["n_failed"].fillna(0) if "n_failed" in df else 0
    done = df["n"].fillna(0) + failed
    controls = df.router.isin(CONTROL_ROUTERS) & (done < done.max())
    return [(r, round(float(p), 3)) for r, p in zip(df.router[controls],
            df.setting_value[controls], strict=True)]  # fmt: skip


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


def needed(df) -> list[tuple[str, float]]:
    """[(control, p)] for the rows of `df` (reports.load.load_runs) no control run matches, after
    the control runs still unfinished (`unfinished`)."""
    from reports.leaderboard import ENDS, MATCH, control_of

    out = unfinished(df)
    for routers in (TOKEN_ROUTERS, QUERY_ROUTERS):
        control = control_of(routers[0])
        runs = df[(df.router == control) & (df.large_token_share > 0)]
        have_p = {round(float(p), 3) for p in runs.setting_value}
        # (a control run started but with nothing decoded yet has no share: NaN matches nothing)
        shares = list(df[df.router.isin([control, *ENDS])].large_token_share.dropna())
        alone = sorted(float(s) for s in df[df.router.isin(routers)].large_token_share.dropna()
                       if all(abs(s - r) > MATCH for r in shares))  # fmt: skip
        while alone:
            group = [s for s in alone if s - alone[0] <= SPAN]
            alone = alone[len(group) :]
            s = (group[0] + group[-1]) / 2
            p = aim(runs, s)
            p = round(min(max(p, 0.001), 1.0), 3)
            if p not in have_p and (control, p) not in out:
                out.append((control, p))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a sweep folder (one task's runs)")
    args = ap.parse_args()
    from reports.load import load_runs

    if not args.folder.is_dir():
        print(f"not a folder: {args.folder}", file=sys.stderr)
        return 2
    df = load_runs(args.folder)
    for control, p in needed(df) if len(df) else []:
        print(control, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
