"""What the training pipelines share: splits, batched decoding with progress, provenance."""

from __future__ import annotations

from harness.errors import UserError


def train_calib(
    task, split_seed: int, train_limit: int | None, calib_limit: int | None, min_train: int = 2
):
    """(train, calib) examples of `task`: the first N of each seeded split, checked non-empty."""
    train = task.split("train", seed=split_seed)[:train_limit]
    calib = task.split("calib", seed=split_seed)[:calib_limit]
    if len(train) < min_train or not calib:
        raise UserError(
            f"need at least {min_train} train and 1 calib example of {task.name}; "
            f"got {len(train)} and {len(calib)}"
        )
    return train, calib


def provenance(engine, task, split_seed: int, train, calib) -> dict:
    """The fields every router checkpoint records: task, split, the ids it must never be
    evaluated on, the models' sources and the backend family of small's hidden states."""
    from routers.citer import backend_family

    return {
        "task": task.name,
        "split_seed": split_seed,
        "train_ids": [ex.id for ex in train],
        "calib_ids": [ex.id for ex in calib],
        "models": {r: b.info.source for r, b in engine.backends.items()},
        "small_backend": backend_family(engine.backends["small"].info),
    }
