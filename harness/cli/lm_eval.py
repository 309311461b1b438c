"""`hybridbench lm-eval`: lm-evaluation-harness with the model `hybrid` (any router).

    hybridbench lm-eval --model hybrid --model_args router=mypkg.routers:MyRouter \\
        --tasks my_task --include_path my_tasks/ --limit 5

Every argument is lm-eval's, passed through; `--include_path` (a folder of task YAMLs, as in
lm-eval) may be given any number of times.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from harness.errors import UserError
from harness.evaluation.lmeval import add_include_paths, register, write_tasks


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "lm_eval_args",
        nargs=argparse.REMAINDER,
        help="lm-eval's own arguments (see `hybridbench lm-eval --help`), passed through",
    )
    # lm-eval owns every option after `lm-eval`: parse none of them here, hand them all on.
    p.prefix_chars = "\0"


def run(args) -> int:
    argv, include = user_include_paths(list(args.lm_eval_args))
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    register()
    from lm_eval.__main__ import cli_evaluate

    with tempfile.TemporaryDirectory(prefix="hybridbench-lmeval-") as tmp:
        write_tasks(Path(tmp))
        add_include_paths(Path(tmp), include)
        saved = sys.argv
        sys.argv = ["lm-eval", *argv, "--include_path", tmp]
        try:
            cli_evaluate()
        except SystemExit as e:  # argparse inside lm-eval: --help, or a bad option
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        finally:
            sys.argv = saved
    return 0


def user_include_paths(argv: list[str]) -> tuple[list[str], list[Path]]:
    """(argv without its --include_path options, the folders they name): lm-eval takes one
    include path, which this command sets, so the user's are put inside it."""
    rest, paths, it = [], [], iter(argv)
    for arg in it:
        if arg == "--include_path":
            value = next(it, None)
            if value is None:
                raise UserError("--include_path needs a folder")
        elif arg.startswith("--include_path="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
            continue
        path = Path(value).expanduser()
        if not path.exists():
            raise UserError(f"--include_path {value}: no such folder or file")
        paths.append(path.resolve())
    return rest, paths
