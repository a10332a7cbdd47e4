"""Static pruning: score a corpus, choose the documents to keep (the top
``1 - prune`` share), and apply a folder's recorded estimator and threshold to
documents added later. Building the pruned folder is
:func:`retrieval.writer.build_pruned_index`."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from retrieval.quality.estimators import Estimator, QualityError
from retrieval.quality.registry import DEFAULT_ESTIMATOR, ESTIMATORS, get_estimator

def _docs(corpus, empty: str) -> list:
    from retrieval.collections import read_corpus

    return list(read_corpus(corpus, empty=empty)) if isinstance(corpus, (str, Path)) else list(corpus)


def score_corpus(corpus, estimator: Union[str, Estimator] = DEFAULT_ESTIMATOR, empty: str = "error",
                 batch_size: int = 64, quiet: bool = False) -> Tuple[List[str], np.ndarray]:
    """(docids, scores) for every document of a corpus path or iterable of Documents."""
    est = get_estimator(estimator) if isinstance(estimator, str) else estimator
    docs = _docs(corpus, empty)
    return [d.docid for d in docs], est.score([d.contents for d in docs], batch_size=batch_size, quiet=quiet)


def write_scores(path: Union[str, Path], docids: List[str], scores: np.ndarray) -> None:
    """One ``docid<TAB>score`` line per document."""
    with open(path, "w") as fh:
        for d, s in zip(docids, scores):
            fh.write(f"{d}\t{float(s):.9g}\n")


def read_scores(path: Union[str, Path]) -> Dict[str, float]:
    """Read a scores file written by :func:`write_scores` / ``retr quality score``."""
    path = Path(path)
    if not path.is_file():
        raise QualityError("scores file not found", path)
    out: Dict[str, float] = {}
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 2:
                raise QualityError(f"expected 'docid<TAB>score', found {len(parts)} columns", path, n)
            try:
                v = float(parts[1])
            except ValueError:
                raise QualityError(f"score {parts[1]!r} is not a number", path, n) from None
            if not math.isfinite(v):
                raise QualityError(f"score of {parts[0]!r} is not finite", path, n)
            if parts[0] in out:
                raise QualityError(f"document {parts[0]!r} is scored twice", path, n)
            out[parts[0]] = v
    if not out:
        raise QualityError("scores file is empty", path)
    return out


def check_share(prune: float) -> float:
    try:
        p = float(prune)
    except (TypeError, ValueError):
        raise QualityError(f"prune share must be a number in [0, 1), got {prune!r}") from None
    if not (0.0 <= p < 1.0):
        raise QualityError(f"prune share must be in [0, 1) (the share of passages dropped), got {prune!r}")
    return p


def select_keep(docids: List[str], scores: np.ndarray, prune: float) -> set:
    """The docids of the top ``1 - prune`` share: ``floor(prune * N)`` lowest scores are
    dropped; ties drop the later document (stable, reproducible)."""
    p = check_share(prune)
    n_drop = int(math.floor(p * len(docids) + 1e-9))
    order = np.lexsort((-np.arange(len(docids)), np.asarray(scores, dtype=np.float64)))  # worst first
    return {docids[i] for i in order[n_drop:]}


def is_scores_file(quality: str) -> bool:
    return quality.split(":", 1)[0] not in ESTIMATORS and (Path(quality).is_file() or quality.endswith((".tsv", ".txt")))


def _pairs(corpus, empty: str):
    from retrieval.collections import read_corpus

    docs = read_corpus(corpus, empty=empty) if isinstance(corpus, (str, Path)) else corpus
    for d in docs:
        yield d.docid, d.contents


def score_blocks(est: Estimator, pairs, executor=None, batch_size: int = 64, quiet: bool = False,
                 total: Optional[int] = None, want_vectors: bool = False):
    """Score ``(docid, text)`` pairs with a blockwise estimator where ``executor`` says
    (:mod:`retrieval.executors`; None: in-process), block by block, in order. Returns
    ``(docids, scores, vectors or None, how they were scored)``; ``vectors`` is
    ``(encoder config, array)`` when the estimator computed any and ``want_vectors``."""
    from retrieval.executors import runner_of
    from retrieval.quality.estimators import EstimatorStage

    run = runner_of(executor).map(EstimatorStage(est, batch_size), pairs, total=total, desc=f"quality ({est.name})",
                                  quiet=quiet)
    docids: List[str] = []
    parts, vparts, cfg = [], [], None
    for ids, payload in run:
        s, v = est.from_payload(payload)
        if len(s) != len(ids):
            raise QualityError(f"estimator {est.name!r} returned {len(s)} scores for {len(ids)} passages")
        docids.extend(ids)
        parts.append(s)
        if v is not None and want_vectors:
            cfg = v[0]
            vparts.append(np.asarray(v[1]))
    scores = np.concatenate(parts) if parts else np.zeros(0)
    vecs = (cfg, np.concatenate(vparts)) if vparts else None
    return docids, scores, vecs, run.record()


def prune_keep_set(corpus, prune: float, quality: Optional[str] = None, empty: str = "error",
                   batch_size: int = 64, quiet: bool = False, vectors: Optional[dict] = None,
                   executor=None) -> Tuple[set, dict]:
    """Score ``corpus`` (or read a scores file) and return (kept docids, manifest record).
    A ``vectors`` dict is filled with the passage vectors the estimator computed, if it
    computed any (``config``: their encoder's, ``docids``, ``array``), for the dense sub-index.
    A blockwise estimator's model runs where ``executor`` says (the record's ``scored_by``)."""
    p = check_share(prune)
    by_default = quality is None
    quality = quality or DEFAULT_ESTIMATOR
    if is_scores_file(quality):
        docids = [d for d, _t in _pairs(corpus, empty)]
        given = read_scores(quality)
        missing = [d for d in docids if d not in given]
        if missing:
            raise QualityError(f"scores file lacks {len(missing)} of the corpus's {len(docids)} document ids "
                               f"(first: {missing[0]!r}); score the same corpus", quality)
        scores = np.array([given[d] for d in docids])
        record = {"estimator": "scores-file", "scores_file": str(Path(quality).resolve())}
    else:
        est = get_estimator(quality)
        if est.blockwise:  # streamed in blocks: the texts are never all in memory
            total = None
            if isinstance(corpus, (str, Path)):
                from retrieval.collections import count_lines
                total = count_lines(corpus)
            docids, scores, vecs, how = score_blocks(est, _pairs(corpus, empty), executor, batch_size, quiet,
                                                     total=total, want_vectors=vectors is not None)
            record = dict(est.describe(), spec=quality, scored_by=how)
            if vectors is not None and vecs is not None:
                vectors.update(config=vecs[0], docids=docids, array=vecs[1])
        else:
            docs = _docs(corpus, empty)
            docids = [d.docid for d in docs]
            scores = est.score([d.contents for d in docs], batch_size=batch_size, quiet=quiet)
            record = dict(est.describe(), spec=quality, scored_by={"executor": "in-process",
                                                                   "note": f"{est.name} scores the whole corpus at once"})
            if vectors is not None and getattr(est, "vectors", None) is not None:
                vectors.update(config=est.vectors[0], docids=docids, array=est.vectors[1])
    keep = select_keep(docids, scores, p)
    if by_default:
        record["default"] = ("chosen without training queries, leave one collection out over SciFact, NFCorpus, "
                             "Cranfield, Vaswani (benchmarks/bench_defaults_pruning.py): +0.002 nDCG@10 over "
                             "random at 30% pruned on average, not on every collection")
    record.update({"share": p, "considered": len(docids),
                   "threshold": float(np.min(scores[[i for i, d in enumerate(docids) if d in keep]]))
                   if keep else None})
    return keep, record


def prune_additions(record: dict, docs: list, quiet: bool = False, executor=None) -> list:
    """The documents of ``docs`` that the pruning of an existing folder (its manifest's
    ``pruning`` record) would have kept: those its estimator scores at or above the
    recorded threshold. Folders pruned with a scores file cannot score new documents."""
    if record.get("estimator") == "scores-file" or not record.get("spec"):
        raise QualityError("this index was pruned with a scores file (or by an older retr that did not record its "
                           "estimator), so new documents cannot be scored; rebuild it from the full corpus")
    if record.get("threshold") is None:
        return []  # everything was pruned
    est = get_estimator(record["spec"])
    if est.blockwise:
        _ids, scores, _v, _how = score_blocks(est, [(d.docid, d.contents) for d in docs], executor, quiet=quiet,
                                              total=len(docs))
    else:
        scores = est.score([d.contents for d in docs], quiet=quiet)
    return [d for d, v in zip(docs, scores) if float(v) >= record["threshold"]]


__all__ = ["ESTIMATORS", "DEFAULT_ESTIMATOR", "Estimator", "QualityError", "get_estimator", "score_corpus",
           "write_scores", "read_scores", "select_keep", "prune_keep_set", "prune_additions",
           "check_share"]
