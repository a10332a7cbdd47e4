"""DeepCT (Dai & Callan 2019): learned passage term weights in Lucene.

- ``model.py``: the DeepCT model (BERT body + per-token regression head), its
  encoder over passage windows, and the impact/pseudo-tf conversions.
- ``targets.py``: training targets (query term recall from qrels, or titles) and
  the analyzer that maps BERT words onto Anserini's terms.
- ``train.py``: ``retr train deepct``.
- ``subindex.py``: the ``deepct`` sub-index kind (build, append, tuning, retriever).
"""
