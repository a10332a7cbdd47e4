"""Dense retrieval: transformer encoders with mean, CLS, first-last and Ditto
pooling, a faiss sub-index, and query-aware dimension selection.

- ``encoder.py``: :class:`DenseEncoder` (batching, devices, resumable encoding shards).
- ``pooling.py``: the poolers, Ditto's attention-weighted pooling included.
- ``ditto_store.py``: the (layer, head, states) chosen for Ditto per model.
- ``sts.py``: STS benchmarks and Ditto's head selection on STS-B dev.
- ``dimsel/``: PRF-DIME and the learned dimension selector (masks, selector, search, training).
- ``subindex.py``: the ``dense`` sub-index kind (build, append, retriever).
"""
