"""A query route's answer decoded before, spliced after this generation's routing pass.

A query router decides once per prompt; when the chosen route's greedy answer for the same
prompt and decoding is already known (`Job.answers`, from a small-only or large-only run), the
loop reuses it instead of decoding it again (`harness.evaluation.runner`, `--reuse-answers`).
"""

from __future__ import annotations

from dataclasses import replace

from harness.core.records import Generation


def reused_answer(run, answer: Generation, route: str, routing_s: float) -> Generation:
    """What decoding the query route `route` after the routing pass in `run` gives, from that
    route's answer decoded on its own before (greedy: the same tokens). Small's route continues
    from the routing prefill (`catch_up`'s last-row reuse), so small's own prefill is replaced by
    the routing one; large's answer follows it. Seconds are the routing pass's plus the answer's
    (its own prefill's taken out on the small route)."""
    if len(answer.prompt_ids) != run.n_prompt:
        raise ValueError(
            f"the reused {route} answer read a prompt of {len(answer.prompt_ids)} tokens, "
            f"this one has {run.n_prompt}"
        )
    forwards = answer.forwards
    saved = 0.0
    if route == "small":
        if not forwards or forwards[0].phase != "prefill" or forwards[0].model != "small":
            raise ValueError("the reused small answer does not start with small's prefill")
        saved, forwards = forwards[0].seconds, forwards[1:]
    return replace(
        answer,
        prompt_ids=tuple(run.tokens[: run.n_prompt]),
        forwards=tuple(run.forwards) + tuple(forwards),
        seconds=routing_s + answer.seconds - saved,
        ttft=routing_s + answer.ttft - saved,
        query_route=route,
    )
