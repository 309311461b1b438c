"""An lm-eval task YAML as the `hf` task's arguments: its data, prompt and target, our scorer.

    hybridbench run --task hf --task-arg lm_eval_task=my_task --task-arg include_path=my_tasks/ \\
        --task-arg scorer=numeric --router entropy --out runs/my_task

The YAML named `task: my_task` is found under `include_path` (a folder or one file, as lm-eval's
`--include_path`), else among the installed lm-eval's own tasks. Its `include:` chain is merged
(the including file's keys win) and `!function module.name` resolves beside the YAML, as lm-eval
does. Fields read: dataset_path, dataset_name, dataset_kwargs.data_files, test_split (else
validation_split), doc_to_text, doc_to_target, doc_to_choice, description (the system turn, as
lm-eval sends it with --apply_chat_template), process_docs, generation_kwargs (until,
max_gen_toks) and task (the name). The prompt is zero-shot; lm-eval's filters and metrics are not
read: `scorer=` names the rule (an lm-eval `multiple_choice` task defaults to `choice`).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from harness.errors import UserError

_TASK_LINE = re.compile(r"^task:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


def task_arguments(name: str, include_path: str | None = None) -> dict:
    """The `hf` task's arguments that the YAML of lm-eval task `name` gives."""
    path = find_yaml(name, include_path)
    cfg = load_yaml(path)
    args: dict = {"name": cfg.get("task", name)}
    data = (cfg.get("dataset_kwargs") or {}).get("data_files")
    if not cfg.get("dataset_path"):
        raise UserError(f"{path}: no dataset_path")
    args["dataset"], args["config"], args["data_files"] = (
        cfg["dataset_path"],
        cfg.get("dataset_name"),
        data,
    )
    args["split"] = cfg.get("test_split") or cfg.get("validation_split")
    for key, field in (
        ("prompt", "doc_to_text"),
        ("reference", "doc_to_target"),
        ("choices", "doc_to_choice"),
        ("system", "description"),
        ("process_docs", "process_docs"),
    ):
        if cfg.get(field) is not None:
            value = cfg[field]
            args[key] = value if callable(value) or isinstance(value, str) else str(value)
    gen = cfg.get("generation_kwargs") or {}
    if gen.get("until"):
        args["stop"] = [gen["until"]] if isinstance(gen["until"], str) else list(gen["until"])
    if gen.get("max_gen_toks"):
        args["max_new_tokens"] = int(gen["max_gen_toks"])
    if cfg.get("output_type") == "multiple_choice":
        args["scorer"] = "choice"
    return {k: v for k, v in args.items() if v is not None}


def find_yaml(name: str, include_path: str | None) -> Path:
    """The YAML file whose `task:` is `name`: under include_path, else lm-eval's own tasks."""
    if include_path is not None:
        root = Path(include_path).expanduser()
        if not root.exists():
            raise UserError(f"include_path {include_path}: no such folder or file")
        found = _search(root, name)
        if found is None:
            raise UserError(f"no lm-eval task {name!r} under {include_path}")
        return found
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"lm-eval task {name!r}: give include_path=, or pip install lm-eval")
    found = _search(Path(list(spec.submodule_search_locations)[0]) / "tasks", name)
    if found is None:
        raise UserError(f"no lm-eval task {name!r} among lm-eval's own; give include_path=")
    return found


def _search(root: Path, name: str) -> Path | None:
    files = [root] if root.is_file() else sorted(root.rglob("*.yaml"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if name in _TASK_LINE.findall(text):
            return path
    return None


def load_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A task YAML with its `include:` chain merged and `!function` resolved beside it."""
    import yaml

    path = path.resolve()
    if path in seen:
        raise UserError(f"{path}: include cycle")
    if not path.is_file():
        raise UserError(f"{path}: lm-eval task file not found")

    class Loader(yaml.SafeLoader):
        pass

    def function(loader, node):
        return _function(path.parent, loader.construct_scalar(node))

    Loader.add_constructor("!function", function)
    try:
        cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)  # noqa: S506
    except yaml.YAMLError as e:
        raise UserError(f"{path}: bad YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: not a task (a YAML mapping)")
    includes = cfg.pop("include", None) or []
    merged: dict = {}
    for inc in [includes] if isinstance(includes, str) else includes:
        inc_path = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        merged.update(load_yaml(inc_path, (*seen, path)))
    return {**merged, **cfg}


def _function(folder: Path, spec: str):
    """`utils.process_docs` -> the function process_docs of folder/utils.py."""
    module, _, attr = spec.rpartition(".")
    file = folder / f"{module.replace('.', '/')}.py"
    loaded = importlib.util.spec_from_file_location(f"lm_eval_task_{module}", file)
    if loaded is None or not file.is_file():
        raise UserError(f"!function {spec}: {file} not found")
    mod = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(mod)
    if not hasattr(mod, attr):
        raise UserError(f"!function {spec}: {file} has no {attr}")
    return getattr(mod, attr)
