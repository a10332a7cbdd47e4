"""Lucene indexes of term vectors: each document a ``{term: integer weight}`` map,
written as Anserini's JsonVectorCollection and indexed pre-tokenised.

Any learned sparse representation (DeepCT's term weights, SPLADE's expansions) is
stored the same way, whatever model made the weights:

- **impact** (``-impact -pretokenized``): a term's weight is its score contribution,
  and a query scores a document by the sum over shared terms of query weight x
  document weight (Anserini's ``SimpleImpactSearcher``);
- **pseudo term frequencies** (``-pretokenized`` alone): a weight becomes the term's
  frequency in the document, ranked with BM25 over whitespace-split query text
  (Anserini's ``SimpleSearcher``), where a query term's weight is its repeat count.

This module holds the Lucene side only: float weights turned into integers
(:func:`quantize`), vectors kept on disk to index them more than once
(:class:`VectorSpool`), indexing (:func:`index_vectors`), the query of a weighted
term map (:func:`weighted_query`), searching (:class:`VectorSearcher`), and the
counts and ids that ``retr check`` and the writer ask of a set of such indexes
kept side by side in one folder (:func:`counts`, :func:`live`, :func:`present`,
:func:`delete`, :func:`expunge`, :func:`sizes`). What the weights mean, and which
model computes them, is the caller's.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from indexes import lucene
from indexes.manifest import folder_size

Vector = Dict[str, int]
Scored = List[Tuple[str, float]]


def quantize(weights: Dict[str, float], factor: float = 100.0,
             transform: Optional[Callable[[float], float]] = None) -> Vector:
    """Integer impacts: ``round(transform(w) * factor)`` for each positive weight (``transform``
    None: ``w`` itself); terms whose impact is under 1 (weights at or below 0 included) are
    dropped, as Anserini would skip them."""
    out = {}
    for t, w in weights.items():
        v = round((transform(w) if transform is not None else w) * factor) if w > 0 else 0
        if v >= 1:
            out[t] = int(v)
    return out


class VectorSpool:
    """``(docid, vector)`` rows kept in a file while a stream of documents goes by, to be
    indexed afterwards, once or several times (:meth:`rows`); memory stays flat whatever
    the corpus size. The file is removed by :meth:`remove` (or leaving a ``with`` block)."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        self._fh = open(self.path, "w", encoding="utf-8")

    def add(self, docid: str, vector: Vector) -> None:
        self._fh.write(json.dumps([docid, vector]) + "\n")

    def close(self) -> None:
        """Done writing (the rows can be read from now on)."""
        self._fh.close()

    def rows(self) -> Iterator[Tuple[str, Vector]]:
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                d, vec = json.loads(line)
                yield d, vec

    def remove(self) -> None:
        self._fh.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> "VectorSpool":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def index_vectors(vectors: Iterable[Tuple[str, Vector]], index_dir: Union[str, Path], impact: bool = True,
                  threads: int = 2, append: bool = False) -> float:
    """Index ``(docid, {term: int})`` pairs (a JsonVectorCollection, pre-tokenised) into
    ``index_dir``: with ``impact`` an impact index, else a BM25 index whose term frequencies
    are the weights (whitespace-analysed). ``append`` adds them to the index already there.
    A vector without a term of weight 1 or more leaves its document out of Lucene (Anserini
    skips it as empty). Returns the indexing seconds."""
    return float(lucene.build_lucene(vectors, Path(index_dir), threads=threads, impact=impact, pretokenized=True,
                                     append=append)["seconds"])


def weighted_query(weights: Vector, impact: bool = True):
    """What :class:`indexes.lucene.LuceneIndex` takes for a weighted bag of terms: for an
    impact index the map itself; for pseudo term frequencies under BM25 the text that repeats
    each term ``weight`` times (Anserini's bag-of-words query boosts a term by its count)."""
    if impact:
        return weights
    return " ".join(t for t, w in weights.items() for _ in range(int(w)))


class VectorSearcher:
    """One index of term vectors, searched with weighted queries (:func:`weighted_query`):
    an impact index, or BM25 over pseudo term frequencies (whitespace analyser, ``k1``/``b``),
    ranked as Anserini's SimpleImpactSearcher / SimpleSearcher rank (see
    :class:`indexes.lucene.LuceneIndex`). Queries with no terms get no hits."""

    def __init__(self, path: Union[str, Path], impact: bool = True, k1: float = 0.9, b: float = 0.4):
        self.impact = impact
        self._index = lucene.LuceneIndex(path, impact=impact, k1=k1, b=b, analyzer=None if impact else "whitespace")
        self._lock = threading.Lock()

    def set_bm25(self, k1: float, b: float) -> None:
        """BM25's parameters for later searches (nothing to set for an impact index)."""
        if not self.impact:
            self._index.set_bm25(float(k1), float(b))

    def batch(self, weights: Sequence[Vector], qids: Sequence[str], k: int, threads: int = 1) -> Dict[str, Scored]:
        """Each query's top ``k`` (``weights[i]`` is query ``qids[i]``)."""
        todo = [(q, w) for q, w in zip(qids, weights) if w]
        out: Dict[str, Scored] = {q: [] for q in qids}
        if not todo:
            return out
        with self._lock:
            res = self._index.batch_search([weighted_query(w, self.impact) for _, w in todo],
                                           [str(q) for q, _ in todo], k, threads)
        out.update(res)
        return out

    def search_filtered(self, weights: Vector, k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` (a ``retrieval.filters.Allowed``) in this
        index's ranking."""
        if not weights:
            return []
        with self._lock:
            return self._index.search_filtered(weighted_query(weights, self.impact), k, allowed)

    def explain(self, weights: Vector, docid: str, returned: Optional[float] = None) -> Optional[dict]:
        """How the document ``docid`` scores for the weighted query ``weights`` (see
        :meth:`indexes.lucene.LuceneIndex.explain`: per matched term, the query weight times the
        stored impact, or BM25's figures over pseudo term frequencies); None where it is not here."""
        with self._lock:
            return self._index.explain(weighted_query(weights, self.impact), docid, returned)

    def collection_stats(self, weights: Sequence[Vector]) -> Optional[dict]:
        """The statistics BM25 over pseudo term frequencies reads for these queries (a sharded index
        sums them over its shards: :mod:`indexes.lucene_shard`); None for an impact index."""
        from indexes.lucene_shard import collection_stats

        return collection_stats(self._index, [weighted_query(w, self.impact) for w in weights if w])

    def with_stats(self, stats: Optional[dict]) -> "VectorSearcher":
        """This searcher scoring with a sharded index's summed ``stats``, raw float scores."""
        import copy

        from indexes.lucene_shard import ShardView

        view = copy.copy(self)
        view._index = ShardView(self._index, stats)
        return view

    def close(self) -> None:
        self._index.close()


# ------------------------------------------------------------------ several indexes in one folder
def counts(folder: Union[str, Path], names: Sequence[str]) -> Dict[str, int]:
    """Live documents of each index ``folder/<name>``."""
    return {n: lucene.doc_count(Path(folder) / n) for n in names}


def live(folder: Union[str, Path], names: Sequence[str]) -> Dict[str, List[str]]:
    """The ids of every live document of each index ``folder/<name>``."""
    return {n: lucene.live_ids(Path(folder) / n) for n in names}


def present(folder: Union[str, Path], names: Sequence[str], docids: Sequence[str]) -> Dict[str, set]:
    """Those of ``docids`` that each index ``folder/<name>`` holds (not deleted)."""
    return {n: set(lucene.present_ids(Path(folder) / n, docids)) for n in names}


def sizes(folder: Union[str, Path], names: Sequence[str]) -> Dict[str, int]:
    """Bytes on disk of each index ``folder/<name>``."""
    return {n: folder_size(Path(folder) / n) for n in names}


def delete(folder: Union[str, Path], names: Sequence[str], docids: Sequence[str]) -> Dict[str, int]:
    """Delete ``docids`` from every index ``folder/<name>`` (Lucene's IndexWriter: new files
    only, see :func:`indexes.lucene.change_index`); returns their :func:`sizes`."""
    for n in names:
        lucene.change_index(Path(folder) / n, delete=docids)
    return sizes(folder, names)


def expunge(folder: Union[str, Path], names: Sequence[str]) -> Dict[str, int]:
    """Rewrite the segments of every index ``folder/<name>`` that hold deleted documents, so that
    none is left; returns their :func:`sizes`."""
    for n in names:
        lucene.change_index(Path(folder) / n, expunge=True)
    return sizes(folder, names)
