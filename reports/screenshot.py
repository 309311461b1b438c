"""Render a leaderboard page in headless Chromium: a screenshot, and the layout measured at a
given screen size (does the page scroll sideways, where does its headline end).

    python -m reports.screenshot reports/published/index.html docs/images/index-420.png --size 420,900
    >>> layout(Path("reports/published/index.html"), 420, 900)
    Layout(width=420, height=900, scroll_width=420, scroll_height=3012, headline_bottom=190.5, ...)

Chromium (Debian's `chromium`: apt-get install -y chromium) is driven over its DevTools pipe
(`--remote-debugging-pipe`: JSON messages on file descriptors 3 and 4, no port, no network),
with a fresh profile. A width under 600 px is emulated as a phone (a mobile viewport, which
honours the page's viewport tag); headless Chromium's own window cannot be narrower than 500 px.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PHONE_BELOW = 600  # px: narrower screens are emulated as a phone
TIMEOUT_S = 60
MEASURE = """JSON.stringify({
  scroll_width: document.documentElement.scrollWidth,
  scroll_height: document.documentElement.scrollHeight,
  inner_width: window.innerWidth,
  headline_bottom: (document.getElementById('headline') || {getBoundingClientRect: () =>
    ({bottom: NaN})}).getBoundingClientRect().bottom,
  first_table_top: (document.querySelector('table') || {getBoundingClientRect: () =>
    ({top: NaN})}).getBoundingClientRect().top,
})"""


@dataclass(frozen=True)
class Layout:
    """A page laid out on a screen of `width` x `height` CSS pixels."""

    width: int  # the screen asked for
    height: int
    inner_width: int  # the layout viewport Chromium used (wider than `width`: it zoomed out)
    scroll_width: int  # the page's width: more than `width` means it scrolls sideways
    scroll_height: int  # the page's height
    headline_bottom: float  # where the element with id="headline" ends (NaN: none)
    first_table_top: float  # where the first table starts (NaN: none)


def chromium() -> str:
    """The Chromium binary, or a SystemExit saying how to install it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("chromium not found: apt-get update && apt-get install -y chromium")
    return found


class _Browser:
    """A headless Chromium with one page, driven over the DevTools pipe."""

    def __init__(self, width: int, height: int):
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
        to_child, self._write = os.pipe()  # the browser reads commands on its fd 3
        self._read, from_child = os.pipe()  # and writes answers on its fd 4

        def fds() -> None:  # runs in the child: move the pipe ends to 3 and 4
            a, b = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child))
            os.dup2(a, 3)
            os.dup2(b, 4)

        cmd = [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile.name}",
            "about:blank",
        ]
        self._proc = subprocess.Popen(
            cmd,
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer, self._id = b"", 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.call("Page.enable", session=True)
        metrics = {
            "width": width,
            "height": height,
            "deviceScaleFactor": 1,
            "mobile": width < PHONE_BELOW,
        }
        self.call("Emulation.setDeviceMetricsOverride", metrics, session=True)

    def _send(self, method: str, params: dict | None, session: bool) -> int:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self._session
        os.write(self._write, json.dumps(msg).encode() + b"\0")
        return self._id

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(line)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        """Send a DevTools command and return its result (events met meanwhile are dropped)."""
        i = self._send(method, params, session)
        while True:
            msg = self._message()
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def open(self, url: str) -> None:
        """Navigate and wait for the page's load event (its images decoded)."""
        self._send("Page.navigate", {"url": url}, session=True)
        while self._message().get("method") != "Page.loadEventFired":
            pass

    def close(self) -> None:
        try:
            self._send("Browser.close", None, session=False)
            self._proc.wait(timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
        finally:
            os.close(self._write)
            os.close(self._read)
            self._profile.cleanup()


def render(html: Path, width: int, height: int, png: Path | None = None) -> Layout:
    """Lay `html` out on a `width` x `height` screen; with `png`, save what the screen shows."""
    browser = _Browser(width, height)
    try:
        browser.open(Path(html).resolve().as_uri())
        value = browser.call(
            "Runtime.evaluate", {"expression": MEASURE, "returnByValue": True}, session=True
        )["result"]["value"]
        if png is not None:
            shot = browser.call("Page.captureScreenshot", {"format": "png"}, session=True)
            Path(png).write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.close()
    got = {k: (float("nan") if v is None else v) for k, v in json.loads(value).items()}
    return Layout(width, height, **got)


def layout(html: Path, width: int, height: int) -> Layout:
    """The layout of `html` on a `width` x `height` screen (`render` without a screenshot)."""
    return render(html, width, height)


def screenshot(html: Path, out: Path, width: int = 1366, height: int = 900) -> Path:
    """Save a PNG of what a `width` x `height` screen shows of `html`; return its path."""
    render(html, width, height, out)
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reports.screenshot", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("html", help="a leaderboard page (leaderboard.html, index.html)")
    parser.add_argument("out", help="PNG to write")
    parser.add_argument("--size", default="1366,900", help="screen width,height in CSS px")
    args = parser.parse_args(argv)
    width, height = (int(x) for x in args.size.split(","))
    result = render(Path(args.html), width, height, Path(args.out))
    print(f"{args.out}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
