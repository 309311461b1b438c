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
the control aimed at the group's middle s, at p = s x (sum of p / sum of realized shares) over
the control's runs in the folder (p = s when there is none): the control's own ratio of asked to
realized share corrects the guess, pooled because one run's ratio is noisy (mbpp's random runs:
0.96, 1.11, 1.11 realized per asked; gsm8k's 1.02-1.10). A control aimed so lands within about a
point of its aim (gsm8k: 0.1-0.9 points), so the middle of a 1.5-point group leaves each of its
routers matched with room to spare. A p that a control run already has is not printed again (that share cannot be reached
by asking again). A control run started and not finished (the chain stopped in it) is printed
first, so that the chain resumes it. Reads files only.
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
            p = s * (float(runs.setting_value.sum()) / float(runs.large_token_share.sum())
                     if len(runs) else 1.0)  # fmt: skip
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
