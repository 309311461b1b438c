"""Screenshot a leaderboard HTML page with headless Chromium, to check that tables and plots render.

    python scripts/screenshot_report.py REPORT.html out.png
    python scripts/screenshot_report.py --demo /tmp/demo out.png   # synthetic runs -> report -> PNG

Needs Debian's `chromium` (apt-get install -y chromium). Chromium runs with a fresh profile
directory, no network features and no sandbox (it usually runs as root in containers).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere without installing the package


def screenshot(html: Path, out: Path, size: str = "1400,2000", chromium: str = "") -> Path:
    """Render `html` in headless Chromium at `size` (width,height) and save a PNG at `out`."""
    binary = chromium or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(binary).exists():
        raise SystemExit("chromium not found: apt-get update && apt-get install -y chromium")
    out = out.resolve()
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
            f"--screenshot={out}", f"--window-size={size}", html.resolve().as_uri(),
        ]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    if not out.is_file():
        raise SystemExit(f"chromium wrote no screenshot at {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="leaderboard.html, or with --demo a folder to fill")
    parser.add_argument("out", help="PNG to write")
    parser.add_argument("--demo", action="store_true", help="build a synthetic report first")
    parser.add_argument("--size", default="1400,2000", help="window width,height")
    args = parser.parse_args(argv)
    html = Path(args.source)
    if args.demo:
        from reports import write_report
        from reports.demo import write_demo_results

        results = write_demo_results(html / "results", n_examples=200)
        html = write_report(results, html / "report")
    print(screenshot(html, Path(args.out), args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
