"""The BM25 sub-index: Lucene over analysed text (Anserini's default English
analyser), built while the corpus streams in, and its retriever."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple

from indexes import manifest as mf
from indexes.errors import InputError
from indexes.lucene import check_bm25  # noqa: F401 (also importable from here and retrieval.bm25)
from retrieval.kinds import BuildContext, Explained, RetrieverBase, SubIndexKind
from retrieval.types import Query, Scored


@dataclass
class BM25Spec:
    kind: ClassVar[str] = "bm25"
    k1: float = 0.9
    b: float = 0.4
    store_docvectors: bool = False

    def validate(self) -> "BM25Spec":
        check_bm25(self.k1, self.b)
        return self


class BM25Retriever(RetrieverBase):
    """Lucene BM25 over analysed text (Anserini's default English analyser)."""

    kind = "bm25"
    options = ("k1", "b", "prf")  # what Index.configure may set
    merge_rule = "anserini"  # shards' raw scores merged by (score, docid), then Anserini's rounding

    #: the feedback in use (retrieval.bm25.prf.Feedback), or None
    feedback = None

    def __init__(self, path: Path, entry: dict):
        from indexes.lucene import LuceneIndex

        cfg = entry.get("config", {})
        self.k1 = float(cfg.get("k1", 0.9))
        self.b = float(cfg.get("b", 0.4))
        self._index = LuceneIndex(path, k1=self.k1, b=self.b)

    def configure(self, k1: Optional[float] = None, b: Optional[float] = None, prf=None) -> None:
        """``k1``, ``b``: BM25's parameters for later searches (Lucene applies them at search time).
        ``prf``: pseudo-relevance feedback, RM3 or Rocchio (a spec such as ``"rm3"`` or
        ``"rocchio(gamma=0.15,use_negative=true)"``, a :class:`retrieval.bm25.prf.Feedback`, or
        ``"none"``/False to switch it off; :mod:`retrieval.bm25.prf`). None keeps a setting."""
        from retrieval.bm25 import prf as fb

        check_bm25(k1, b)
        setting = fb.parse(prf)
        if setting is not None:
            self._set_feedback(setting or None)
        if k1 is not None or b is not None:
            self._index.set_bm25(self.k1 if k1 is None else k1, self.b if b is None else b)
            self.k1, self.b = self._index.k1, self._index.b

    def _set_feedback(self, setting) -> None:
        from indexes.errors import ParameterError
        from indexes.lucene import MissingDocvectors

        try:
            if setting is None:
                self._index.set_feedback(None)
            else:
                self._index.set_feedback(setting.method, **setting.params())
        except MissingDocvectors:
            raise ParameterError("{prf} reads the feedback documents' term vectors, which this folder's BM25 "
                                 "sub-index does not store: rebuild the folder with {store_docvectors}") from None
        self.feedback = setting

    call_options = ("prf",)  # what one search may set for itself (Index.search's prf)

    def with_options(self, prf=None) -> "RetrieverBase":
        """This retriever with feedback ``prf`` (as :meth:`configure` takes it; ``"none"``: none)
        for the searches made through what it returns (:class:`retrieval.bm25.prf.PerSearch`), its
        own setting left as it is."""
        from indexes.errors import ParameterError
        from indexes.lucene import MissingDocvectors
        from retrieval.bm25 import prf as fb

        setting = fb.parse(prf)
        if setting is None:
            return self
        try:
            java = self._index.feedback(setting.method, **setting.params()) if setting else False
        except MissingDocvectors:
            raise ParameterError("{prf} reads the feedback documents' term vectors, which this folder's BM25 "
                                 "sub-index does not store: rebuild the folder with {store_docvectors}") from None
        return fb.PerSearch(self, self._index, java)

    def search(self, text: str, k: int) -> Scored:
        return self._index.search(text, k)

    def search_filtered(self, text: str, k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` in this retriever's ranking (Lucene FILTER clause)."""
        return self._index.search_filtered(text, k, allowed)

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        res = self._index.batch_search([q.text for q in queries], [q.qid for q in queries], k, threads)
        return {q.qid: res.get(q.qid, []) for q in queries}

    def confidence(self, texts: Sequence[str], lists: Sequence[Scored]) -> List[Optional[Tuple[str, float]]]:
        """Per query, ``("share", top score / the query's mass)``: the share of the query the best
        passage matched (0 with no hit or no known term; None where the mass is undefined)."""
        masses = self._index.query_masses(texts)
        out: List[Optional[Tuple[str, float]]] = []
        for m, hits in zip(masses, lists):
            if m != m:   # NaN
                out.append(None)
            else:
                out.append(("share", float(hits[0][1]) / m if hits and m > 0 else 0.0))
        return out

    def explain(self, text: str, docid: str, ranked: Scored) -> Explained:
        """Lucene's own explanation of each query term's BM25 score for ``docid`` (tf, df, idf,
        length normalisation, the term's share of the score), and Anserini's rounding."""
        from indexes.lucene import BM25_COLUMNS, explain_notes

        ex = self._index.explain(text, docid, dict(ranked).get(docid), k=max(1, len(ranked)))
        if ex is None:
            return Explained(None, notes=["not in this Lucene index (Anserini skips a passage without text)"])
        notes = explain_notes(ex)
        if self.feedback is not None:  # the terms are the expanded query's, weighted by the feedback model
            notes.append(f"query expanded by {self.feedback.spec()} (Anserini's reranker): qw is each term's "
                         "weight in the expanded query")
        return Explained(ex["score"], ex["parts"], columns=BM25_COLUMNS, notes=notes,
                         formula=f"BM25 (k1={self.k1:g}, b={self.b:g}): sum over the query's terms of "
                                 "qw x idf x tf-part, tf-part = tf / (tf + k1 x len-norm), "
                                 "len-norm = 1 - b + b x dl / avgdl",
                         details={**ex["statistics"], "k1": self.k1, "b": self.b, "raw": ex["raw"],
                                  "lucene": ex["lucene"], "unmatched": ex["unmatched"],
                                  "lucene_explanation": ex["text"],
                                  "prf": self.feedback.spec() if self.feedback is not None else None})

    def highlight(self, text: str, passages: Sequence[str]) -> List[List[Tuple[int, int]]]:
        """Per passage, the character spans of its tokens whose term (Anserini's default English
        analyser: lower case, stop words, Porter stemming) is one of the query's."""
        return self._index.highlights(text, passages)

    def collection_stats(self, texts: Sequence[str]) -> dict:
        """This index's document count, lengths and the query terms' frequencies (a sharded index sums them)."""
        from indexes.lucene_shard import collection_stats

        return collection_stats(self._index, texts)

    def with_stats(self, stats) -> "BM25Retriever":
        """The same retriever scoring with a sharded index's summed ``stats``, raw float scores. A
        sharded index runs feedback in its router (:mod:`retrieval.sharded.prf`) and never sets it on
        a shard, so a shard folder with feedback set on its own retriever is refused here: its
        expansion would read that shard's top documents alone."""
        from indexes.lucene_shard import ShardView

        if getattr(self, "feedback", None) is not None:  # expansion reads each shard's own top documents
            raise InputError("pseudo-relevance feedback set on one shard's retriever does not apply to a sharded "
                             "index (that shard would expand the query from its own top documents); give it to "
                             "the sharded index instead")
        view = copy.copy(self)
        view._index = ShardView(self._index, stats)
        return view

    # -- pseudo-relevance feedback on a sharded index (retrieval.sharded.prf) -----------------------
    def stores_vectors(self) -> bool:
        """Whether this sub-index stores the term vectors RM3 and Rocchio read (``--docvectors``)."""
        return bool(self._index.searcher.storesVectors())

    def term_vectors(self, docids: Sequence[str]) -> Dict[str, Tuple[List[str], List[int]]]:
        """The stored term vectors of those of ``docids`` live here (:func:`indexes.lucene_shard.term_vectors`)."""
        from indexes.lucene_shard import term_vectors

        return term_vectors(self._index, docids)

    def term_stats(self, terms: Sequence[str]) -> dict:
        """Live documents and each analysed term's (df, ttf) here (:func:`indexes.lucene_shard.term_stats`)."""
        from indexes.lucene_shard import term_stats

        return term_stats(self._index, terms)

    def expand(self, setting, k: int, items: Sequence[tuple], dfs: Dict[str, int], docs: int) -> list:
        """The queries Anserini's reranker of ``setting`` (a :class:`retrieval.bm25.prf.Feedback`)
        expands each item's text to from the whole sharded index's figures
        (:func:`indexes.lucene_shard.expand`); independent of this shard's own documents."""
        from indexes.lucene_shard import expand

        java = self._index.feedback(setting.method, **setting.params())
        return expand(self._index, java, items, k, dfs, docs)

    def expanded(self, queries: Dict[str, Tuple[str, object]]) -> "RetrieverBase":
        """This retriever (a :meth:`with_stats` view) searching, for each query, the expanded query
        ``queries[qid] = (text, Boosted)`` instead of its text (:class:`retrieval.bm25.prf.Expanded`)."""
        from retrieval.bm25.prf import Expanded

        return Expanded(self, self._index, queries)

    def close(self) -> None:
        self._index.close()


class BM25Kind(SubIndexKind):
    name = "bm25"
    streams = True  # indexed while the corpus is first read

    def default_spec(self) -> BM25Spec:
        return BM25Spec()

    def build(self, folder: Path, name: str, ctx: BuildContext, spec: BM25Spec) -> dict:
        from indexes.lucene import build_lucene

        t0 = time.perf_counter()
        Path(folder).mkdir(parents=True, exist_ok=True)
        info = build_lucene(ctx.docs(), folder, threads=ctx.threads, store_docvectors=spec.store_docvectors,
                            quiet=ctx.quiet, meanwhile=ctx.meanwhile)
        return {
            "kind": "bm25", "path": name, "built_at": mf.now(), "doc_count": int(info["doc_count"]),
            "config": {"k1": spec.k1, "b": spec.b, "analyzer": "anserini-default-english",
                       "store_docvectors": spec.store_docvectors},
            "model": None, "build_seconds": round(time.perf_counter() - t0, 3),
        }

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        from indexes.lucene import build_lucene

        build_lucene(((d.docid, d.contents) for d in docs), folder, threads=ctx.threads, quiet=True, append=True,
                     store_docvectors=bool(entry.get("config", {}).get("store_docvectors")))
        return entry

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        from indexes.lucene import change_index

        change_index(folder, delete=docids)
        return entry

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        from indexes.lucene import change_index

        change_index(folder, expunge=True)
        return entry

    def retriever(self, folder: Path, entry: dict) -> BM25Retriever:
        return BM25Retriever(folder, entry)

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        from indexes.lucene import doc_count

        return {"lucene": doc_count(folder)}

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        from indexes.lucene import live_ids

        return {"lucene": live_ids(folder)}

    def present(self, folder: Path, entry: dict, docids: Sequence[str]) -> Dict[str, set]:
        from indexes.lucene import present_ids

        return {"lucene": set(present_ids(folder, docids))}


KIND = BM25Kind()
