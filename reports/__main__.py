"""`python -m reports RESULTS_DIR [OUT_DIR]`: write the leaderboard of a results folder."""

import argparse
import sys

from harness.errors import UserError
from reports.leaderboard import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
    parser.add_argument("results_dir", help="folder of run directories (or one run directory)")
    parser.add_argument(
        "out_dir",
        nargs="?",
        help="where to write (default RESULTS_DIR/report; an edition: RESULTS_DIR itself)",
    )
    args = parser.parse_args(argv)
    try:
        path = write_report(args.results_dir, args.out_dir)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
