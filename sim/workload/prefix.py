"""Prefix-block hashes for synthetic sessions, shared system prompts and ShareGPT history.

A prompt is cut into blocks of ``block`` tokens (the engine's ``kv.block_size``, so prompts
share exactly the tokens the engine's KV blocks share, as vLLM and SGLang hash full KV blocks;
``HASH_BLOCK_TOKENS`` for callers that name none, e.g. the ShareGPT reader); block ``i`` gets the hash
``h_i = mix(h_{i-1}, key_i, fill_i)`` (a hash chain, as in vLLM's prefix caching), where
``fill_i`` is the number of tokens in the block (the last block may be partial) and ``key_i``
names whose content the block holds: a shared system prompt's key when the block lies wholly
inside that system prompt, otherwise the key of the request's own content (one key per session,
whose later turns replay its earlier tokens). So two prompts get equal hashes for exactly the
full blocks their (fictional) token sequences share, and a partial block never matches a full
one. The KV manager maps hash blocks onto KV blocks as it does Mooncake's 512-token blocks;
with blocks of ``kv.block_size`` tokens the map is one to one, and a 100-token system prompt
shares its first 96 tokens with 16-token blocks (64 with 64-token hash blocks).
"""
from __future__ import annotations

HASH_BLOCK_TOKENS = 64
_MASK = (1 << 64) - 1


def _mix(h: int, key: int, fill: int) -> int:
    """A 63-bit hash of (previous hash, key, fill): splitmix64's finaliser over their mix."""
    x = (h * 0x9E3779B97F4A7C15 + key * 0xBF58476D1CE4E5B9 + fill) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) >> 1


def shared_key(index: int) -> int:
    """Key of shared content number ``index`` (a system prompt)."""
    return 2 * index


def own_key(uid: int) -> int:
    """Key of one session's or request's own content; ``uid`` must be unique in the workload."""
    return 2 * uid + 1


class HashChain:
    """Block hashes of one growing token sequence: ``shared_tokens`` tokens of shared content
    (key ``shared``) followed by the owner's content (key ``own``). ``hashes(n)`` returns the
    hashes of the first ``n`` tokens and caches the full blocks, so a session's turns cost
    only their new blocks."""

    __slots__ = ("_full", "_shared_tokens", "_shared", "_own", "block")

    def __init__(self, own: int, shared: int = 0, shared_tokens: int = 0, block: int = HASH_BLOCK_TOKENS):
        self._full: list[int] = []
        self._shared_tokens, self._shared, self._own, self.block = shared_tokens, shared, own, block

    def hashes(self, n_tokens: int) -> tuple[int, ...]:
        b, full = self.block, self._full
        while len(full) < n_tokens // b:
            end = (len(full) + 1) * b
            key = self._shared if end <= self._shared_tokens else self._own
            full.append(_mix(full[-1] if full else 0, key, b))
        whole = n_tokens // b
        rest = n_tokens - whole * b
        out = tuple(full[:whole])
        if rest:
            out += (_mix(out[-1] if out else 0, self._own if n_tokens > self._shared_tokens else self._shared, rest),)
        return out
