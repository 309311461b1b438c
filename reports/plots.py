"""The report's plots, each a pure function from one task's runs (a `load_runs` frame) to PNG bytes.

Figures are drawn on matplotlib's object API (no pyplot state, no backend switch) with seaborn's
style and palette, and saved without a Software/date stamp so that the same runs give the same
bytes. matplotlib and seaborn are imported when a plot is drawn, not when this module is.
"""

from __future__ import annotations

import io
import json
import math

import pandas as pd

from reports.load import REFERENCES, add_speed, decoded, is_true, main_knob
from reports.style import style
from reports.text import setting_text

GB = 1e9
BYTE_MODELS = ("small", "reward", "router", "large")


def _figure(width: float, height: float, ncols: int = 1, nrows: int = 1):
    """A figure of nrows x ncols axes, returned row by row in one flat list."""
    import seaborn as sns
    from matplotlib.figure import Figure

    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _empty(fig, ax, message: str) -> bytes:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return _png(fig)


def reference(df: pd.DataFrame, router: str, column: str) -> float:
    """Mean of `column` over the runs of a reference router (`small` or `large`); NaN if none."""
    values = df.loc[df["router"] == router, column].astype(float)
    return float(values.mean()) if len(values) else math.nan


def _routed(df: pd.DataFrame) -> pd.DataFrame:
    """The non-reference runs that have decoded something (a run the chain has just started has
    no quality and no share: it would be an empty legend entry or an empty panel)."""
    return df[~df["router"].isin(REFERENCES) & df["n"].map(decoded)]


def _router_colors(df: pd.DataFrame) -> dict[str, str]:
    """Each routed router's colour (reports.style: the same on every page and plot)."""
    return {r: style(r).color for r in sorted(_routed(df)["router"].unique())}


def _knobbed(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Non-reference routers run at two or more values of a numeric setting, each with its runs
    sorted by it (a router at one value, e.g. speculative k = 4 fixed and adaptive, would be a
    point or a vertical line: the tables say more)."""
    routed = _routed(df)
    routed = routed[routed["setting_value"].astype(float).notna()]
    return [
        (r, g.sort_values(["setting_value", "run"]))
        for r, g in routed.groupby("router")
        if g["setting_value"].nunique() > 1
    ]


def _reference_lines(ax, df: pd.DataFrame, column: str, large: float | None = None) -> None:
    """Small-only's and large-only's `column` as dashed lines (`large`: large-only's value, where
    it is known by definition rather than read from its row)."""
    for router in ("small", "large"):
        y = large if router == "large" and large is not None else reference(df, router, column)
        if not math.isnan(y):
            ax.axhline(
                y, color=style(router).color, linestyle="--", linewidth=1, label=f"{router} only"
            )


ZOOM_BELOW = 0.6  # the token-share axis ends a little past the routed runs' shares below this
OFF_AXIS = 2  # at most this many runs beyond ZOOM_BELOW are drawn at the cut edge, share written


def _transfer(df: pd.DataFrame) -> pd.Series:
    """Which runs are of a router trained on another task (drawn hollow)."""
    if "transfer" not in df:
        return pd.Series(False, index=df.index)
    return df["transfer"].map(is_true)


def _series(routed: pd.DataFrame):
    """(label, runs, hollow) per router, its transfer runs a series of their own."""
    moved = _transfer(routed)
    for router, g in routed.groupby("router"):
        for hollow in (False, True):
            part = g[moved[g.index] == hollow]
            if len(part):
                yield (f"{router} (transfer)" if hollow else router), part, hollow


def _quality_panel(ax, df: pd.DataFrame, share: str) -> None:
    """Quality against `share`, a line per router in its colour and marker, transfer runs
    hollow, 95% intervals as error bars; the token-share axis zoomed as `quality_vs_share` says."""
    routed = _routed(df)
    for label, g, hollow in _series(routed):
        s = style(g["router"].iloc[0])
        g = g.sort_values([share, "run"])
        x = g[share].astype(float)
        q, lo, hi = g["quality"], g["quality_ci_low"], g["quality_ci_high"]
        ax.plot(
            x,
            q,
            marker=s.marker,
            color=s.color,
            label=label,
            markersize=7,
            markerfacecolor="white" if hollow else s.color,
            linestyle=":" if hollow else "-",
        )
        ax.errorbar(x, q, yerr=[q - lo, hi - q], fmt="none", ecolor=s.color, capsize=3, alpha=0.6)
    _reference_lines(ax, df, "quality")
    shares = routed[share].astype(float)  # every routed run's, for the axis
    beyond = routed[shares >= ZOOM_BELOW]
    zoom = share == "large_token_share" and (shares < ZOOM_BELOW).any() and len(beyond) <= OFF_AXIS
    edge = shares[shares < ZOOM_BELOW].max() + 0.05 if zoom else 1.02
    ax.set_xlim(-0.01 if zoom else -0.02, edge)
    cut = ""
    if zoom:
        cut = f" (axis cut at {edge:.2f})"
        moved = _transfer(beyond)
        for i, r in beyond.iterrows():  # off the axis: at its edge, the share written
            s = style(r["router"])
            ax.plot(
                [edge],
                [r["quality"]],
                marker=s.marker,
                color=s.color,
                clip_on=False,
                linestyle="none",
                markerfacecolor="white" if moved[i] else s.color,
            )
            ax.annotate(
                f"{r[share]:.2f} →",
                (edge, r["quality"]),
                xytext=(-6, -14),
                textcoords="offset points",
                ha="right",
                fontsize=9,
                color="0.15",
            )
    ax.set_xlabel(share.replace("_", " ") + cut)
    ax.set_ylabel(f"quality ({df['metric'].iloc[0]})" if len(df) else "quality")


def _legend_below(fig, ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=min(len(labels), 4),
            fontsize="small",
            frameon=False,
        )


def quality_vs_share(df: pd.DataFrame) -> bytes:
    """The main plot: quality against large-token share, a line per router (its own colour and
    marker; runs of a router trained on another task hollow on a dotted line) with its 95% CI as
    error bars, and the small-only and large-only qualities as dashed lines. Where at most
    OFF_AXIS routed runs have a share of ZOOM_BELOW or more, the axis ends a little past the
    largest share below it (the routers of a sweep at shares up to 0.35 would otherwise crowd a
    third of the panel) and those runs (adaptive speculative decoding, which hands answers to
    large) are drawn at its edge with their share written."""
    fig, axes = _figure(8, 5.6)
    _quality_panel(axes[0], df, "large_token_share")
    axes[0].set_title("quality vs large-token share")
    _legend_below(fig, axes[0])
    return _png(fig)


def quality_vs_call_share(df: pd.DataFrame) -> bytes:
    """Quality against large-call share (decode steps that ran large), as the main plot draws
    it against token share; the axis spans [0, 1]."""
    fig, axes = _figure(8, 5.6)
    _quality_panel(axes[0], df, "large_call_share")
    axes[0].set_title("quality vs large-call share")
    _legend_below(fig, axes[0])
    return _png(fig)


PANELS_PER_ROW = 4  # small multiples wrap so that a panel stays legible on a laptop screen


def _per_router(df: pd.DataFrame, draw, ylabel: str) -> bytes:
    knobbed = _knobbed(df)
    ncols = min(max(len(knobbed), 1), PANELS_PER_ROW)
    nrows = max(math.ceil(len(knobbed) / ncols), 1)
    fig, axes = _figure(max(4.0 * ncols, 6.0), 3.4 * nrows, ncols=ncols, nrows=nrows)
    if not knobbed:
        return _empty(fig, axes[0], "no router with a numeric setting")
    for ax in axes[len(knobbed) :]:
        ax.set_axis_off()
    colors = _router_colors(df)
    for ax, (router, g) in zip(axes, knobbed, strict=False):
        draw(ax, g, colors[router])
        ax.set_title(router)
        ax.set_xlabel(main_knob(json.loads(g["router_args"].iloc[0])))
        ax.set_ylabel(ylabel)
        ax.legend(loc="best", fontsize="small")
    return _png(fig)


def share_vs_setting(df: pd.DataFrame) -> bytes:
    """Large-token share (solid) and large-call share (dashed) against each router's setting."""

    def draw(ax, g, color):
        x = g["setting_value"].astype(float)
        ax.plot(x, g["large_token_share"], marker="o", color=color, label="token share")
        ax.plot(
            x, g["large_call_share"], marker="s", linestyle="--", color=color, label="call share"
        )
        ax.set_ylim(-0.02, 1.02)

    return _per_router(df, draw, "large share")


def throughput_vs_setting(df: pd.DataFrame) -> bytes:
    """Measured throughput relative to large-only's on the same machine (`reports.load.add_speed`)
    against each router's setting, with small-only's and large-only's as lines."""
    df = df if "vs_large" in df else add_speed(df)

    def draw(ax, g, color):
        x = g["setting_value"].astype(float)
        modeled = g.get("throughput_modeled", pd.Series(False, index=g.index))
        modeled = modeled.map(is_true)
        for is_modeled, part in ((False, g[~modeled]), (True, g[modeled])):
            if len(part):  # a run that reused answers has a modeled clock: dotted, hollow
                ax.plot(
                    x[part.index],
                    part["vs_large"].astype(float),
                    marker="o",
                    color=color,
                    linestyle=":" if is_modeled else "-",
                    markerfacecolor="white" if is_modeled else color,
                    label="modeled" if is_modeled else "measured",
                )
        # large-only is 1 by definition (its own run may sit below it: it ran on a busier machine)
        _reference_lines(ax, df, "vs_large", large=1.0)

    return _per_router(df, draw, "throughput / large-only")


def bytes_per_model(df: pd.DataFrame) -> bytes:
    """Bytes moved per example (GB), one stacked bar per run, split by model."""
    fig, axes = _figure(10, max(2.5, 0.42 * len(df) + 1.2))
    ax = axes[0]
    if not len(df):
        return _empty(fig, ax, "no runs")
    labels = [
        f"{r} {setting_text(json.loads(a))}".replace(" —", "")
        for r, a in zip(df["router"], df["router_args"], strict=True)
    ]
    left = [0.0] * len(df)
    colors = {
        "small": style("small").color,
        "reward": style("reward").color,
        "router": style("citer").color,
        "large": style("large").color,
    }
    for model in BYTE_MODELS:
        column = f"bytes_{model}"
        values = [
            0.0 if math.isnan(v) else v / GB
            for v in df.get(column, pd.Series([0.0] * len(df))).astype(float)
        ]
        if any(values):
            ax.barh(range(len(df)), values, left=left, color=colors[model], label=model)
            left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(range(len(df)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("GB moved per example (weights + KV read)")
    if ax.get_legend_handles_labels()[0]:  # runs that recorded no bytes have no bars
        ax.legend(loc="lower right", fontsize="small")
    return _png(fig)


# name -> plot; the report writes `<name>_<task>.png` for each, under its caption.
PLOTS = {
    "quality_vs_share": quality_vs_share,
    "quality_vs_call_share": quality_vs_call_share,
    "share_vs_setting": share_vs_setting,
    "throughput_vs_setting": throughput_vs_setting,
    "bytes_per_model": bytes_per_model,
}

# name -> the heading the report shows above the plot (a figure of small multiples or bars has no
# title of its own; each panel is titled only by its router)
CAPTIONS = {
    "quality_vs_share": "Quality against the large model's share of tokens, each router a line "
    "in its own colour and marker with its 95% interval (hollow on a dotted line: a router "
    "trained on another task); dashed: small-only and large-only. Where at most two runs are at "
    "0.6 or more the axis ends just past the largest share below it, and those runs sit at its "
    "edge, their share written",
    "quality_vs_call_share": "Quality against the large model's share of decode steps (calls), "
    "drawn as the main plot",
    "share_vs_setting": "Large-token share (solid) and large-call share (dashed) against each "
    "router's setting, a panel per router run at two settings or more",
    "throughput_vs_setting": "Throughput relative to large-only's on the same machine against "
    "each router's setting, a panel per router run at two settings or more (dotted, hollow: "
    "modeled, the run reused answers); dashed: small-only and large-only",
    "bytes_per_model": "Memory traffic per example (GB read: weights and KV cache), one bar per "
    "run, split by model",
}
