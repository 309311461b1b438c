"""Speculative decoding: greedy equivalence with large's `generate`, and at temperature > 0 a
chi-square test that the output is distributed as large's own samples (Leviathan et al. 2022)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from harness.core.loop import DecodeConfig
from harness.core.records import ModelInfo
from harness.core.router import StepView
from harness.core.sampling import distribution
from harness.core.scheduler import generate
from routers import get_router
from routers.speculative import Speculative, greedy_accept, speculative_sampling
from tests.test_core import PROMPT, N, hf_greedy
from tests.tiny import BACKENDS, CPU_LIKE, GPU_LIKE, tiny_backends


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request):
    return tiny_backends(kind=request.param)


@pytest.fixture(scope="module")
def hf_pair():
    return tiny_backends(kind="hf")


def spec(pair, args, **cfg):
    return generate(pair, get_router("speculative", args), PROMPT, DecodeConfig(**cfg))


# ---------------------------------------------------------------- temperature 0


@pytest.mark.parametrize(
    "args",
    [
        {"k": 1},
        {"k": 3},
        {"k": 5},
        {"k": 2, "adaptive": True, "schedule": "heuristic"},
        {"k": 2, "adaptive": True, "costs": GPU_LIKE},
    ],
)
def test_greedy_equals_large_generate(pair, args):
    g = spec(pair, args, max_new_tokens=N)
    assert list(g.token_ids) == hf_greedy(pair["large"])
    assert hf_greedy(pair["small"]) != hf_greedy(pair["large"])  # rejections did happen
    assert 0 < sum(g.provenance) < len(g.provenance)  # small's accepted tokens, large's fixes
    assert all(s.large_called for s in g.steps)  # large verifies every step


def test_greedy_equals_hf_assisted_generation(hf_pair):
    assisted = hf_greedy(hf_pair["large"], assistant_model=hf_pair["small"].model)
    assert list(spec(hf_pair, {"k": 4}, max_new_tokens=N).token_ids) == assisted


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_token_budget_respected(pair, n):
    g = spec(pair, {"k": 3}, max_new_tokens=n)
    assert list(g.token_ids) == hf_greedy(pair["large"])[:n] and len(g.provenance) == n


def test_eos_inside_a_draft_stops(pair):
    ref = hf_greedy(pair["large"])
    eos = ref[6]
    g = spec(pair, {"k": 5}, max_new_tokens=N, eos_ids=(eos,))
    assert list(g.token_ids) == ref[: ref.index(eos)] and g.stop_reason == "eos"


def test_greedy_accept_is_the_zero_temperature_limit():
    """With one-hot q and p (temperature 0), the sampling rule gives greedy_accept's answer."""
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        k = int(torch.randint(1, 5, (1,), generator=g))
        large = torch.randn(k + 1, 6, generator=g)
        draft = torch.where(
            torch.rand(k, generator=g) < 0.7, large[:k].argmax(-1), torch.randint(0, 6, (k,))
        )
        q = torch.nn.functional.one_hot(draft, 6).float()
        p = distribution(large, 0.0)
        assert speculative_sampling(draft, q, p, g) == greedy_accept(draft, large)


def test_cost_schedule_stops_speculating_where_it_cannot_pay(pair):
    """CPU_LIKE: after MIN_STEPS verify steps large decodes alone (drafted 0), for good; the
    output is still large's greedy one."""
    from routers.speculative import MIN_STEPS

    g = spec(pair, {"k": 2, "adaptive": True, "costs": CPU_LIKE}, max_new_tokens=N)
    assert list(g.token_ids) == hf_greedy(pair["large"])
    drafted = [s.drafted for s in g.steps]
    assert all(d > 0 for d in drafted[:MIN_STEPS]) and set(drafted[MIN_STEPS:]) == {0}
    assert len(drafted) > MIN_STEPS  # the switch did happen within the budget


def test_best_k_follows_acceptance_and_costs():
    from routers.speculative import best_k, expected_tokens, seconds_for

    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert seconds_for({1: 0.1, 33: 3.3}, 17) == pytest.approx(1.7)
    assert seconds_for({1: 0.05}, 4) == pytest.approx(0.2)  # one point: proportional
    assert seconds_for({2: 0.2, 4: 0.3}, 1) == pytest.approx(0.15)  # extrapolated below
    assert best_k(0.99, CPU_LIKE, 32) == 0  # verify costs its tokens one by one: never pays
    assert best_k(0.0, GPU_LIKE, 32) == 0  # nothing is accepted: large alone
    ks = [best_k(a, GPU_LIKE, 32) for a in (0.3, 0.6, 0.8, 0.95)]
    assert ks == sorted(ks) and ks[0] >= 1 and ks[-1] > ks[0]  # more acceptance, longer drafts


def test_cost_schedule_needs_costs():
    r = Speculative(k=2, adaptive=True)
    view = StepView(
        0, torch.tensor([1, 1]), torch.zeros(2, 5), None, torch.zeros(3, 5), None, 0.0, 1.0, None
    )
    with pytest.raises(ValueError, match="needs the machine's pass costs"):
        r.decide(view)
    assert Speculative(k=2, adaptive=True, schedule="heuristic").decide(view).keep == 0
    with pytest.raises(ValueError, match="costs must map"):
        Speculative(costs={"small": {1: 0.1}})
    assert r.describe()["schedule"] == "cost"


def test_adaptive_schedule_follows_hf_heuristic():
    r = Speculative(k=3, adaptive=True, max_k=6, schedule="heuristic")
    large = torch.zeros(8, 5)
    large[:, 1] = 1.0  # large always wants token 1

    def step(draft):
        d = torch.tensor(draft)
        k = len(d)
        view = StepView(0, d, torch.zeros(k, 5), None, large[: k + 1], None, 0.0, 1.0, None)
        return r.decide(view).keep

    ks = [r.needs().draft_len]
    for accept_all in (True, True, False, False, False, False, True):
        k = ks[-1]
        assert step([1] * k if accept_all else [1] + [0] * (k - 1)) == (k if accept_all else 1)
        ks.append(r.needs().draft_len)
    assert ks == [3, 5, 6, 5, 4, 3, 2, 4]  # +2 capped at max_k; -1 floored at 1
    r.reset()
    assert r.needs().draft_len == 3


def test_bad_arguments_are_user_errors():
    from harness.errors import UserError

    with pytest.raises(UserError, match="k must be"):
        get_router("speculative", {"k": 0})


# ---------------------------------------------------------------- temperature > 0

# Tolerance: a chi-square goodness-of-fit test at significance 1e-3 (critical value from the
# Wilson-Hilferty approximation), cells with expected count < 5 pooled. Seeded, so it is
# deterministic; the negative controls show the same test rejects the wrong distribution.


def chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper (1 - 1e-3) quantile of chi-square(df), z = 3.09 the standard normal's."""
    a = 2 / (9 * df)
    return df * (1 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic with cells of expected count < 5 pooled; returns (stat, df)."""
    n = counts.sum()
    exp = probs * n
    small = exp < 5
    obs_c = torch.cat([counts[~small], counts[small].sum().reshape(1)])
    exp_c = torch.cat([exp[~small], exp[small].sum().reshape(1)])
    keep = exp_c > 0
    obs_c, exp_c = obs_c[keep], exp_c[keep]
    return float(((obs_c - exp_c) ** 2 / exp_c).sum()), len(exp_c) - 1


def test_acceptance_rule_gives_large_distribution():
    """Direct calls on fixed q/p over 6 tokens: the first emitted token is distributed as p_1 and,
    after x_1 is accepted, the second as p_2 (10,000 draws)."""
    g = torch.Generator().manual_seed(1)
    q = torch.tensor([[0.5, 0.2, 0.1, 0.1, 0.05, 0.05], [0.05, 0.05, 0.1, 0.1, 0.2, 0.5]])
    p = torch.tensor([[0.1, 0.1, 0.4, 0.1, 0.2, 0.1], [0.3, 0.0, 0.3, 0.1, 0.2, 0.1], [1 / 6] * 6])
    first, second = torch.zeros(6), torch.zeros(6)
    for _ in range(10_000):
        draft = torch.multinomial(q, 1, generator=g).flatten()
        n, y = speculative_sampling(draft, q, p, g)
        out = draft[:n].tolist() + [y]
        first[out[0]] += 1
        if n >= 1:
            second[out[1]] += 1
    for counts, probs in ((first, p[0]), (second, p[1])):
        stat, df = chi2_stat(counts, probs)
        assert stat < chi2_critical(df), (counts / counts.sum(), probs)
    # negative control: the same test rejects small's distribution q_1
    stat, df = chi2_stat(first, q[0])
    assert stat > chi2_critical(df)


class BigramBackend:
    """A 'model' whose next-token logits depend only on the last token: a [V, V] table.

    Enough for the core's full path (prefill, draft, verify, rollback) with thousands of
    generations per second, and its sequence distribution is known exactly.
    """

    def __init__(self, table: torch.Tensor, name: str):
        self.table = table
        self.info = ModelInfo(name, "bigram", "cpu", "float32", 0, 0, 0)
        self.length, self.tokens = 0, []

    def reset(self):
        self.length, self.tokens = 0, []

    def forward(self, ids, n_rows, hidden=False):
        self.tokens += list(ids)
        self.length = len(self.tokens)
        return self.table[self.tokens[-n_rows:]], None

    def crop(self, n):
        self.tokens = self.tokens[:n]
        self.length = len(self.tokens)

    def sync(self):
        pass


def sequence_probs(table, last, n, temperature, top_p) -> torch.Tensor:
    """Exact probability of every n-token continuation, in itertools.product order."""
    dist = distribution(table, temperature, top_p)
    out = []
    for seq in itertools.product(range(table.shape[0]), repeat=n):
        prob, prev = 1.0, last
        for t in seq:
            prob, prev = prob * float(dist[prev, t]), t
        out.append(prob)
    return torch.tensor(out)


@pytest.mark.parametrize("temperature,top_p,args", [(1.0, 1.0, {"k": 2}), (0.8, 0.9, {"k": 3})])
def test_sampled_output_is_distributed_as_large(temperature, top_p, args):
    """End to end through the core: 3 sampled tokens over a 4-token vocabulary, 4,000 seeds;
    the 64 sequence frequencies match large's exact sequence distribution (chi-square)."""
    v, n, samples = 4, 3, 4000
    g = torch.Generator().manual_seed(5)
    large_t = torch.randn(v, v, generator=g)
    small_t = large_t + torch.randn(v, v, generator=g)  # small disagrees often
    models = {"small": BigramBackend(small_t, "small"), "large": BigramBackend(large_t, "large")}
    router = get_router("speculative", args)
    counts = torch.zeros(v**n)
    for seed in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, temperature=temperature, top_p=top_p, seed=seed)
        ids = generate(models, router, [0, 1], cfg).token_ids
        counts[sum(t * v**i for i, t in enumerate(reversed(ids)))] += 1
    probs = sequence_probs(large_t, 1, n, temperature, top_p)
    stat, df = chi2_stat(counts, probs)
    assert stat < chi2_critical(df)
    tv = 0.5 * float((counts / samples - probs).abs().sum())
    assert tv < 0.05
    # negative control: the test rejects small's own sequence distribution
    stat_small, df_small = chi2_stat(counts, sequence_probs(small_t, 1, n, temperature, top_p))
    assert stat_small > chi2_critical(df_small)


def test_pass_costs_are_measured_once_and_feed_the_schedule(pair, tmp_path, monkeypatch):
    from harness.backends.engine import Engine
    from harness.backends.pass_costs import PASS_SIZES, pass_costs

    monkeypatch.setenv("HYBRIDBENCH_CACHE", str(tmp_path))
    engine = Engine(None, pair)
    costs = pass_costs(engine, rounds=1)
    assert set(costs) == {"small", "large"}
    assert all(set(t) == set(PASS_SIZES) and min(t.values()) > 0 for t in costs.values())
    assert all(list(t.values()) == sorted(t.values()) for t in costs.values())  # monotone in n
    assert len(list((tmp_path / "passes").glob("*.json"))) == 1
    assert pass_costs(engine, rounds=1) == costs  # the cached measurement, not a new one
    r = Speculative(k=2, adaptive=True)
    assert r.backends(engine) == {} and r.costs == costs
    g = generate(pair, r, PROMPT, DecodeConfig(max_new_tokens=N))
    assert list(g.token_ids) == hf_greedy(pair["large"])
