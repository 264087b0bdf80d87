"""LLM text made safe to show a user: plain, bounded, and with no instructions addressed to the reader.

An explanation or a question back from the LLM is shown verbatim nowhere: :func:`plain_text`
normalises it (NFKC, invisible format characters removed), drops terminal escapes, control
characters, HTML tags and markdown markup, removes every sentence that addresses instructions
or secrets to the reader (role prefixes such as 'SYSTEM:', 'ignore previous instructions', API
keys, tokens, passwords, key-like strings, links, shell commands), and cuts the rest to a
length, at a sentence end when there is one.  Each change is said in the returned notes.
"""

from __future__ import annotations

import re

from agent.text.number_kinds import normalise

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MARKUP = [(re.compile(r"<[^>\n]{0,200}>"), ""), (re.compile(r"```[a-zA-Z]*"), ""), (re.compile(r"[*_]{2,}"), ""),
           (re.compile(r"^\s{0,3}#{1,6}\s+", re.M), ""), (re.compile(r"`"), "")]
_ADDRESSED = re.compile(
    r"\b(?:system|assistant|developer|user)\s*:|\bignore\s+(?:all\s+|any\s+|the\s+)?(?:previous|prior|above|earlier)"
    r"|\b(?:api|access|auth|bearer|secret)[\s_-]*(?:key|token)s?\b|\bpassw(?:or)?ds?\b|\bsecrets?\b"
    r"|\bcredentials?\b|\bprivate\s+keys?\b|\b(?:reveal|disclose|exfiltrat\w*|leak)\b|\bsk-[A-Za-z0-9_-]{6,}"
    r"|https?://|\bwww\.|\b(?:curl|wget|sudo|rm\s+-rf|chmod|export\s+[A-Z_]+=)",
    re.I)
_LONG_WORD = re.compile(r"[A-Za-z0-9_-]{32,}")


def _key_like(sentence: str) -> bool:
    """A word of 32+ letters and digits mixed (an API key, a token, a hash)."""
    return any(re.search(r"\d", w) and re.search(r"[A-Za-z]", w) for w in _LONG_WORD.findall(sentence))


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def plain_text(text: str, max_chars: int, *, what: str = "the LLM's text") -> tuple[str, list[str]]:
    """(safe text, notes): see the module docstring.  ``what`` names the text in the notes."""
    notes: list[str] = []
    clean = _CONTROL.sub(" ", _ANSI.sub("", normalise(text or "")))
    for pattern, repl in _MARKUP:
        clean = pattern.sub(repl, clean)
    kept, removed = [], 0
    for sentence in _SENTENCE_END.split(clean):
        if not sentence.strip():
            continue
        if _ADDRESSED.search(sentence) or _key_like(sentence):
            removed += 1
        else:
            kept.append(sentence.strip())
    if removed:
        notes.append(f"removed {removed} sentence(s) of {what} addressed to the reader (instructions, keys, "
                     "secrets, links or commands)")
    out = re.sub(r"[ \t]{2,}", " ", " ".join(kept)).strip()
    if len(out) > max_chars:
        cut = out[:max_chars]
        end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
        notes.append(f"{what} was cut to {max_chars:,} of {len(out):,} characters")
        out = (cut[:end + 1] if end > max_chars // 2 else cut.rstrip()) + " [cut]"
    return out, notes
