"""SPLADE (Formal et al. 2021): learned sparse retrieval with expansion, in a Lucene impact index.

- ``model.py``: the SPLADE-max encoder over a masked language model (SPLADE-tiny bundled),
  its integer impacts (Pyserini's quantisation) and unweighted word-piece queries.
- ``subindex.py``: the spec, the build and live changes, the retriever and the ``splade`` kind.
- ``options.py``: ``--splade [MODEL]`` of `retr index`, ``--splade-query`` of `retr search` and
  `retr train splade`, declared as data (:mod:`retrieval.options`).
"""
