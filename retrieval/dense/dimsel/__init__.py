"""Query-aware dimension selection for the dense retriever (METHODS.md §3).

For each query, score only a subset of embedding dimensions: the query vector is
masked (the other dimensions set to 0) and searched in the *same* faiss index,
so documents are never touched. Modes: none (plain dense search), prf (DIME), learned
(a small MLP from the query embedding), oracle (from relevance labels; an upper bound).

- ``masks.py``: importance (DIME-PRF, the label oracle) and the masks chosen from it
  (``keep_count``, ``top_mask``, ``adaptive_mask``, ``apply_mask``), the index's document
  vectors, ``DimSelError``; numpy only.
- ``selector.py``: the learned selector as search needs it: ``SelectorConfig``, the network,
  ``Selector`` (applied in numpy; loading it imports torch), where it is saved (``SELECTOR_DIR``).
- ``search.py``: ``DimSel`` (the retriever wrapper), ``wrap`` (what ``Index.search(dimsel=...)``
  calls), ``attach``, ``dense_of``.
- ``training.py``: ``training_data``, ``fit`` and its losses, ``train_selector`` (saves the selector
  and records it in a new generation of the folder). Search never imports it.

This file imports nothing, so ``import retrieval.dense.dimsel.search`` loads no training code.

Usage::

    from retrieval.dense.dimsel.search import DimSel
    from retrieval.dense.dimsel.training import train_selector
    idx = retrieval.open_index("IDX")
    train_selector(idx, "queries.jsonl", "qrels/train.tsv")          # -> IDX/dense/dimsel/
    r = DimSel(idx.snapshot().retriever("dense"), mode="learned")  # or mode="prf", alpha=0.5, prf_k=5
    r.search("what causes fever", k=10)
    idx.search("what causes fever", retriever="dense", dimsel="learned")
"""
