"""Seed-only weight initialisation of the tiny models (the small trained-tokenizer one and the backbone ones).

Kept apart from both model builders so that neither imports the other.
"""

from __future__ import annotations


def seeded_init(model, seed: int, std: float) -> None:
    """Initialise ``model`` from its own generator, so the weights depend on the seed alone (not on the global RNG
    state or on how a transformers version orders its init calls): norms 1, biases 0, the rest N(0, std)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
