"""Nucleus sampling sorts only the most likely tokens when they hold the nucleus: the distribution
and every seeded draw must equal those of sorting the whole vocabulary."""

from __future__ import annotations

import pytest
import torch

from harness.core import sampling
from harness.core.sampling import distribution, sample

VOCAB = 151_936  # the default pair's vocabulary: the size the shortcut is for


def full_sort(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The definition: softmax, the whole row sorted, the smallest top set of mass >= top_p."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    sorted_p = sorted_p.masked_fill(torch.cumsum(sorted_p, -1) - sorted_p >= top_p, 0.0)
    probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


def logits_of(scale: float, seed: int, shape=(VOCAB,)) -> torch.Tensor:
    # scale 8: a peaked row (a nucleus of a few tokens); 0.5: nearly flat (thousands)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


@pytest.mark.parametrize("scale", [8.0, 3.0, 0.5])
@pytest.mark.parametrize("temperature,top_p", [(0.2, 0.8), (0.7, 0.95), (1.0, 0.99)])
def test_distribution_equals_the_full_sort(scale, temperature, top_p):
    for seed in range(3):
        x = logits_of(scale, seed)
        assert torch.equal(distribution(x, temperature, top_p), full_sort(x, temperature, top_p))


def test_both_paths_are_taken_and_rows_are_handled_together(monkeypatch):
    calls = []
    real = torch.sort

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(torch, "sort", spy)
    peaked, flat = logits_of(8.0, 0), logits_of(0.5, 1)
    distribution(peaked, 1.0, 0.9)
    assert not calls  # the prefix held the nucleus: no full sort
    distribution(flat, 1.0, 0.9)
    assert calls  # it did not: the whole row sorted
    calls.clear()
    both = torch.stack([peaked, flat])
    got = distribution(both, 1.0, 0.9)  # one row short of top_p: every row sorted fully
    assert calls
    assert torch.equal(got, full_sort(both, 1.0, 0.9))
    assert sampling.NUCLEUS_PREFIX < VOCAB


def test_seeded_draws_equal_those_from_the_full_sort():
    for seed in range(40):
        x = logits_of(2.0 + seed % 5, seed)
        t, p = 0.2 + 0.02 * seed, 0.8 + 0.004 * seed
        want = torch.multinomial(
            full_sort(x, t, p), 1, generator=torch.Generator().manual_seed(seed)
        )
        got = sample(x, t, p, torch.Generator().manual_seed(seed))
        assert got == int(want)
