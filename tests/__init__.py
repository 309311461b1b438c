"""Tests; `load_script` imports one of benchmarks/*.py as a module."""

from pathlib import Path


def load_script(name: str):
    """benchmarks/NAME.py as a module, e.g. load_script("step_times")."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    path = root / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
