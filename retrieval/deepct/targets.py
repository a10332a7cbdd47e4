"""DeepCT training targets: query term recall (Dai & Callan 2019) and HDCT-style
title weak supervision, over one shared notion of a *term*.

A term is what the DeepCT sub-index stores and what queries are matched with:

1. text is split into words the way BERT's basic tokenizer does (whitespace and
   punctuation, lower-cased, accents stripped), via ``tokenizers``' BertPreTokenizer;
2. each word goes through Anserini's default English analyzer (Lucene's
   StandardTokenizer, Porter stemming, Lucene's English stopwords) — the analyzer the
   BM25 sub-index uses — so stems and stopwords agree with BM25; stopwords yield no term.

Splitting into BERT words first keeps terms aligned with the model's word-pieces
(a word's weight is its first piece's weight), and the same function analyses
queries at search time, so targets, index and queries all share one vocabulary.
"""
from __future__ import annotations

import random
import unicodedata
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from retrieval.types import Document, Query

Word = Tuple[str, int, int]  # (lower-cased word, char start, char end)


class QrelsWarning(UserWarning):
    """Qrels that point to documents or queries we do not have."""


def _strip_accents(s: str) -> str:
    if s.isascii():
        return s
    return "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")


class TermAnalyzer:
    """Text -> BERT-style words -> Lucene English stems (cached per word)."""

    def __init__(self) -> None:
        from tokenizers.pre_tokenizers import BertPreTokenizer

        self._pre = BertPreTokenizer()
        self._cache: Dict[str, Tuple[str, ...]] = {}
        self._lucene = None

    def words(self, text: str) -> List[Word]:
        """Words with their character spans in ``text``."""
        return [(_strip_accents(w.lower()), s, e) for w, (s, e) in self._pre.pre_tokenize_str(text)]

    def stems(self, word: str) -> Tuple[str, ...]:
        """Stems of one lower-cased word ('' for stopwords/punctuation gives ())."""
        got = self._cache.get(word)
        if got is None:
            if not any(c.isalnum() for c in word):
                got = ()
            else:
                if self._lucene is None:
                    from indexes import jvm

                    utils = jvm.autoclass("io.anserini.analysis.AnalyzerUtils")
                    analyzer = jvm.autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
                    self._lucene = (utils, analyzer)
                utils, analyzer = self._lucene
                got = tuple(str(t) for t in utils.analyze(analyzer, word))
            self._cache[word] = got
        return got

    def terms(self, text: str) -> List[str]:
        """All terms of a text in order (repeats kept)."""
        return [t for w, _s, _e in self.words(text) for t in self.stems(w)]

    def term_set(self, text: str) -> Set[str]:
        return set(self.terms(text))


_ANALYZER: Optional[TermAnalyzer] = None


def analyzer() -> TermAnalyzer:
    """The process-wide analyzer (its word cache is shared)."""
    global _ANALYZER
    if _ANALYZER is None:
        _ANALYZER = TermAnalyzer()
    return _ANALYZER


@dataclass
class Targets:
    """Per-document term targets in [0, 1] plus what went into them."""

    by_doc: Dict[str, Dict[str, float]] = field(default_factory=dict)
    source: Dict[str, str] = field(default_factory=dict)  # docid -> "qrels" | "title"
    stats: Dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.by_doc)


def read_qrels_pairs(path: Path | str) -> Dict[str, Dict[str, int]]:
    """qid -> {docid: grade} from a TREC or BEIR qrels file (header line allowed)."""
    from retrieval.datasets.qrels import read_qrels

    return read_qrels(path)


def query_term_recall(docs: Dict[str, str], queries: Dict[str, str], qrels: Dict[str, Dict[str, int]],
                      min_rel: int = 1, term_analyzer: Optional[TermAnalyzer] = None,
                      exclude_queries: Iterable[str] = ()) -> Targets:
    """Query term recall: for passage p with relevant queries Q_p, target(t) =
    |{q in Q_p : t in q}| / |Q_p| for each term t of p (0 for p's other terms).

    ``docs`` maps docid -> text as the model will see it; a qrel counts as
    relevant when its grade >= ``min_rel``. Qrels that name unknown documents
    or queries are skipped, counted in ``stats`` and reported by one warning.
    """
    an = term_analyzer or analyzer()
    excluded = set(exclude_queries)
    rel_queries: Dict[str, List[str]] = defaultdict(list)
    unknown_docs: Set[str] = set()
    unknown_queries: Set[str] = set()
    skipped_pairs = 0
    for qid, judged in qrels.items():
        if qid in excluded:
            continue
        for docid, grade in judged.items():
            if grade < min_rel:
                continue
            if qid not in queries:
                unknown_queries.add(qid)
                skipped_pairs += 1
            elif docid not in docs:
                unknown_docs.add(docid)
                skipped_pairs += 1
            else:
                rel_queries[docid].append(qid)
    qterms: Dict[str, Set[str]] = {}
    out = Targets()
    for docid, qids in rel_queries.items():
        doc_terms = an.term_set(docs[docid])
        counts = dict.fromkeys(doc_terms, 0)
        for qid in qids:
            if qid not in qterms:
                qterms[qid] = an.term_set(queries[qid])
            for t in qterms[qid] & doc_terms:
                counts[t] += 1
        out.by_doc[docid] = {t: c / len(qids) for t, c in counts.items()}
        out.source[docid] = "qrels"
    out.stats = {"documents": len(out.by_doc), "relevant_pairs": sum(map(len, rel_queries.values())),
                 "queries": len({q for qs in rel_queries.values() for q in qs}), "min_rel": min_rel,
                 "skipped_pairs": skipped_pairs, "unknown_documents": len(unknown_docs),
                 "unknown_queries": len(unknown_queries), "excluded_queries": len(excluded)}
    if skipped_pairs:
        warnings.warn(f"{skipped_pairs} relevant qrels skipped: {len(unknown_docs)} unknown documents "
                      f"(e.g. {sorted(unknown_docs)[:3]}), {len(unknown_queries)} unknown queries "
                      f"(e.g. {sorted(unknown_queries)[:3]})", QrelsWarning, stacklevel=2)
    return out


def title_targets(docs: Iterable[Document], term_analyzer: Optional[TermAnalyzer] = None,
                  limit: Optional[int] = None, seed: int = 0) -> Tuple[Targets, Dict[str, str]]:
    """HDCT-style weak supervision: the title is the passage's one pseudo-query,
    so a body term's target is 1 if it occurs in the title, else 0.

    Returns the targets and the *body* texts (title removed, and a leading copy
    of the title stripped from the body too) that the model should be trained on;
    documents without a title or whose body is empty are skipped.
    """
    an = term_analyzer or analyzer()
    pool = [d for d in docs if d.title.strip()]
    if limit is not None and len(pool) > limit:
        pool = random.Random(seed).sample(pool, limit)
    out, bodies = Targets(), {}
    for d in pool:
        title, body = d.title.strip(), d.text.strip()
        if body.lower().startswith(title.lower()):
            body = body[len(title):].strip()  # e.g. Cranfield repeats the title at the start of the text
        if not body:
            continue
        tq = an.term_set(title)
        out.by_doc[d.docid] = {t: (1.0 if t in tq else 0.0) for t in an.term_set(body)}
        out.source[d.docid] = "title"
        bodies[d.docid] = body
    out.stats = {"documents": len(out.by_doc), "with_title": len(pool)}
    return out, bodies


def split_queries(qids: Sequence[str], dev_fraction: float, seed: int) -> Tuple[List[str], List[str]]:
    """Deterministic (train, dev) split of query ids."""
    ids = sorted(set(qids))
    random.Random(seed).shuffle(ids)
    n_dev = int(round(len(ids) * dev_fraction))
    return sorted(ids[n_dev:]), sorted(ids[:n_dev])
