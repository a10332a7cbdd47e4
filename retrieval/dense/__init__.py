"""Dense retrieval: transformer encoders with mean, CLS, first-last and Ditto
pooling, a faiss sub-index, and query-aware dimension selection.

- ``encoder.py``: :class:`DenseEncoder` (batching, devices, resumable encoding shards).
- ``pooling.py``: the poolers, Ditto's attention-weighted pooling included.
- ``ditto_store.py``: the (layer, head, states) chosen for Ditto per model.
- ``sts.py``: STS benchmarks and Ditto's head selection on STS-B dev.
- ``dimsel/``: PRF-DIME and the learned dimension selector (masks, selector, search, training).
- ``subindex.py``: the ``dense`` sub-index kind (build, append, retriever).
- ``options.py``: what it adds to the command line, as data (``--dense``, ``--dimsel``, `retr train dimsel`,
  `retr train dense`).
- ``training.py``: :func:`train` (``retrieval.dense.train(corpus, output, queries, qrels, pretrain="rom")``):
  MLM pre-training (``mlm.py``, ``masking.py``) and contrastive fine-tuning (``contrastive.py``, ``pairs.py``)
  of the encoder itself.
"""


def __getattr__(name):
    # ``retrieval.dense.train`` without importing torch and transformers with the package
    if name in ("train", "DenseTrainConfig"):
        from retrieval.dense import training

        return getattr(training, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
