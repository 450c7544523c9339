"""A small banking environment made for learning on CPU (seeded task families, short prompts, two turns)."""

from .environment import LedgerEnvironment

__all__ = ["LedgerEnvironment"]
