"""Passage quality and static pruning ("learning what to index", METHODS.md §4).

A query-agnostic estimator scores each passage; pruning drops the lowest-scoring
share BEFORE anything is encoded or indexed::

    from retrieval.quality import get_estimator
    from retrieval.writer import build_pruned_index
    s = get_estimator("length").score(["a passage", "another one"])   # np.ndarray, higher = keep
    idx = build_pruned_index("corpus.jsonl", "IDX", prune=0.3)         # default estimator, top 70% kept

- ``estimators.py``: the query-agnostic estimators.
- ``registry.py``: the estimators by name (:data:`ESTIMATORS`): ``learned`` (shipped
  logistic head on frozen MiniLM features), ``dense-norm``, ``pseudo-ppl``, ``length``,
  ``stopwords``, ``random``, ``deepct-mass``/``deepct-max``; the default for ``--prune``.
- ``learned.py`` / ``heads.py``: the learned estimator, its training and the shipped head.
- ``prune.py``: scores files, keep sets, and pruning of documents added later.
"""
from retrieval.quality.estimators import Estimator, QualityError
from retrieval.quality.registry import DEFAULT_ESTIMATOR, ESTIMATORS, get_estimator
from retrieval.quality.prune import (check_share, prune_additions, prune_keep_set, read_scores, score_corpus,
                                     select_keep, write_scores)

__all__ = ["ESTIMATORS", "DEFAULT_ESTIMATOR", "Estimator", "QualityError", "get_estimator", "score_corpus",
           "write_scores", "read_scores", "select_keep", "prune_keep_set", "prune_additions", "check_share"]
