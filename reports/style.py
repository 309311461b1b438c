"""One colour and one marker per router, the same on every page and in every plot.

    >>> style("entropy")
    Style(color='#e69f00', marker='o', symbol='●')

The built-in routers have fixed entries (Okabe and Ito's colour-blind-safe palette without its
yellow, which washes out on white, then Paul Tol's darker tones); any other router takes a colour
and marker from its name's CRC-32, so a user's router keeps its look from task to task and from
one edition to the next. `symbol` is the marker as a text glyph, drawn beside the router's name
in the HTML tables so that a table row and its plot mark are found by eye.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Style:
    """How a router is drawn."""

    color: str  # hex colour of its marks, lines and table glyph
    marker: str  # matplotlib marker of its points
    symbol: str  # the same marker as a text glyph for the HTML tables


GLYPHS = {
    "o": "●",
    "s": "■",
    "D": "◆",
    "^": "▲",
    "v": "▼",
    "P": "✚",
    "X": "✖",
    "*": "★",
    "h": "⬢",
    "p": "⬟",
    "<": "◀",
    ">": "▶",
    "d": "◆",
}

ROUTER_STYLES = {
    "entropy": ("#e69f00", "o"),  # orange
    "confidence": ("#56b4e9", "s"),  # sky blue
    "citer": ("#009e73", "D"),  # bluish green
    "reward": ("#0072b2", "^"),  # blue
    "query": ("#d55e00", "v"),  # vermilion
    "speculative": ("#cc79a7", "P"),  # reddish purple
    "learned": ("#882255", "h"),  # wine
    "r2r": ("#88ccee", "d"),  # cyan
    "oracle": ("#332288", "*"),  # indigo
    "random": ("#555555", "X"),  # dark grey: the control of the token routers
    "random_query": ("#8c564b", "p"),  # brown: the control of the query router
    "small": ("#999999", "<"),  # the references, drawn as dashed lines in the plots
    "large": ("#000000", ">"),
}
# for routers without an entry: dark enough on white, none close to a built-in's colour
SPARE_COLORS = ("#117733", "#aa4499", "#661100", "#6699cc", "#999933", "#44aa99", "#dd4477")
SPARE_MARKERS = ("d", "h", "p", "<", ">", "*")


def style(router: str) -> Style:
    """The colour, marker and glyph of `router` (fixed for the built-ins, from its name else)."""
    if router in ROUTER_STYLES:
        color, marker = ROUTER_STYLES[router]
    else:
        h = zlib.crc32(router.encode("utf-8"))
        color = SPARE_COLORS[h % len(SPARE_COLORS)]
        marker = SPARE_MARKERS[(h // len(SPARE_COLORS)) % len(SPARE_MARKERS)]
    return Style(color, marker, GLYPHS[marker])
