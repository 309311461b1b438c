"""A remote large model: a `Backend` that asks an OpenAI-compatible completions server.

The large model can live behind an HTTP server (llama.cpp's `llama-server` on a CPU box, vLLM's
OpenAI server on a GPU box). The decoding core does not change: it calls `forward`, and this
backend turns each call into ONE HTTP round trip to `POST {url}/v1/completions`:

    {"prompt": [[...prefix ending at row 0...], ..., [...prefix ending at row n-1...]],
     "max_tokens": 1, "temperature": 0, <top-k log-probabilities of the next token>}

i.e. one token-id prompt per output row the core asks for (a verify of k drafted tokens asks for
k+1 rows), each answered with the server's next token and its top-k log-probabilities.

Approximation (pinned here once): a row of "logits" is the server's top-k log-probabilities
log p(t) at the k ids it returned and -inf at every other id. Its argmax is the server's greedy
token, so greedy routing (oracle, speculative at temperature 0, large-only) is exact. Sampling
from it samples the top-k renormalized p, not p; speculative sampling at temperature > 0 is then
lossless only with respect to that truncated p. Raise `top_k` to shrink the gap.

Cold prefill (llama.cpp): llama.cpp's numbers for a position depend on how it was batched (a
prompt token evaluated inside the prompt batch differs in the last bits from the same token
re-evaluated alone after a prompt-cache hit), and with quantized weights such differences flip
greedy near-ties within tens of tokens; measured here, the server's own greedy completion of one
prompt differed between a cold and a warm cache at token 42. So each generation's first prompt
is sent alone with `cache_prompt: false` (evaluated from position 0, as a fresh completion would
be). Routers that consult large at every step (large, oracle, speculative) then extend the
cached sequence by one token per prompt, as decoding does, and their outputs do not depend on
what the server served before. It costs one extra round trip and
one full prompt evaluation per generation; `cold_prefill=False` trades that for cache hits.

KV cache: the server's prompt cache plays that role (llama.cpp matches each prompt's longest
cached prefix; vLLM's prefix caching does the same). `crop` only shortens the prefix this backend
remembers, and every request sends the whole prefix: `stats.bytes_sent` counts that cost.

Failures: every attempt has a timeout; connection errors, timeouts, truncated bodies and HTTP
408/429/5xx are retried with exponential backoff, bounded in count (`retries`) and in time
(`deadline_s`); after the last attempt a `RemoteError` says what failed. The runner records such
an example as failed and decodes it again on resume. Other HTTP errors (4xx) are not retried.

    backend = RemoteBackend(RemoteConfig("http://127.0.0.1:8080"), vocab_size=151936)
    engine = remote_engine("http://127.0.0.1:8080", small="qwen2.5-coder-0.5b-instruct")

Dialects: `llama.cpp` (llama-server: `n_probs`, ids in `logprobs.content[*].top_logprobs[*].id`)
and `vllm` (`logprobs` + `return_tokens_as_token_ids`, ids as "token_id:N" keys). The vllm parser
is tested on a canned response only; no vLLM server runs on this machine.
"""

from __future__ import annotations

import copy
import http.client
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import torch

from harness.core.records import ModelInfo
from harness.errors import ServiceError, UserError

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
DIALECTS = ("llama.cpp", "vllm")


class RemoteError(ServiceError):
    """The remote model did not answer after every retry (or refused the request)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status  # the last HTTP status the server answered with; 0 if it never did


@dataclass(frozen=True)
class RemoteConfig:
    """Where the remote large model is and how hard to try."""

    url: str  # server root, e.g. "http://127.0.0.1:8080" (the /v1/completions path is added)
    dialect: str = "llama.cpp"  # "llama.cpp" (llama-server) or "vllm"
    model: str = ""  # the "model" field sent in each request (vLLM needs it; llama.cpp ignores)
    top_k: int = 20  # log-probabilities per row; other ids get -inf (see the module docstring)
    timeout_s: float = 30.0  # per attempt: connect + response
    retries: int = 4  # attempts after the first one
    backoff_s: float = 0.5  # sleep before retry i is backoff_s * 2**(i-1), capped at max_backoff_s
    max_backoff_s: float = 8.0
    deadline_s: float = 120.0  # no new attempt starts later than this after the first one
    cold_prefill: bool = True  # llama.cpp: evaluate each generation's prompt afresh (see below)
    restore_cache: bool = True  # llama.cpp: put the server's cache back before a retry (_restore)
    idle_s: float = 2.0  # reconnect before reusing a connection idle this long (servers close
    # idle keep-alive connections after ~5 s; a request sent on one would fail and be retried)


@dataclass
class RemoteStats:
    """Running totals since the backend was made (mutable: the backend adds to them)."""

    forwards: int = 0  # forward() calls answered
    requests: int = 0  # HTTP requests answered (a cold prefill takes two, see RemoteConfig)
    round_trips: int = 0  # HTTP attempts, failed ones included
    retries: int = 0  # attempts after a failed one
    rows: int = 0  # next-token rows asked for (one prompt each)
    bytes_sent: int = 0  # request bodies (JSON), headers excluded
    bytes_received: int = 0  # response bodies, headers excluded
    restores: int = 0  # requests that put the server's cache back before a retry (below)
    seconds: float = 0.0  # wall time inside HTTP calls, backoff sleeps included
    errors: list[str] = field(default_factory=list)  # one line per failed attempt


class RemoteBackend:
    """The Backend protocol (harness.backends) over an OpenAI-compatible completions server."""

    def __init__(self, cfg: RemoteConfig, vocab_size: int, info: ModelInfo | None = None):
        if cfg.dialect not in DIALECTS:
            raise UserError(f"unknown remote dialect {cfg.dialect!r}; valid: {', '.join(DIALECTS)}")
        parts = urlsplit(cfg.url)
        if parts.scheme != "http" or not parts.hostname:
            raise UserError(f"remote model url must look like http://HOST:PORT, got {cfg.url!r}")
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.host, self.port = parts.hostname, parts.port or 80
        self.root = parts.path.rstrip("/")
        self.info = info or ModelInfo("large", cfg.url, "remote", "server", 0, 0, 0)
        self.stats = RemoteStats()
        self.tokens: list[int] = []
        self._conn: http.client.HTTPConnection | None = None
        self._last_used = 0.0
        self._served: list[int] | None = None  # the server's cache after the last answer (below)

    # ------------------------------------------------------------------ Backend protocol

    @property
    def length(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.tokens = []

    def crop(self, n: int) -> None:
        del self.tokens[n:]

    def sync(self) -> None:
        pass  # every call returns after the server answered

    def forward(self, ids: list[int], n_rows: int, hidden: bool = False):
        """Append `ids`; return [n_rows, V] log-probability rows (top-k, -inf elsewhere).

        The first call of a generation (the prefill) sends its first prompt alone and with the
        server's prompt cache off when `cold_prefill` is set (llama.cpp): see `RemoteConfig`.
        """
        if hidden:
            raise RemoteError("a remote model has no hidden state to return")
        cold = not self.tokens and self.cfg.cold_prefill and self.cfg.dialect == "llama.cpp"
        self.tokens += list(ids)
        n = len(self.tokens)
        if not 1 <= n_rows <= n:
            raise ValueError(f"asked for {n_rows} rows of a {n}-token sequence")
        prompts = [self.tokens[: n - n_rows + 1 + i] for i in range(n_rows)]
        groups = [(prompts[:1], False), (prompts[1:], True)] if cold else [(prompts, True)]
        choices = []
        for group, cache in groups:
            if group:
                restore = (lambda g=group: self._restore(g[0])) if cache else None
                answer = self._post("/v1/completions", self._payload(group, cache), restore)
                choices += sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))
                self._served = list(group[-1])
        if len(choices) != n_rows:
            raise RemoteError(f"asked for {n_rows} completions, server returned {len(choices)}")
        rows = torch.full((n_rows, self.vocab_size), -math.inf)
        for r, choice in enumerate(choices):
            for tok, logprob in parse_choice(choice, self.cfg.dialect).items():
                if 0 <= tok < self.vocab_size:
                    rows[r, tok] = logprob
        self.stats.forwards += 1
        self.stats.rows += n_rows
        return rows, None

    def sequences(self, n: int) -> list[RemoteBackend]:
        """n sequences, each with its own token list and connection; `forward_batch` sends their
        requests concurrently and the server batches them (vLLM, llama-server --parallel N)."""
        seqs = [self]
        for _ in range(n - 1):
            other = copy.copy(self)
            other.tokens, other._conn, other.owner = [], None, self
            seqs.append(other)
        return seqs

    def forward_batch(self, calls) -> list:
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            return list(pool.map(lambda c: c[0].forward(c[1], c[2], c[3]), calls))

    # ------------------------------------------------------------------ requests

    def _payload(self, prompts: list[list[int]], cache: bool = True) -> dict:
        body = {"prompt": prompts, "max_tokens": 1, "temperature": 0.0, "stream": False}
        if self.cfg.model:
            body["model"] = self.cfg.model
        if self.cfg.dialect == "llama.cpp":
            body.update(n_probs=self.cfg.top_k, cache_prompt=cache)
        else:
            body.update(logprobs=self.cfg.top_k, return_tokens_as_token_ids=True)
        return body

    def completion(self, prompt: list[int], max_tokens: int) -> list[int]:
        """The server's own greedy completion of `prompt` in one request (a reference for tests)."""
        cache = not self.cfg.cold_prefill
        body = {**self._payload([list(prompt)], cache), "max_tokens": max_tokens}
        body["n_probs" if self.cfg.dialect == "llama.cpp" else "logprobs"] = 1
        choice = self._post("/v1/completions", body)["choices"][0]
        return generated_ids(choice, self.cfg.dialect)

    def server_info(self) -> dict:
        """GET /v1/models (llama-server adds `meta`: n_params, size, n_vocab)."""
        return self._request("GET", "/v1/models", None)

    def _post(self, path: str, payload: dict, before_retry=None) -> dict:
        return self._request("POST", path, json.dumps(payload).encode(), before_retry)

    def _restore(self, prompt: list[int]) -> None:
        """Before a retry: put llama-server's prompt cache back where the last answer left it.

        A failed attempt may have reached the server (an answer cut or timed out on the way
        back): its cache then holds the whole prompt, and the retry would evaluate only the last
        position, alone, where the first attempt evaluated the new tokens as one batch. llama.cpp's
        numbers depend on that batching (module docstring), enough to flip a near-tie of large's
        greedy token. One request for the served prefix plus a token the prompt does not continue
        with makes the server drop what the failed attempt added; the retry then evaluates the same
        tokens in the same batch as an undisturbed run. A failed attempt answered by the server
        itself late (after the client gave up) can still move the cache afterwards."""
        served = self._served
        if not (self.cfg.restore_cache and self.cfg.dialect == "llama.cpp"):
            return
        if not served or len(served) >= len(prompt):
            return
        if prompt[: len(served)] != served:
            return
        other = 0 if prompt[len(served)] != 0 else 1
        body = {**self._payload([served + [other]], True), "n_probs": 1}
        self.stats.restores += 1
        self._attempt("POST", "/v1/completions", json.dumps(body).encode())

    def _request(self, method: str, path: str, body: bytes | None, before_retry=None) -> dict:
        """One call with timeouts and bounded retries; RemoteError after the last attempt.
        `before_retry()` runs before each retry (the cache restore of a completions request)."""
        cfg, t0, last, attempts, answered = self.cfg, time.monotonic(), "", 0, 0
        try:
            for attempt in range(cfg.retries + 1):
                if attempt:
                    pause = min(cfg.backoff_s * 2 ** (attempt - 1), cfg.max_backoff_s)
                    if time.monotonic() - t0 + pause > cfg.deadline_s:
                        break
                    time.sleep(pause)
                    self.stats.retries += 1
                    if before_retry is not None:
                        before_retry()
                attempts += 1
                status, data, error = self._attempt(method, path, body)
                answered = status or answered
                if status == 200:
                    try:
                        answer = json.loads(data)
                        self.stats.requests += 1
                        return answer
                    except ValueError as e:
                        error = f"bad JSON in response ({e})"
                elif status and status not in RETRY_STATUS:
                    raise RemoteError(f"{cfg.url}{path}: HTTP {status}: {_snippet(data)}", status)
                last = error or f"HTTP {status}: {_snippet(data)}"
                self.stats.errors.append(last)
            raise RemoteError(
                f"{cfg.url}{path}: gave up after {attempts} attempts; last error: {last}", answered
            )
        finally:
            self.stats.seconds += time.monotonic() - t0

    def _attempt(self, method: str, path: str, body: bytes | None):
        """(status, body, error): status 0 when the connection failed or the body was cut."""
        self.stats.round_trips += 1
        self.stats.bytes_sent += len(body or b"")
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self._conn is not None and time.monotonic() - self._last_used > self.cfg.idle_s:
            self._close()
        try:
            if self._conn is None:
                self._conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.cfg.timeout_s
                )
            self._conn.request(method, self.root + path, body=body, headers=headers)
            resp = self._conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:  # timeouts, resets, cut bodies
            self._close()
            return 0, b"", f"{type(e).__name__}: {e}".rstrip(": ")
        self.stats.bytes_received += len(data)
        self._last_used = time.monotonic()
        if resp.will_close:
            self._close()
        return resp.status, data, ""

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _snippet(data: bytes, n: int = 200) -> str:
    return data[:n].decode("utf-8", "replace").replace("\n", " ")


# ---------------------------------------------------------------------- response parsing


def parse_choice(choice: dict, dialect: str) -> dict[int, float]:
    """token id -> log-probability for the first generated token of one completion choice.

    llama.cpp:  choice["logprobs"]["content"][0] = {"id": 5, "logprob": -0.1,
                    "top_logprobs": [{"id": 5, "logprob": -0.1}, {"id": 9, "logprob": -2.3}]}
    vllm:       choice["logprobs"] = {"tokens": ["token_id:5"], "token_logprobs": [-0.1],
                    "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -2.3}]}
    Both give {5: -0.1, 9: -2.3}. The generated token is always included.
    """
    logprobs = choice.get("logprobs") or {}
    if dialect == "llama.cpp":
        content = logprobs.get("content") or []
        if not content:
            raise RemoteError(f"no log-probabilities in the server's answer: {choice}")
        first = content[0]
        out = {int(t["id"]): float(t["logprob"]) for t in first.get("top_logprobs") or []}
        out.setdefault(int(first["id"]), float(first["logprob"]))
        return out
    tops, tokens = logprobs.get("top_logprobs") or [], logprobs.get("tokens") or []
    if not tops or not tokens:
        raise RemoteError(f"no log-probabilities in the server's answer: {choice}")
    out = {_vllm_id(k): float(v) for k, v in (tops[0] or {}).items()}
    out.setdefault(_vllm_id(tokens[0]), float(logprobs["token_logprobs"][0]))
    return out


def generated_ids(choice: dict, dialect: str) -> list[int]:
    """The ids of every generated token of one choice (needs log-probabilities requested)."""
    logprobs = choice.get("logprobs") or {}
    if dialect == "llama.cpp":
        return [int(t["id"]) for t in logprobs.get("content") or []]
    return [_vllm_id(t) for t in logprobs.get("tokens") or []]


def _vllm_id(key: str) -> int:
    if not key.startswith("token_id:"):
        raise RemoteError(f"expected 'token_id:N' (return_tokens_as_token_ids), got {key!r}")
    return int(key.split(":", 1)[1])


# ---------------------------------------------------------------------- engine


def remote_info(backend: RemoteBackend) -> ModelInfo:
    """A ModelInfo from the server's /v1/models (llama-server reports size and parameters).

    weight_bytes is the served file's size; kv_bytes_per_token is unknown to an API client (0).
    This is the first request a run makes: a server that does not answer it after every retry,
    or answers as no completions server would, is the user's to fix (one UserError line).
    """
    try:
        answer = backend.server_info()
    except RemoteError as e:
        if e.status:  # something answered, but not as an OpenAI-compatible server does
            raise UserError(
                f"the remote large model at {backend.cfg.url} answered with an error ({e}); give "
                "--large the root URL of llama-server or vLLM (the harness adds /v1/...)"
            ) from None
        raise UserError(
            f"the remote large model at {backend.cfg.url} did not answer ({e}); start its "
            "server (e.g. llama-server --port PORT) or give --large http://HOST:PORT of one"
        ) from None
    if not isinstance(answer, dict) or not isinstance(answer.get("data", []), list):
        raise UserError(
            f"{backend.cfg.url}/v1/models answered {_snippet(json.dumps(answer).encode())}: not "
            "an OpenAI-compatible server; give --large http://HOST:PORT of llama-server or vLLM"
        )
    models = [m for m in answer.get("data") or [] if isinstance(m, dict)] or [{}]
    meta = models[0].get("meta") if isinstance(models[0].get("meta"), dict) else {}
    return ModelInfo(
        name="large",
        source=f"{backend.cfg.url} ({models[0].get('id', '?')})",
        device="remote",
        dtype="server",
        n_params=int(meta.get("n_params", 0)),
        weight_bytes=int(meta.get("size", 0)),
        kv_bytes_per_token=0,
        backend="remote",
    )
