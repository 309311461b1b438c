"""Records that cross module boundaries: what the decoding core produces and the runner writes.

Everything here is a small frozen dataclass or a pure conversion to/from JSON, so that
`reports/` and `harness/metrics/quality.py` can read result files without importing torch or a model.

Vocabulary (one for the whole project): `small` and `large` are the two generating models;
`reward` is the reward model and `router` a router's own network (e.g. CITER's MLP).
Provenance per emitted token: 0 = small, 1 = large.

Phases of a forward pass:
  prefill   - the prompt, once per model that runs
  draft     - small proposing tokens
  verify    - large run over drafted tokens before the router decides (oracle, speculative)
  catch_up  - large consulted after tokens it has not seen: one batched pass over them
  score     - the reward model scoring drafted tokens
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SMALL, LARGE = 0, 1
MODELS = ("small", "large", "reward", "router")
PHASES = ("prefill", "draft", "verify", "catch_up", "score")


@dataclass(frozen=True)
class ForwardRecord:
    """One forward pass of one model."""

    model: str  # one of MODELS
    phase: str  # one of PHASES
    tokens_in: int  # new tokens fed in this pass (the batch length)
    cache_len: int  # tokens already in this model's KV cache before the pass (KV read cost)
    seconds: float  # wall time of the pass, device-synchronized


@dataclass(frozen=True)
class StepRecord:
    """One iteration of the decode loop (a "decode step")."""

    drafted: int  # tokens small proposed this step
    kept: int  # drafted tokens accepted and emitted (provenance 0)
    large_tokens: int  # tokens emitted by large this step (0 or 1)
    large_called: bool  # large ran a forward pass this step (verify or catch_up)
    seconds: float  # wall time of the whole step


@dataclass(frozen=True)
class ModelInfo:
    """What the cost model needs to know about one model; written into every run manifest."""

    name: str  # role: small, large, reward or router
    source: str  # where it was loaded from (package GGUF name, directory, hub id)
    device: str  # e.g. "cpu", "cuda:0", "remote"
    dtype: str  # e.g. "bfloat16"
    n_params: int  # parameter count
    weight_bytes: int  # bytes read per forward pass for the weights
    kv_bytes_per_token: int  # KV-cache bytes per cached token (read once per forward pass)
    sha256: str = ""  # checksum of the weight file it was built from, when known
    backend: str = "hf"  # what runs it: "hf", "llama.cpp <version>" or "remote"


@dataclass(frozen=True)
class Generation:
    """The result of decoding one prompt."""

    prompt_ids: tuple[int, ...]  # the tokenized prompt (chat template applied)
    token_ids: tuple[int, ...]  # emitted tokens, stop tokens excluded
    text: str  # decoded completion, cut at the first stop string
    provenance: tuple[int, ...]  # per emitted token: 0 small, 1 large
    stop_reason: str  # "eos", "stop_string", "max_tokens"
    steps: tuple[StepRecord, ...]  # one per decode step
    forwards: tuple[ForwardRecord, ...]  # one per forward pass, in order
    seconds: float  # end-to-end wall time, prefill included
    ttft: float  # seconds from start until the first token was emitted (NaN if none)
    query_route: str = ""  # for query-level routers: "small" or "large"; else ""

    def to_json(self) -> dict:
        """A compact, JSON-ready dict: forwards and steps stored column-wise."""
        return {
            "token_ids": list(self.token_ids),
            "text": self.text,
            "provenance": list(self.provenance),
            "stop_reason": self.stop_reason,
            "seconds": self.seconds,
            "ttft": self.ttft,
            "query_route": self.query_route,
            "n_prompt_tokens": len(self.prompt_ids),
            "steps": _columns(self.steps, StepRecord),
            "forwards": _columns(self.forwards, ForwardRecord),
        }

    @classmethod
    def from_json(cls, d: dict, prompt_ids: tuple[int, ...]) -> Generation:
        """Inverse of `to_json`, given the prompt it was decoded from (the JSON keeps only its
        length, checked here)."""
        if d.get("n_prompt_tokens") != len(prompt_ids):
            raise ValueError(
                f"generation of a {d.get('n_prompt_tokens')}-token prompt, "
                f"given {len(prompt_ids)} prompt tokens"
            )
        return cls(
            prompt_ids=tuple(prompt_ids),
            token_ids=tuple(d["token_ids"]),
            text=d["text"],
            provenance=tuple(d["provenance"]),
            stop_reason=d["stop_reason"],
            steps=rows_from_columns(d["steps"], StepRecord),
            forwards=rows_from_columns(d["forwards"], ForwardRecord),
            seconds=d["seconds"],
            ttft=float("nan") if d["ttft"] is None else d["ttft"],
            query_route=d.get("query_route", ""),
        )


def _columns(rows, cls) -> dict[str, list]:
    names = list(cls.__dataclass_fields__)
    return {n: [getattr(r, n) for r in rows] for n in names}


def rows_from_columns(cols: dict[str, list], cls):
    """Inverse of the column-wise storage in `Generation.to_json`."""
    names = list(cls.__dataclass_fields__)
    n = len(cols[names[0]]) if names and names[0] in cols else 0
    return tuple(cls(**{k: cols[k][i] for k in names}) for i in range(n))


@dataclass(frozen=True)
class ExampleRecord:
    """One line of a run's `records.jsonl`: one scored example."""

    example_id: str  # the task's stable id for the example
    split: str  # the task split it came from (train / calib / test)
    completion: str  # the decoded completion that was scored
    scores: dict  # metric name -> value (the task's primary metric included)
    generation: dict  # Generation.to_json()
    seconds: float  # wall time for decode + score
    error: str = ""  # non-empty when the example failed (it is retried on resume)

    def to_json(self) -> dict:
        return asdict(self)
