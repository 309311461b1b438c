"""`hybridbench calibrate-reward`: `hybridbench calibrate --router reward` under its own name."""

from __future__ import annotations

from harness.cli import calibrate


def configure(p) -> None:
    calibrate.configure(p, router="reward")


def run(args) -> int:
    args.router = "reward"
    return calibrate.run(args)
