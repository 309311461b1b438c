"""A third party's router and task, defined here and named by import path or by entry point, through
every command that takes one (run, sweep, calibrate, generate, lm-eval, report), on the tiny pair;
and what a plugin that is missing, raises or answers in the wrong shape gets: one error line, and
a run folder that resumes once it is fixed."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from harness.cli.main import main
from harness.core.router import Decision, Needs, Router
from harness.errors import UserError
from routers import get_router, router_class, router_entry
from routers.calibration import threshold_for
from routers.score import ScoreRouter
from tasks import get_task, task_entry
from tasks.base import Example, Task, user_message
from tests.tiny import save_tiny_pair

ROUTER, TASK = "tests.test_plugins:Hesitant", "tests.test_plugins:Sums"


class Hesitant(ScoreRouter):
    """A third party's score router: defers where small's top-2 probability margin is small."""

    name = "hesitant"
    defers_below = True
    default_threshold = 0.1
    SWEEP_THRESHOLDS = (0.02, 0.5)

    def token_scores(self, view):
        top2 = torch.softmax(view.small_logits.float(), -1).topk(2, dim=-1).values
        return top2[:, 0] - top2[:, 1]


class Sums(Task):
    """A third party's task: "i+i=" -> 2i, exact match; 60 rows, hashed splits."""

    name = "sums"
    metric = "exact_match"
    max_new_tokens = 6

    def read(self):
        return [Example(f"sums/{i}", user_message(f"{i}+{i}="), str(2 * i)) for i in range(60)]

    def score(self, example, completion):
        return {"exact_match": float(completion.strip() == example.reference)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    small, large = save_tiny_pair(tmp_path_factory.mktemp("tiny"))
    return ["--small", small, "--large", large, "--dtype", "float32", "--threads", "1"]


def run_argv(pair, out, router=ROUTER, task=TASK, limit=3, *extra):
    return ["run", "--task", task, "--router", router, "--limit", str(limit), "--max-new-tokens",
            "6", "--out", str(out), *pair, *extra]  # fmt: skip


def error_lines(err: str) -> list[str]:
    """The lines a failing command printed that are not progress bars."""
    return [line for line in err.splitlines() if line.startswith(("error:", "Traceback"))]


# --- the registries --------------------------------------------------------------------------


def test_an_import_path_names_a_router_or_task_and_records_where_it_came_from():
    assert router_class(ROUTER) is Hesitant and isinstance(get_task(TASK).task, Sums)
    entry = router_entry(ROUTER)
    assert entry.origin == "import path" and entry.target == ROUTER
    assert entry.version.startswith("sha256:")  # a module in no package: its file's digest
    assert router_entry("entropy").where() == "built-in"
    assert task_entry("jsonl").provenance()["class"] == "tasks.jsonl:JSONLTask"
    with pytest.raises(UserError, match="unknown router 'nope'; valid routers: .*entropy"):
        router_class("nope")
    with pytest.raises(UserError, match="cannot import no_such_pkg"):
        router_class("no_such_pkg.mod:X")
    with pytest.raises(UserError, match="has no 'Nope'"):
        get_task("tests.test_plugins:Nope")


def fake_dist(root: Path, name: str, version: str, routers: dict, tasks: dict) -> Path:
    """An installed distribution's metadata (dist-info) declaring entry points, on sys.path."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = {"hybridbench.routers": routers, "hybridbench.tasks": tasks}
    text = "".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items()
    )
    (info / "entry_points.txt").write_text(text)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return info


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package `third-party-routers 1.0` whose entry points name Hesitant and Sums (and a
    router whose module is missing, and one shadowed by a built-in)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    routers = {"hesitant": ROUTER, "ghost": "ghost_pkg.routers:Ghost", "entropy": ROUTER}
    return fake_dist(tmp_path / "site", "third-party-routers", "1.0", routers, {"sums": TASK})


def test_entry_points_are_listed_with_their_package_and_resolved_lazily(installed, capsys):
    assert main(["routers"]) == 0
    out = capsys.readouterr().out
    assert "hesitant" in out and "entry point of third-party-routers 1.0" in out
    assert "ghost" in out  # listed without importing its (missing) module
    assert "entry point of third-party-routers 1.0 (shadowed: not used)" in out
    assert router_class("entropy").__name__ == "EntropyRouter"  # a built-in is never shadowed
    assert main(["tasks"]) == 0
    assert "sums" in capsys.readouterr().out
    assert router_class("hesitant") is Hesitant and task_entry("sums").package
    assert main(["generate", "--router", "ghost", "--prompt", "hi"]) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "ghost (entry point of third-party-routers 1.0): cannot import ghost_pkg" in line


def test_a_resumed_run_says_when_its_plugin_changed_version(installed, pair, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(run_argv(pair, out, "hesitant", "sums", 2)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["router"] == "hesitant"
    assert manifest["plugins"]["router"] == {
        "class": ROUTER, "origin": "entry point", "package": "third-party-routers",
        "version": "1.0",
    }  # fmt: skip
    assert manifest["plugins"]["task"]["class"] == TASK
    capsys.readouterr()
    shutil.rmtree(installed)  # the package is upgraded: 1.1 replaces 1.0
    fake_dist(installed.parent, "third-party-routers", "1.1", {"hesitant": ROUTER}, {"sums": TASK})
    assert main(run_argv(pair, out, "hesitant", "sums", 3)) == 0  # resumed, not refused
    err = capsys.readouterr().err
    (note,) = [line for line in err.splitlines() if line.startswith("note:")]
    was, now = f"{ROUTER} third-party-routers 1.0", f"{ROUTER} third-party-routers 1.1"
    assert f"its router {was} -> {now}" in note  # and its task: from the same package
    assert f"its task {TASK} third-party-routers 1.0 -> {TASK} third-party-routers 1.1" in note
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["plugins"]["router"]["version"] == "1.1"


# --- every command that takes a router or a task -----------------------------------------------


def test_run_calibrate_sweep_report_and_generate_take_import_paths(pair, tmp_path, capsys):
    cal = tmp_path / "cal.json"
    argv = ["calibrate", "--router", ROUTER, "--task", TASK, "--limit", "3", "--max-new-tokens",
            "6", "--out", str(cal), *pair]  # fmt: skip
    assert main(argv) == 0
    c = json.loads(cal.read_text())
    assert c["router"] == "hesitant" and c["router_class"] == ROUTER and c["task"] == "sums"
    assert len(c["example_ids"]) == 3 and len(c["scores"]) == c["n_tokens"] > 0
    assert all(i.startswith("sums/") for i in c["example_ids"])
    router = get_router(ROUTER, {"target_share": 0.5, "calibration": str(cal)})
    assert router.threshold == pytest.approx(threshold_for(Hesitant, c["scores"], 0.5))
    assert router.used_example_ids() == set(c["example_ids"])

    out = tmp_path / "run"
    extra = ["--router-arg", "target_share=0.5", "--router-arg", f"calibration={cal}"]
    assert main(run_argv(pair, out, ROUTER, TASK, 3, *extra)) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["router"] == ROUTER and m["task"] == "sums" and m["metric"] == "exact_match"
    assert m["router_trained_on"] == ["sums"] and m["transfer"] is False
    assert m["plugins"]["router"]["origin"] == "import path"
    assert len((out / "records.jsonl").read_text().splitlines()) == 3

    sweep = tmp_path / "sweep"
    argv = ["sweep", "--task", TASK, "--routers", f"small,{ROUTER}", "--targets", "0.2,0.5",
            "--router-arg", f"{ROUTER}:calibration={cal}", "--limit", "2",
            "--max-new-tokens", "6", "--out", str(sweep), *pair]  # fmt: skip
    assert main(argv) == 0
    runs = sorted(p.name for p in sweep.iterdir() if (p / "summary.json").is_file())
    assert runs == ["small__default", f"{ROUTER}__target_share=0.2", f"{ROUTER}__target_share=0.5"]
    assert main(["report", str(sweep)]) == 0
    assert ROUTER in (sweep / "report" / "leaderboard.md").read_text()

    capsys.readouterr()
    assert main(["generate", "--router", ROUTER, "--prompt", "1+1=", "--max-new-tokens", "5",
                 *pair]) == 0  # fmt: skip
    assert "large_token_share=" in capsys.readouterr().err


def test_lm_eval_takes_a_router_by_import_path_and_a_task_by_include_path(pair, tmp_path):
    pytest.importorskip("lm_eval")
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n"
                            for i in range(3)))  # fmt: skip
    include = tmp_path / "my_tasks"
    include.mkdir()
    (include / "sums.yaml").write_text(
        textwrap.dedent(f"""\
        task: plugin_sums
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{question}}}}"
        doc_to_target: "{{{{answer}}}}"
        generation_kwargs:
          until: ["\\n"]
          max_gen_toks: 4
        metric_list:
          - metric: exact_match
            aggregation: mean
            higher_is_better: true
        """)
    )
    small, large = pair[1], pair[3]
    out = tmp_path / "out"
    model_args = (
        f"router={ROUTER},threshold=0.3,small={small},large={large},dtype=float32,threads=1"
    )
    argv = ["lm-eval", "--model", "hybrid", "--model_args", model_args, "--tasks", "plugin_sums",
            "--include_path", str(include), "--output_path", str(out), "--log_samples"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    assert "exact_match,none" in results["plugin_sums"]
    assert len(next(out.rglob("samples_*.jsonl")).read_text().splitlines()) == 3
    assert main(["lm-eval", "--include_path", str(tmp_path / "none"), "--tasks", "x"]) == 2


# --- faulty plugins: one error line, and a run folder that resumes once fixed ------------------


class Flaky(Hesitant):
    """Raises in its third generation while BROKEN is set."""

    BROKEN = True
    generations = 0

    def reset(self):
        Flaky.generations += 1

    def token_scores(self, view):
        if Flaky.BROKEN and Flaky.generations >= 3:
            raise RuntimeError("the margin is undefined here")
        return super().token_scores(view)


class WrongShape(Hesitant):
    def token_scores(self, view):
        return torch.zeros(len(view.draft) + 1)


class NoDecision(Router):
    def needs(self):
        return Needs(draft_len=1)

    def decide(self, view):
        return None


class KeepsTooMuch(Router):
    def needs(self):
        return Needs(draft_len=1)

    def decide(self, view):
        return Decision(keep=2, defer=False)


class BadScores(Sums):
    """Scores without its metric while BROKEN is set."""

    BROKEN = True

    def score(self, example, completion):
        return {"match": 1.0} if BadScores.BROKEN else super().score(example, completion)


class RaisingRead(Sums):
    def read(self):
        raise KeyError("column 'question'")


def test_a_router_that_raises_stops_with_one_line_and_its_run_resumes(pair, tmp_path, capsys):
    out = tmp_path / "run"
    Flaky.generations = 0  # one generation at a time: the third to start is the third to end
    argv = run_argv(pair, out, "tests.test_plugins:Flaky", TASK, 4, "--batch", "1")
    assert main(argv) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert line.startswith("error: router tests.test_plugins:Flaky: decide raised RuntimeError")
    assert "the margin is undefined here" in line and "resumes" in line
    done = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(done) == 2 and not any(r.get("error") for r in done)
    Flaky.BROKEN = False  # fixed
    try:
        assert main(argv) == 0
    finally:
        Flaky.BROKEN = True
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["examples"] for s in manifest["sessions"]] == [2, 2]  # only the rest was decoded
    assert json.loads((out / "summary.json").read_text())["n"] == 4


@pytest.mark.parametrize(
    "router, said",
    [
        ("WrongShape", "token_scores returned shape (2,) for a draft of 1 tokens; expected (1,)"),
        ("NoDecision", "decide returned None, not a Decision"),
        ("KeepsTooMuch", "decide returned Decision(keep=2, defer=False, large_token=None) for"),
    ],
)
def test_a_router_that_answers_in_the_wrong_shape_gets_one_line(pair, tmp_path, capsys, router,
                                                                   said):  # fmt: skip
    assert main(run_argv(pair, tmp_path / "run", f"tests.test_plugins:{router}", TASK, 1)) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert said in line, line


def test_a_task_that_raises_or_scores_wrongly_gets_one_line_and_resumes(pair, tmp_path, capsys):
    assert main(run_argv(pair, tmp_path / "a", "small", "tests.test_plugins:RaisingRead")) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "task tests.test_plugins:RaisingRead: split raised KeyError" in line
    assert not (tmp_path / "a").exists()  # refused before a run folder was made

    out = tmp_path / "b"
    assert main(run_argv(pair, out, "small", "tests.test_plugins:BadScores", 2)) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "score returned {'match': 1.0}, not a dict holding 'exact_match'" in line
    BadScores.BROKEN = False
    try:
        assert main(run_argv(pair, out, "small", "tests.test_plugins:BadScores", 2)) == 0
    finally:
        BadScores.BROKEN = True
    assert json.loads((out / "summary.json").read_text())["n"] == 2


def test_a_missing_plugin_gets_one_line_and_runs_once_it_exists(pair, tmp_path, capsys,
                                                                 monkeypatch):  # fmt: skip
    monkeypatch.setattr(sys, "path", [str(tmp_path / "src"), *sys.path])
    out = tmp_path / "run"
    argv = run_argv(pair, out, "my_routers.margin:Margin", TASK, 2)
    assert main(argv) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert line == (
        "error: router my_routers.margin:Margin: cannot import my_routers.margin: "
        "ModuleNotFoundError: No module named 'my_routers'"
    )
    package = tmp_path / "src" / "my_routers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "margin.py").write_text(
        "from tests.test_plugins import Hesitant\n\n\nclass Margin(Hesitant):\n    pass\n"
    )
    importlib.invalidate_caches()
    try:
        assert main(argv) == 0
        m = json.loads((out / "manifest.json").read_text())
        assert m["plugins"]["router"]["class"] == "my_routers.margin:Margin"
        # the plugin's code changes: a module in no package is versioned by its file's digest
        (package / "margin.py").write_text(
            "from tests.test_plugins import Hesitant\n\n\nclass Margin(Hesitant):\n"
            "    default_threshold = 0.1\n"
        )
        for name in ("my_routers.margin", "my_routers"):
            sys.modules.pop(name, None)
        capsys.readouterr()
        assert main(run_argv(pair, out, "my_routers.margin:Margin", TASK, 3)) == 0
        assert "note: since this run began, its router my_routers.margin:Margin sha256:" in (
            capsys.readouterr().err
        )
    finally:
        for name in ("my_routers.margin", "my_routers"):
            sys.modules.pop(name, None)


# --- a task without code: a JSONL file and one of the project's scorers ------------------------


def jsonl_task(tmp_path, rows, scorer, **kw):
    path = tmp_path / "my-task.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return get_task("jsonl", path=str(path), scorer=scorer, **kw)


def test_jsonl_tasks_score_with_the_projects_scorers(tmp_path):
    task = jsonl_task(tmp_path, [{"prompt": "2+5?", "reference": 7, "id": "a"},
                                 {"prompt": "1+1?", "reference": "2"}], "numeric")  # fmt: skip
    a, b = task.split("all")
    assert task.name == "my-task" and task.metric == "exact_match" and a.id == "my-task/a"
    assert b.id.startswith("my-task/") and len(b.id) == len("my-task/") + 16  # a content digest
    assert task.score(a, "so the answer is \\boxed{7.0}.") == {"exact_match": 1.0, "extracted": 1.0}
    assert task.score(a, "I think 8")["exact_match"] == 0.0
    assert get_task("gsm8k").split("test")[0].id.startswith("gsm8k/")  # built-ins: unwrapped
    # the splits are every hashed task's: the same (seed, id) -> the same split
    many = jsonl_task(tmp_path, [{"prompt": f"{i}?", "reference": i} for i in range(80)], "numeric")
    parts = {s: {e.id for e in many.split(s)} for s in ("train", "calib", "test")}
    assert sum(map(len, parts.values())) == 80 and not parts["calib"] & parts["test"]
    assert parts["test"] == {e.id for e in many.split("all") if many.split_of(e) == "test"}

    choice = jsonl_task(tmp_path, [{"prompt": "Sky?", "choices": ["red", "blue"],
                                    "reference": "(B)", "system": "Be brief."}], "choice")  # fmt: skip
    (ex,) = choice.split("all")
    assert [m["role"] for m in ex.messages] == ["system", "user"]
    assert "(A) red\n(B) blue" in ex.messages[1]["content"] and ex.reference == "B"
    assert choice.score(ex, "The answer is (B).")["acc"] == 1.0
    assert choice.score(ex, "The answer is (A).")["acc"] == 0.0

    code = jsonl_task(tmp_path, [{"prompt": "Write add(a, b).",
                                  "reference": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]}],
                      "code")  # fmt: skip
    (ex,) = code.split("all")
    good = "```python\ndef add(a, b):\n    return a + b\n```"
    assert code.score(ex, good) == {"pass@1": 1.0, "extracted": 1.0}
    assert code.score(ex, good.replace("a + b", "a - b"))["pass@1"] == 0.0

    rouge = jsonl_task(tmp_path, [{"prompt": "Summarize: ...", "reference": "A cat sat."}], "rouge")
    (ex,) = rouge.split("all")
    assert rouge.score(ex, "A cat sat.")["rougeLsum"] == pytest.approx(1.0)
    assert rouge.metric == "rougeLsum"


@pytest.mark.parametrize(
    "rows, scorer, said",
    [
        (['{"prompt": "x", "reference": 1'], "numeric", "my-task.jsonl:1: bad JSON"),
        ([{"prompt": "x"}], "numeric", "my-task.jsonl:1: missing field 'reference'"),
        ([{"prompt": "x", "reference": "seven"}], "numeric",
         "my-task.jsonl:1: reference 'seven' is not a number (scorer numeric)"),
        ([{"prompt": "", "reference": 1}], "numeric", "'prompt' must be a non-empty string"),
        ([{"prompt": "x", "reference": "C", "choices": ["a", "b"]}], "choice",
         "reference 'C' is not one of the letters AB"),
        ([{"prompt": "x", "reference": "A"}], "choice", "scorer choice needs 'choices'"),
        ([{"prompt": "x", "reference": []}], "code", "scorer code needs reference: test code"),
        ([{"prompt": "x", "reference": 1, "id": 3}, {"prompt": "y", "reference": 2, "id": 3}],
         "numeric", "my-task.jsonl:2: duplicate of line 1 (id 3)"),
        ([], "numeric", "my-task.jsonl: no rows"),
    ],
)  # fmt: skip
def test_a_bad_jsonl_file_is_one_line_naming_file_and_line(tmp_path, capsys, rows, scorer, said):
    with pytest.raises(UserError, match=None) as e:
        jsonl_task(tmp_path, rows, scorer).split("all")
    assert said in str(e.value) and "\n" not in str(e.value)
    argv = [
        "run",
        "--task",
        "jsonl",
        "--task-arg",
        f"path={tmp_path / 'my-task.jsonl'}",
        "--task-arg",
        f"scorer={scorer}",
        "--router",
        "small",
        "--out",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert said in line and not (tmp_path / "r").exists()


def test_jsonl_task_arguments_are_checked(tmp_path):
    with pytest.raises(UserError, match="needs path=FILE and scorer=numeric"):
        get_task("jsonl")
    with pytest.raises(UserError, match="unknown scorer 'fuzzy'; valid: numeric, choice"):
        get_task("jsonl", path=str(tmp_path), scorer="fuzzy")
    with pytest.raises(UserError, match="data file .*nope.jsonl not found"):
        get_task("jsonl", path=str(tmp_path / "nope.jsonl"), scorer="numeric")
