"""Pseudo-relevance feedback for BM25: RM3 and Rocchio, with Pyserini's parameter names and
defaults (``LuceneSearcher.set_rm3`` / ``set_rocchio``), run by Anserini's own rerankers
(``Rm3Reranker``, ``RocchioReranker``) through retr's Java helper (``retr.lucene.Feedback``).

A setting is a :class:`Feedback`, or a spec as ``Index.configure("bm25", prf=...)`` takes it:
``"rm3"``, ``"rm3(fb_terms=20,fb_docs=10,original_query_weight=0.5)"``, ``"rocchio"``,
``"rocchio(alpha=1,beta=0.75,gamma=0.15,use_negative=true)"``, a dict ``{"method": "rm3", ...}``,
or ``"none"`` / ``False`` to switch feedback off."""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, Union

from indexes.errors import ParameterError
from retrieval.kinds import RetrieverBase

#: the parameters each method takes (Pyserini's names), with their defaults
RM3 = {"fb_terms": 10, "fb_docs": 10, "original_query_weight": 0.5, "filter_terms": True}
ROCCHIO = {"fb_terms": 10, "fb_docs": 10, "bottom_fb_terms": 10, "bottom_fb_docs": 10, "alpha": 1.0,
           "beta": 0.75, "gamma": 0.0, "use_negative": False}
METHODS = {"rm3": RM3, "rocchio": ROCCHIO}
#: Pyserini's set_rocchio calls the top documents' parameters top_fb_terms / top_fb_docs
ALIASES = {"top_fb_terms": "fb_terms", "top_fb_docs": "fb_docs"}
OFF = ("none", "off", "false")
FLOAT32_MAX = 3.4028234663852886e38  # the rerankers take their weights as Java floats

_SPEC = re.compile(r"^\s*([a-z0-9]+)\s*(?:\((.*)\))?\s*$", re.I)


@dataclass(frozen=True)
class Feedback:
    """RM3 (``fb_terms`` expansion terms from the top ``fb_docs`` documents, the original query
    weighted ``original_query_weight``; ``filter_terms``: only terms of 2 to 20 ASCII letters or
    digits) or Rocchio (``alpha`` x query + ``beta`` x mean of the top ``fb_docs`` documents' vectors
    cut to ``fb_terms`` terms, minus ``gamma`` x the bottom ``bottom_fb_docs`` ones' with
    ``use_negative``). Defaults are Pyserini's."""

    method: str
    fb_terms: int = 10
    fb_docs: int = 10
    original_query_weight: float = 0.5
    filter_terms: bool = True
    bottom_fb_terms: int = 10
    bottom_fb_docs: int = 10
    alpha: float = 1.0
    beta: float = 0.75
    gamma: float = 0.0
    use_negative: bool = False

    def params(self) -> Dict[str, Any]:
        """The method's own parameters (the others are not used by it)."""
        d = asdict(self)
        return {k: d[k] for k in METHODS[self.method]}

    def spec(self) -> str:
        """The spec that parses back to this setting, listing what differs from the defaults."""
        changed = {k: v for k, v in self.params().items() if v != METHODS[self.method][k]}
        inner = ",".join(f"{k}={_text(v)}" for k, v in changed.items())
        return f"{self.method}({inner})" if inner else self.method

    def validate(self) -> "Feedback":
        if self.method not in METHODS:
            raise ParameterError("{prf}: unknown method {got!r} (rm3 or rocchio)", got=self.method)
        for k, v in self.params().items():
            default = METHODS[self.method][k]
            if isinstance(default, bool):
                ok = isinstance(v, bool)
            elif isinstance(default, int):
                ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 2 ** 31 - 1
            else:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
                    and 0 <= v <= (1 if k == "original_query_weight" else FLOAT32_MAX)
            if not ok:
                want = ("true or false" if isinstance(default, bool) else "a whole number >= 1"
                        if isinstance(default, int) else "a number in [0, 1]" if k == "original_query_weight"
                        else "a finite number >= 0 (a 32-bit float)")
                raise ParameterError("{prf}: {_k} must be {_want}, got {got!r}", _k=k, _want=want, got=v)
        return self


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def _value(key: str, raw: str, default: Any) -> Any:
    raw = raw.strip()
    try:
        if isinstance(default, bool):
            low = raw.lower()
            if low not in ("true", "false", "1", "0"):
                raise ValueError
            return low in ("true", "1")
        if isinstance(default, int):
            return int(raw)
        return float(raw)
    except ValueError:
        raise ParameterError("{prf}: {_k}={got!r} is not {_want}", _k=key, got=raw,
                             _want="true or false" if isinstance(default, bool)
                             else "a whole number" if isinstance(default, int) else "a number") from None


def _given(method: str, items: Dict[str, Any], parse: bool) -> Dict[str, Any]:
    allowed = METHODS[method]
    out: Dict[str, Any] = {}
    for key, raw in items.items():
        name = ALIASES.get(key, key) if method == "rocchio" else key
        if name not in allowed:
            raise ParameterError("{prf}: {_m} does not take {got!r} (it takes {_takes})", _m=method, got=key,
                                 _takes=", ".join(allowed))
        out[name] = _value(key, raw, allowed[name]) if parse else raw
    return out


def parse(value: Union[None, bool, str, dict, Feedback]) -> Union[None, bool, Feedback]:
    """A setting from what ``prf`` may be: None (keep the current one), False (off), or a
    :class:`Feedback` (checked)."""
    if value is None or isinstance(value, Feedback):
        return value.validate() if isinstance(value, Feedback) else None
    if value is False or (isinstance(value, str) and value.strip().lower() in OFF):
        return False
    if isinstance(value, dict):
        method = str(value.get("method", "")).lower()
        if method not in METHODS:
            raise ParameterError("{prf}: a dict names its method: {{'method': 'rm3' or 'rocchio', ...}}")
        return Feedback(method, **_given(method, {k: v for k, v in value.items() if k != "method"},
                                         parse=False)).validate()
    if not isinstance(value, str):
        raise ParameterError("{prf}: expected rm3, rocchio, a spec such as rm3(fb_terms=20), or none; "
                             "got {got!r}", got=value)
    m = _SPEC.match(value)
    if not m or m.group(1).lower() not in METHODS:
        raise ParameterError("{prf}: expected rm3, rocchio, a spec such as rm3(fb_terms=20), or none; "
                             "got {got!r}", got=value)
    method, inner = m.group(1).lower(), (m.group(2) or "").strip()
    items: Dict[str, str] = {}
    for part in filter(None, (p.strip() for p in inner.split(","))) if inner else ():
        key, eq, raw = part.partition("=")
        if not eq or not key.strip():
            raise ParameterError("{prf}: {got!r} is not name=value", got=part)
        items[key.strip()] = raw
    return Feedback(method, **_given(method, items, parse=True)).validate()


class PerSearch(RetrieverBase):
    """A BM25 retriever searching with the feedback of one request (a Java ``retr.lucene.Feedback``,
    or False for none), whatever :meth:`configure` set on it: Index.search's ``prf``. The same
    Anserini rerankers as a configured setting, through the same Lucene searcher, so its hits equal
    those of the retriever configured so."""

    def __init__(self, base, lucene, feedback):
        self.base, self._lucene, self._feedback = base, lucene, feedback
        self.kind, self.merge_rule = base.kind, base.merge_rule

    def search(self, text: str, k: int):
        return self._lucene.search(text, k, feedback=self._feedback)

    def search_filtered(self, text: str, k: int, allowed):
        return self._lucene.search_filtered(text, k, allowed, feedback=self._feedback)

    def batch_search(self, queries, k: int, threads: int = 1):
        res = self._lucene.batch_search([q.text for q in queries], [q.qid for q in queries], k, threads,
                                        feedback=self._feedback)
        return {q.qid: res.get(q.qid, []) for q in queries}

    def confidence(self, texts, lists):
        return self.base.confidence(texts, lists)

    def highlight(self, text: str, passages):
        return self.base.highlight(text, passages)


class Expanded(RetrieverBase):
    """A shard's BM25 retriever (a ``with_stats`` view: global statistics, raw scores) searching, for
    each query, the query RM3 or Rocchio expanded it to on the whole sharded index
    (:mod:`retrieval.sharded.prf`): ``queries`` is ``{qid: (text, indexes.lucene_shard.Boosted)}``.
    Filtered searches find the expanded query by the text (a text expands to one query in a round)."""

    def __init__(self, base, view, queries):
        self.base, self._view = base, view
        self._by_qid = {q: b for q, (_t, b) in queries.items()}
        self._by_text = {t: b for _q, (t, b) in queries.items()}
        self.kind, self.merge_rule = base.kind, base.merge_rule

    def search(self, text: str, k: int):
        return self._view.search(self._by_text[text], k)

    def search_filtered(self, text: str, k: int, allowed):
        return self._view.search_filtered(self._by_text[text], k, allowed)

    def batch_search(self, queries, k: int, threads: int = 1):
        res = self._view.batch_search([self._by_qid[q.qid] for q in queries], [q.qid for q in queries], k, threads)
        return {q.qid: res.get(q.qid, []) for q in queries}

    def confidence(self, texts, lists):
        return self.base.confidence(texts, lists)
