"""Reports: read result folders and write the leaderboard (Markdown, static HTML, plots).
Imports no model code.

    from reports import load_runs, write_report
    write_report("runs/sweep1")            # -> runs/sweep1/report/leaderboard.html
    write_report("reports/published")      # an edition: a page per task and index.html
"""

from reports.leaderboard import write_report
from reports.load import load_runs

__all__ = ["load_runs", "write_report"]
