"""Turn a tiktoken rank file (base64 token, rank per line) into a ``tokenizers`` byte-level BPE.

Both backbones publish their vocabulary in this format inside installable packages (Qwen's in ``dashscope``,
Llama 3's in ``llama-models``). A ``tokenizers`` BPE needs merges, which a rank file does not list: each
multi-byte token's merge is recovered by running BPE on its own bytes with only the lower-ranked tokens, which
must end in exactly two parts (the pair that tiktoken merges last). That gives one merge per token, ordered by
rank, so the ``tokenizers`` BPE merges pairs in the same order tiktoken does.
"""

from __future__ import annotations

import base64
from typing import Iterable


def load_ranks(path: str) -> dict[bytes, int]:
    """``{token bytes: rank}`` of a tiktoken rank file; a malformed line is an error naming file and line."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
            except ValueError:
                raise ValueError(f"{path}:{n}: not a tiktoken rank line (base64 token, space, rank)") from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not the consecutive ids 0..{len(ranks) - 1}")
    return ranks


def _split_by_rank(ranks: dict[bytes, int], token: bytes, below: int) -> list[bytes]:
    """tiktoken's BPE on ``token`` using only tokens ranked below ``below``."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < below and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def recover_merges(ranks: dict[bytes, int], all_splits: bool = False) -> list[tuple[bytes, bytes]]:
    """Merges in rank order of the merged token.

    ``all_splits=False``: one merge per multi-byte token (every token must be reachable by BPE from
    lower-ranked tokens; Qwen2's released merges list is of this kind, one per token). ``all_splits=True``:
    every split of a token into two tokens, as tiktoken may merge any adjacent pair whose concatenation is a
    token (needed for vocabularies with tokens BPE cannot reach, as Llama 3's; its released tokenizer lists
    merges this way and also looks whole pieces up first, ``ignore_merges``).
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        if all_splits:
            local = [(token[:i], token[i:]) for i in range(1, len(token))
                     if token[:i] in ranks and token[i:] in ranks]
            merges.extend(sorted(local, key=lambda lr: (ranks[lr[0]], ranks[lr[1]])))
            continue
        parts = _split_by_rank(ranks, token, rank)
        if len(parts) != 2:
            raise ValueError(f"token of rank {rank} cannot be built from two lower-ranked tokens: {token!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _byte_to_unicode() -> dict[int, str]:
    """The byte-level alphabet of GPT-2-style tokenizers (printable stand-ins for the 256 byte values)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def build_bpe(ranks: dict[bytes, int], pattern: str, nfc: bool, ignore_merges: bool):
    """A ``tokenizers.Tokenizer``: split by ``pattern``, byte-level, BPE over the ranks (ids = ranks).

    ``ignore_merges=True`` also selects the ``all_splits`` merges (see :func:`recover_merges`)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    table = _byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab = {text(tok): rank for tok, rank in ranks.items()}
    merges = [(text(a), text(b)) for a, b in recover_merges(ranks, all_splits=ignore_merges)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                               ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def add_tokens(tok, tokens: Iterable[tuple[int, str, bool]]) -> None:
    """Add ``(id, text, special)`` tokens; ids must continue the vocabulary without gaps."""
    from tokenizers import AddedToken

    for tid, content, special in sorted(tokens):
        if tok.get_vocab_size(with_added_tokens=True) != tid:
            raise ValueError(f"added token {content!r} must get id {tid}, next free id is "
                             f"{tok.get_vocab_size(with_added_tokens=True)}")
        added = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
