"""reports: loading result folders, the leaderboard files, determinism, and no model imports."""

import html
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.run_folder import RunFolder
from harness.errors import UserError
from harness.metrics.quality import summarize
from reports import load_runs, write_report
from reports.demo import write_demo_results
from reports.load import setting_label, setting_value
from reports.plots import CAPTIONS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A small sweep: small, large, speculative, reward x3, random x3 (see reports.demo)."""
    return write_demo_results(tmp_path_factory.mktemp("results"), n_examples=12)


def test_setting_label_and_value():
    assert setting_label({}) == ""
    assert setting_label({"threshold": 2.0, "draft_len": 4}) == "draft_len=4, threshold=2"
    assert (
        setting_label({"threshold": 0.5, "path": "a/c.pt", "checkpoint": "ab12"}) == "threshold=0.5"
    )
    assert setting_value({"rate": 0.25}) == 0.25  # the only numeric argument
    assert setting_value({"threshold": 2.0, "draft_len": 4}) == 2.0  # the first of KNOBS
    assert math.isnan(setting_value({"model": "mlp"}))


def test_load_runs(results):
    df = load_runs(results)
    assert len(df) == 9 and set(df["router"]) == {
        "small",
        "large",
        "speculative",
        "reward",
        "random",
    }
    reward = df[df["router"] == "reward"]
    assert list(reward["setting_value"]) == [1.0, 2.0, 4.0]  # by share, here the knob's order
    assert df.loc[df["router"] == "random", "n_failed"].sum() == 1  # the demo's one failed record
    small, large = (df[df["router"] == r].iloc[0] for r in ("small", "large"))
    assert small["large_token_share"] == 0.0 and large["large_token_share"] == 1.0


def test_runs_read_in_the_order_of_their_share(results, tmp_path):
    """A router's runs are listed by the large-token share they realized, not by threshold:
    entropy's threshold falls as its share grows, so threshold order would read its calibrated
    rows 0.35, 0.2, 0.1 beside other routers' 0.1, 0.2, 0.35."""
    import shutil

    from reports.tables import TaskRuns, paired_table, runs_table

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    path = copy / "reward_threshold1" / "summary.json"  # the lowest threshold, now the most large
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "large_token_share": 0.9}))
    df = load_runs(copy)
    reward = df[df["router"] == "reward"]
    assert list(reward["setting_value"]) == [2.0, 4.0, 1.0]
    assert reward["large_token_share"].is_monotonic_increasing
    task = TaskRuns.of(df)
    settings = [r[1] for r in runs_table(task).rows if r[0] == "reward"]
    assert settings == ["threshold 2", "threshold 4", "threshold 1"]
    assert [r[1] for r in paired_table(task).rows if r[0] == "reward"] == settings


def test_load_runs_recomputes_missing_summary(results):
    run = results / "reward_threshold4"
    assert not (run / "summary.json").exists()
    manifest = json.loads((run / "manifest.json").read_text())
    expected = summarize(RunFolder(run).lines(), manifest)
    row = load_runs(results).set_index("run").loc["reward_threshold4"]
    for key in ("quality", "large_token_share", "large_call_share", "bytes_total", "tok_per_s"):
        assert row[key] == pytest.approx(expected[key]), key


def test_load_runs_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_runs(tmp_path / "missing")
    assert len(load_runs(tmp_path)) == 0
    with pytest.raises(UserError, match="no runs"):
        write_report(tmp_path, tmp_path / "out")


def test_write_report_files(results, tmp_path):
    html_path = write_report(results, tmp_path / "report")
    assert html_path == tmp_path / "report" / "leaderboard.html"
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert "leaderboard.md" in names and len([n for n in names if n.endswith(".png")]) == 5
    page = html_path.read_text()
    assert "<table>" in page and '<th><a href="#def-apgr">APGR (token)</a></th>' in page
    assert page.count('<img alt="') == 5 and '<img alt="quality_vs_share" width="800"' in page
    assert 'src="data:image/png;base64,' in page
    assert 'src="http' not in page and "<script" not in page  # static, no external assets
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert page.count('<div class="scroll"><table>') == page.count("<table>")  # each scrolls
    md = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "| router | setting | n | quality [95% CI] |" in md and "![quality_vs_share](" in md
    for png in (tmp_path / "report").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every plot under a heading of its own (the per-router panels and the bytes bars had none)
    for name, caption in CAPTIONS.items():
        assert f'<figure><figcaption>{html.escape(caption)}</figcaption><img alt="{name}"' in page
        assert f"*{caption}*\n\n![{name}](" in md
    # reading order: the goal, the main plot, the verdicts, the runs (collapsed), the speed,
    # then setup and provenance (collapsed) and the definitions
    order = ["Quality goal", "quality_vs_share", "Paired vs control", "<summary>Runs",
             "Throughput (measured)", "<summary>Provenance", "Definitions"]  # fmt: skip
    where = [md.index(x) for x in order]
    assert where == sorted(where), order
    assert page.index('id="headline"') < page.index("<table>")  # the answer before any table


def test_write_report_is_deterministic(results, tmp_path):
    out = write_report(results, tmp_path / "a").parent
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    write_report(results, out)  # re-run over the same results folder
    second = {p.name: p.read_bytes() for p in out.iterdir()}
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], name


def test_reports_import_no_model_code(results, tmp_path):
    code = (
        "import sys, reports, reports.load, reports.plots, reports.leaderboard, reports.demo\n"
        "import reports.site, reports.render, reports.tables, reports.speed, reports.screenshot\n"
        f"reports.write_report({str(results)!r}, {str(tmp_path / 'r')!r})\n"
        "bad = [m for m in ('torch', 'transformers', 'accelerate', 'gguf') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


PUBLISHED = ROOT / "reports" / "published"
PUBLISHED_TASKS = sorted(p.parents[1].name for p in PUBLISHED.glob("*/report/leaderboard.md"))
EDITION_N = {"gsm8k": 200, "mbpp": 255, "humaneval": 85}  # the test examples per task


def test_published_edition_holds_its_tasks():
    """The edition publishes its three tasks, and only them."""
    assert set(PUBLISHED_TASKS) == set(EDITION_N), PUBLISHED_TASKS


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    """The published edition written afresh from its run folders by the one command
    (`hybridbench report reports/published --out OUT`)."""
    from harness.cli.main import main

    out = tmp_path_factory.mktemp("edition")
    assert main(["report", str(PUBLISHED), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("page", ["index.md", *(f"{t}/report/leaderboard.md" for t in EDITION_N)])
def test_published_leaderboard_is_what_report_writes_from_its_runs(page, edition):
    """The committed leaderboard (reports/published: the index and each task's page)
    regenerates from its committed run folders. Compared: the Markdown (tables, provenance).
    The PNGs, and so the HTML that embeds them, are byte-identical only under the matplotlib
    version that drew them (checked by hand on re-run)."""
    fresh = (edition / page).read_text()
    assert fresh == (PUBLISHED / page).read_text()
    task = page.split("/")[0]
    if task in EDITION_N:  # the real sweep, not an empty table
        assert f"| large | — | {EDITION_N[task]} |" in fresh
    else:
        assert all(f"[{t}]({t}/report/leaderboard.md)" in fresh for t in EDITION_N)


def test_edition_pages_link_each_other_and_read_the_answer_first(edition):
    """The index leads with the question and the router x task matrix; each task page links
    the index and the other tasks, and its goal table comes before every other table."""
    index = (edition / "index.html").read_text()
    assert index.index('id="headline"') < index.index('id="matrix"') < index.index("<table")
    for t in EDITION_N:
        assert f'<a href="{t}/report/leaderboard.html">' in index
        page = (edition / t / "report" / "leaderboard.html").read_text()
        assert '<a href="../../index.html">Index</a>' in page and f"<strong>{t}</strong>" in page
        others = [o for o in EDITION_N if o != t]
        assert all(f'<a href="../../{o}/report/leaderboard.html">' in page for o in others)
        assert page.index('id="headline"') < page.index('id="goal"') < page.index("<table")
    # the matrix: a row per router, a column per task, each cell gap · verdict · speed
    md = (edition / "index.md").read_text()
    row = next(x for x in md.splitlines() if x.startswith("| large only |"))
    assert row.count("100.0% · 1.00×") == len(EDITION_N)


def test_paired_speed_and_transfer_tables(results, tmp_path):
    """Each router row is paired with the control run at the nearest large-token share (the
    difference is `verdicts.compare_records` of the two runs); a run of a router trained on
    another task moves to the transfer table; modeled speed is the cost model's; measured and
    modeled throughput never share a column, and large-only is 1.00 by definition."""
    import shutil

    from harness.metrics import verdicts
    from harness.metrics.costmodel import PROFILES, modeled_latency
    from reports.load import add_speed
    from reports.speed import speed_table
    from reports.tables import UNCOMPARED, TaskRuns, paired_table, transfer_table
    from reports.text import diff_cell, p_cell

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    moved = copy / "reward_threshold1" / "summary.json"
    summary = json.loads(moved.read_text())
    moved.write_text(json.dumps({**summary, "transfer": True, "router_trained_on": "mbpp"}))
    reused = copy / "random_rate0.75" / "summary.json"  # as if its answers were reused
    reused.write_text(json.dumps({**json.loads(reused.read_text()), "throughput_modeled": True}))
    task = TaskRuns.of(add_speed(load_runs(copy)))
    df = task.runs
    assert list(task.transfer["run"]) == ["reward_threshold1"]
    rows = {(r[0], r[1]): r for r in paired_table(task).rows}
    randoms = df[df["router"].isin(["random", "small", "large"])]  # small, large: p = 0 and 1
    for _, r in df[df["router"].isin(["reward", "speculative"])].iterrows():
        row = rows[(r["router"], task.setting(r))]
        nearest = randoms.loc[
            (randoms["large_token_share"] - r["large_token_share"]).abs().idxmin()
        ]
        d = verdicts.compare_records(
            RunFolder(r["path"]).lines(), RunFolder(nearest["path"]).lines(), r["metric"]
        )
        want = nearest["router"]
        if want == "random":
            want += f" {task.setting(nearest)}"
        assert row[3] == want and row[5] == str(d.n) and d.n > 0
        assert row[6:8] == (diff_cell(d), p_cell(d.p))
        assert row[9] in ("better", "worse", "no difference")
    # the page's family: every paired row, its transfer rows too, Holm-adjusted together
    every = [*paired_table(task).rows, *paired_table(task, transfer=True).rows]
    raw = [
        task.pairing(r).comparison.p
        for _, r in task.all_runs.iterrows()
        if r["router"] not in UNCOMPARED
    ]
    assert len(raw) == len(every) > 2
    assert sorted(row[8] for row in every) == sorted(p_cell(q) for q in verdicts.holm(raw))
    speed = {(r[0], r[1]): r for r in speed_table(task).rows}
    small = speed[("small", "—")]
    run = df[df["router"] == "small"].iloc[0]
    manifest = json.loads((Path(run["path"]) / "manifest.json").read_text())
    want = modeled_latency(RunFolder(run["path"]).lines(), manifest, PROFILES["h100"])
    assert small[-1] == f"{want['modeled_tok_per_s']:.1f}"
    assert speed[("large", "—")][6:9] == ("1.00", "—", "—")  # large-only: 1.00 by definition
    assert small[6] != "—" and small[7:9] == ("—", "—")  # measured: the modeled columns empty
    modeled = speed[("random", "rate = 0.75")]
    assert modeled[4:7] == ("—", "—", "—") and modeled[8] != "—"  # (no tok/s: a toy run)
    md = (write_report(copy, tmp_path / "report").parent / "leaderboard.md").read_text()
    runs_section = md.split("### Runs")[1].split("### Routers")[0]
    assert "threshold 1 " not in runs_section.replace("|", " ")  # moved out of the runs table
    transfer = md.split("### Transfer: routers trained on another task")[1]
    assert "| reward | threshold 1 | mbpp |" in transfer
    assert transfer_table(task).rows[0][2] == "mbpp"
    # the transfer row against the task's own random runs, paired as in-task rows are
    (row,) = paired_table(task, transfer=True).rows
    assert row[:2] == ("reward", "threshold 1") and row[3].startswith("random ")
    paired_transfer = md.split("### Transfer: paired vs control at the same share")[1]
    assert "| reward | threshold 1 |" in paired_transfer.split("###")[0]
    # and it joins the quality goal and the plot, marked as transfer
    goal = md.split("### Quality goal")[1].split("###")[0]
    assert "| reward (transfer) |" in goal and goal.split("| reward (transfer) |")[1].split("\n")[
        0
    ].endswith(" threshold 1 |")


def test_small_only_is_the_control_at_share_zero(results, tmp_path):
    """Random at p = 0 is small-only's policy: a router that realizes a share within 2 points of
    0 is paired with the small-only run when no random run is that near; with no random run at
    all, a router far from both ends has no control."""
    import shutil

    from reports.tables import TaskRuns, paired_table

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    for d in copy.glob("random_*"):
        shutil.rmtree(d)
    moved = copy / "reward_threshold1" / "summary.json"
    moved.write_text(json.dumps({**json.loads(moved.read_text()), "large_token_share": 0.01}))
    rows = {r[:2]: r for r in paired_table(TaskRuns.of(load_runs(copy))).rows}
    near = rows[("reward", "threshold 1")]
    assert near[3:5] == ("small", "0.000") and near[5] == "12" and near[7:10].count("—") == 0
    assert rows[("reward", "threshold 2")][3:] == ("no random run", "—", "—", "—", "—", "—", "—")


def test_per_router_panels_wrap_four_to_a_row(results):
    """The small multiples (share and throughput against each router's setting) wrap four to a
    row, so that a sweep of many routers keeps each panel legible on a laptop screen."""
    import struct

    import pandas as pd

    from reports.plots import share_vs_setting

    df = load_runs(results)
    knobbed = df[df["router"].isin(["random", "reward"])]
    renamed = [knobbed.assign(router=f"{r}{i}") for i in range(3) for r in ("random", "reward")]
    many = pd.concat([df, *renamed], ignore_index=True)  # 2 + 6 = 8 routers at 2+ settings

    def size(png: bytes) -> tuple[int, int]:
        return struct.unpack(">II", png[16:24])  # the PNG header's width and height

    assert size(share_vs_setting(df)) == (800, 340)  # random, reward: one row
    assert size(share_vs_setting(many)) == (1600, 2 * 340)  # eight: two rows of four


def test_plots_color_each_router_alike_and_leave_out_runs_not_decoded(results, monkeypatch):
    """Every plot gives a router its one colour and marker (reports.style: fixed, whatever the
    other routers of the page; random was green in one plot and orange in the next), runs of a
    router trained on another task are hollow, and a run the chain has just started (no
    example, no quality) draws neither a legend entry nor an empty panel."""
    import math

    import pandas as pd
    from matplotlib.colors import to_hex

    from reports import plots
    from reports.style import style

    df = load_runs(results)
    started = df[df["router"] == "reward"].iloc[:1].assign(
        router="citer", n=0, quality=math.nan, large_token_share=math.nan,
        large_call_share=math.nan, quality_ci_low=math.nan, quality_ci_high=math.nan)  # fmt: skip
    df = pd.concat([df, started], ignore_index=True)
    figs = []
    monkeypatch.setattr(plots, "_png", lambda fig: figs.append(fig) or b"")

    def colors(ax) -> dict[str, str]:
        return {ln.get_label(): to_hex(ln.get_color()) for ln in ax.get_lines()}

    plots.quality_vs_share(df)
    legend = colors(figs[-1].axes[0])
    assert {"random", "reward", "speculative"} <= set(legend) and "citer" not in legend
    for router in ("random", "reward", "speculative"):
        assert legend[router] == style(router).color, router
    lines = {ln.get_label(): ln for ln in figs[-1].axes[0].get_lines()}
    assert lines["reward"].get_marker() == style("reward").marker
    # a transfer run: its own series, hollow, in its router's colour
    moved = df.assign(transfer=df["run"] == "reward_threshold1")
    plots.quality_vs_share(moved)
    lines = {ln.get_label(): ln for ln in figs[-1].axes[0].get_lines()}
    assert lines["reward (transfer)"].get_markerfacecolor() == "white"
    assert to_hex(lines["reward (transfer)"].get_color()) == style("reward").color
    assert to_hex(lines["reward"].get_markerfacecolor()) == style("reward").color
    plots.share_vs_setting(df)
    panels = {ax.get_title(): ax for ax in figs[-1].axes if ax.get_title()}
    # no empty citer panel, and none for speculative: one setting (k = 4) is a point, not a curve
    assert set(panels) == {"random", "reward"}
    for router, ax in panels.items():
        assert colors(ax)["token share"] == legend[router], router


def test_quality_plot_zooms_the_token_axis_to_the_shares_run(results, monkeypatch):
    """With every routed run below 0.6 large tokens the token-share axis ends just past the
    largest share (a sweep at 0.1-0.35 crowded a third of the panel), while the call-share axis
    keeps [0, 1]; up to two runs at a larger share are drawn at the cut's edge, more keep the whole
    token axis. Each router gets its own marker as well as its own color."""
    import pandas as pd

    from reports import plots

    df = load_runs(results)
    figs = []
    monkeypatch.setattr(plots, "_png", lambda fig: figs.append(fig) or b"")
    routed = df[~df["router"].isin(["small", "large"])]
    low = df[df["router"].isin(["small", "large"]) | (df["large_token_share"] < 0.6)]
    top = float(low.loc[low.index.isin(routed.index), "large_token_share"].max())
    plots.quality_vs_call_share(low)
    call = figs[-1].axes[0]
    plots.quality_vs_share(low)
    token = figs[-1].axes[0]
    assert token.get_xlim()[1] == pytest.approx(top + 0.05) and "axis cut" in token.get_xlabel()
    assert call.get_xlim() == pytest.approx((-0.02, 1.02))
    markers = {ln.get_label(): ln.get_marker() for ln in token.get_lines()}
    routers = set(low.loc[low.index.isin(routed.index), "router"])
    assert len({markers[r] for r in routers}) == len(routers)
    # one or two runs far out (adaptive speculative decoding hands answers to large: 0.94 on
    # gsm8k) keep the zoom: they sit at the cut edge with their share written
    far = routed.assign(large_token_share=0.8).iloc[:1]
    plots.quality_vs_share(pd.concat([low, far], ignore_index=True))
    token = figs[-1].axes[0]
    assert token.get_xlim()[1] == pytest.approx(top + 0.05)
    edge = [ln for ln in token.get_lines() if list(ln.get_xdata()) == [pytest.approx(top + 0.05)]]
    assert len(edge) == 1 and not edge[0].get_clip_on()
    assert list(edge[0].get_ydata()) == [pytest.approx(float(far["quality"].iloc[0]))]
    assert [t.get_text() for t in token.texts] == ["0.80 →"]
    # more than two: the whole token axis
    wide = pd.concat([low, routed.assign(large_token_share=0.8).iloc[:3]], ignore_index=True)
    assert len(wide) == len(low) + 3
    plots.quality_vs_share(wide)
    token = figs[-1].axes[0]
    assert token.get_xlim() == pytest.approx((-0.02, 1.02)) and not token.texts


def test_html_keeps_numbers_on_one_line_and_lets_long_text_wrap():
    """A short cell (a number with its interval, a setting) stays on one line (class num:
    nowrap), so that a row of a table scrolling sideways on a phone keeps one line; a long cell
    (the setup table's list of commits) wraps, where nowrap pushed its column and the machines
    beside it past a laptop's screen; a matrix of short phrases (`wrap`) wraps everywhere."""
    from reports.render import html_table
    from reports.tables import Table

    commits = "; ".join(f"{i}7d6b94150a5" for i in range(8))
    t = Table("t", ("a", "b"), (("+0.260 [+0.195, +0.330]", commits), ("0.25 (modeled)", "x")))
    html = html_table(t)
    assert '<td class="num">+0.260 [+0.195, +0.330]</td>' in html
    assert '<td class="num">0.25 (modeled)</td>' in html
    assert f"<td>{commits}</td>" in html
    setting = "target 20% (threshold 0.351)"
    assert f'<td class="num">{setting}</td>' in html_table(Table("t", ("s",), ((setting,),)))
    assert f"<td>{setting}</td>" in html_table(Table("t", ("s",), ((setting,),), wrap=True))


def test_a_table_with_no_rows_says_so(results, tmp_path):
    import shutil

    from reports.leaderboard import EMPTY

    refs = tmp_path / "refs"
    for run in ("small", "large"):
        shutil.copytree(results / run, refs / run)
    page = write_report(refs, tmp_path / "report")
    md = (page.parent / "leaderboard.md").read_text()
    routers = md.split("### Routers")[1].split("###")[0]
    assert routers.strip() == f"_{EMPTY}_" and "| router | settings |" not in md
    assert f"<p><em>{EMPTY}</em></p>" in page.read_text()


def test_quality_goal_table_takes_each_routers_best_run_under_the_share(results):
    from harness.metrics.frontier import pgr
    from reports.leaderboard import GOAL_SHARE
    from reports.load import add_speed
    from reports.tables import TaskRuns, goal_table

    df = load_runs(results)
    table = goal_table(TaskRuns.of(add_speed(df)))
    q_small, q_large = (df[df.router == r].quality.mean() for r in ("small", "large"))
    rate_large = df[df.router == "large"].tok_per_s.mean()  # the demo's runs predate throughput
    rows = {row[0]: row for row in table.rows}
    assert set(rows) == {r for r in df.router.unique() if r not in ("small", "large")
                         and (df[df.router == r].large_token_share <= GOAL_SHARE).any()}  # fmt: skip
    for router, row in rows.items():
        under = df[(df.router == router) & (df.large_token_share <= GOAL_SHARE)]
        best = under.sort_values("quality", ascending=False).iloc[0]
        assert row[4].startswith(f"{best.quality:.3f} [")
        assert row[1] == f"{100 * pgr(best.quality, q_small, q_large):.1f}%"
        verdicts = ("better", "worse", "no difference")
        assert row[2] == "control" if router == "random" else row[2] in verdicts
        assert row[5:7] == (f"{best.tok_per_s / rate_large:.2f}", "—")  # measured, not modeled
    qualities = [float(row[4].split()[0]) for row in table.rows]
    assert qualities == sorted(qualities, reverse=True)
    assert table.note.startswith("Sorted by gap recovered, best first.")


def test_the_quality_goal_reads_the_grid_not_the_rows_aimed_between_it():
    """A row aimed at another row's share (a matched control: entropy at 0.224, here its luckiest
    draw; learned and confidence both aimed at r2r's 0.179) is off the sweep's grid, so the goal
    takes each router's best run at the grid's shares; a router with no run on the grid keeps
    its own (`read_edition`'s shares, from the same grid: tests/test_submit.py)."""
    import pandas as pd

    from reports.load import grid_shares
    from reports.tables import goal_runs

    rows = []

    def run(router, knob, s, quality):
        rows.append({"run": f"{router}__{knob}={s}", "router": router, "transfer": False,
                     "router_args": json.dumps({knob: s, "threshold": 0.5}),
                     "large_token_share": 0.9 * s, "quality": quality})  # fmt: skip

    for router, knob in [("entropy", "target_share"), ("confidence", "target_share"),
                         ("learned", "target_share"), ("random", "p")]:  # fmt: skip
        for s in (0.1, 0.2, 0.35):
            run(router, knob, s, 0.3 + s)  # 0.35's realized share (0.315) is past the goal
    run("entropy", "target_share", 0.224, 0.9)
    run("learned", "target_share", 0.179, 0.9)
    run("confidence", "target_share", 0.179, 0.9)
    run("margin", "target_share", 0.15, 0.6)
    df = pd.DataFrame(rows)
    settings = zip(df.router, df.router_args.map(json.loads), strict=True)
    assert grid_shares(settings) == {0.1, 0.2, 0.35}
    best = {r["router"]: r["run"] for r in goal_runs(df)}
    assert best == {"entropy": "entropy__target_share=0.2",
                    "confidence": "confidence__target_share=0.2",
                    "learned": "learned__target_share=0.2", "random": "random__p=0.2",
                    "margin": "margin__target_share=0.15"}  # fmt: skip
    assert grid_shares([("a", {"target_share": 0.1}), ("b", {"p": 0.3})]) == {0.1, 0.3}


@pytest.mark.parametrize(
    "name, engine",
    [("device-latency-h100.json", "engine transformers 5.17.0, eager, bf16"),
     ("device-latency-h100-llamacpp.json", "engine llama.cpp (llama-cpp-python 0.3.36"),
     ("device-latency-h100-llamacpp-edition2.json", "engine llama.cpp (llama-cpp-python 0.3.36")],
)  # fmt: skip
def test_gpu_machine_rows_join_the_leaderboard(results, tmp_path, name, engine):
    """A results folder's device/*.json (benchmarks/device_latency.py) becomes a table: measured
    tok/s from the examples' own tokens and seconds, beside the modeled figures it recorded,
    under a title that names the engine (older files name none: transformers), and each
    row's setting without its file arguments (an entropy row's calibration path)."""
    import shutil

    from reports.load import setting_label

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    (copy / "device").mkdir()
    data = ROOT / "docs" / "data" / name
    shutil.copy(data, copy / "device" / data.name)
    md = (write_report(copy, tmp_path / "report").parent / "leaderboard.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in md and engine in md
    md = md.split("<summary>Measured on a GPU machine</summary>")[1].split("</details>")[0]
    d = json.loads(data.read_text())
    for name, row in d["rows"].items():
        ex = row["examples"]
        rate = sum(e["tokens"] for e in ex) / sum(e["measured_s"] for e in ex)
        sheet = row["summary"]["modeled_tok_per_s_datasheet"]
        line = next(r for r in md.splitlines() if r.startswith(f"| {name} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == str(len(ex)) and cells[5].startswith(f"{rate:.1f} [")
        assert cells[7] == f"{sheet:.1f}"
        assert cells[1] == (setting_label(row["router_args"]) or "—")
    assert "calibration=" not in md


def test_setup_and_cost_tables_from_the_runs_sessions(results, tmp_path):
    """Runs whose manifests keep their invocations (`sessions`) get a setup table (machines,
    dates, commits, ... of the runs and their sessions) and a cost table: per run the sessions
    summed, then all runs; examples/hour from those sums. Folders without sessions (the first
    release's) get neither, so their reports stay as published."""
    import shutil

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    sessions = {
        "small": [{"batch": 1, "examples": 4, "tokens": 40, "wall_s": 1800.0, "cpu_s": 3600.0},
                  {"batch": 16, "examples": 8, "tokens": 80, "wall_s": 5000.0,
                   "measured_wall_s": 900.0, "cpu_s": 1800.0},  # answers reused: wall_s is modeled
                  {"batch": 16, "started": "2025-01-02T00:00:00+0000"}],
        "large": [{"batch": 8, "examples": 12, "tokens": 90, "wall_s": 3600.0,
                   "measured_wall_s": 3600.0,
                   "git_commit": "f" * 40, "started": "2025-02-03T04:05:06+0000",
                   "machine": {"cpu": "Test CPU @ 1GHz", "cpus": 3}}],
    }  # fmt: skip
    sessions["small"][2].update(  # another machine of the same brand
        machine={"cpu": "Test CPU @ 1GHz", "cpus": 3, "cpu_features": ["avx2"]},
        batch_probe={"measured": "2025-02-04T00:00:00+0000",
                     "step_seconds": {"large": {"1": 0.5, "16": 2.0}}},
    )  # fmt: skip
    for run, s in sessions.items():
        manifest = json.loads((copy / run / "manifest.json").read_text())
        manifest["sessions"] = s
        (copy / run / "manifest.json").write_text(json.dumps(manifest))
    # a speed anchor (large-only on another machine's first examples) is part of the sweep's cost
    shutil.copytree(copy / "large", copy / "anchors" / "m2")
    md = (write_report(copy, tmp_path / "report").parent / "leaderboard.md").read_text()
    table = md.split("### Cost: wall and CPU time on the machine that ran each run")[1]
    table = table.split("###")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("| ") and "---" not in line}  # fmt: skip
    # CPU hours: the recorded ones; where an invocation recorded none, at most its wall hours
    # times its machine's CPUs (small's third: 0 s on 3 CPUs; large's: 1 h on 3 CPUs)
    assert rows["small"][2:] == ["1, 16", "3", "12", "120", "0.75", "≤ 1.50", "16.0"]
    assert rows["large"][2:] == ["8", "1", "12", "90", "1.00", "≤ 3.00", "12.0"]
    assert rows["reward_threshold1"][2:] == ["—", "0", "0", "0", "0.00", "0.00", "—"]
    assert rows["anchors/m2"][2:] == rows["large"][2:]
    assert list(rows)[-2:] == ["anchors/m2", "all runs"]  # after the runs, before their sum
    assert rows["all runs"][3:] == ["5", "36", "300", "2.75", "≤ 7.50", "13.1"]
    assert '<a id="def-cost"></a>**cost**: what each run took' in md
    setup = md.split("### Setup (from the run manifests)")[1].split("###")[0]
    assert "| dates | 2025-01-01 to 2025-02-03 |" in setup  # the runs' starts, then the session
    machines = setup.split("| machines |")[1].split("\n")[0]
    # one brand, two machines: told apart by their SIMD extensions and batch probe, labelled
    # in order of first use (small's first two sessions: the run's machine, the demo's); the
    # runs without sessions last, unlabelled
    assert machines == (" A: demo, ? CPUs; B: Test CPU @ 1GHz, 3 CPUs, avx2, probe 2025-02-04: "
                        "large's 16-sequence step 2.000 s (others' CPU meanwhile: not recorded); C: Test CPU @ 1GHz, 3 CPUs; demo, "
                        "? CPUs |"), machines  # fmt: skip
    assert f"| code commits | {'0' * 12}; {'f' * 12} |" in setup  # the demo's, the session's
    assert "| batch sizes | 1; 8; 16 |" in setup
    plain = (write_report(results, tmp_path / "plain").parent / "leaderboard.md").read_text()
    assert "### Cost" not in plain and "**cost**:" not in plain and "### Setup" not in plain


def test_training_cost_table(tmp_path):
    """`hybridbench training-cost`: each training folder's cost.jsonl summed (resumed invocations
    too), its examples from what it holds, and a run's cost from its summary."""
    data, run = tmp_path / "reward-data", tmp_path / "gsm8k-train-small"
    data.mkdir()
    run.mkdir()
    lines = [
        {"argv": ["reward-data", "--out", "x"], "wall_s": 1800.0, "tokens_generated": 700},
        {
            "argv": ["reward-data", "--out", "x"],
            "wall_s": 1800.0,
            "tokens_generated": 300,
            "cpu_s": 3240.0,
        },
    ]  # fmt: skip  (the first line is from before CPU time was logged)
    (data / "cost.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (data / "manifest.json").write_text(json.dumps({"prompts": 20, "tasks": ["gsm8k", "mbpp"]}))
    (data / "pairs.jsonl").write_text("")
    summary = {"n": 10, "examples_per_hour": 20.0, "tokens_per_example": 30.5, "router": "small",
               "split": "train", "task": "gsm8k"}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))
    out = subprocess.run([sys.executable, "-m", "harness.cli.main", "training-cost", str(tmp_path)],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout  # fmt: skip
    row = "| reward-data | reward-data | 20 prompts (gsm8k, mbpp) | 2 | 1.00 | 0.90 (1 of 2"
    assert row + " invocations) | 1,000 |" in out
    assert (
        "| gsm8k-train-small | run (small, train) | 10 gsm8k examples | — | 0.50 | — | 305 |" in out
    )


def test_paper_tables(results):
    """benchmarks/paper_tables.py: one row per reward run, sorted by threshold, with small's and
    large's quality beside it and each run's throughput against large-only's (the Runs table's)."""
    from reports.leaderboard import _speed_cell, quality_cell
    from reports.load import add_speed
    from tests import load_script

    text = load_script("paper_tables").table(str(results), "reward")
    lines = [x for x in text.splitlines() if x.startswith("| ") and "---" not in x]
    rows = [[c.strip() for c in x.strip("|").split("|")] for x in lines[1:]]
    df = add_speed(load_runs(results))
    runs = {json.loads(r["router_args"])["threshold"]: r for _, r in df.iterrows()
            if r["router"] == "reward"}  # fmt: skip
    assert [float(r[0]) for r in rows] == [1.0, 2.0, 4.0] == sorted(runs)
    small, large = (quality_cell(df[df["router"] == k].iloc[0]) for k in ("small", "large"))
    for r in rows:
        run = runs[float(r[0])]
        assert (r[3], r[4], r[5]) == (small, quality_cell(run), large)
        assert r[-1] == _speed_cell(run) and float(r[-1].split()[0]) > 0


def test_step_times(tmp_path):
    """benchmarks/step_times.py: steps after the prefill split by whether small drafted, with the
    tokens each kind emitted (kept drafts + large's token) and their recorded seconds."""
    from tests import load_script

    steps = {"drafted": [4, 4, 0, 0], "kept": [0, 2, 0, 0], "large_tokens": [1, 1, 1, 1],
             "seconds": [9.0, 2.0, 0.5, 0.25]}  # fmt: skip
    rec = {"example_id": "t/1", "generation": {"steps": steps}, "scores": {}}
    (tmp_path / "records.jsonl").write_text(json.dumps(rec) + "\n")
    got = load_script("step_times").step_times(tmp_path)
    assert got["speculative"] == {"steps": 1, "tokens": 3, "seconds": 2.0}
    assert got["large alone"] == {"steps": 2, "tokens": 2, "seconds": 0.75}


def test_a_folder_of_two_tasks_gets_a_page_each_and_an_index(results, tmp_path):
    """Runs of two tasks in one folder: a page per task beside an index that links both."""
    import shutil

    mixed = tmp_path / "mixed"
    for run in results.iterdir():
        shutil.copytree(run, mixed / run.name)
        copy = mixed / f"other-{run.name}"
        shutil.copytree(run, copy)
        for name in ("manifest.json", "summary.json"):
            if (copy / name).is_file():
                data = json.loads((copy / name).read_text())
                (copy / name).write_text(json.dumps({**data, "task": "other-task"}))
    index = write_report(mixed)
    assert index == mixed / "report" / "index.html"
    md = (mixed / "report" / "index.md").read_text()
    for task in ("demo-arith", "other-task"):
        assert f"[{task}](leaderboard-{task}.md)" in md
        page = (mixed / "report" / f"leaderboard-{task}.html").read_text()
        assert '<a href="index.html">Index</a>' in page and f"<strong>{task}</strong>" in page


def test_nearest_share_takes_the_closest_known_share_and_says_how_far():
    import pandas as pd

    from harness.metrics.verdicts import NOTHING, compare_scores
    from reports.text import MATCH, nearest_share, p_cell, verdict

    pool = pd.DataFrame({"large_token_share": [0.1, math.nan, 0.23, 0.31]}, index=[5, 6, 7, 8])
    near, gap = nearest_share(pool, 0.25)
    assert near == 7 and gap == pytest.approx(0.02) and gap <= MATCH + 1e-12
    assert nearest_share(pool, 0.3)[0] == 8
    assert nearest_share(pool.iloc[:0], 0.2) == (None, math.inf)
    unknown = nearest_share(pool.loc[[6]], 0.2)  # a share not known yet is never matched
    assert unknown[1] == math.inf
    # a verdict is the rule's (harness/metrics/verdicts.py; tests/test_verdicts.py)
    ids = [str(i) for i in range(40)]
    right, wrong = dict.fromkeys(ids, 1.0), dict.fromkeys(ids, 0.0)
    assert verdict(NOTHING) == "—" and p_cell(NOTHING.p) == "—"
    assert verdict(compare_scores(right, wrong)) == "better"
    assert verdict(compare_scores(wrong, right)) == "worse"
    assert verdict(compare_scores(right, right)) == "no difference"
    assert [p_cell(p) for p in (0.0784, 0.0042, 1e-9)] == ["0.078", "0.0042", "<0.0001"]
