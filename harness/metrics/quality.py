"""Metrics of one run: pure functions over the records of `records.jsonl` and the run manifest.

Every metric is defined once, in the docstring of the function that computes it. Per-example
functions take one record (the dict form of `ExampleRecord.to_json()`); aggregate functions take
the list of records and say how they weigh examples:

  token-weighted  sum over examples of the numerator / sum over examples of the denominator
  example-mean    the plain mean over examples of a per-example value

Records whose `error` is non-empty are failed examples: every aggregate leaves them out and
`summarize` counts them in `n_failed`. An empty denominator (no examples, no emitted tokens, no
decode steps) gives NaN, never 0.

    >>> summarize(records, manifest)["large_token_share"]   # what `summary.json` holds
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from harness.core.records import MODELS

NAN = float("nan")


# ---------------------------------------------------------------- record access


def ok_records(records: Sequence[dict]) -> list[dict]:
    """The records that did not fail (empty `error`)."""
    return [r for r in records if not r.get("error")]


def _gen(record: dict) -> dict:
    return record.get("generation") or {}


def _col(record: dict, table: str, column: str) -> list:
    return (_gen(record).get(table) or {}).get(column) or []


def _ratio(num: float, den: float) -> float:
    return num / den if den else NAN


def _mean(values: Sequence[float]) -> float:
    """Mean of the finite values; NaN when there are none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else NAN


# ---------------------------------------------------------------- per-example counts


def n_emitted(record: dict) -> int:
    """Tokens emitted for the example (stop tokens excluded): the length of its provenance."""
    return len(_gen(record).get("provenance") or [])


def n_large_emitted(record: dict) -> int:
    """Emitted tokens whose provenance is 1 (produced by the large model)."""
    return sum(_gen(record).get("provenance") or [])


def n_steps(record: dict) -> int:
    """Decode steps (iterations of the decode loop) of the example."""
    return len(_col(record, "steps", "large_called"))


def n_large_steps(record: dict) -> int:
    """Decode steps in which the large model ran a forward pass (verify or catch_up)."""
    return sum(bool(c) for c in _col(record, "steps", "large_called"))


def n_large_forwards(record: dict) -> int:
    """Forward passes of the large model, prefill included (a remote large model: round trips)."""
    return sum(m == "large" for m in _col(record, "forwards", "model"))


def example_score(record: dict, metric: str) -> float:
    """The example's value of `metric` (bools count 1/0); KeyError names the scores it has."""
    scores = record.get("scores") or {}
    if metric not in scores:
        raise KeyError(
            f"record {record.get('example_id')!r} has no score {metric!r}; it has {sorted(scores)}"
        )
    return float(scores[metric])


# ---------------------------------------------------------------- quality


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean.

    Draws `n_boot` resamples of the values with replacement (numpy PCG64 seeded with `seed`),
    takes each resample's mean, and returns the (1-confidence)/2 and (1+confidence)/2
    percentiles of those means (numpy's linear interpolation). No values: (NaN, NaN).
    Example: [1, 1, 1] -> (1.0, 1.0).
    """
    x = np.asarray(values, dtype=float)
    return bootstrap_statistic(x.size, lambda idx: x[idx].mean(axis=1), n_boot, confidence, seed)


def ratio_ci(
    num: Sequence[float], den: Sequence[float], n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile bootstrap CI of sum(num) / sum(den), resampling examples (each example's
    pair together), e.g. tokens per second over examples; the draws are `bootstrap_ci`'s.
    Example: num [2, 2], den [1, 1] -> (2.0, 2.0)."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    return bootstrap_statistic(
        a.size, lambda idx: a[idx].sum(axis=1) / b[idx].sum(axis=1), n_boot, 0.95, seed
    )


def bootstrap_statistic(
    n: int, statistic, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
):
    """The percentile interval of `statistic` over `n_boot` resamples of n items with
    replacement (numpy PCG64 seeded with `seed`); `statistic` maps [rows, n] indices to [rows]
    (e.g. a ratio of sums over the resampled examples, several columns of each kept together)."""
    if n == 0:
        return NAN, NAN
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(bootstrap_draws(n, statistic, n_boot, seed), [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_draws(n: int, statistic, n_boot: int, seed: int) -> np.ndarray:
    """`statistic` over `n_boot` resamples of n >= 1 items with replacement (numpy PCG64 seeded
    with `seed`): the draws `bootstrap_statistic` takes its percentiles of."""
    rng = np.random.default_rng(seed)
    rows = max(1, min(n_boot, 1_000_000 // n))  # bound memory: at most ~1e6 draws at once
    stats = []
    for start in range(0, n_boot, rows):
        stats.append(statistic(rng.integers(0, n, size=(min(rows, n_boot - start), n))))
    return np.concatenate(stats)


def quality(records: Sequence[dict], metric: str) -> float:
    """Example-mean of the primary `metric` over non-failed records; NaN when there are none.

    A NaN score is not skipped: it makes the quality NaN, so a scoring bug cannot hide.
    """
    values = [example_score(r, metric) for r in ok_records(records)]
    return sum(values) / len(values) if values else NAN


def quality_ci(
    records: Sequence[dict], metric: str, n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile bootstrap CI (`bootstrap_ci`) of `quality` over the non-failed records,
    in example-id order (`_by_id`)."""
    return bootstrap_ci([example_score(r, metric) for r in _by_id(records)], n_boot, seed=seed)


def _by_id(records: Sequence[dict]) -> list[dict]:
    """The non-failed records in example-id order: what a bootstrap over examples resamples, so
    that its interval does not depend on the order the records come in (a batched run writes
    them as they finish; summary.json, the report and scripts read them in different orders)."""
    return sorted(ok_records(records), key=lambda r: str(r.get("example_id", "")))


# ---------------------------------------------------------------- large-model shares


def paired_difference(
    a: Sequence[dict], b: Sequence[dict], metric: str, n_boot: int = 1000, seed: int = 0
) -> dict[str, float]:
    """Mean of score(a) - score(b) over the examples both ran without failing, with its 95%
    percentile bootstrap CI (`bootstrap_ci`, resampling examples in id order: the difference is
    paired). Example: a scores [1, 1, 0], b scores [0, 1, 0] on the same ids -> diff 0.333."""
    b_by_id = {r["example_id"]: r for r in ok_records(b)}
    pairs = [(r, b_by_id[r["example_id"]]) for r in _by_id(a) if r["example_id"] in b_by_id]
    diffs = [example_score(x, metric) - example_score(y, metric) for x, y in pairs]
    lo, hi = bootstrap_ci(diffs, n_boot=n_boot, seed=seed)
    return {"n": len(diffs), "diff": _mean(diffs), "ci_low": lo, "ci_high": hi}


def large_token_share(records: Sequence[dict]) -> float:
    """Tokens emitted by the large model / all emitted tokens. Token-weighted over examples.

    Example: provenances [0, 1, 1] and [0] -> 2 / 4 = 0.5. No emitted tokens: NaN.
    With one token emitted per step and a step per token (the seed paper's loop without a KV
    cache), this equals `large_call_share`; with drafting (speculative) the two differ widely.
    """
    ok = ok_records(records)
    return _ratio(sum(map(n_large_emitted, ok)), sum(map(n_emitted, ok)))


def large_call_share(records: Sequence[dict]) -> float:
    """Decode steps in which the large model ran a forward pass / all decode steps.

    Token-weighted in the sense of step-weighted: sum over examples / sum over examples.
    A step counts when `steps.large_called` is true (a verify or catch_up pass); prefill is not a
    decode step. The seed paper's "Cloud LLM activation ratio" (total LLM steps / total SLM steps)
    is this step-based ratio. Example: large_called [T, F, F] and [T] -> 2 / 4 = 0.5. No steps: NaN.
    """
    ok = ok_records(records)
    return _ratio(sum(map(n_large_steps, ok)), sum(map(n_steps, ok)))


def query_large_share(records: Sequence[dict]) -> float:
    """Examples a query-level router sent to large / examples it routed (non-empty `query_route`).

    Example-mean. NaN for token-level routers (no example carries a query route).
    """
    routes = [_gen(r).get("query_route") for r in ok_records(records)]
    routes = [q for q in routes if q]
    return _ratio(sum(q == "large" for q in routes), len(routes))


def draft_acceptance(records: Sequence[dict]) -> float:
    """Drafted tokens kept / drafted tokens (steps.kept / steps.drafted), token-weighted; NaN if none drafted."""
    ok = ok_records(records)
    kept = sum(sum(_col(r, "steps", "kept")) for r in ok)
    return _ratio(kept, sum(sum(_col(r, "steps", "drafted")) for r in ok))


# ---------------------------------------------------------------- bytes moved


def forward_bytes(weight_bytes: float, kv_bytes_per_token: float, cache_len: int) -> float:
    """Bytes one forward pass moves: the model's weights once plus the KV cache it reads.

    bytes = weight_bytes + cache_len * kv_bytes_per_token, where cache_len is the number of tokens
    already cached before the pass (CITER's data-transfer cost; writing the new tokens' KV is not
    counted). Example: 1000 + 10 * 8 = 1080.
    """
    return weight_bytes + cache_len * kv_bytes_per_token


def example_bytes(record: dict, models: Mapping[str, Mapping]) -> dict[str, float]:
    """Bytes moved by one example, by model, summed over its forward passes (`forward_bytes`).

    `models` is the manifest's `models` (role -> ModelInfo dict). Returns keys `small`, `large`,
    `reward`, `router` (all phases of that model), `catch_up` (the part of them moved in catch_up
    passes, already included in its model's total) and `total` (all models). A model that ran but
    has no entry in `models` makes its key and `total` NaN (cost unknown).
    """
    out = dict.fromkeys((*MODELS, "catch_up", "total"), 0.0)
    fw = _gen(record).get("forwards") or {}
    for model, phase, cache_len in zip(
        fw.get("model", []), fw.get("phase", []), fw.get("cache_len", []), strict=True
    ):
        info = models.get(model)
        b = (
            forward_bytes(info["weight_bytes"], info["kv_bytes_per_token"], cache_len)
            if info
            else NAN
        )
        out[model] = out.get(model, 0.0) + b
        out["total"] += b
        if phase == "catch_up":
            out["catch_up"] += b
    return out


def bytes_moved(records: Sequence[dict], models: Mapping[str, Mapping]) -> dict[str, float]:
    """Example-mean of `example_bytes` per key (bytes per example); NaN for no examples."""
    per = [example_bytes(r, models) for r in ok_records(records)]
    keys = (*MODELS, "catch_up", "total")
    return {k: (sum(p[k] for p in per) / len(per) if per else NAN) for k in keys}


def bytes_per_token(records: Sequence[dict], models: Mapping[str, Mapping]) -> float:
    """All bytes moved / all emitted tokens (`example_bytes` total), token-weighted; NaN if no tokens."""
    ok = ok_records(records)
    return _ratio(sum(example_bytes(r, models)["total"] for r in ok), sum(map(n_emitted, ok)))


# ---------------------------------------------------------------- measured latency


def decode_seconds(record: dict) -> float:
    """Wall time of the example's decode steps: sum of steps.seconds (prefill not included)."""
    return float(sum(_col(record, "steps", "seconds")))


def time_per_output_token(record: dict) -> float:
    """TPOT: (end-to-end seconds - ttft) / (emitted tokens - 1); NaN with fewer than 2 tokens.

    The usual serving definition: the time between tokens after the first one.
    Example: seconds 2.0, ttft 0.5, 4 tokens -> 1.5 / 3 = 0.5 s.
    """
    n, gen = n_emitted(record), _gen(record)
    if n < 2:
        return NAN
    return (float(gen.get("seconds", NAN)) - float(gen.get("ttft", NAN))) / (n - 1)


def latency(records: Sequence[dict]) -> dict[str, float]:
    """Measured latency over non-failed records (timers are the runner's, device-synchronized).

    ttft_s     example-mean of generation.ttft (examples with a finite ttft)
    tpot_s     example-mean of `time_per_output_token` (examples with >= 2 tokens)
    e2e_s      example-mean of generation.seconds (end to end, prefill included)
    decode_s   example-mean of `decode_seconds`
    tok_per_s  throughput: emitted tokens / decode seconds, token-weighted (sum / sum)
    Each is NaN when its denominator is empty.
    """
    ok = ok_records(records)
    return {
        "ttft_s": _mean([float(_gen(r).get("ttft", NAN)) for r in ok]),
        "tpot_s": _mean([time_per_output_token(r) for r in ok]),
        "e2e_s": _mean([float(_gen(r).get("seconds", NAN)) for r in ok]),
        "decode_s": _mean([decode_seconds(r) for r in ok]),
        "tok_per_s": _ratio(sum(map(n_emitted, ok)), sum(map(decode_seconds, ok))),
    }


def clock_s(session: Mapping) -> float:
    """A session's seconds on the clock: `measured_wall_s` where it reused answers (its `wall_s`
    is then modeled, the reused answers' decoding added), else `wall_s`; 0 when unrecorded."""
    return float(session.get("measured_wall_s", session.get("wall_s")) or 0.0)


def rate_sessions(manifest: Mapping) -> list[dict]:
    """The sessions a run's throughput is measured over (`throughput`): those with wall seconds
    at the largest batch size any of them used that decoded examples (all of them with wall
    seconds when none at that size did)."""
    sessions = [s for s in manifest.get("sessions") or [] if s.get("wall_s")]
    batch = max([int(s.get("batch", 1)) for s in sessions] or [1])
    at_batch = [s for s in sessions if int(s.get("batch", 1)) == batch and s.get("examples")]
    return at_batch or sessions


def throughput(manifest: Mapping) -> dict[str, float]:
    """A run's throughput from its manifest's `sessions` (one per invocation of `run`):

    batch                 the largest batch size any session used (1 = unbatched)
    throughput_tok_per_s  emitted tokens / wall seconds (scoring included), over the sessions
                          at that batch size that decoded examples: a run grown unbatched and
                          then batched (say the first 100 examples at B = 1, the next at 16)
                          reports its B = 16 rate, the one other B = 16 rows compare with
    examples_per_hour     examples / wall hours, over the same sessions
    throughput_modeled    True when a session reused answers decoded by other runs (`run
                          --reuse-answers`): its wall seconds add their decoding time there
    """
    sessions = rate_sessions(manifest)
    wall = sum(float(s["wall_s"]) for s in sessions)
    return {
        "batch": max([int(s.get("batch", 1)) for s in sessions] or [1]),
        "throughput_tok_per_s": _ratio(sum(s.get("tokens", 0) for s in sessions), wall),
        "examples_per_hour": _ratio(3600 * sum(s.get("examples", 0) for s in sessions), wall),
        "throughput_modeled": any(s.get("reused", {}).get("examples") for s in sessions),
    }


# ---------------------------------------------------------------- run summary


def summarize(
    records: Sequence[dict], manifest: Mapping, n_boot: int = 1000, seed: int = 0
) -> dict:
    """A run's `summary.json`: a flat dict of the aggregates above (JSON-able; NaN where undefined).

    router_trained_on, transfer   tasks the router learned from (comma-joined); whether the task is
                            not among them (a transfer row, shown apart)
    n / n_failed            non-failed and failed records
    quality, quality_ci_*   `quality` of the manifest's primary metric and its `quality_ci`
    large_token_share, large_call_share, query_large_share, draft_acceptance
    tokens_per_example, steps_per_example, large_forwards_per_example   example-means
    bytes_<model>, bytes_catch_up, bytes_total   `bytes_moved` (example-mean bytes per example)
    bytes_per_token         `bytes_per_token`
    ttft_s, tpot_s, e2e_s, decode_s, tok_per_s   `latency`: per stream, so NaN for a run
                            that decoded several examples at once (batch > 1)
    batch, throughput_tok_per_s, examples_per_hour, throughput_modeled   `throughput`
    """
    ok = ok_records(records)
    models = manifest.get("models") or {}
    metric = manifest["metric"]
    lo, hi = quality_ci(ok, metric, n_boot=n_boot, seed=seed)
    out = {
        "task": manifest.get("task", ""),
        "router": manifest.get("router", ""),
        "router_trained_on": ",".join(manifest.get("router_trained_on") or []),
        "transfer": bool(manifest.get("transfer", False)),
        "split": manifest.get("split", ""),
        "metric": metric,
        "n": len(ok),
        "n_failed": len(records) - len(ok),
        "quality": quality(ok, metric),
        "quality_ci_low": lo,
        "quality_ci_high": hi,
        "large_token_share": large_token_share(ok),
        "large_call_share": large_call_share(ok),
        "query_large_share": query_large_share(ok),
        "draft_acceptance": draft_acceptance(ok),
        "tokens_per_example": _mean([n_emitted(r) for r in ok]),
        "steps_per_example": _mean([n_steps(r) for r in ok]),
        "large_forwards_per_example": _mean([n_large_forwards(r) for r in ok]),
    }
    out.update({f"bytes_{k}": v for k, v in bytes_moved(ok, models).items()})
    out["bytes_per_token"] = bytes_per_token(ok, models)
    speed = throughput(manifest)
    per_stream = latency(ok)
    if speed["batch"] > 1:  # each example's timers include waiting for the others
        per_stream = dict.fromkeys(per_stream, NAN)
    out.update(per_stream)
    out.update(speed)
    return out
