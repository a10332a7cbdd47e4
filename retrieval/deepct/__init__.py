"""DeepCT (Dai & Callan 2019): learned passage term weights in Lucene.

- ``model.py``: the DeepCT model (BERT body + per-token regression head), its
  encoder over passage windows, and the impact/pseudo-tf conversions.
- ``targets.py``: training targets (query term recall from qrels, or titles) and
  the analyzer that maps BERT words onto Anserini's terms.
- ``train.py``: ``retr train deepct``'s training (its settings: ``train_config.py``).
- ``weights.py``: the stored term weights and the Lucene variants made from them
  (modes x scales; the Lucene side is ``indexes/impact.py``).
- ``tuning.py``: choosing mode, scale, k1/b and the ``bm25+deepct`` fusion on the
  model's held-out training queries (at build time, or again: ``retune_deepct``).
- ``subindex.py``: the spec, build and additions, the retriever and the ``deepct`` kind.
- ``options.py``: what it adds to the command line, as data (``--deepct``, `retr train deepct`,
  `retr deepct-tune`).
"""
