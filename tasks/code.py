"""Code tasks' shared parts (mbpp, humaneval): pull code out of a reply, run it with its tests.

`extract_code` takes the first ```python (or bare ```) fenced block of a chat reply; a block cut
off by the token limit counts up to the end; a reply with no fence is taken as code. `passes`
runs a whole program in `harness.sandbox` (separate process, time and memory limits) and
says whether it exited cleanly: pass@1 with one greedy sample.
"""

from __future__ import annotations

import re

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


def passes(program: str) -> bool:
    """True if `program` (solution + tests) runs to completion in the sandbox."""
    from harness.sandbox import run_python  # lazy: scoring code tasks is the only user

    return run_python(program).status == "ok"
