"""Test-wide settings: never reach a model or dataset hub; one torch thread per test process.

Tiny models gain nothing from threads, and with several threads a test slows by orders of
magnitude when another job holds the machine's cores.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)
