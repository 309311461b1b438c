"""The layout's contract: imports point down (`.importlinter`), no module imports itself back
through others, and the decoding core stays small."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybridbench", "harness", "routers", "tasks", "reports")


def test_import_contracts_hold():
    """`lint-imports` with the repository's contracts: layers and forbidden imports."""
    lint = Path(sys.executable).with_name("lint-imports")  # import-linter, in the test extra
    proc = subprocess.run(
        [str(lint), "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_module_imports_itself_back():
    """No file-level cycle: for every import a -> b, b does not reach a."""
    graph = grimp.build_graph(*PACKAGES)
    cycles = []
    for a in sorted(graph.modules):
        for b in graph.find_modules_directly_imported_by(a):
            if graph.find_shortest_chain(importer=b, imported=a):
                cycles.append((a, b))
    assert not cycles, cycles


def test_file_sizes():
    """The loop and the scheduler under 300 lines each; no file of harness/ over 500."""
    core = ROOT / "harness" / "core"
    for name in ("loop.py", "scheduler.py"):
        n = len((core / name).read_text().splitlines())
        assert n < 300, (name, n)
    big = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "harness").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not big, big


# A run folder's files are named in one module (harness/core/run_folder.py); a reward data folder
# is another format, whose own manifest its module names.
RUN_FILES = re.compile(r"(?:^|/)(?:manifest\.json|records\.jsonl|summary\.json|writer\.lock)")
NAMES_RUN_FILES = {"harness/core/run_folder.py", "harness/training/reward_data.py"}


def test_only_the_run_folder_module_names_a_run_folders_files():
    """No string constant outside `harness.core.run_folder` is a path to a run folder's file
    (prose that mentions one, with spaces around it, is not a path)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in NAMES_RUN_FILES:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                value = node.value if isinstance(node, ast.Constant) else None
                if isinstance(value, str) and " " not in value and RUN_FILES.search(value):
                    found.append(f"{rel}:{node.lineno}: {value!r}")
    assert not found, found


def test_the_parsed_command_line_stops_in_the_cli():
    """Below `harness/cli/` a run travels as a `RunSpec` (models as a `ModelSpec`), never as an
    `argparse.Namespace`: no module outside the command line builds or names one."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel.startswith("harness/cli/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = getattr(node, "attr", None) or getattr(node, "id", None)
                if name == "Namespace":
                    found.append(f"{rel}:{node.lineno}")
    assert not found, found


# Functions below `harness/cli/` that still take a command's parsed options: none. (The decoding
# options `hybridbench generate` hands to `decode_config` are read by name, as from a RunSpec.)
TAKES_PARSED_OPTIONS: set[str] = set()
DICT_METHODS = {"get", "items", "keys", "values", "setdefault", "pop", "update", "copy"}


def reads_parsed_options(tree: ast.AST) -> list[tuple[str, int]]:
    """(function, line) of each function taking a parameter named `args` and reading an
    attribute of it (a dict's methods aside: router and task arguments travel as dicts)."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        if "args" not in params:
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "args"
                and node.attr not in DICT_METHODS
            ):
                found.append((fn.name, node.lineno))
                break
    return found


def test_below_the_cli_functions_take_typed_values_not_parsed_options():
    """Each command's options are parsed once, in `harness/cli/`, into a typed value: a run's
    `RunSpec` (calibrate's too), `SweepSpec`, `SubmitSpec`, `BenchSpec`, `ModelSpec`, and the
    training commands' `CiterSpec`, `QuerySpec`, `RewardSpec`, `PairsSpec`. No function below
    `harness/cli/` takes the parsed options (a parameter `args` whose attributes it reads),
    except in TAKES_PARSED_OPTIONS: the learned and R2R routers' `train(args)`. (`generate`
    hands its parsed decoding options to `decode_config`, which reads them by name as it reads a
    `RunSpec`.) `RunSpec.from_args`, the conversion itself, is called from `harness/cli/` only."""
    assert reads_parsed_options(ast.parse("def f(args):\n    return args.task\n")) == [("f", 2)]
    assert not reads_parsed_options(ast.parse("def f(args):\n    return args.get('k')\n"))
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel.startswith("harness/cli/") or rel in TAKES_PARSED_OPTIONS:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [f"{rel}:{line} {name}" for name, line in reads_parsed_options(tree)]
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
            found += [
                f"{rel}:{c.lineno} from_args"
                for c in calls
                if isinstance(c.func, ast.Attribute) and c.func.attr == "from_args"
            ]
    assert not found, found
