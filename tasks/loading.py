"""Opening data with `datasets`: a Hub id, local files in any format it reads, or a saved folder.

    splits = load("data/arith.parquet")                 # {"train": Dataset}: one file, one split
    splits = load("data/")                              # test.jsonl, train.csv, ... -> their splits
    splits = load("openai/gsm8k", config="main")        # the Hub (or its local cache when offline)
    splits = load_files({"test": "x.jsonl.gz"})         # named files, named splits

`datasets.load_dataset` converts what it reads once into its cache (`HF_DATASETS_CACHE`, by
default ~/.cache/huggingface/datasets) and reads it from there afterwards. With
`HF_DATASETS_OFFLINE=1` (or `HF_HUB_OFFLINE=1`) it never reaches the network: a Hub id that is
not in the cache stops with one line saying so. Every failure here is a `UserError` of one line
naming the dataset (a missing file or folder, an unknown Hub id, a file it cannot parse), and
`pick_split` / `require_columns` name a missing split or column with the ones that exist.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from harness.errors import UserError

# file suffix -> the `datasets` builder that reads it (".gz", ".bz2", ... are read through)
BUILDERS = {
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".arrow": "arrow",
    ".txt": "text",
}
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip")


def offline() -> bool:
    """Whether the environment forbids reaching the Hub (what `datasets` itself reads)."""
    flags = (os.environ.get(v, "") for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
    return any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def builder_of(path: str | Path) -> str:
    """The `datasets` builder for a data file, by its suffix: "x.jsonl.gz" -> "json"."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    while suffixes and suffixes[-1] in _COMPRESSED:
        suffixes.pop()
    builder = BUILDERS.get(suffixes[-1] if suffixes else "")
    if builder is None:
        raise UserError(
            f"{path}: not a data file datasets reads by its name; use one ending in "
            + ", ".join(BUILDERS)
        )
    return builder


def _datasets():
    """The `datasets` module, imported on first use (it is slow to import), progress bars off."""
    import datasets

    datasets.disable_progress_bars()
    return datasets


@contextlib.contextmanager
def _quiet_and_one_line(what: str):
    """Turn what `datasets` raises into one UserError line about `what`; its own error log,
    which repeats the failure over several lines, is silenced meanwhile."""
    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    except UserError:
        raise
    except ConnectionError as e:
        hint = (
            "the hub is offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE) and it is not in the local cache"
            if offline()
            else "the hub could not be reached"
        )
        raise UserError(f"dataset {what}: {hint} ({_first_line(e)})") from None
    except FileNotFoundError as e:
        raise UserError(f"dataset {what} not found: {_first_line(e)}") from None
    except Exception as e:  # a parse error, a bad config name, ...: datasets' own words
        cause = e.__cause__ or e.__context__
        detail = _first_line(e) if cause is None else f"{_first_line(e)}: {_first_line(cause)}"
        raise UserError(f"dataset {what}: {type(e).__name__}: {detail}") from None
    finally:
        log.setLevel(level)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def load_files(files: dict[str, str | Path], builder: str | None = None) -> dict:
    """split name -> `datasets.Dataset`, one split per named file (all read by one builder: the
    first file's by suffix unless given). Split names are `datasets`': word characters and dots."""
    for path in files.values():
        if not Path(path).is_file():
            raise UserError(f"{path}: file not found")
    builder = builder or builder_of(next(iter(files.values())))
    what = str(next(iter(files.values()))) if len(files) == 1 else f"{builder} files"
    with _quiet_and_one_line(what):
        data = _datasets().load_dataset(builder, data_files={k: str(v) for k, v in files.items()})
    return dict(data)


def load(
    dataset: str,
    config: str | None = None,
    revision: str | None = None,
    data_files: dict | str | None = None,
) -> dict:
    """split name -> `datasets.Dataset` of `dataset`: a local data file (one split, "train" as
    `datasets` names it), a local folder (a `save_to_disk` folder, or data files whose names say
    their splits), a Hub id (read from the cache when offline), or a builder name ("json",
    "parquet", ...) with `data_files` (as an lm-eval task YAML names local data)."""
    if data_files:
        _check_local_files(dataset, data_files)
        with _quiet_and_one_line(dataset):
            data = _datasets().load_dataset(dataset, config, data_files=data_files)
        return dict(data)
    path = Path(dataset).expanduser()
    if path.is_file():
        if config:
            raise UserError(f"dataset {dataset} is one file: it has no config {config!r}")
        with _quiet_and_one_line(dataset):
            data = _datasets().load_dataset(builder_of(path), data_files=str(path))
        return dict(data)
    if path.is_dir():
        saved = (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()
        with _quiet_and_one_line(dataset):
            if saved:
                data = _datasets().load_from_disk(str(path))
            else:
                data = _datasets().load_dataset(str(path), config)
        return dict(data) if hasattr(data, "keys") else {"train": data}
    if dataset.startswith((".", "/", "~")) or Path(dataset).suffix.lower() in BUILDERS:
        raise UserError(f"dataset {dataset} not found: no such file or folder")
    with _quiet_and_one_line(dataset):
        data = _datasets().load_dataset(dataset, config, revision=revision)
    return dict(data)


def _check_local_files(dataset: str, data_files) -> None:
    """One line naming a local data file that is not there (URLs and globs are left to
    `datasets`)."""
    groups = data_files.values() if isinstance(data_files, dict) else [data_files]
    for group in groups:
        for one in [group] if isinstance(group, str) else group:
            local = "://" not in str(one) and not any(c in str(one) for c in "*?[")
            if local and not Path(one).is_file():
                raise UserError(f"dataset {dataset}: data file {one} not found")


def pick_split(splits: dict, split: str | None, dataset: str):
    """The named split of a loaded dataset, or its only one, or its "test" one when not named."""
    names = list(splits)
    if split is None:
        if len(names) == 1:
            return splits[names[0]]
        if "test" in splits:
            return splits["test"]
        raise UserError(f"dataset {dataset} has splits {', '.join(names)}: name one (split=)")
    if split not in splits:
        raise UserError(f"dataset {dataset} has no split {split!r}; its splits: {', '.join(names)}")
    return splits[split]


def require_columns(data, columns, dataset: str) -> None:
    """Raise one UserError naming the first of `columns` that `data` (a Dataset) lacks."""
    have = list(data.column_names)
    for column in columns:
        if column not in have:
            raise UserError(
                f"dataset {dataset} has no column {column!r}; its columns: {', '.join(have)}"
            )
