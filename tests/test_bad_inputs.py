"""Every bad file argument and an unreachable remote model end in one `error:` line, exit 2.

One test per input class: model files (GGUF files and model folders), trained routers'
checkpoints, reward checkpoints, calibration files, a remote large model. Each case drives
`harness.cli.main.main(["generate", ...])` on the tiny pair, in process, and checks the exit
status, that stderr is exactly one `error:` line with no traceback, and what that line says.
docs/bad-inputs.md is the table of these inputs and the lines they give.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.utils import logging as hf_logging

from harness.cli.main import main
from tests.tiny import save_tiny_pair, tiny_gguf_pair

PLACES: dict[str, str] = {}  # real path -> its name in docs/bad-inputs.md (filled by fixtures)
DOC = (Path(__file__).parents[1] / "docs" / "bad-inputs.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[str, str]:
    small, large = save_tiny_pair(tmp_path_factory.mktemp("pair"))
    PLACES.update({small: "models/small", large: "models/large"})
    return small, large


@pytest.fixture(autouse=True)
def quiet(monkeypatch, tmp_path):
    """No progress bars on stderr (they are not errors), and a fresh model cache."""
    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path / "cache"))
    hf_logging.disable_progress_bar()
    yield
    hf_logging.enable_progress_bar()


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    """A folder of bad inputs, one per case below."""
    root = tmp_path_factory.mktemp("bad")
    PLACES.update({str(root): "bad", str(tiny_gguf_pair()[1]): "large.gguf"})
    real = Path(tiny_gguf_pair()[1]).read_bytes()
    (root / "random.gguf").write_bytes(np.random.default_rng(0).bytes(4096))
    (root / "empty.gguf").write_bytes(b"")
    (root / "cut.gguf").write_bytes(real[: len(real) // 2])
    write_gguf_of_unknown_architecture(root / "unknown-arch.gguf")
    (root / "weights.bin").write_bytes(b"\0" * 64)
    for name, config in {"no-config": None, "bad-config": "{not json", "no-type": "{}"}.items():
        (root / name).mkdir()
        if config is not None:
            (root / name / "config.json").write_text(config)
    (root / "text.pt").write_text("not a checkpoint")
    torch.save({"weights": torch.zeros(2)}, root / "no-kind.pt")
    torch.save({"kind": "query", "hidden_size": 48}, root / "query.pt")
    torch.save({"kind": "citer", "threshold": 0.5}, root / "damaged-citer.pt")
    torch.save({"format": "hybridbench-reward/1", "n_layers": 1}, root / "damaged-reward.pt")
    (root / "text.json").write_text("scores: 1, 2")
    (root / "no-scores.json").write_text(json.dumps({"router": "entropy"}))
    (root / "empty-scores.json").write_text(json.dumps({"router": "entropy", "scores": []}))
    (root / "confidence.json").write_text(json.dumps({"router": "confidence", "scores": [0.5]}))
    (root / "a-folder").mkdir()
    return root


def write_gguf_of_unknown_architecture(path: Path) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "nosuchmodel")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def one_error_line(capsys, *argv: str) -> str:
    """Run `hybridbench generate` with `argv`; its one stderr line, after checking exit 2 and
    that docs/bad-inputs.md shows this line for this command."""
    argv = ("generate", "--prompt", "hi", "--max-new-tokens", "2", "--threads", "1", *argv)
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    row = f"| `hybridbench {shown(' '.join(argv))}` | `{shown(lines[0])}` |"
    assert row in DOC, f"docs/bad-inputs.md lacks the row\n{row}"
    return lines[0]


def shown(text: str) -> str:
    """`text` with this run's temporary paths replaced by the names the table uses."""
    for real, name in sorted(PLACES.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, name)
    return text.replace("|", "\\|")


def hf_pair(pair) -> list[str]:
    return ["--small", pair[0], "--large", pair[1], "--dtype", "float32"]


# ---------------------------------------------------------------- model files

MODEL_FILES = {  # --small VALUE: what the line must say
    "/no/such/model": "model path not found: /no/such/model; give a packaged model name",
    "random.gguf": "is not a GGUF file (it starts with",
    "empty.gguf": "is not a GGUF file (it is empty)",
    "cut.gguf": "not a readable GGUF file",
    "unknown-arch.gguf": "llama.cpp could not load",
    "weights.bin": "is neither a model folder nor a .gguf file",
    "no-config": "is not a model folder: it has no config.json",
    "bad-config": "config.json is not a model config: not JSON",
    "no-type": "config.json names no model_type",
}


@pytest.mark.parametrize(("value", "message"), MODEL_FILES.items(), ids=list(MODEL_FILES))
def test_bad_model_files(capsys, bad, value, message):
    small = value if value.startswith("/") else str(bad / value)
    large = str(tiny_gguf_pair()[1])  # a GGUF: llama.cpp is the default backend for both
    line = one_error_line(capsys, "--router", "small", "--small", small, "--large", large)
    assert message in line, line


def test_a_gguf_transformers_cannot_convert(capsys, bad, pair):
    small = str(bad / "unknown-arch.gguf")
    line = one_error_line(capsys, "--router", "small", "--backend", "hf", "--small", small,
                          "--large", pair[1], "--dtype", "float32")  # fmt: skip
    assert "could not load" in line and "unknown-arch.gguf" in line and "nosuchmodel" in line


# ---------------------------------------------------------------- router checkpoints

ROUTER_CHECKPOINTS = {  # (router, checkpoint): what the line must say
    ("citer", "/no/such.pt"): "citer router checkpoint not found: /no/such.pt (made by hybridbench",
    (
        "citer",
        "text.pt",
    ): "is not a citer router checkpoint (torch.load cannot read it: UnpicklingError)",
    ("query", "text.pt"): "is not a query router checkpoint",
    ("citer", "no-kind.pt"): "is not a citer router checkpoint (it names no router kind)",
    ("citer", "query.pt"): "is a 'query' checkpoint, not 'citer'",
    ("citer", "damaged-citer.pt"): "is a damaged citer router checkpoint: it lacks hidden_size",
    ("citer", "a-folder"): "is a folder, not a citer router checkpoint",
}


@pytest.mark.parametrize(
    ("router", "value", "message"),
    [(r, v, m) for (r, v), m in ROUTER_CHECKPOINTS.items()],
    ids=[f"{r}-{v}" for r, v in ROUTER_CHECKPOINTS],
)
def test_bad_router_checkpoints(capsys, bad, pair, router, value, message):
    path = value if value.startswith("/") else str(bad / value)
    line = one_error_line(
        capsys, *hf_pair(pair), "--router", router, "--router-arg", f"path={path}"
    )
    assert message in line, line


# ---------------------------------------------------------------- reward checkpoints

REWARD_CHECKPOINTS = {
    "/no/such.pt": "reward checkpoint not found: /no/such.pt (made by hybridbench train-reward)",
    "text.pt": "is not a reward checkpoint (torch.load cannot read it: UnpicklingError)",
    "no-kind.pt": "is not a reward checkpoint (hybridbench-reward/1)",
    "damaged-reward.pt": "is a damaged reward checkpoint: it lacks backbone, trained",
    "a-folder": "is a folder, not a reward checkpoint",
}


@pytest.mark.parametrize(
    ("value", "message"), REWARD_CHECKPOINTS.items(), ids=list(REWARD_CHECKPOINTS)
)
def test_bad_reward_checkpoints(capsys, bad, pair, value, message):
    path = value if value.startswith("/") else str(bad / value)
    argv = ["--router", "reward", "--router-arg", f"checkpoint={path}"]
    line = one_error_line(capsys, *hf_pair(pair), *argv)
    assert message in line, line


# ---------------------------------------------------------------- calibration files

CALIBRATIONS = {
    "/no/cal.json": "calibration file not found: /no/cal.json (made by hybridbench calibrate)",
    "text.json": "is not a calibration file: not JSON",
    "no-scores.json": "is not a calibration file (it holds no list of scores)",
    "empty-scores.json": "is not a calibration file (it holds no list of scores)",
    "confidence.json": "calibrates router 'confidence', not 'entropy'",
    "a-folder": "is a folder, not a calibration file",
}


@pytest.mark.parametrize(("value", "message"), CALIBRATIONS.items(), ids=list(CALIBRATIONS))
def test_bad_calibration_files(capsys, bad, pair, value, message):
    path = value if value.startswith("/") else str(bad / value)
    argv = ["--router", "entropy", "--router-arg", "target_share=0.2"]
    line = one_error_line(capsys, *hf_pair(pair), *argv, "--router-arg", f"calibration={path}")
    assert message in line, line


# ---------------------------------------------------------------- a remote large model


class NotACompletionsServer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(404)
        self.end_headers()
        self.wfile.write(b"no such page")

    def log_message(self, *args):
        pass


def test_a_remote_model_that_does_not_answer(capsys, pair, monkeypatch):
    """Not listening: every retry is made (without their pauses), then one line."""
    monkeypatch.setattr("harness.backends.remote.time.sleep", lambda s: None)
    argv = ["--router", "large", "--small", pair[0], "--dtype", "float32"]
    line = one_error_line(capsys, *argv, "--large", "http://127.0.0.1:1")
    assert "the remote large model at http://127.0.0.1:1 did not answer" in line, line
    assert "gave up after 5 attempts" in line and "start its server" in line
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotACompletionsServer) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        PLACES[url] = "http://127.0.0.1:PORT"
        line = one_error_line(capsys, *argv, "--large", url)
        server.shutdown()
    assert "answered with an error" in line and f"{url}/v1/models: HTTP 404" in line, line
