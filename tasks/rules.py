"""lm-eval's answer-extraction filters and `exact_match`, as small pure functions.

lm-eval is an optional dependency, so the scoring rules it publishes are re-implemented here,
line for line, and `tests/test_scoring_lmeval.py` feeds the same completions through these
functions and through the installed lm-eval (its YAML configs, filters and metric) and asserts
equal scores. The regex constants that mirror a YAML are checked against it there too.

- `regex_extract`         = lm_eval.filters.extraction.RegexFilter + take_first
- `multi_choice_extract`  = lm_eval.filters.extraction.MultiChoiceRegexFilter + take_first
- `exact_match`           = lm_eval.api.metrics.exact_match_hf_evaluate, one prediction
"""

from __future__ import annotations

import re
import string
import unicodedata

INVALID = "[invalid]"  # lm-eval's fallback when a filter finds nothing
_ASCII_PUNCT = str.maketrans("", "", string.punctuation)


def regex_extract(text: str, pattern: str, group_select: int = 0, fallback: str = INVALID) -> str:
    """The `group_select`-th match of `pattern` (first non-empty group if it has groups), stripped.

    regex_extract("so #### 18", r"#### (\\-?[0-9\\.\\,]+)") -> "18"
    """
    matches = re.findall(pattern, text)
    if not matches:
        return fallback
    match = matches[group_select]
    if isinstance(match, tuple):
        match = next((m for m in match if m), fallback)
    return match.strip()


def exact_match(
    prediction: str,
    reference: str,
    regexes_to_ignore: tuple[str, ...] = (),
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
) -> float:
    """1.0 if equal after deleting `regexes_to_ignore` (in order), lowercasing, deleting ASCII
    punctuation (each when asked), else 0.0."""
    for pattern in regexes_to_ignore:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    if ignore_case:
        prediction, reference = prediction.lower(), reference.lower()
    if ignore_punctuation:
        prediction = prediction.translate(_ASCII_PUNCT)
        reference = reference.translate(_ASCII_PUNCT)
    return float(prediction == reference)


def _strip_unicode_punct(text: str) -> str:
    return "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))


def multi_choice_extract(
    text: str,
    choices: list[str],
    pattern: str,
    group_select: int = 0,
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
) -> str:
    """A letter answer "(X)" from a free-form reply, by lm-eval's three steps:

    1. `pattern` (e.g. r"(\\([A-Z]\\))" finds "(B)");
    2. else the text of a choice quoted in the reply (compared after the ignore_* normalization),
       mapped to its letter;
    3. else a letter after a colon ("Answer: B"), mapped to "(B)".
    Each step takes the `group_select`-th match; nothing found gives "[invalid]".
    """

    def normalize(s: str) -> str:
        s = s.lower() if ignore_case else s
        return _strip_unicode_punct(s) if ignore_punctuation else s

    def find(regex: str, s: str, convert: dict[str, str]) -> str:
        matches = re.findall(regex, s)
        if not matches:
            return ""
        match = matches[group_select]
        if isinstance(match, tuple):
            match = next((m for m in match if m), "")
        match = match.strip()
        return convert.get(match, match) if match else match

    letters = [chr(ord("A") + i) for i in range(len(choices))]
    choice_to_letter = {
        normalize(c.strip()): f"({x})" for c, x in zip(choices, letters, strict=True)
    }
    # longest first: alternation is leftmost-wins, so a choice that prefixes another can't shadow it
    texts = sorted((re.escape(normalize(c.strip())) for c in choices), key=len, reverse=True)
    return (
        find(pattern, text, {})
        or find("|".join(texts), normalize(text), choice_to_letter)
        or find(rf":[\s]*({'|'.join(letters)})", text, {x: f"({x})" for x in letters})
        or INVALID
    )


# --- MATH (lm_eval/tasks/minerva_math/utils.py, lm-eval 0.4.13; Minerva, Lewkowycz et al. 2022) ---

SUBSTITUTIONS = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
]
REMOVED_EXPRESSIONS = [
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "ft",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    r"\mathrm{th}",
    r"^\circ",
    r"^{\circ}",
    r"\;",
    r",\!",
    "{,}",
    '"',
    "\\dots",
]


def last_boxed(text: str) -> str | None:
    """The last "\\boxed{...}" (braces balanced) or "\\fbox{...}" in `text`, or None."""
    idx = text.rfind("\\boxed")
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return None
    depth = 0
    for i in range(idx, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if text[i] == "}" and depth == 0:
            return text[idx : i + 1]
    return None


def unbox(boxed: str) -> str:
    """ "\\boxed{x}" -> "x" (also "\\boxed x" and "\\fbox{x}")."""
    for left in ("\\boxed ", "\\boxed{", "\\fbox{"):
        if boxed.startswith(left):
            return boxed[len(left) :] if left.endswith(" ") else boxed[len(left) : -1]
    return boxed


def normalize_final_answer(final_answer: str) -> str:
    """Minerva's normalization of a final answer, as lm-eval 0.4.13 has it: "\\text{5 cm}" -> "5"."""
    final_answer = final_answer.split("=")[-1]
    for expr in REMOVED_EXPRESSIONS:
        if expr.isalpha():  # unit words while whitespace still delimits them
            final_answer = re.sub(rf"(?<!\\)\b{expr}\b", "", final_answer)
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        if expr.isalpha():  # glued units, skipping LaTeX command names ("ft" in "\left")
            segments = re.split(r"(\\[a-zA-Z]+)", final_answer)
            for i in range(0, len(segments), 2):
                segments[i] = segments[i].replace(expr, "")
            final_answer = "".join(segments)
        else:
            final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)(\[[^\]]*\])(\w)", "\\1\\2{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)(?!\[)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", final_answer):  # 100,000 -> 100000, not "0,1"
        final_answer = final_answer.replace(",", "")
    return final_answer
