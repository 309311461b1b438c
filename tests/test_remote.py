"""The remote large model against a real llama.cpp server (started here), with faults injected.

The server is llama.cpp's `llama-server` (scripts/build_llama_server.sh builds it) serving
tests/tiny.py's large model written as a GGUF file (scripts/make_tiny_gguf.py); the small model
is tiny.py's small model in transformers, so the two share a vocabulary. Tests that need the
server are skipped when no `llama-server` binary is found (HYBRIDBENCH_LLAMA_SERVER, then
$HYBRIDBENCH_CACHE/bin/llama-server, then PATH). Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from harness.backends.engine import Engine
from harness.backends.hf import HFBackend
from harness.backends.models import cache_dir
from harness.backends.remote import RemoteBackend, RemoteConfig, RemoteError, parse_choice
from harness.core.loop import DecodeConfig
from routers import ROUTERS, get_router
from tests.faultproxy import FaultProxy
from tests.tiny import info, tiny_pair, tiny_tokenizer

N_TOKENS = 24
FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 20.0}  # retries in milliseconds


def server_binary() -> str | None:
    for cand in (os.environ.get("HYBRIDBENCH_LLAMA_SERVER"), cache_dir() / "bin" / "llama-server"):
        if cand and Path(cand).is_file():
            return str(cand)
    return shutil.which("llama-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pair():
    small, large = tiny_pair()
    return small, large, tiny_tokenizer()


@pytest.fixture(scope="module")
def server(pair, tmp_path_factory):
    """A llama-server process serving the tiny large model on 127.0.0.1; yields its port."""
    binary = server_binary()
    if binary is None:
        pytest.skip("llama-server not found: run scripts/build_llama_server.sh")
    from scripts.make_tiny_gguf import write_qwen2_gguf

    _, large, tok = pair
    gguf = write_qwen2_gguf(large, tok, tmp_path_factory.mktemp("gguf") / "tiny-large.gguf")
    port = free_port()
    log = open(tmp_path_factory.mktemp("log") / "llama-server.log", "w")  # noqa: SIM115
    cmd = [binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-c", "1024"]
    cmd += ["-np", "1", "-t", "1", "-fa", "off", "--no-warmup"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"llama-server did not start; see {log.name}")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def remote(url: str, **kw) -> RemoteBackend:
    return RemoteBackend(RemoteConfig(url, **{**FAST, **kw}), vocab_size=128)


def engine_with(pair, backend: RemoteBackend) -> Engine:
    small, _, tok = pair
    return Engine(tok, {"small": HFBackend(small, info("small", small)), "large": backend})


PROMPTS = ("hello", "What is 7*6?", "abc")


def test_server_rows_are_large_log_probabilities(pair, server):
    """The served GGUF is tiny.py's large model: top-k rows match transformers' log-softmax."""
    _, large, tok = pair
    ids = tok("<|im_start|>user\nhi<|im_end|>\n")["input_ids"]
    b = remote(f"http://127.0.0.1:{server}", top_k=5)
    b.reset()
    rows, _ = b.forward(ids, 3)
    with torch.no_grad():
        ref = torch.log_softmax(large(torch.tensor([ids])).logits[0, -3:].float(), -1)
    # the server's greedy token is transformers' best up to float rounding (random tiny models
    # have near-ties: here one position's top two differ by 8e-6)
    best = rows.argmax(-1)
    assert (ref.max(-1).values - ref[torch.arange(3), best] < 1e-4).all()
    finite = torch.isfinite(rows)
    assert (finite.sum(-1) == 5).all()  # top-5 per row, -inf elsewhere
    assert torch.allclose(rows[finite], ref[finite], atol=1e-3)
    # one forward: the prefill's first prompt alone (cold), then the other two rows
    assert b.stats.forwards == 1 and b.stats.requests == b.stats.round_trips == 2
    assert b.stats.rows == 3


def _reference(server: int, tok, prompt: str) -> list[int]:
    ids = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    ids = tok(ids)["input_ids"]
    return ids, remote(f"http://127.0.0.1:{server}").completion(ids, N_TOKENS)


@pytest.mark.parametrize("name", ["oracle", "speculative", "large"])
def test_routers_reproduce_the_servers_greedy_completion(pair, server, name):
    if name not in ROUTERS:
        pytest.skip(f"router {name} is not registered yet")
    tok = pair[2]
    backend = remote(f"http://127.0.0.1:{server}")
    engine = engine_with(pair, backend)
    for prompt in PROMPTS:
        ids, expected = _reference(server, tok, prompt)
        eos = set(engine.eos_ids)
        expected = expected[: next((i for i, t in enumerate(expected) if t in eos), len(expected))]
        gen = engine.generate(get_router(name), ids, DecodeConfig(max_new_tokens=N_TOKENS))
        assert list(gen.token_ids) == expected, prompt
    s = backend.stats
    # a prefill asking for several rows sends its first prompt alone (cold): one more request
    split = 0 if name == "large" else len(PROMPTS)
    assert s.round_trips == s.requests == s.forwards + split
    if name == "oracle":  # one verify pass per step, two rows each
        assert s.rows == 2 * s.forwards
    assert s.bytes_sent > 0 and s.bytes_received > 0


# at most two faults in a row, so that every request succeeds within its 4 retries
FAULTS = ["500", "drop", "ok", "cut", "delay:1.5", "ok", "503", "ok", "ok", "drop"]


def test_faults_are_retried_and_the_output_is_unchanged(pair, server):
    tok = pair[2]
    ids, expected = _reference(server, tok, PROMPTS[1])
    with FaultProxy(server, list(FAULTS)) as proxy:
        # delay:1.5 is a timeout; each request takes the next fault (no cache restores between)
        backend = remote(proxy.url, timeout_s=1.0, restore_cache=False)
        engine = engine_with(pair, backend)
        gen = engine.generate(get_router("oracle"), ids, DecodeConfig(max_new_tokens=N_TOKENS))
    eos = set(engine.eos_ids)
    expected = expected[: next((i for i, t in enumerate(expected) if t in eos), len(expected))]
    assert list(gen.token_ids) == expected
    n_faults = sum(f != "ok" for f in FAULTS)
    assert proxy.seen[: len(FAULTS)] == FAULTS
    s = backend.stats
    assert s.retries == n_faults and s.round_trips == s.requests + n_faults
    assert len(s.errors) == n_faults
    assert any("timed out" in e for e in s.errors), s.errors
    assert any("HTTP 500" in e for e in s.errors) and any("HTTP 503" in e for e in s.errors)


class Evaluated(RemoteBackend):
    """The remote backend, keeping how many prompt tokens the server evaluated for each answer
    (llama-server's `timings.prompt_n`) and the rows of each forward."""

    def _attempt(self, method, path, body):
        status, data, error = super()._attempt(method, path, body)
        if status == 200 and path.endswith("completions"):
            import json

            self.evaluated.append(json.loads(data).get("timings", {}).get("prompt_n"))
        return status, data, error


def test_a_retry_after_a_cut_answer_evaluates_what_an_undisturbed_request_does(server):
    """An answer cut on the way back leaves the whole prompt in the server's cache; the retry
    first puts the cache back, so the server evaluates the same new tokens in one batch again
    (not only the last one) and the rows are bit for bit an undisturbed run's."""
    prefix, new = [3, 4, 5, 6, 7, 8], [9, 10, 11, 12]
    runs = {}
    for name, schedule in (("undisturbed", []), ("cut", ["ok", "cut"])):
        with FaultProxy(server, list(schedule)) as proxy:
            backend = Evaluated(RemoteConfig(proxy.url, **FAST), vocab_size=128)
            backend.evaluated = []
            backend.reset()
            backend.forward(prefix, 1)  # the cold prefill: the prompt alone, evaluated afresh
            rows, _ = backend.forward(new, 1)
            runs[name] = (rows, backend.evaluated, backend.stats, proxy.seen)
    (rows0, eval0, _, _), (rows1, eval1, stats, seen) = runs["undisturbed"], runs["cut"]
    assert eval0 == [len(prefix), len(new)]
    assert seen[:2] == ["ok", "cut"] and stats.retries == 1 and stats.restores == 1
    # the cut attempt's answer was lost; then the restore (one token), then the retry
    assert eval1 == [len(prefix), 1, len(new)]
    assert torch.equal(rows0, rows1)


def test_gives_up_after_the_last_retry(pair, server):
    with FaultProxy(server, ["500"] * 10) as proxy:
        backend = remote(proxy.url, retries=2)
        backend.reset()
        t0 = time.monotonic()
        with pytest.raises(RemoteError, match=r"gave up after 3 attempts; last error: HTTP 500"):
            backend.forward([3, 4, 5], 1)
        assert time.monotonic() - t0 < 5
    assert proxy.seen == ["500"] * 3 and backend.stats.round_trips == 3


def test_a_client_error_is_not_retried(server):
    with FaultProxy(server, ["400"]) as proxy:
        backend = remote(proxy.url)
        backend.reset()
        with pytest.raises(RemoteError, match="HTTP 400"):
            backend.forward([3, 4], 1)
    assert backend.stats.round_trips == 1


def test_runner_records_the_failure_and_resume_retries_it(pair, server, tmp_path):
    """A remote failure becomes a failed record; a resumed run decodes that example again."""
    from harness.core.run_folder import RunFolder
    from harness.evaluation.runner import decode_examples
    from tasks.base import Example, user_message

    class Echo:
        name, metric = "echo", "len"

        def score(self, example, completion):
            return {"len": float(len(completion))}

    examples = [Example(f"q{i}", user_message(p), None) for i, p in enumerate(PROMPTS[:2])]
    cfg = DecodeConfig(max_new_tokens=6)
    folder = RunFolder(tmp_path)
    path = folder.records_path
    with FaultProxy(server, ["500"] * 3) as proxy:  # q0's first forward fails 3 times
        engine = engine_with(pair, remote(proxy.url, retries=2))
        done = {}
        decode_examples(engine, get_router("oracle"), Echo(), examples, cfg, folder, "test", done)
    assert set(done) == {"q1"}
    first = path.read_text().splitlines()
    assert len(first) == 2 and "gave up after 3 attempts" in first[0]
    # resume, as `hybridbench run` does: keep good records, decode the rest
    done = folder.repair()
    todo = [ex for ex in examples if ex.id not in done]
    assert [ex.id for ex in todo] == ["q0"]
    engine = engine_with(pair, remote(f"http://127.0.0.1:{server}"))
    decode_examples(engine, get_router("oracle"), Echo(), todo, cfg, folder, "test", done)
    final = folder.done()
    assert set(final) == {"q0", "q1"} and not any(r["error"] for r in final.values())


def test_vllm_answers_are_parsed_by_token_id():
    choice = {
        "logprobs": {
            "tokens": ["token_id:5"],
            "token_logprobs": [-0.1],
            "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -2.3}],
        }
    }
    assert parse_choice(choice, "vllm") == {5: -0.1, 9: -2.3}
    llama = {
        "logprobs": {
            "content": [{"id": 5, "logprob": -0.1, "top_logprobs": [{"id": 9, "logprob": -2.3}]}]
        }
    }
    assert parse_choice(llama, "llama.cpp") == {9: -2.3, 5: -0.1}
    with pytest.raises(RemoteError, match="token_id"):
        parse_choice({"logprobs": {"tokens": ["hi"], "top_logprobs": [{"hi": -1.0}]}}, "vllm")


def test_bad_urls_and_dialects_are_user_errors():
    from harness.errors import UserError

    with pytest.raises(UserError, match="http://HOST:PORT"):
        RemoteBackend(RemoteConfig("127.0.0.1:8080"), vocab_size=8)
    with pytest.raises(UserError, match="dialect"):
        RemoteBackend(RemoteConfig("http://127.0.0.1:1", dialect="tgi"), vocab_size=8)


def test_an_unreachable_server_fails_fast_and_clearly():
    backend = remote(f"http://127.0.0.1:{free_port()}", retries=1)
    backend.reset()
    with pytest.raises(
        RemoteError, match="gave up after 2 attempts; last error: ConnectionRefused"
    ):
        backend.forward([1, 2], 1)


def test_cli_takes_a_server_url_as_the_large_model(server, tmp_path, capsys):
    """`--large http://...` decodes with the local small model and the remote large one."""
    from harness.cli.main import main
    from tests.tiny import save_tiny_pair

    small_dir, _ = save_tiny_pair(tmp_path)
    argv = [
        "generate",
        "--router",
        "oracle",
        "--prompt",
        "hello",
        "--max-new-tokens",
        "6",
        "--small",
        small_dir,
        "--large",
        f"http://127.0.0.1:{server}",
        "--dtype",
        "float32",
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "6 tokens" in err and "large_call_share=1.000" in err
