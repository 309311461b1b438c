"""The tasks' scorers agree with lm-eval's own rules on the same completions.

lm-eval is the reference: its YAML configs (gsm8k, mmlu_flan_cot_zeroshot) are loaded from the
installed package, their filters built by lm-eval's filter registry and applied to lm-eval
Instances, and the prediction scored by lm-eval's registered `exact_match` with the YAML's
settings. MATH's normalization is compared with the functions in lm-eval's minerva_math/utils.py
(read from its source: importing that module needs math_verify, which is not installed).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tasks import choice as choice_rules
from tasks import get_task, rules
from tasks import gsm8k as gsm8k_rules

lm_eval = pytest.importorskip("lm_eval")
LM_TASKS = Path(lm_eval.__file__).parent / "tasks"


def load_config(relative: str) -> dict:
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(LM_TASKS / relative, resolve_func=False)


def lmeval_scores(config: dict, items: list[tuple[dict, str, str]]) -> list[dict[str, float]]:
    """filter name -> lm-eval's exact_match, per (doc, completion, target), through lm-eval's own
    pipeline (one batch: its multi-choice filter rebuilds a unicode table on every call)."""
    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_metric
    from lm_eval.filters import build_filter_ensemble

    (metric_cfg,) = config["metric_list"]
    kwargs = {
        k: v
        for k, v in metric_cfg.items()
        if k not in ("metric", "aggregation", "higher_is_better", "hf_evaluate")
    }
    metric = get_metric(metric_cfg["metric"])
    instances = []
    for i, (doc, completion, _) in enumerate(items):
        inst = Instance("generate_until", doc=doc, arguments=("", {}), idx=i)
        inst.resps = [completion]
        instances.append(inst)
    for f in config["filter_list"]:
        steps = [
            (s["function"], {k: v for k, v in s.items() if k != "function"}) for s in f["filter"]
        ]
        build_filter_ensemble(f["name"], steps).apply(instances)
    return [
        {
            name: float(metric(references=[target], predictions=[pred], **kwargs)["exact_match"])
            for name, pred in inst.filtered_resps.items()
        }
        for inst, (_, _, target) in zip(instances, items, strict=True)
    ]


# ---------------------------------------------------------------- gsm8k

GSM8K_YAML = "gsm8k/gsm8k.yaml"


def gsm8k_completions(gold: str) -> list[str]:
    plain = gold.replace(",", "")
    return [
        f"She makes 9 * 2 = $18 a day.\n#### {gold}",  # the asked-for format
        f"#### {plain}.",  # trailing period
        f"#### {gold}\nI hope this helps (2 steps).",  # strict right, flexible picks the 2
        f"The answer is ${gold}.",  # no ####, dollar sign
        f"**Answer:** {plain}",  # markdown
        f"#### ${plain}",  # strict regex cannot read "$"
        f"#### {int(plain) + 1}",  # wrong
        f"#### -{plain}",  # wrong sign
        f"#### {plain}.00",  # not normalized by lm-eval
        "I am not sure how to solve this.",  # no number
        "",  # empty
        "First 3 + 4 = 7, then ... so the result is unclear...",  # ellipsis is a "number"
        f"{plain}",  # bare number
        f"#### {gold} #### 5",  # two answers: strict takes the first
        f"Adding up, \\boxed{{{gold}}}.",  # the format the prompt asks for (Qwen's)
        f"\\boxed{{{plain}}}\n#### {plain}",  # both forms
    ]


def test_gsm8k_patterns_are_lmevals():
    config = load_config(GSM8K_YAML)
    filters = {f["name"]: f["filter"][0] for f in config["filter_list"]}
    assert gsm8k_rules.STRICT_PATTERN == filters["strict-match"]["regex_pattern"]
    assert gsm8k_rules.FLEXIBLE_PATTERN == filters["flexible-extract"]["regex_pattern"]
    assert filters["flexible-extract"]["group_select"] == -1
    (metric,) = config["metric_list"]
    assert list(gsm8k_rules.IGNORE) == metric["regexes_to_ignore"]
    assert metric["ignore_case"] and not metric["ignore_punctuation"]


def test_gsm8k_scores_equal_lmeval():
    config = load_config(GSM8K_YAML)
    task = get_task("gsm8k")
    examples = task.load()
    picked = [examples[0], examples[1]] + [ex for ex in examples if "," in ex.reference][:2]
    cases, items = [], []
    for ex in picked:
        doc = {"question": "", "answer": ex.meta["solution"]}
        target = lm_eval.utils.apply_template(config["doc_to_target"], doc)
        for completion in gsm8k_completions(ex.reference):
            cases.append((ex, completion))
            items.append((doc, completion, target))
    for (ex, completion), theirs in zip(cases, lmeval_scores(config, items), strict=True):
        ours = task.score(ex, completion)
        assert ours["exact_match_strict"] == theirs["strict-match"], completion
        assert ours["exact_match_flexible"] == theirs["flexible-extract"], completion
    assert len(cases) == 4 * 16


# ---------------------------------------------------------------- mmlu (and every letter task)

MMLU_YAML = "mmlu/flan_cot_zeroshot/mmlu_professional_psychology.yaml"


def choice_completions(gold: str, choices: list[str]) -> list[str]:
    wrong = "A" if gold != "A" else "B"
    text = choices["ABCDE".index(gold)]
    return [
        f"Let's think. ... The answer is ({gold}).",
        f"The answer is {gold}.",  # no parentheses
        f"the answer is ({gold.lower()}).",  # lower case
        f"({gold})",
        gold,  # bare letter: no rule reads it
        f"Answer: {gold}",  # letter after a colon
        f"I think it is {text}.",  # the option's text
        f"({wrong}) looks tempting, but the answer is ({gold}).",  # last (X) wins
        f"The answer is ({gold}), not ({wrong}).",  # strict reads "(G), not (W)"
        f"**The answer is ({wrong})**",
        f"The final answer: ({gold})",
        "I cannot answer this question.",
        "",
        f"Options (A) and (B) are wrong. The answer is {gold}",
    ]


def test_choice_patterns_are_lmevals():
    config = load_config(MMLU_YAML)
    filters = {f["name"]: f["filter"][0] for f in config["filter_list"]}
    assert choice_rules.STRICT_PATTERN == filters["strict-match"]["regex_pattern"]
    flexible = filters["flexible-extract"]
    assert choice_rules.FLEXIBLE_PATTERN == flexible["regex_pattern"]
    assert (
        flexible["group_select"] == -1
        and flexible["ignore_case"]
        and flexible["ignore_punctuation"]
    )
    (metric,) = config["metric_list"]
    assert metric["ignore_case"] and metric["ignore_punctuation"]


def choice_docs() -> list[tuple[object, object]]:
    """(task, example) pairs: MMLU rows (4 options), one CSQA row (5), one 3-option ARC row."""
    mmlu = get_task("mmlu", subject="professional_psychology")
    arc, csqa = get_task("arc_challenge"), get_task("commonsense_qa")
    rows = [(mmlu, ex) for ex in mmlu.split("test")[:4]]
    rows.append((csqa, csqa.load()[0]))
    rows.append((arc, next(ex for ex in arc.load() if len(ex.meta["choices"]) == 3)))
    return rows


def test_choice_scores_equal_lmeval():
    config = load_config(MMLU_YAML)
    cases, items = [], []
    for task, ex in choice_docs():
        choices = ex.meta["choices"]
        doc = {"question": "", "choices": choices, "answer": "ABCDE".index(ex.reference)}
        target = f"({ex.reference})"
        if len(choices) == 4:  # the YAML's own target template covers four options
            assert lm_eval.utils.apply_template(config["doc_to_target"], doc) == target
        for completion in choice_completions(ex.reference, choices):
            cases.append((task, ex, completion))
            items.append((doc, completion, target))
    for (task, ex, completion), theirs in zip(cases, lmeval_scores(config, items), strict=True):
        ours = task.score(ex, completion)
        assert ours["acc_flexible"] == theirs["flexible-extract"], completion
        assert ours["acc_strict"] == theirs["strict-match"], completion
    assert len(cases) == 6 * 14


def test_choice_text_fallback_matches_lmeval_with_punctuation():
    """Step 2 of the flexible rule (quoted option text) with unicode punctuation and prefixes."""
    config = load_config(MMLU_YAML)
    choices = ["Guilty", "Guilty of Romance", "“Not” guilty", "None—of these"]
    doc = {"question": "", "choices": choices, "answer": 1}
    completions = ["It is guilty of romance!", "surely “not” guilty", "none of these", "guilty"]
    items = [(doc, c, f"({gold})") for c in completions for gold in "ABCD"]
    for (_, completion, target), theirs in zip(items, lmeval_scores(config, items), strict=True):
        pred = rules.multi_choice_extract(
            completion, choices, choice_rules.FLEXIBLE_PATTERN, -1, True, True
        )
        mine = rules.exact_match(pred, target, ignore_case=True, ignore_punctuation=True)
        assert mine == theirs["flexible-extract"], (completion, target)


# ---------------------------------------------------------------- math500


def minerva_functions() -> dict:
    """lm-eval's last_boxed_only_string, remove_boxed and normalize_final_answer, from source."""
    source = (LM_TASKS / "minerva_math" / "utils.py").read_text()
    wanted = {"last_boxed_only_string", "remove_boxed", "normalize_final_answer"}
    keep = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            keep.append(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("SUBSTITUTIONS", "REMOVED_EXPRESSIONS")
            for t in node.targets
        ):
            keep.append(node)
    namespace = {"re": re}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "minerva_utils", "exec"), namespace)
    assert wanted <= namespace.keys()
    return namespace


ANSWERS = [
    "\\text{5 cm}",
    "100,000",
    "0,1",
    "\\frac12",
    "\\sqrt[3]8",
    "\\sqrt2",
    "x = 3",
    "\\left( 3, \\frac{\\pi}{2} \\right)",
    "$\\$4.50$",
    "10\\%",
    "90^\\circ",
    "\\textbf{(C)}",
    "\\boxed{7}",
    "an integer",
    "2\\pi cm",
    "\\dfrac{1}{2}",
]


def test_math_normalization_equals_lmeval():
    lm = minerva_functions()
    assert rules.SUBSTITUTIONS == lm["SUBSTITUTIONS"]
    assert rules.REMOVED_EXPRESSIONS == lm["REMOVED_EXPRESSIONS"]
    for text in ANSWERS:
        assert rules.normalize_final_answer(text) == lm["normalize_final_answer"](text), text
    for text in [
        "\\boxed{1}",
        "a \\boxed{\\frac{1}{2}} b \\boxed{3}",
        "\\fbox{4}",
        "\\boxed 5$",
        "none",
    ]:
        assert rules.last_boxed(text) == lm["last_boxed_only_string"](text), text


def test_math500_gold_equals_lmeval_process_docs():
    """Our reference is lm-eval's `answer` (process_docs) for every one of the 500 problems."""
    lm = minerva_functions()
    task = get_task("math500")
    from tasks.math500 import DATA
    from tasks.sources import olmo_docs

    solutions = {f"math500/{doc['index']}": doc["solution"] for _, doc in olmo_docs(DATA)}
    for ex in task.load():
        boxed = lm["last_boxed_only_string"](solutions[ex.id])
        assert ex.reference == lm["normalize_final_answer"](lm["remove_boxed"](boxed)), ex.id
