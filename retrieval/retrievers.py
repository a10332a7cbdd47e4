"""Retrievers: one per sub-index kind, each answering text queries with
``(docid, score)`` lists. They are opened lazily by :class:`retrieval.index.Index`."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from retrieval.types import Query

Scored = List[Tuple[str, float]]


class BM25Retriever:
    """Lucene BM25 over analysed text (Anserini's default English analyser)."""

    kind = "bm25"

    def __init__(self, path: Path, entry: dict):
        from indexes.lucene import LuceneIndex

        cfg = entry.get("config", {})
        self.k1 = float(cfg.get("k1", 0.9))
        self.b = float(cfg.get("b", 0.4))
        self._index = LuceneIndex(path, k1=self.k1, b=self.b)

    def configure(self, k1: Optional[float] = None, b: Optional[float] = None) -> None:
        if k1 is not None or b is not None:
            self._index.set_bm25(self.k1 if k1 is None else k1, self.b if b is None else b)
            self.k1, self.b = self._index.k1, self._index.b

    def search(self, text: str, k: int) -> Scored:
        return self._index.search(text, k)

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        res = self._index.batch_search([q.text for q in queries], [q.qid for q in queries], k, threads)
        return {q.qid: res.get(q.qid, []) for q in queries}


RETRIEVERS = {"bm25": BM25Retriever}


class DenseRetriever:
    """faiss search over vectors from the dense encoder recorded in the manifest.
    The encoder (torch + transformers) loads on the first query."""

    kind = "dense"

    def __init__(self, path: Path, entry: dict):
        from indexes.faiss_index import FaissIndex

        self.path = Path(path)
        self.entry = entry
        self._index = FaissIndex.open(self.path)
        self._encoder = None

    @property
    def encoder(self):
        if self._encoder is None:
            from retrieval.encoders.dense import DenseEncoder

            self._encoder = DenseEncoder.from_config(self.entry["encoder"], quiet=True)
        return self._encoder

    def encode_queries(self, texts: Sequence[str]):
        return self.encoder.encode(list(texts), quiet=True).astype("float32", copy=False)

    def search_vectors(self, vectors, k: int) -> List[Scored]:
        scores, names = self._index.search(vectors, k)
        return [list(zip(n, map(float, s))) for n, s in zip(names, scores)]

    def search(self, text: str, k: int) -> Scored:
        return self.search_vectors(self.encode_queries([text]), k)[0]

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        res = self.search_vectors(self.encode_queries([q.text for q in queries]), k)
        return {q.qid: r for q, r in zip(queries, res)}


RETRIEVERS["dense"] = DenseRetriever

from retrieval import deepct_index as _deepct_index  # noqa: E402,F401  (registers RETRIEVERS["deepct"])
