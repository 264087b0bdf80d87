"""Catalog names in free text: find the model and GPU a request mentions (ids, aliases, fuzzy family matches).

Matching works on *keys*: lower case with everything but letters, digits and dots removed, so
"Mixtral 8x7B", "mixtral-8x7b" and "Mixtral-8x7B-v0.1" meet their catalog entries, and a run of
up to five consecutive words is tried against every id and alias (the longest match wins).  When
nothing matches exactly, a family word plus a size ("llama 70b") narrows the catalog to a few
ids: one is taken (and said), several make a question.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from projection.hardware import list_hardware
from projection.model_spec import list_model_ids

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]*")
SIZE = re.compile(r"^(\d+(?:\.\d+)?x)?\d+(?:\.\d+)?b$")
MODEL_FAMILIES = ("llama", "mixtral", "qwen", "deepseek", "gpt", "nemotron", "mistral", "gemma", "phi")
# Families the catalog may lack, with the Hugging Face model_type projection.model_spec reads from a config.json:
# a "Mistral 7B" is asked back (with this hint), never read as a Mixtral.
HF_TYPES = {"mistral": "mistral", "gemma": "gemma", "phi": "phi3", "qwen2": "qwen2", "qwen": "qwen2",
            "llama": "llama", "mixtral": "mixtral", "qwen3": "qwen3", "nemotron": "nemotron"}
MAX_FUZZY_CHARS = 40   # difflib is quadratic in the word length: longer words are not fuzzy-matched
GPU_FAMILIES = ("a100", "h100", "h200", "h800", "b200", "b300", "gb200", "gb300", "mi300", "mi325", "mi355")
MAX_WINDOW = 5
DEFAULT_SEQ_LEN = 4096


def key(text: str) -> str:
    """Fold a name to its matching key: lower case, only letters, digits and dots."""
    return re.sub(r"[^a-z0-9.]", "", text.lower()).strip(".")


@dataclass(frozen=True, slots=True)
class Word:
    """One word of a request with its character span."""

    text: str
    start: int
    end: int


def words(text: str) -> list[Word]:
    """The words of ``text`` (trailing dots and commas dropped) with their spans."""
    out = []
    for m in WORD.finditer(text):
        raw = m.group(0).rstrip(".,;:!?")
        if raw:
            out.append(Word(raw, m.start(), m.start() + len(raw)))
    return out


@dataclass(slots=True)
class Match:
    """What a name search found in a text: an id, several options, or nothing (with suggestions)."""

    kind: str
    value: str | None = None
    options: list[str] = field(default_factory=list)
    mention: str = ""
    start: int = -1
    end: int = -1
    note: str = ""
    hint: str = ""


@lru_cache(maxsize=1)
def model_catalog() -> dict[str, dict[str, object]]:
    """Catalog model entries (id -> yaml entry): the loader's own cache when it has one, else the files."""
    try:   # share the parsed catalog with projection.model_spec (the search loads it anyway)
        from projection.model_spec import _catalog

        entries = {str(k): dict(v) for k, v in _catalog().items()}
    except (ImportError, AttributeError, TypeError):
        entries = {}
    if not entries:
        from projection.safe_yaml import load_catalog

        folder = resources.files("projection") / "catalog" / "models"
        for item in folder.iterdir():
            if item.name.endswith(".yaml"):
                entry = load_catalog(item.read_text(encoding="utf-8"))
                if isinstance(entry, dict) and "id" in entry:
                    entries[str(entry["id"])] = entry
    for model_id in list_model_ids():      # anything the loader knows that the files did not say
        entries.setdefault(model_id, {"id": model_id})
    return entries


@lru_cache(maxsize=1)
def model_index() -> dict[str, str]:
    """Key of every model id and alias -> model id."""
    index: dict[str, str] = {}
    for model_id, entry in model_catalog().items():
        index[key(model_id)] = model_id
        for alias in entry.get("aliases", []) or []:  # type: ignore[union-attr]
            index.setdefault(key(str(alias)), model_id)
    return index


@lru_cache(maxsize=1)
def gpu_index() -> dict[str, str]:
    """Key of every GPU id and alias -> GPU id."""
    index: dict[str, str] = {}
    for spec in list_hardware():
        for name in (spec.id, *spec.aliases):
            index.setdefault(key(name), spec.id)
    return index


def typical_seq_len(model_id: str) -> int:
    """The default sequence length of a model: 4096, or less when its context is shorter."""
    config = model_catalog().get(model_id, {}).get("config", {}) or {}
    limit = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return min(DEFAULT_SEQ_LEN, int(limit)) if isinstance(limit, int) and limit > 0 else DEFAULT_SEQ_LEN


def _exact(ws: list[Word], index: dict[str, str], plural: bool) -> Match | None:
    best: Match | None = None
    for i in range(len(ws)):
        for j in range(i + 1, min(len(ws), i + MAX_WINDOW) + 1):
            joined = "".join(w.text for w in ws[i:j])
            keys = [key(joined)]
            if plural and joined.lower().endswith("s"):
                keys.append(key(joined[:-1]))
            for k in keys:
                if k in index and (best is None or len(k) > len(key(best.mention))):
                    best = Match("found", index[k], mention=text_of(ws[i:j]), start=ws[i].start, end=ws[j - 1].end)
    return best


def text_of(ws: list[Word]) -> str:
    """The words joined by spaces."""
    return " ".join(w.text for w in ws)


def _close(word: str, candidates: list[str], n: int, cutoff: float) -> list[str]:
    """difflib's close matches, for words short enough to compare (bounded work)."""
    return difflib.get_close_matches(word, candidates, n=n, cutoff=cutoff) if len(word) <= MAX_FUZZY_CHARS else []


def config_hint(family_word: str) -> str:
    """How to give a model the catalog lacks: its config.json, whose model_type is read field by field."""
    k = key(family_word)
    family = next((f for f in sorted(HF_TYPES, key=len, reverse=True) if k.startswith(f)), None)
    if family is None:
        return "give the path of its Hugging Face config.json"
    return (f"it is not in the catalog: give the path of its Hugging Face config.json (model_type "
            f"'{HF_TYPES[family]}' is read from its fields)")


def _family_options(ws: list[Word], families: tuple[str, ...], ids: list[str]) -> tuple[list[str], list[Word]]:
    """Ids sharing a family word (and a size, when one is given) with the text, and the words used."""
    lowered = [w.text.lower() for w in ws]
    for i, word in enumerate(lowered):
        family = next((f for f in families if word.startswith(f)), None)
        if family is None:
            continue
        version = key(word[len(family):]).lstrip("-")
        used = [ws[i]]
        sizes = []
        for w in ws[i + 1:i + 4]:
            k = key(w.text)
            if SIZE.match(k) or re.fullmatch(r"v?\d+(\.\d+)?", k) or re.fullmatch(r"a\d+b", k):
                used.append(w)
                if SIZE.match(k):
                    sizes.append(k)
            else:
                break
        options = [m for m in ids if key(m).startswith(family)]
        if version:
            options = [m for m in options if key(m)[len(family):].startswith(version)]
        for size in sizes:
            options = [m for m in options if re.search(rf"(?<![0-9.x]){re.escape(size)}", m.lower())]
        return options, used
    return [], []


def find_model(text: str) -> Match:
    """Find the catalog model a request names (see the module docstring)."""
    ws = words(text)
    found = _exact(ws, model_index(), plural=False)
    if found is not None:
        return found
    ids = sorted(model_catalog())
    options, used = _family_options(ws, MODEL_FAMILIES, ids)
    mention = text_of(used)
    if used and not options:
        family_word = key(used[0].text)
        family = next((f for f in MODEL_FAMILIES if family_word.startswith(f)), family_word[:4])
        same = [m for m in ids if key(m).startswith(family)]      # suggest only the same family: never Mixtral
        near = [model_index()[k] for k in _close(key(mention), list(model_index()), 3, 0.5)]
        near = [m for m in near if m in same]
        return Match("unknown", options=sorted(set(near) or set(same[:4])), mention=mention,
                     start=used[0].start, end=used[-1].end, hint=config_hint(family_word))
    if len(options) == 1:
        return Match("found", options[0], mention=mention, start=used[0].start, end=used[-1].end,
                     note=f"read '{mention}' as {options[0]} (the only catalog match)")
    if options:
        return Match("ambiguous", options=options, mention=mention, start=used[0].start, end=used[-1].end)
    guess = _model_like_word(ws)
    if guess is None:
        return Match("missing")
    near = _close(key(guess.text), list(model_index()), 3, 0.5)
    return Match("unknown", options=sorted({model_index()[k] for k in near}), mention=guess.text[:MAX_FUZZY_CHARS],
                 start=guess.start, end=guess.end, hint=config_hint(guess.text))


def _model_like_word(ws: list[Word]) -> Word | None:
    """A word that looks like a model name: letters and a size (``foo-13b``), or the word after 'tune'."""
    for w in ws:
        k = key(w.text)
        if re.search(r"[a-z]", k) and re.search(r"\d+(\.\d+)?b$", k) and not SIZE.match(k):
            return w
    for i, w in enumerate(ws[:-1]):
        if w.text.lower() in ("tune", "train", "model") and not re.fullmatch(r"\d+", ws[i + 1].text):
            nxt = ws[i + 1]
            if nxt.text.lower() not in ("for", "on", "with", "a", "the", "my"):
                return nxt
    return None


def find_gpu(text: str) -> Match:
    """Find the catalog GPU a request names; plurals ('H100s') and families ('a100') included."""
    ws = words(text)
    found = _exact(ws, gpu_index(), plural=True)
    if found is not None:
        return found
    ids = sorted({v for v in gpu_index().values()})
    for w in ws:
        k = key(w.text)
        k = k[:-1] if k.endswith("s") and len(k) > 3 else k
        family = next((f for f in GPU_FAMILIES if k.startswith(f)), None)
        if family is None:
            continue
        options = [g for g in ids if key(g).startswith(k)] or [g for g in ids if key(g).startswith(family)]
        if len(options) == 1:
            return Match("found", options[0], mention=w.text, start=w.start, end=w.end,
                         note=f"read '{w.text}' as {options[0]}")
        if options:
            return Match("ambiguous", options=options, mention=w.text, start=w.start, end=w.end)
        near = _close(k, list(gpu_index()), 3, 0.5)
        return Match("unknown", options=sorted({gpu_index()[n] for n in near}), mention=w.text[:MAX_FUZZY_CHARS],
                     start=w.start, end=w.end)
    counted = re.search(r"\b(?:on|for|with|across|using)\s+\d{1,9}(?:\.\d{1,6})?\s?[kK]?\s?(?:x\s?)?([A-Za-z][\w.-]*)",
                        text)
    if counted and counted.group(1).lower().rstrip("s") not in ("gpu", "node", "device", "card", "chip", "server",
                                                                  "tray", "accelerator"):
        w = counted.group(1)[:MAX_FUZZY_CHARS]
        return Match("unknown", options=suggest_gpu(w), mention=w, start=counted.start(1), end=counted.end(1))
    return Match("missing")


def suggest_gpu(name: str) -> list[str]:
    """Nearest GPU ids to an unknown name."""
    near = _close(key(name), list(gpu_index()), 3, 0.4)
    return sorted({gpu_index()[n] for n in near})


def resolve_model(name: str) -> str | None:
    """The catalog id of a model name or alias (exact key match), else None."""
    return model_index().get(key(name))


def resolve_gpu(name: str) -> str | None:
    """The catalog id of a GPU name or alias (exact key match, plural allowed), else None."""
    k = key(name)
    return gpu_index().get(k) or (gpu_index().get(k[:-1]) if k.endswith("s") else None)
