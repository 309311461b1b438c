"""The loaded models of one experiment, the tokenizer they share, and prompt encoding.

engine = Engine.load()                       # the default pair, small on CPU, large on GPU if any
ids = engine.encode([{"role": "user", "content": "2+2?"}])
gen = engine.generate(get_router("oracle"), ids, DecodeConfig(max_new_tokens=64))
"""

from __future__ import annotations

from dataclasses import asdict, replace

from harness.backend import Backend, HFBackend
from harness.core import DecodeConfig, generate
from harness.records import Generation


class Engine:
    """Backends by role ("small", "large", optionally "reward") and their shared tokenizer."""

    def __init__(self, tokenizer, backends: dict[str, Backend]):
        self.tokenizer = tokenizer
        self.backends = dict(backends)

    @classmethod
    def load(
        cls,
        small: str | None = None,
        large: str | None = None,
        *,
        dtype: str = "bfloat16",
        small_device: str = "auto",
        large_device: str = "auto",
    ) -> Engine:
        """Load a small/large pair; refuses a pair whose tokenizers differ."""
        from harness import models

        s = models.load_model(
            small or models.DEFAULT_SMALL, role="small", device=small_device, dtype=dtype
        )
        lg = models.load_model(
            large or models.DEFAULT_LARGE, role="large", device=large_device, dtype=dtype
        )
        models.check_same_tokenizer(s.tokenizer, lg.tokenizer)
        return cls(
            s.tokenizer,
            {"small": HFBackend(s.model, s.info), "large": HFBackend(lg.model, lg.info)},
        )

    def add(self, role: str, backend: Backend) -> None:
        """Attach another model (a reward model, a remote large model) under `role`."""
        self.backends[role] = backend

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The tokenizer's EOS plus the chat end-of-turn token (Qwen: <|im_end|>)."""
        ids = {self.tokenizer.eos_token_id}
        ids |= {self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        return tuple(
            sorted(i for i in ids if isinstance(i, int) and i != self.tokenizer.unk_token_id)
        )

    def encode(self, prompt) -> list[int]:
        """A chat prompt (list of messages, or a plain user string) -> token ids, template applied."""
        messages = (
            [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        )
        out = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        ids = out["input_ids"] if hasattr(out, "keys") else out
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(self, router, prompt_ids: list[int], cfg: DecodeConfig) -> Generation:
        cfg = replace(cfg, eos_ids=cfg.eos_ids or self.eos_ids)
        return generate(self.backends, router, prompt_ids, cfg, self.decode)

    def model_infos(self) -> dict:
        """Role -> ModelInfo as a dict, for run manifests and the cost model."""
        return {role: asdict(b.info) for role, b in self.backends.items()}
