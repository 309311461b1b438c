"""The leaderboard renders in headless Chromium: on a phone-sized screen (420 px wide) no page
scrolls sideways and the headline is on the first screen; a screenshot shows tables and plots.

Needs Debian's `chromium` (CI: apt-get update && apt-get install -y chromium); skipped without it.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from reports import write_report
from reports.demo import write_demo_results
from reports.screenshot import layout, screenshot

ROOT = Path(__file__).resolve().parents[1]
PHONE = (420, 900)  # CSS px: a phone held upright
LAPTOP = (1366, 900)

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="chromium not installed (apt-get update && apt-get install -y chromium)",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """An edition of two synthetic tasks: a task page each and the index."""
    root = tmp_path_factory.mktemp("edition")
    for task in ("arith", "other"):
        write_demo_results(root / task, n_examples=12)
    return write_report(root).parent


def pages(site: Path) -> list[Path]:
    return [site / "index.html", *sorted(site.glob("*/report/leaderboard.html"))]


def test_phone_screen_needs_no_sideways_scroll_and_shows_the_headline(site):
    for page in pages(site):
        got = layout(page, *PHONE)
        assert got.inner_width == PHONE[0], f"{page}: laid out {got.inner_width} px wide"
        assert got.scroll_width <= PHONE[0], f"{page}: scrolls sideways ({got.scroll_width} px)"
        assert not math.isnan(got.headline_bottom), f"{page}: no headline"
        assert got.headline_bottom <= PHONE[1], f"{page}: headline below the first screen"
        assert got.first_table_top < PHONE[1], f"{page}: no table on the first screen"


def test_published_site_on_a_phone():
    """The committed edition's index and task pages, as a reader's phone shows them."""
    published = ROOT / "reports" / "published"
    for page in pages(published):
        got = layout(page, *PHONE)
        assert got.scroll_width <= PHONE[0], f"{page}: scrolls sideways ({got.scroll_width} px)"
        assert got.headline_bottom <= PHONE[1], f"{page}: headline below the first screen"


def test_screenshot_shows_tables_and_plots(site, tmp_path):
    import matplotlib.image

    from reports.render import png_size

    page = site / "arith" / "report" / "leaderboard.html"
    png = screenshot(page, tmp_path / "shot.png", LAPTOP[0], 1800)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and png_size(data) == (LAPTOP[0], 1800)
    pixels = matplotlib.image.imread(png)[..., :3]
    dark = (pixels.mean(-1) < 0.5).mean()  # text, table rules and plot lines
    colour = (pixels.max(-1) - pixels.min(-1) > 0.3).mean()  # the plots' coloured marks
    assert dark > 0.005, "page looks blank"
    assert colour > 0.001, "no coloured plot marks on the page"
