"""Code tasks' shared parts (mbpp, humaneval): pull code out of a reply, run it with its tests.

`extract_code` takes the first ```python (or bare ```) fenced block of a chat reply; a block cut
off by the token limit counts up to the end; a reply with no fence is taken as code. `passes`
runs a whole program (solution, then its tests) in `harness.sandbox` (separate process, time
and memory limits): pass@1 with one greedy sample.

A program passes only if it exits with status 0 and its last line ran (`reached_end`, proved
by a per-run token the sandbox hides from the code), so every test after the solution ran to
the end. A solution that ends the run early cannot pass, however it does it: sys.exit or
raise SystemExit (at import or when a test calls it), os._exit, an atexit handler or excepthook
that rewrites the exit status after a failing assert, a signal handler that exits. What the
check does not stop, a solution built to cheat it (reading the token's fd, patching what the
tests compare or call), is in `harness.sandbox`'s docstring.
"""

from __future__ import annotations

import ast
import re
import textwrap

# an opening fence with its language, then the block up to the closing fence or the end of text
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str) -> str:
    """The code in a completion: the first python (or unlabelled) fenced block, else the first
    fenced block, else the whole completion.

    extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.") -> "def f():\\n    return 1\\n"
    """
    blocks = _FENCE.findall(completion)  # left to right, so a closing fence never opens a block
    for lang, code in blocks:
        if lang.lower() in ("", "python", "python3", "py"):
            return code
    return blocks[0][1] if blocks else completion


_CLOSED_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n.*?```", re.DOTALL)


def has_code(completion: str) -> bool:
    """Whether a reply gives an answer to score: a closed fenced block, or (no fence at all) a
    reply that parses as Python once dedented (a HumanEval body continuation). A block cut off
    by the token limit is no answer.

    has_code("```python\ndef f(): pass\n```") -> True; has_code("```python\ndef f(") -> False
    """
    if _CLOSED_FENCE.search(completion):
        return True
    if "```" in completion or not completion.strip():
        return False
    try:
        ast.parse(textwrap.dedent(completion))
    except (SyntaxError, ValueError):
        return False
    return True


def passes(program: str) -> bool:
    """True if `program` (solution + tests) runs to its last line and exits 0 in the sandbox."""
    from harness.sandbox import run_python  # lazy: scoring code tasks is the only user

    result = run_python(program)
    return result.status == "ok" and result.reached_end
