"""Tests; `load_script` imports one of scripts/*.py (they are not a package) as a module."""

from pathlib import Path


def load_script(name: str):
    """scripts/NAME.py as a module, e.g. load_script("chain_status")."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
