"""Test-wide settings: never reach a model or dataset hub; one torch thread per test process;
a cache of the test run's own.

Tiny models gain nothing from threads, and with several threads a test slows by orders of
magnitude when another job holds the machine's cores.

The tests' batch-size probes, pass-cost tables and converted tiny models go to a temporary
HYBRIDBENCH_CACHE removed at exit, not into the user's cache (~/.cache/hybridbench), which keeps
only what real runs put there. The one thing tests take from it is a built `llama-server`
(tests/test_remote.py), passed on as HYBRIDBENCH_LLAMA_SERVER. Timings are cached even when
another job holds the cores (HYBRIDBENCH_BUSY_CORES=inf).
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_user_cache = Path(os.environ.get("HYBRIDBENCH_CACHE") or Path.home() / ".cache" / "hybridbench")
if (_user_cache / "bin" / "llama-server").is_file():
    os.environ.setdefault("HYBRIDBENCH_LLAMA_SERVER", str(_user_cache / "bin" / "llama-server"))
os.environ["HYBRIDBENCH_CACHE"] = tempfile.mkdtemp(prefix="hybridbench-test-cache-")
atexit.register(shutil.rmtree, os.environ["HYBRIDBENCH_CACHE"], ignore_errors=True)

# timings of tiny models are cached whatever else runs (harness.backends.contention.measured_quietly);
# tests/test_batching.py checks the contended case with this set back
os.environ["HYBRIDBENCH_BUSY_CORES"] = "inf"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)
