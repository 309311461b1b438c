"""Reports: read result folders and write leaderboards and plots. Imports no model code.

from reports import load_runs, write_report
write_report("runs/sweep1", "runs/sweep1/report")
"""

from reports.leaderboard import write_report
from reports.load import load_runs

__all__ = ["load_runs", "write_report"]
