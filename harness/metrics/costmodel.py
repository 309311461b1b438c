"""Modeled latency on named hardware, and dollar cost of the large model's tokens.

Decode is memory-bound, so a forward pass is modeled as the time to read the bytes it moves
(`harness.metrics.quality.forward_bytes`) at the memory bandwidth of the device its model runs on, plus a
network round trip for every forward pass of a large model that sits behind a network.

    >>> profile = get_profile("seed-xeon-a100")
    >>> modeled_latency(records, manifest, profile)["modeled_tok_per_s"]

`this-machine` measures this machine's bandwidth with a short copy probe, only when asked for.

Measured on a machine (`hybridbench bench-gpu`), the cost model of a run is its own passes
(`PassRecord`), each decode pass priced at its model's measured one-token step time
(`step_priced_seconds`), the same for every router.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import UserError
from harness.metrics.quality import example_bytes, n_emitted, n_large_forwards, ok_records

NAN = float("nan")
GB = 1e9

# Which device each model runs on: reward model and router net sit beside the small model.
SIDE = {"small": "small", "reward": "small", "router": "small", "large": "large"}


@dataclass(frozen=True)
class HardwareProfile:
    """Where the two sides of a hybrid system run, as bandwidths and a network round trip."""

    name: str  # registry key
    small_bandwidth: float  # bytes/s of the memory the small model (and reward, router) reads
    large_bandwidth: float  # bytes/s of the memory the large model reads
    large_remote: bool  # large is behind a network: each of its forward passes is a round trip
    rtt: float  # seconds per network round trip (used only when large_remote)
    source: str  # where the numbers come from


PROFILES = {
    # The seed paper's setting: small model on a Xeon CPU at the edge, large on a cloud A100-80GB.
    # Xeon: ASSUMPTION, a 3rd-gen Xeon Scalable socket with 8 channels of DDR4-3200:
    #   8 x 3200 MT/s x 8 B = 204.8 GB/s theoretical peak (Intel ARK); achieved copy bandwidth
    #   is lower (~60-80%), so like the GPU numbers this is a peak and modeled times are lower bounds.
    # A100 80GB SXM: 2,039 GB/s HBM2e (NVIDIA A100 datasheet; the PCIe card is 1,935 GB/s).
    # RTT: ASSUMPTION, 30 ms for an edge-to-cloud round trip in one region.
    "seed-xeon-a100": HardwareProfile(
        name="seed-xeon-a100",
        small_bandwidth=204.8 * GB,
        large_bandwidth=2039 * GB,
        large_remote=True,
        rtt=0.030,
        source="Xeon 8ch DDR4-3200 peak (assumed); A100-80GB SXM datasheet; 30 ms RTT (assumed)",
    ),
    # Both models on one H100 SXM5 80GB: 3,350 GB/s HBM3 (NVIDIA H100 datasheet). No network.
    "h100": HardwareProfile(
        name="h100",
        small_bandwidth=3350 * GB,
        large_bandwidth=3350 * GB,
        large_remote=False,
        rtt=0.0,
        source="H100 SXM5 80GB datasheet, both models on one GPU",
    ),
}
PROFILE_NAMES = (*PROFILES, "this-machine")


def measure_bandwidth(
    nbytes: int = 128 * 2**20, repeats: int = 5, timer: Callable[[], float] = time.perf_counter
) -> float:
    """This machine's memory bandwidth in bytes/s: the best of `repeats` copies of `nbytes`.

    A copy reads and writes `nbytes`, so bandwidth = 2 * nbytes / best time (STREAM's convention).
    """
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: page in both buffers
    best = float("inf")
    for _ in range(repeats):
        start = timer()
        np.copyto(dst, src)
        best = min(best, timer() - start)
    return 2 * src.nbytes / best


def this_machine_profile(bandwidth: float | None = None) -> HardwareProfile:
    """Both models on this machine at its measured bandwidth (`measure_bandwidth`), no network."""
    bw = measure_bandwidth() if bandwidth is None else bandwidth
    return HardwareProfile(
        name="this-machine",
        small_bandwidth=bw,
        large_bandwidth=bw,
        large_remote=False,
        rtt=0.0,
        source=f"measured: numpy copy probe, {bw / GB:.1f} GB/s",
    )


def get_profile(name: str) -> HardwareProfile:
    """The named profile; `this-machine` runs the bandwidth probe now (about a second)."""
    if name == "this-machine":
        return this_machine_profile()
    if name not in PROFILES:
        raise UserError(f"unknown hardware profile {name!r}; valid: {', '.join(PROFILE_NAMES)}")
    return PROFILES[name]


def modeled_seconds(
    bytes_by_model: Mapping[str, float], large_forwards: float, profile: HardwareProfile
) -> float:
    """Modeled time = sum over models of bytes moved / bandwidth of that model's side
    + large forward passes x RTT when the large model is remote.

    `bytes_by_model` maps model name (small, large, reward, router) to bytes moved
    (`harness.metrics.quality.example_bytes`); other keys (catch_up, total) are ignored.
    Example: small 2e9 B at 200e9 B/s + large 4e9 B at 2000e9 B/s + 3 x 0.03 s = 0.01 + 0.002 + 0.09.
    """
    seconds = 0.0
    for model, side in SIDE.items():
        bw = profile.small_bandwidth if side == "small" else profile.large_bandwidth
        seconds += bytes_by_model.get(model, 0.0) / bw
    return seconds + (large_forwards * profile.rtt if profile.large_remote else 0.0)


def example_modeled_seconds(
    record: dict, models: Mapping[str, Mapping], profile: HardwareProfile
) -> float:
    """`modeled_seconds` of one example (its bytes by model and its large forward passes)."""
    return modeled_seconds(example_bytes(record, models), n_large_forwards(record), profile)


def modeled_latency(
    records: Sequence[dict], manifest: Mapping, profile: HardwareProfile
) -> dict[str, float]:
    """Modeled latency of a run's non-failed records under `profile`.

    modeled_s          example-mean of `example_modeled_seconds`
    modeled_tok_per_s  emitted tokens / modeled seconds, token-weighted (sum / sum)
    NaN when there are no records (or no modeled time).
    """
    ok = ok_records(records)
    models = manifest.get("models") or {}
    secs = [example_modeled_seconds(r, models, profile) for r in ok]
    total = sum(secs)
    return {
        "modeled_s": total / len(secs) if secs else NAN,
        "modeled_tok_per_s": sum(map(n_emitted, ok)) / total if total else NAN,
    }


# ---------------------------------------------------------------- dollars


@dataclass(frozen=True)
class PriceProfile:
    """API prices of the large model, per million tokens."""

    name: str  # label shown in reports
    usd_per_m_input: float  # $ per million input tokens the large model is sent
    usd_per_m_output: float  # $ per million tokens the large model emits
    resend_context: bool = False  # stateless API: every call re-sends the whole context


def large_token_counts(record: dict, resend_context: bool = False) -> tuple[int, int]:
    """(input, output) tokens billed for the large model in one example.

    input: over the large model's forward passes, the new tokens fed in (tokens_in) — with
    `resend_context`, the whole context instead (cache_len + tokens_in). output: tokens emitted
    by large (provenance 1). Example: passes (tokens_in 10, cache 0) (3, 10), 2 large tokens:
    (13, 2), or (26, 2) when the context is re-sent.
    """
    fw = (record.get("generation") or {}).get("forwards") or {}
    n_in = 0
    for model, tokens_in, cache_len in zip(
        fw.get("model", []), fw.get("tokens_in", []), fw.get("cache_len", []), strict=True
    ):
        if model == "large":
            n_in += tokens_in + (cache_len if resend_context else 0)
    return n_in, sum((record.get("generation") or {}).get("provenance") or [])


def example_cost_usd(record: dict, price: PriceProfile) -> float:
    """$ for one example: input x usd_per_m_input / 1e6 + output x usd_per_m_output / 1e6."""
    n_in, n_out = large_token_counts(record, price.resend_context)
    return (n_in * price.usd_per_m_input + n_out * price.usd_per_m_output) / 1e6


def cost_per_example(records: Sequence[dict], price: PriceProfile) -> float:
    """Example-mean of `example_cost_usd` over non-failed records; NaN for none."""
    costs = [example_cost_usd(r, price) for r in ok_records(records)]
    return sum(costs) / len(costs) if costs else NAN


# ---------------------------------------------------------------- passes priced at the step


@dataclass(frozen=True)
class PassRecord:
    """One batched model pass of a timed run (`hybridbench bench-gpu`)."""

    model: str  # the role that ran it: small, large, reward, router
    calls: int  # generations whose calls it ran together
    feed: int  # tokens of its longest call
    prefill: bool  # some call started its model's cache (a prompt): not a decode pass
    seconds: float  # measured, device-synchronized


def step_priced_seconds(passes: Sequence[PassRecord], step_seconds: Mapping[str, float]) -> float:
    """The cost model's seconds for a run's passes, the same for every router: each decode pass
    priced at its model's one-token step time at the run's batch size (`step_seconds`, by model),
    whatever it feeds, since at these sizes a pass of a few tokens reads the same weights as a
    pass of one (the memory-bound ideal, speculative verifies included); a prefill pass at its
    measured seconds (the prompts cost every row the same). Example: small's step 2 ms, large's
    10 ms; passes: prefill of each (30 ms, 50 ms), 8 small decode passes, 3 large catch-ups of
    1-5 tokens: 0.08 + 8 x 0.002 + 3 x 0.010 = 0.126 s. NaN when a model has no step time."""
    total = 0.0
    for p in passes:
        total += p.seconds if p.prefill else step_seconds.get(p.model, NAN)
    return total


def passes_by_size(passes: Sequence[PassRecord]) -> dict[str, dict[int, int]]:
    """Decode passes counted per model per batch size (calls in the pass):
    [small x3 calls, small x3, large x1] -> {"small": {3: 2}, "large": {1: 1}}."""
    out: dict[str, dict[int, int]] = {}
    for p in passes:
        if not p.prefill:
            sizes = out.setdefault(p.model, {})
            sizes[p.calls] = sizes.get(p.calls, 0) + 1
    return out


def feed_bucket_seconds(
    passes: Sequence[PassRecord], bucket: Callable[[int], int | None]
) -> dict[str, dict[str, dict]]:
    """Measured decode passes per model per feed bucket (`bucket(feed)`, None: past the
    largest, labelled "long"): {"large": {"8": {"passes": 12, "median_s": 0.011}}}, to read
    beside the cost model's one price per pass."""
    groups: dict[tuple[str, str], list[float]] = {}
    for p in passes:
        if not p.prefill:
            b = bucket(p.feed)
            groups.setdefault((p.model, "long" if b is None else str(b)), []).append(p.seconds)
    out: dict[str, dict[str, dict]] = {}
    for (model, b), secs in sorted(groups.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        out.setdefault(model, {})[b] = {"passes": len(secs), "median_s": float(np.median(secs))}
    return out


def _order(label: str) -> float:
    return float("inf") if label == "long" else float(label)
