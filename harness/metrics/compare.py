"""`hybridbench compare OLD NEW`: flag a quality or speed regression between two run folders.

    hybridbench compare runs/main-oracle runs/pr-oracle --max-slowdown 1.25

Both folders are `hybridbench run` outputs (read by `harness.core.run_folder`); only files are read,
no model is loaded. Exit status 1 when a regression is flagged, 0 when none, 2 on a user error.

Rules (every number printed comes from `harness.metrics.quality`):
- quality: on the examples both runs scored (matched by example id), new against old by the
  verdict rule of `harness.metrics.verdicts` (a family of one): the paired difference new - old
  of the primary metric with its 95% bootstrap interval (`--n-boot`, default 10,000 resamples,
  seed 0), and the exact McNemar test on the discordant pairs for a metric scored 0 or 1 (a
  bootstrap p for a graded one). A drop is flagged when the verdict is "worse" (p < 0.05) and,
  with `--tolerance` above 0, the whole interval also lies below `-tolerance`. Without shared
  examples the unpaired rule applies: new quality below the lower end of old's
  `metrics.quality_ci`. Each run's quality and large-token share on the paired examples are
  recorded beside its own (a run that scored more examples than the other differs there).
- speed: when both manifests record their sessions, `throughput_tok_per_s` (`metrics.throughput`:
  emitted tokens / wall seconds, the one speed a batched run has); otherwise per-stream
  `tok_per_s` (`metrics.latency`: emitted tokens / decode seconds). A slowdown old / new above
  `--max-slowdown` (default 1.25) is flagged, when both ran on one machine: two machines sold
  under one CPU name decoded 1.5x apart (`harness.metrics.machines` tells them apart by recorded id or
  shared batch probe), so a slowdown across machines is printed, never flagged. Batch sizes
  that differ are printed too.
- failures: more failed examples (records with an `error`) in new than in old is flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.core.run_folder import Run
from harness.errors import UserError
from harness.metrics import quality as metrics
from harness.metrics.verdicts import N_BOOT, SEED, compare_scores, example_scores


@dataclass(frozen=True)
class Verdict:
    """The comparison of two runs, and which regressions it flags."""

    metric: str  # the primary quality metric both runs share
    n_paired: int  # examples scored in both runs (0: the unpaired rule was used)
    quality_old: float
    quality_new: float
    quality_old_ci: tuple[float, float]  # 95% bootstrap CI of old's quality
    paired_old: float  # old's quality on the paired examples (NaN: none); differs from
    paired_new: float  # quality_old (_new) when a run scored examples the other did not
    paired_share_old: float  # old's large-token share on the paired examples (NaN: none, or
    paired_share_new: float  # nothing emitted): the share the paired difference was measured at
    diff_ci: tuple[float, float]  # 95% bootstrap CI of mean(new - old) on paired examples
    diff: float  # mean(new - old) on the paired examples (NaN: none)
    test: str  # the paired test (harness.metrics.verdicts: exact McNemar or bootstrap)
    p: float  # its two-sided p (NaN: no paired example)
    discordant: tuple[int, int] | None  # (new only, old only) right; None: a graded metric
    verdict: str  # better | worse | no difference | — (the rule, alone in its family)
    n_boot: int  # bootstrap resamples of the interval (seed `seed`)
    seed: int
    tok_per_s_old: float
    tok_per_s_new: float
    slowdown: float  # tok_per_s_old / tok_per_s_new (> 1: new is slower)
    same_machine: bool  # both decoded on one machine: the slowdown is flagged only then
    failed_old: int
    failed_new: int
    flags: tuple[str, ...]  # one line per regression; empty when none


def compare(
    old: Run, new: Run, max_slowdown: float = 1.25, tolerance: float = 0.0, n_boot: int = N_BOOT
) -> Verdict:
    """Compare two runs (see the module docstring for the rules)."""
    metric = old.manifest.get("metric")
    for key in ("task", "split", "metric"):
        if old.manifest.get(key) != new.manifest.get(key):
            raise UserError(
                f"runs differ in {key} ({old.manifest.get(key)!r} vs {new.manifest.get(key)!r}); "
                "compare runs of the same task, split and metric"
            )
    q_old, q_new = metrics.quality(old.records, metric), metrics.quality(new.records, metric)
    old_ci = metrics.quality_ci(old.records, metric, n_boot=n_boot)
    scores_old, scores_new = (
        example_scores(old.records, metric),
        example_scores(new.records, metric),
    )
    paired = compare_scores(scores_new, scores_old, n_boot=n_boot, seed=SEED)
    n_pairs, diff_ci = paired.n, (paired.ci_low, paired.ci_high)
    paired_old, paired_new = paired_means(scores_old, scores_new)
    shared = scores_old.keys() & scores_new.keys()
    share_old, share_new = (paired_share(r.records, shared) for r in (old, new))
    tps_old, tps_new = speeds(old, new)
    slowdown = tps_old / tps_new if tps_new > 0 else math.nan

    flags = []
    if paired.verdict == "worse" and (tolerance <= 0 or diff_ci[1] < -tolerance):
        flags.append(
            f"quality: {metric} dropped {q_old:.4g} -> {q_new:.4g}; paired change {paired.diff:+.4g}"
            f", 95% CI [{diff_ci[0]:.4g}, {diff_ci[1]:.4g}], {paired.test} p = {paired.p:.3g} "
            f"({n_pairs} examples)"
        )
    elif not n_pairs and q_new < old_ci[0]:
        flags.append(
            f"quality: {metric} {q_new:.4g} is below old's 95% CI [{old_ci[0]:.4g}, {old_ci[1]:.4g}]"
        )
    same = not machines_differ(old, new)
    if same and slowdown > max_slowdown:
        flags.append(
            f"speed: {tps_old:.4g} -> {tps_new:.4g} tok/s, {slowdown:.3g}x slower "
            f"(allowed {max_slowdown:g}x)"
        )
    if new.n_failed > old.n_failed:
        flags.append(f"failures: {old.n_failed} -> {new.n_failed} failed examples")
    return Verdict(
        metric=metric,
        n_paired=n_pairs,
        quality_old=q_old,
        quality_new=q_new,
        quality_old_ci=old_ci,
        paired_old=paired_old,
        paired_new=paired_new,
        paired_share_old=share_old,
        paired_share_new=share_new,
        diff_ci=diff_ci,
        diff=paired.diff,
        test=paired.test,
        p=paired.p,
        discordant=None if paired.a_only is None else (paired.a_only, paired.b_only),
        verdict=paired.verdict,
        n_boot=n_boot,
        seed=SEED,
        tok_per_s_old=tps_old,
        tok_per_s_new=tps_new,
        slowdown=slowdown,
        same_machine=same,
        failed_old=old.n_failed,
        failed_new=new.n_failed,
        flags=tuple(flags),
    )


def paired_means(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    """(a, b) mean score ({example id: score}) on the examples both scored; NaN when none."""
    shared = a.keys() & b.keys()
    if not shared:
        return math.nan, math.nan
    return tuple(sum(s[i] for i in shared) / len(shared) for s in (a, b))


def paired_share(records, ids) -> float:
    """The large-token share (`metrics.large_token_share`) of the records of examples `ids`."""
    return metrics.large_token_share([r for r in records if r.get("example_id") in ids])


def machines_differ(old: Run, new: Run) -> bool:
    """Whether the two runs' timings come from different machines: with sessions recorded,
    unless all of both runs' throughput sessions ran on one machine (`harness.metrics.machines`);
    else when their manifests describe the machine differently (older manifests hold fewer
    fields: only the ones both have count)."""
    if old.manifest.get("sessions") and new.manifest.get("sessions"):
        used = _by_machine(old, new)
        return not (len(used["old"]) == 1 and used["old"].keys() == used["new"].keys())
    m_old, m_new = old.manifest.get("machine") or {}, new.manifest.get("machine") or {}
    return any(m_old[k] != m_new[k] for k in set(m_old) & set(m_new))


def speeds(old: Run, new: Run) -> tuple[float, float]:
    """(old, new) tokens per second, measured the same way for both (see the module docstring)."""
    if old.manifest.get("sessions") and new.manifest.get("sessions"):
        return tuple(metrics.throughput(r.manifest)["throughput_tok_per_s"] for r in (old, new))
    return tuple(metrics.latency(r.records)["tok_per_s"] for r in (old, new))


def report(old: Run, new: Run, v: Verdict) -> str:
    """The human-readable comparison printed by the command."""
    lines = [
        f"old: {old.path}  router={old.manifest.get('router')} {old.manifest.get('router_args')}",
        f"new: {new.path}  router={new.manifest.get('router')} {new.manifest.get('router_args')}",
        f"{v.metric}: {v.quality_old:.4g} (95% CI {v.quality_old_ci[0]:.4g}..{v.quality_old_ci[1]:.4g}, "
        f"n={len(old.records)}) -> {v.quality_new:.4g} (n={len(new.records)}); "
        f"paired change {v.diff:+.4g}, 95% CI {v.diff_ci[0]:.4g}..{v.diff_ci[1]:.4g} "
        f"({v.n_boot} resamples, seed {v.seed}) on {v.n_paired} examples",
        *(
            [
                f"on those {v.n_paired}: {v.paired_old:.4g} -> {v.paired_new:.4g} at large-token "
                f"share {v.paired_share_old:.3f} -> {v.paired_share_new:.3f}"
            ]
            if v.n_paired and v.n_paired < max(len(old.records), len(new.records))
            else []
        ),
        _test_line(v),
        f"tok/s: {v.tok_per_s_old:.4g} -> {v.tok_per_s_new:.4g} (slowdown {v.slowdown:.3g}x)",
        f"failed examples: {v.failed_old} -> {v.failed_new}",
    ]
    if not v.same_machine:
        note = "note: different machines, speeds are not comparable (no speed flag)"
        lines.append(f"{note}: {_machines(old, new)}")
    b_old, b_new = (metrics.throughput(r.manifest)["batch"] for r in (old, new))
    if b_old != b_new:
        lines.append(f"note: batch {b_old:g} vs {b_new:g}: throughputs are not comparable")
    lines += [f"REGRESSION {f}" for f in v.flags] or ["no regression flagged"]
    return "\n".join(lines)


def _by_machine(old: Run, new: Run) -> dict[str, dict[str, dict[str, float]]]:
    """Per run ("old", "new"), both with sessions: its throughput sessions summed per machine
    (`machines.by_machine`), a machine named by an id recorded by any session of either run that
    it ran, else by its label."""
    from harness.metrics.machines import by_machine, session_machines

    labels = session_machines({"old": old.manifest, "new": new.manifest})
    runs = {"old": old, "new": new}
    ids: dict[str, str] = {}
    for key, run in runs.items():
        for s, lab in zip(run.manifest["sessions"], labels[key], strict=True):
            if machine_id := (s.get("machine") or {}).get("id"):
                ids.setdefault(lab, machine_id)
    return {
        key: {
            ids.get(lab, f"machine {lab}"): sums
            for lab, sums in by_machine(run.manifest, labels[key]).items()
        }
        for key, run in runs.items()
    }


def _machines(old: Run, new: Run) -> str:
    """Where each run's timed examples were decoded, with their counts; without sessions, the
    two manifests' machines."""
    if not (old.manifest.get("sessions") and new.manifest.get("sessions")):
        return f"{old.manifest.get('machine') or {}} vs {new.manifest.get('machine') or {}}"
    out = []
    for key, used in _by_machine(old, new).items():
        where = ", ".join(f"{m} ({d['examples']:.0f} examples)" for m, d in used.items())
        out.append(f"{key} on {where or 'no timed session'}")
    return "; ".join(out)


def _test_line(v: Verdict) -> str:
    """The paired test's line: its p, the discordant pairs of a 0/1 metric, the verdict."""
    if not v.n_paired:
        return "no example scored in both runs: no paired test"
    pairs = v.discordant
    said = f" (discordant: {pairs[0]} right in new only, {pairs[1]} in old only)" if pairs else ""
    return f"{v.test} p = {v.p:.4g}{said}; verdict: {v.verdict}"
