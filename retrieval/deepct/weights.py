"""DeepCT's stored term weights and the Lucene variants made from them.

    INDEX/deepct/weights.jsonl.gz     raw term weights per passage (to derive variants without re-encoding);
                                      passages added later: weights-g<N>.jsonl.gz, one file per generation,
                                      merged into weights.jsonl.gz by compaction
    INDEX/deepct/impact-linear/       JsonVectorCollection -impact -pretokenized, tf = round(w*100)
    INDEX/deepct/impact-sqrt/         the same with round(sqrt(w)*100)
    INDEX/deepct/bm25-linear/         JsonVectorCollection -pretokenized (no -impact): the weights become
    INDEX/deepct/bm25-sqrt/           pseudo term frequencies under BM25 (k1/b tuned)

A variant is a mode (``impact`` | ``bm25``) and a scale (``linear`` | ``sqrt``): each
scale turns a passage's weights into integer impacts
(:func:`retrieval.deepct.model.to_impacts`), and each scale's impacts are indexed
in both modes. The Lucene side (indexing, searching, counts) is
:mod:`indexes.impact`, which knows nothing of DeepCT.
"""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from indexes import impact
from indexes.atomic import atomic_path
from indexes.errors import RetrError

MODES = ("impact", "bm25")
SCALES = ("linear", "sqrt")
DEFAULT_MODE = "bm25"            # fallback without held-out queries: BM25 over pseudo-tf beat impacts on
                                 # SciFact (both bodies) and NFCorpus (benchmarks/results/deepct.md)
DEFAULT_K1, DEFAULT_B = 20.0, 0.9  # BM25 over pseudo-tf when no dev queries are at hand to tune on
WEIGHTS_FILE = "weights.jsonl.gz"
_ADDED = re.compile(r"^weights-g(\d+)\.jsonl\.gz$")


def variant_name(mode: str, scale: str) -> str:
    return f"{mode}-{scale}"


def variants_of(entry: dict) -> List[str]:
    """The variant folders a manifest entry lists."""
    return list(entry.get("config", {}).get("variants", []))


def open_variant(folder: Path, mode: str, scale: str, k1: float = DEFAULT_K1, b: float = DEFAULT_B
                 ) -> impact.VectorSearcher:
    """The searcher of one variant of the DeepCT folder ``folder`` (``k1``/``b``: BM25's, in bm25 mode)."""
    v = variant_name(mode, scale)
    if not (Path(folder) / v).exists():
        raise RetrError(f"{folder}: DeepCT variant {v!r} is missing")
    return impact.VectorSearcher(Path(folder) / v, impact=(mode == "impact"), k1=k1, b=b)


def plain_query_terms(texts: Sequence[str]) -> List[Dict[str, int]]:
    """Query term weights without the model: each term's count, the terms taken as the
    passages' are (:func:`retrieval.deepct.targets.analyzer`)."""
    from retrieval.deepct.targets import analyzer

    an = analyzer()
    return [dict(Counter(an.terms(t))) for t in texts]


# ----------------------------------------------------------------------------------- encoding
def term_weights(enc, docs, total: Optional[int], runner, quiet: bool, desc: str = "DeepCT encoding"):
    """``(BlockRun, stream of (docid, term weights))``: the model runs where ``runner`` says,
    the words are stemmed here (the analyzer needs the JVM, which stays in this process)."""
    from retrieval.deepct.model import terms_of_words

    run = runner.map(enc.stage(), docs, total=total, desc=desc, quiet=quiet, threads=None)

    def stream():
        for ids, words in run:
            yield from zip(ids, terms_of_words(words, enc.prep.an))

    return run, stream()


# ----------------------------------------------------------------------------------- storing
def write_variants(folder: Path, pairs: Iterable[Tuple[str, Dict[str, float]]], threads: int,
                   append: bool = False, generation: int = 0
                   ) -> Tuple[List[str], Dict[str, int], Dict[str, float], int]:
    """Store the raw weights of ``(docid, weights)`` pairs and write (or, with ``append``, extend)
    every Lucene variant; returns (docids, bytes per variant, indexing seconds per variant,
    documents without terms). ``pairs`` is a stream: weights and each scale's impacts are
    written to disk as they come, so memory stays flat whatever the corpus size. Added
    weights go to a file of their own, ``weights-g<N>.jsonl.gz``: the folder is a hard-link
    copy of the previous generation's, whose files must not change."""
    from retrieval.deepct.model import to_impacts

    ids: List[str] = []
    empty = 0
    spools = {scale: impact.VectorSpool(folder / f".impacts-{scale}.jsonl") for scale in SCALES}
    try:
        def rows():
            nonlocal empty
            for d, w in pairs:
                ids.append(d)
                for scale, spool in spools.items():
                    imp = to_impacts(w, scale)
                    if scale == "linear" and not imp:
                        empty += 1
                    spool.add(d, imp)
                yield d, w

        write_weights(folder / (f"weights-g{int(generation)}.jsonl.gz" if append else WEIGHTS_FILE), rows())
        for spool in spools.values():
            spool.close()
        index_s = {}
        for scale in SCALES:
            for mode in MODES:
                v = variant_name(mode, scale)
                # an empty vector would make Anserini skip the document; keep it findable by id only
                index_s[v] = round(impact.index_vectors(spools[scale].rows(), folder / v, impact=(mode == "impact"),
                                                        threads=threads, append=append), 2)
    finally:
        for spool in spools.values():
            spool.remove()
    return ids, impact.sizes(folder, list(index_s)), index_s, empty


def write_weights(path: Path, rows) -> None:
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        for d, w in rows:
            f.write(json.dumps({"id": d, "w": {t: round(v, 5) for t, v in w.items()}}) + "\n")


def weight_files(folder: Path) -> List[Path]:
    """The folder's weight files in the order they were written: the build's, then each addition's."""
    extra = sorted((int(m.group(1)), p) for p in Path(folder).iterdir() if (m := _ADDED.match(p.name)))
    base = Path(folder) / WEIGHTS_FILE
    return ([base] if base.exists() else []) + [p for _g, p in extra]


def read_weights(folder: Path):
    """``(docid, {term: weight})`` of every passage the folder's weight files hold, in the order
    they were written (the build's, then each addition's); a later row of a docid replaces an
    earlier one (an update), and deleted documents are still there until compaction."""
    for p in weight_files(folder):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                yield o["id"], o["w"]


def compact_weights(folder: Path, order: Sequence[str]) -> int:
    """Replace the folder's weight files by one holding the latest weights of the documents in
    ``order`` (the live ones, in the document store's order, as a fresh build writes them);
    returns how many of them have no term."""
    from retrieval.deepct.model import to_impacts

    latest = dict(read_weights(folder))
    missing = [d for d in order if d not in latest]
    if missing:
        raise RetrError(f"{folder}: no stored DeepCT weights for {len(missing)} document(s) "
                        f"(first: {missing[0]!r})")
    old = weight_files(folder)
    write_weights(folder / WEIGHTS_FILE, ((d, latest[d]) for d in order))
    for p in old:
        if p.name != WEIGHTS_FILE:
            p.unlink()
    return sum(1 for d in order if not to_impacts(latest[d], "linear"))
