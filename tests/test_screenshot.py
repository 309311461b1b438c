"""The HTML leaderboard renders in headless Chromium: a screenshot shows tables and plots.

Needs Debian's `chromium` (CI: apt-get update && apt-get install -y chromium); skipped without it.
"""

from __future__ import annotations

import shutil
import struct

import pytest

from reports import write_report
from reports.demo import write_demo_results
from tests import load_script


def screenshot_module():
    return load_script("screenshot_report")


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="chromium not installed (apt-get update && apt-get install -y chromium)",
)
def test_leaderboard_html_screenshot_shows_tables_and_plots(tmp_path):
    import matplotlib.image

    html = write_report(
        write_demo_results(tmp_path / "results", n_examples=12), tmp_path / "report"
    )
    png = screenshot_module().screenshot(html, tmp_path / "shot.png", size="1200,1800")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1200, 1800)  # IHDR width, height
    pixels = matplotlib.image.imread(png)[..., :3]
    dark = (pixels.mean(-1) < 0.5).mean()  # text, table rules and plot lines
    colour = (pixels.max(-1) - pixels.min(-1) > 0.3).mean()  # the plots' coloured marks
    assert dark > 0.005, "page looks blank"
    assert colour > 0.001, "no coloured plot marks on the page"
