"""The `arith` task: short arithmetic word problems in a JSONL file, scored by the numeric rule."""

from __future__ import annotations

from pathlib import Path

from hybridbench import JSONLTask

DATA = Path(__file__).parent / "data" / "arith.jsonl"
SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class Arith(JSONLTask):
    """data/arith.jsonl (60 problems written for this example) with gsm8k's numeric scorer:
    the last \\boxed{} (else the last number) compared numerically with the reference."""

    def __init__(self, max_new_tokens: int = 256):
        super().__init__(DATA, "numeric", "arith", max_new_tokens, SYSTEM)
