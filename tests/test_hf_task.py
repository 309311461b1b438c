"""`--task hf`: any `datasets` dataset (parquet, JSON, an lm-eval YAML) as a task without code.

Datasets are written to disk in each test; nothing reaches a hub (conftest sets HF_*_OFFLINE).
The command line runs, calibrates and sweeps them on the tiny pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.cli.main import main
from harness.errors import UserError
from tasks import get_task
from tests.tiny import save_tiny_pair


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """arith.parquet (40 sums: question, a, b, answer, uid), code.json (6 functions with their
    tests and gold code), mc.jsonl (ARC-style choices) and split/ (test.csv + validation.csv)."""
    root = tmp_path_factory.mktemp("hf-data")
    rows = [{"question": f"What is {i} plus {i + 1}?", "a": i, "b": i + 1, "answer": 2 * i + 1,
             "uid": f"s{i}"} for i in range(40)]  # fmt: skip
    pd.DataFrame(rows).to_parquet(root / "arith.parquet")
    with open(root / "code.json", "w") as f:
        for i in range(6):
            row = {"text": f"Write a function add{i}(a, b) that returns a + b.",
                   "test_list": [f"assert add{i}(1, 2) == 3", f"assert add{i}(0, 0) == 0"],
                   "code": f"def add{i}(a, b):\n    return a + b\n"}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    mc = [{"q": "Sky colour?", "choices": {"label": ["1", "2"], "text": ["red", "blue"]}, "key": "2"},
          {"q": "Grass colour?", "choices": {"label": ["1", "2"], "text": ["green", "pink"]}, "key": "1"}]  # fmt: skip
    (root / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mc))
    (root / "split").mkdir()
    pd.DataFrame(rows[:30]).to_csv(root / "split" / "test.csv", index=False)
    pd.DataFrame(rows[30:]).to_csv(root / "split" / "validation.csv", index=False)
    return root


def arith(data, **kw):
    args = {"dataset": str(data / "arith.parquet"), "prompt": "question", "reference": "answer",
            "scorer": "numeric", **kw}  # fmt: skip
    return get_task("hf", **args)


def test_parquet_numeric_with_a_template_over_columns_and_a_system_turn(data):
    task = arith(data, prompt="Add {{a}} and {{b}}.", system="Answer in \\boxed{}.", id="uid")
    examples = task.split("all")
    assert task.name == "arith" and task.metric == "exact_match" and len(examples) == 40
    first = examples[0]
    assert first.id == "arith/s0" and first.reference == "1"
    assert first.messages == ({"role": "system", "content": "Answer in \\boxed{}."},
                              {"role": "user", "content": "Add 0 and 1."})  # fmt: skip
    assert task.score(first, "so \\boxed{1}") == {"exact_match": 1.0, "extracted": 1.0}
    assert task.score(first, "I get 2")["exact_match"] == 0.0
    # hashed splits, as every hashed task: disjoint, covering, the same ids on a second load
    parts = {s: {e.id for e in task.split(s)} for s in ("train", "calib", "test")}
    assert sum(map(len, parts.values())) == 40 and not parts["calib"] & parts["test"]
    assert [e.id for e in arith(data, id="uid").split("test")] == [e.id for e in task.split("test")]


def test_ids_default_to_a_digest_of_the_prompt_not_the_row_position(data, tmp_path):
    rows = pd.read_parquet(data / "arith.parquet")
    rows.iloc[::-1].to_parquet(tmp_path / "arith.parquet")  # the same rows, reversed
    forward = {e.id: e.reference for e in arith(data).split("all")}
    backward = {e.id: e.reference for e in arith(tmp_path).split("all")}
    assert forward == backward and all(len(i) == len("arith/") + 16 for i in forward)


def test_json_code_task_runs_its_tests_in_the_sandbox(data):
    task = get_task("hf", dataset=str(data / "code.json"), prompt="text", tests="test_list",
                    reference="code", scorer="code")  # fmt: skip
    ex = task.split("all")[0]
    assert task.metric == "pass@1" and ex.meta["tests"].startswith("assert add0(1, 2) == 3")
    assert task.score(ex, f"```python\n{ex.reference}```") == {"pass@1": 1.0, "extracted": 1.0}
    wrong = "```python\ndef add0(a, b):\n    return a - b\n```"
    assert task.score(ex, wrong)["pass@1"] == 0.0


def test_choice_reads_labelled_options_and_exact_normalizes(data):
    task = get_task("hf", dataset=str(data / "mc.jsonl"), prompt="q", choices="choices",
                    reference="key", scorer="choice")  # fmt: skip
    sky, grass = task.split("all")
    assert (sky.reference, grass.reference) == ("B", "A") and sky.meta["choices"] == ["red", "blue"]
    assert "(A) red\n(B) blue" in sky.messages[0]["content"]
    assert task.score(sky, "The answer is (B).")["acc"] == 1.0
    exact = get_task("hf", dataset=str(data / "mc.jsonl"), prompt="q", reference="key",
                     scorer="exact")  # fmt: skip
    one = exact.split("all")[0]
    assert exact.score(one, "The answer is **2**.") == {"exact_match": 1.0, "extracted": 1.0}
    assert exact.score(one, "The answer is 1.")["exact_match"] == 0.0


def test_a_train_split_makes_split_a_held_out_test_set(data):
    folder = str(data / "split")
    task = get_task("hf", dataset=folder, split="test", train_split="validation",
                    prompt="question", reference="answer", scorer="numeric")  # fmt: skip
    assert len(task.split("test")) == 30 and len(task.split("test", seed=7)) == 30
    assert len(task.split("train")) + len(task.split("calib")) == 10
    plain = get_task("hf", dataset=folder, prompt="question", reference="answer", scorer="numeric")
    assert len(plain.split("all")) == 30  # no split named: the "test" one


def test_an_lm_eval_task_yaml_gives_the_data_prompt_and_target(data, tmp_path):
    (tmp_path / "base.yaml").write_text(
        "output_type: generate_until\ndataset_path: parquet\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data / 'arith.parquet'}\n"
        "test_split: test\ndoc_to_target: '{{answer}}'\n"
        "generation_kwargs:\n  until: ['Question:']\n  max_gen_toks: 64\n"
    )
    (tmp_path / "my_arith.yaml").write_text(
        "include: base.yaml\ntask: my_arith\ndoc_to_text: 'Question: {{question}}'\n"
        "description: 'Put the answer in \\boxed{}.'\nprocess_docs: !function utils.first_ten\n"
    )
    (tmp_path / "utils.py").write_text(
        "def first_ten(dataset):\n    return dataset.select(range(10))\n"
    )
    task = get_task("hf", lm_eval_task="my_arith", include_path=str(tmp_path), scorer="numeric")
    examples = task.split("all")
    assert task.name == "my_arith" and len(examples) == 10
    assert task.stop == ("Question:",) and task.max_new_tokens == 64
    assert examples[0].messages == ({"role": "system", "content": "Put the answer in \\boxed{}."},
                                    {"role": "user", "content": "Question: What is 0 plus 1?"})  # fmt: skip
    assert examples[0].reference == "1"
    # an argument given on the command line wins over the YAML's
    short = get_task("hf", lm_eval_task="my_arith", include_path=str(tmp_path), scorer="numeric",
                     max_new_tokens=8)  # fmt: skip
    assert short.max_new_tokens == 8


def test_lm_evals_own_gsm8k_yaml_over_local_data(data, tmp_path):
    """data.md's recipe: include lm-eval's installed gsm8k YAML, override only its data; its
    prompt and stop strings are kept, and a task argument narrows its target to the number."""
    import importlib.util

    lm_eval = Path(list(importlib.util.find_spec("lm_eval").submodule_search_locations)[0])
    rows = [{"question": f"Tom has {i} apples and buys 2. How many?",
             "answer": f"He has {i} + 2 = {i + 2}.\n#### {i + 2}"} for i in range(5)]  # fmt: skip
    (tmp_path / "gsm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "gsm8k_local.yaml").write_text(
        f"include: {lm_eval / 'tasks' / 'gsm8k' / 'gsm8k.yaml'}\ntask: gsm8k_local\n"
        f"dataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {tmp_path / 'gsm.jsonl'}\n"
    )
    task = get_task("hf", lm_eval_task="gsm8k_local", include_path=str(tmp_path), scorer="numeric",
                    reference="{{answer.split('####')[-1].strip()}}")  # fmt: skip
    first = task.split("all")[0]
    assert first.messages[0]["content"] == f"Question: {rows[0]['question']}\nAnswer:"
    assert first.reference == "2" and "Question:" in task.stop
    assert task.score(first, "So he has \\boxed{2} apples.")["exact_match"] == 1.0
    with pytest.raises(UserError, match=r"gsm\.jsonl \[row 0\]: reference .* is not a number"):
        get_task("hf", lm_eval_task="gsm8k_local", include_path=str(tmp_path),
                 scorer="numeric").load()  # fmt: skip
    with pytest.raises(UserError, match="dataset openai/gsm8k: the hub is offline"):
        get_task("hf", lm_eval_task="gsm8k", scorer="exact").load()  # lm-eval's own: the Hub


def error_line(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines()
             if ln.startswith(("error:", "Traceback"))]  # fmt: skip
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "args, said",
    [
        ({"dataset": "missing/arith.parquet"}, "dataset missing/arith.parquet not found"),
        ({"prompt": "problem"}, "has no column 'problem'; its columns: question, a, b, answer, uid"),
        ({"prompt": "{{question}} {{hint}}"}, "has no column 'hint'"),
        ({"split": "validation"}, "has no split 'validation'; its splits: train"),
        ({"dataset": "openai/gsm8k", "config": "main"},
         "dataset openai/gsm8k: the hub is offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE) and it "
         "is not in the local cache"),
        ({"scorer": "fuzzy"}, "unknown scorer 'fuzzy'; valid: numeric, choice, code, rouge, exact"),
        ({"reference": "question"}, "reference 'What is 0 plus 1?' is not a number"),
    ],
)  # fmt: skip
def test_a_bad_dataset_split_or_column_is_one_line_and_exit_2(data, tmp_path, capsys, args, said):
    import os

    assert os.environ["HF_DATASETS_OFFLINE"] == "1"  # tests/conftest.py: no hub, fail at once
    base = {"dataset": str(data / "arith.parquet"), "prompt": "question", "reference": "answer",
            "scorer": "numeric"}  # fmt: skip
    base.update(args)
    with pytest.raises(UserError) as e:
        get_task("hf", **base).load()
    assert said in str(e.value) and "\n" not in str(e.value)
    task_args = [x for k, v in base.items() for x in ("--task-arg", f"{k}={v}")]
    out = tmp_path / "r"
    assert main(["run", "--task", "hf", *task_args, "--router", "small", "--out", str(out)]) == 2
    assert said in error_line(capsys) and not out.exists()


# ---------------------------------------------------------------- the command line, tiny pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def models(pair):
    return ["--small", pair[0], "--large", pair[1], "--dtype", "float32", "--threads", "1"]


def task_args(**kw) -> list[str]:
    return [x for k, v in kw.items() for x in ("--task-arg", f"{k}={v}")]


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_parquet_and_json_datasets_run_calibrate_and_sweep_on_the_tiny_pair(data, pair, tmp_path):
    numeric = ["--task", "hf", *task_args(dataset=data / "arith.parquet", prompt="question",
                                          reference="answer", scorer="numeric", id="uid")]  # fmt: skip
    code = ["--task", "hf", *task_args(dataset=data / "code.json", prompt="text",
                                       tests="test_list", reference="code", scorer="code")]  # fmt: skip
    budget = ["--max-new-tokens", "6", *models(pair)]
    for name, task, scorer in (("arith", numeric, "numeric"), ("code", code, "code")):
        out = tmp_path / name
        argv = ["run", *task, "--router", "random", "--router-arg", "p=0.5", "--split", "all",
                "--limit", "3", "--out", str(out), *budget]  # fmt: skip
        assert main(argv) == 0
        s = summary(out)
        assert s["n"] == 3 and s["n_failed"] == 0 and 0.0 <= s["quality"] <= 1.0
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["task"] == name and manifest["task_args"]["scorer"] == scorer
        records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
        assert all(r["example_id"].startswith(f"{name}/") for r in records)
    cal = tmp_path / "entropy.json"
    argv = [
        "calibrate",
        "--router",
        "entropy",
        *numeric,
        "--limit",
        "4",
        "--out",
        str(cal),
        *budget,
    ]
    assert main(argv) == 0 and json.loads(cal.read_text())["split"] == "calib"
    sweep = tmp_path / "sweep"
    argv = ["sweep", *numeric, "--routers", "small,large,entropy", "--targets", "0.5",
            "--router-arg", f"entropy:calibration={cal}", "--limit", "3", "--out", str(sweep),
            *budget]  # fmt: skip
    assert main(argv) == 0
    runs = {d.name: summary(d) for d in sweep.iterdir() if (d / "summary.json").is_file()}
    assert {"small__default", "large__default"} <= set(runs) and len(runs) == 3
    assert runs["small__default"]["large_token_share"] == 0.0
    assert runs["large__default"]["large_token_share"] == 1.0
