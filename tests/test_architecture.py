"""The layout's contract: imports point down (`.importlinter`), no module imports itself back
through others, and the decoding core stays small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "routers", "tasks", "reports")


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
