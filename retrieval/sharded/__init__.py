"""Sharded indexes (issue #30): one index split into N ordinary retr folders, searched as one.

    SHARDED/shards.json        the sharded manifest (:mod:`indexes.sharded`): format, its ``id``, the
                               number of shards, the routing rule, and the shard folders' names
    SHARDED/shard-000/ ...     ordinary retr folders (live indexes as any other); each one's manifest
                               records ``sharded: {id, shard, shards}``, checked against shards.json

Routing: a document lives in shard ``int.from_bytes(blake2b(docid.encode("utf-8"), digest_size=8)
.digest(), "big") % shards`` (:func:`indexes.sharded.shard_of`), so adding, updating or deleting a
document touches its shard only.

The search protocol: scatter/gather over shard objects
-----------------------------------------------------
:class:`retrieval.sharded.index.ShardedIndex` runs a search as explicit rounds over a sequence of
*shard-like* objects. In-process they are :class:`retrieval.sharded.shard.ShardSearcher` (one per
shard folder); a Ray Serve router may pass remote handles with the same methods instead, as long as
each call returns the value (``ShardedIndex(shards, call=...)`` says how to call a method and wait
for the answers of all shards at once; the default calls them one after the other). Every argument
and every answer is plain picklable data (dicts, lists, tuples, str, int, float, None).

A shard-like object has these methods:

``describe() -> dict``
    ``{"id": sharded index id, "shard": i, "shards": n, "generation": int, "documents": int,
    "retrievers": {name: merge rule}, "needs_stats": {name: whether its scores may read statistics},
    "pipelines": the manifest's tuned pipelines, "fields": {metadata field: documents carrying it},
    "prf": {name of a retriever taking pseudo-relevance feedback: whether it stores term vectors}}``. ``ShardedIndex`` checks that every shard
    answers the same ``id`` and ``shards`` and that shard i is at position i.

``stats(texts: list[str], retrievers: list[str], options: dict) -> dict``
    Round 1 (DFS): per retriever name, the statistics its scoring needs for these query texts, from
    this shard (``Retriever.collection_stats``): nested dicts/lists of integers, or None for a
    retriever that needs none (dense, impact scores). ``options``: {retriever name: configure
    options} (BM25's k1/b, DeepCT's mode...), applied before the statistics are read, since they
    can change which index is read (DeepCT's variants).

``search(queries: list[tuple[qid, text]], retrievers: list[str], k: int, stats: dict,
options: dict, filter, ..., text=False) -> dict``
    Round 2 (query): per retriever name, ``{qid: [(docid, score), ...]}``: this shard's first ``k``
    documents (among those ``filter`` allows: the same filter object ``Index.search`` takes), scored
    with ``stats`` (round 1's statistics summed over all shards by :func:`merge.sum_stats`), with
    scores in the form its merge rule merges (Lucene: the float sum before Anserini's rounding and
    tie offsets). With ``text``, also ``"#texts": {docid: (title, text, metadata)}`` for the
    documents it lists, read from the same generation. ``expanded={name: {qid: Boosted}}``: the
    queries pseudo-relevance feedback expanded those queries to (below), searched instead.

``vectors(retriever, docids) / term_stats(retriever, terms) / expand(retriever, setting, k, items,
dfs, docs, options)``
    Pseudo-relevance feedback (BM25's RM3 and Rocchio), run by the router over the whole index
    (:mod:`retrieval.sharded.prf`): the stored term vectors of the feedback documents a shard owns;
    its live documents and the vectors' terms' ``[df, ttf]`` (summed); on any ONE shard, Anserini's
    reranker over those global figures, answering each query's expanded query (terms and boosts).

``confidence(texts: list[str], lists: dict, stats: dict, options: dict) -> list[dict]``
    Only for fusions that weigh by confidence, on any ONE shard after the merge: per text,
    ``{retriever name: (kind, value) or None}`` for the merged global lists ``lists`` ({name: [one
    list per text]}), under the global statistics.

``explain(text, docid, lists: dict, stats: dict, options: dict, filter, dimsel, fused) -> dict``
    Only on the shard that owns ``docid``, after rounds 1 to 3 (and 4) of a search of ``text``:
    ``{"refused": whether the filter leaves it out (None: no filter), "explained": {retriever
    name: its Retriever.explain of the document as plain data (kind, score, parts, formula,
    columns, details, notes)}}`` with the retriever scoring under the global ``stats`` (BM25 and
    DeepCT's BM25 mode: Lucene's explanation through the Java helper's ``explainWith``) and
    ``lists`` ({name: the merged global list}) the lists whose scores the parts add up to;
    ``indexes.errors.NotFound`` where the shard holds no such document.
    :meth:`~retrieval.sharded.index.ShardedIndex.explain` makes one folder's explain dict of it.

``fetch(docids: list[str]) -> dict``
    ``{docid: (title, text, metadata)}`` for those of ``docids`` this shard holds (the router asks
    each document's own shard, :func:`indexes.sharded.shard_of`).

``get(docid) / count() / close()``: one document as ``retrieval.Document`` fields, the live
document count, release (local shards).

The router's steps (:mod:`retrieval.sharded.merge` holds the pure functions):
 1. ``stats`` on every shard, ``merge.sum_stats`` over their answers (skipped without a filter when
    no retriever of the pipeline ``needs_stats``: they would all answer None);
 2. ``search`` on every shard with the summed stats;
 3. per retriever ``merge.merge_lists(rule, [each shard's list], depth)``: the exact global list
    (``"anserini"``: raw float score descending, then the docid's UTF-8 bytes, then Anserini's
    rounding to 4 decimals and its 1e-6 tie offsets over the merged list, as one Lucene index
    orders and rounds; ``"score"``: score descending, then the docid's bytes, as a folder's rescored faiss ranking);
 4. a fused pipeline: ``confidence`` on one shard where the fusion asks for it, then
    ``retrieval.fusion.fuse`` on the merged lists (``merge.fuse_lists``), cut at k;
 5. with ``text``: the texts the search round sent along (an unfused pipeline without a deepened
    filter: the global first k are among the shards' first k), else ``fetch`` from the hits' shards
    in one call.

A retriever with pseudo-relevance feedback (``prf``, per search or configured on the router; never
set on a shard) gets its list from :func:`retrieval.sharded.prf.expand`'s rounds instead of step 2:
the merged first ranking, the feedback documents' vectors from their shards, the vectors' terms'
statistics, the expansion on one shard, then step 2 with the expanded queries and their terms'
global statistics. Runs equal one folder's (tests/retrieval/test_sharded_prf.py).
"""
