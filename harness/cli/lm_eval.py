"""`hybridbench lm-eval`: lm-evaluation-harness with the model `hybrid` (any router)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from harness.errors import UserError
from harness.evaluation.lmeval import register, write_tasks


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "lm_eval_args",
        nargs=argparse.REMAINDER,
        help="lm-eval's own arguments (see `hybridbench lm-eval --help`), passed through",
    )
    # lm-eval owns every option after `lm-eval`: parse none of them here, hand them all on.
    p.prefix_chars = "\0"


def run(args) -> int:
    argv = list(args.lm_eval_args)
    if "--include_path" in argv:
        raise UserError(
            "hybridbench lm-eval sets --include_path itself; put extra task YAMLs in tasks/lmeval/"
        )
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    register()
    from lm_eval.__main__ import cli_evaluate

    with tempfile.TemporaryDirectory(prefix="hybridbench-lmeval-") as tmp:
        write_tasks(Path(tmp))
        saved = sys.argv
        sys.argv = ["lm-eval", *argv, "--include_path", tmp]
        try:
            cli_evaluate()
        except SystemExit as e:  # argparse inside lm-eval: --help, or a bad option
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        finally:
            sys.argv = saved
    return 0
