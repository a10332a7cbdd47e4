"""The dense sub-index: passages encoded by a transformer (mean, CLS,
first-last or Ditto pooling) into a faiss index, built from the folder's
document store, and its retriever (queries encoded by the same encoder)."""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

from indexes import manifest as mf
from indexes.errors import InputError, RetrError
from retrieval.filters import first_allowed
from retrieval.kinds import BuildContext, Explained, RetrieverBase, SubIndexKind
from retrieval.models import QUERY_BACKEND_ENV
from retrieval.types import Query, Scored, contents


@dataclass
class DenseSpec:
    """How to build a dense sub-index: encoder, pooling and faiss configuration."""

    kind: ClassVar[str] = "dense"
    model: Optional[str] = None          # None or "minilm": bundled all-MiniLM-L6-v2; or a local HF folder
    pooling: str = "mean"                 # mean | cls | first-last | ditto
    factory: str = "Flat"                 # faiss factory string
    dtype: str = "float32"                # stored vector precision (float32 | float16)
    device: str = "auto"                  # cpu | cuda | auto
    batch_size: int = 64
    max_length: Optional[int] = None
    shard_size: int = 50_000              # encoding shards (resumable)
    sts_dir: Optional[str] = None         # STS data for choosing Ditto's (layer, head) when none is stored
    backend: str = "auto"                 # auto | torch | onnx | onnx-int8 (CPU): recorded resolved in the encoder's config
    precision: str = "auto"               # auto | fp32 | bf16 | fp16: recorded resolved (retrieval.models.resolve_encoding)

    def validate(self) -> "DenseSpec":
        from retrieval.dense.pooling import canonical_name

        from retrieval.models import check_backend, resolve_precision

        pooling = canonical_name(self.pooling)  # raises on an unknown pooling
        self.backend = check_backend(self.backend)
        if self.backend not in ("torch", "auto") and pooling not in ("mean", "cls"):
            from retrieval.onnxrt import OnnxUnavailable

            raise OnnxUnavailable(f"backend {self.backend} runs mean or cls pooling, not {pooling} (use torch)")
        resolve_precision(self.precision, "cpu")  # an unknown name is one line, before any model loads
        if self.batch_size < 1 or self.shard_size < 1:
            raise InputError("batch size and shard size must be positive")
        if pooling == "ditto":
            self._check_ditto()
        return self

    def _check_ditto(self) -> None:
        """Ditto pooling needs a (layer, head): stored by `retr ditto-select`, the paper's for its
        checkpoints, or chosen on STS-B dev during the build. In the last case the STS data must be
        there, and this is checked with the spec, before a build reads the corpus or builds BM25
        (a build used to index BM25 first and then fail for want of it)."""
        from retrieval.dense import ditto_store
        from retrieval.dense.sts import find_sts_dir
        from retrieval.models import model_hash, resolve_model_path

        path = resolve_model_path(self.model)
        if ditto_store.paper_default(path) is None and ditto_store.load_choice(model_hash(path)) is None:
            find_sts_dir(self.sts_dir)  # STSDataNotFound names sts_dir (the CLI: --sts-dir)


def _docs(store_path: Path) -> Iterator[Tuple[str, str]]:
    from indexes.docstore import DocStore

    for docid, title, text, _meta in DocStore(store_path).iter_docs():
        yield docid, contents(title, text)


# what must agree for vectors made by another component to stand in for this encoder's output
_SAME_VECTORS = ("model_sha256", "pooling", "ditto_layer", "ditto_head", "ditto_states", "max_length",
                 "normalize", "dim", "precision", "backend")


def _reusable(precomputed: Optional[dict], cfg: dict, docids: List[str]):
    """The rows of ``precomputed`` (config, docids, array) for ``docids``, in that order,
    when its encoder matches ``cfg`` and it holds every one of them; else None."""
    if not precomputed or any(precomputed["config"].get(k) != cfg.get(k) for k in _SAME_VECTORS):
        return None
    row = {d: i for i, d in enumerate(precomputed["docids"])}
    if any(d not in row for d in docids):
        return None
    return precomputed["array"][[row[d] for d in docids]]


def build_dense(folder: Path, name: str, spec: DenseSpec, ctx: BuildContext,
                precomputed: Optional[dict] = None) -> dict:
    """Encode every document of the store (``ctx.store_path``, of the corpus ``ctx.fingerprint``) and
    write a faiss index into ``folder`` (which becomes sub-index ``name``); returns its manifest entry.

    Encoded shards go to ``<ctx.cache_base>-<key>``, keyed by the encoder and the
    corpus: a build that is interrupted resumes from the finished shards, and
    the cache is removed once the sub-index is complete.

    ``precomputed`` (``config``, ``docids``, ``array``: e.g. the vectors the learned
    quality estimator computed while pruning) replaces encoding when it was made by
    the same encoder (model weights, pooling, max length, normalisation) and covers
    every document; the entry's ``vectors_from`` says so.

    ``ctx.executor`` (an opened runner of :mod:`retrieval.executors`; None: in-process)
    says where the encoder runs; the entry's ``encoded_by`` records it.
    """
    from indexes.faiss_index import FaissIndex
    from retrieval.dense.encoder import DenseEncoder
    from retrieval.executors import runner_of

    store_path, fingerprint, cache_base, quiet, executor = (ctx.store_path, ctx.fingerprint, ctx.cache_base,
                                                            ctx.quiet, ctx.executor)

    spec.validate()
    t0 = time.perf_counter()
    enc = DenseEncoder(spec.model, pooling=spec.pooling, device=spec.device, max_length=spec.max_length,
                       dtype=spec.dtype, quiet=quiet, sts_dir=spec.sts_dir,
                       precision=spec.precision, backend=spec.backend)
    FaissIndex.create(enc.dim, spec.factory, use_gpu=False)  # reject a bad factory string before encoding
    cfg = enc.config()
    cache = _shard_cache(cache_base, cfg, fingerprint, spec)
    store_ids = [d for d, _t in _docs(store_path)] if precomputed else []
    reused = _reusable(precomputed, cfg, store_ids) if precomputed else None
    docids: List[str] = store_ids if reused is not None else []  # else filled while encoding
    runner = runner_of(executor)
    shards, encoded_by = [], None
    if reused is None:
        shards, encoded_by = _encode_store(runner, enc, store_path, cache, spec, docids, quiet)
    encode_s = time.perf_counter() - t0
    if not docids:
        raise InputError("no documents to encode")
    fi = FaissIndex.build(_vector_batches(reused, shards, docids, enc, spec), factory=spec.factory, dim=enc.dim,
                          use_gpu=False, quiet=quiet, expected=len(docids))
    fi.save(folder)
    (folder / "encoder.json").write_text(json.dumps(cfg, indent=2) + "\n")
    shutil.rmtree(cache, ignore_errors=True)
    entry = _dense_entry(name, spec, enc, cfg, fi.ntotal, fi.describe(folder))
    entry["truncated"] = over_window(enc, (t for _d, t in _docs(store_path)))
    entry.update(encode_seconds=round(encode_s, 2), build_seconds=round(time.perf_counter() - t0, 2),
                 vectors_from="encoded" if reused is None else
                 (precomputed or {}).get("source", "quality estimator (pruning pass)"),
                 encoded_by=encoded_by, spec=asdict(spec))
    return entry


def over_window(enc, texts, batch: int = 1024) -> int:
    """How many of ``texts`` the encoder cuts: longer than its window (``max_length`` word-pieces,
    special tokens included), counted with its own tokenizer. Nothing is truncated in silence: the
    entry's ``truncated`` holds it and `retr info` shows it (a chunked corpus has none)."""
    n, buf = 0, []

    def count(b) -> int:
        lens = enc.tokenizer(b, add_special_tokens=True, truncation=False, return_length=True,
                             return_attention_mask=False, return_token_type_ids=False)["length"]
        return sum(1 for x in lens if x > enc.max_length)

    for t in texts:
        buf.append(t)
        if len(buf) >= batch:
            n, buf = n + count(buf), []
    return n + (count(buf) if buf else 0)


def _shard_cache(cache_base: Path, cfg: dict, fingerprint: str, spec: DenseSpec) -> Path:
    """Where the encoded shards of this encoder and corpus go: ``<cache_base>-<key>``."""
    key = hashlib.sha256(json.dumps([cfg, fingerprint, spec.shard_size], sort_keys=True,
                                    default=str).encode()).hexdigest()[:16]
    return cache_base.with_name(f"{cache_base.name}-{key}")


def _encode_store(runner, enc, store_path: Path, cache: Path, spec: DenseSpec, docids: List[str],
                  quiet: bool):
    """Encode the store's documents into resumable shards in ``cache``, in this process or on
    ``runner`` (Ray). Fills ``docids``; returns (shard paths, how they were encoded)."""
    if runner.kind != "local":
        return _encode_shards_on(runner, enc, store_path, cache, spec, docids, quiet)
    import torch

    def texts():
        for docid, text in _docs(store_path):
            docids.append(docid)
            yield text

    from indexes.docstore import DocStore

    encoded_by = {"executor": "in-process", "workers": 1, "threads": torch.get_num_threads(),
                  "devices": [str(enc.device)]}
    store = DocStore(store_path)
    try:
        total = len(store)  # the bar's total, so it shows an ETA
    finally:
        store.close()
    shards = enc.encode_to_shards(texts(), cache, shard_size=spec.shard_size, batch_size=spec.batch_size,
                                  quiet=quiet, total=total)
    return shards, encoded_by


def _vector_batches(reused, shards, docids: List[str], enc, spec: DenseSpec):
    """(float32 vectors, their docids) for faiss: from ``reused`` (at the stored precision, as if
    encoded here) when set, else from the shard files in order."""
    import numpy as np

    if reused is not None:
        for s in range(0, len(docids), spec.shard_size):
            v = np.asarray(reused[s:s + spec.shard_size]).astype(enc.out_dtype).astype(np.float32)
            yield v, docids[s:s + len(v)]
        return
    start = 0
    for p in shards:
        v = np.load(p).astype(np.float32, copy=False)
        yield v, docids[start:start + len(v)]
        start += len(v)


def _dense_entry(name: str, spec: DenseSpec, enc, cfg: dict, doc_count: int, faiss_info: dict) -> dict:
    """The manifest entry of a dense sub-index, less its timings and provenance."""
    return {
        "kind": "dense", "path": name,
        "built_at": mf.now(), "doc_count": doc_count,
        "config": {"factory": spec.factory, "pooling": enc.pooling, "dtype": spec.dtype,
                   "max_length": enc.max_length, "dim": enc.dim, "normalize": enc.normalize,
                   "ditto_layer_head": list(enc.ditto_layer_head) if enc.ditto_layer_head else None,
                   "ditto_states": enc.ditto_states, "backend": enc.backend, "precision": enc.precision},
        "model": {"path": cfg["model"], "sha256": cfg["model_sha256"], "architecture": cfg.get("architecture")},
        "encoder": cfg, "faiss": faiss_info,
    }


def _encode_shards_on(runner, enc, store_path: Path, cache: Path, spec: DenseSpec, docids: List[str],
                      quiet: bool):
    """:meth:`DenseEncoder.encode_to_shards` with the encoder run by ``runner`` (Ray): the same
    resumable shard files, written here as the blocks come back in order. Finished shards
    are not encoded again. Fills ``docids``; returns (shard paths, how they were encoded)."""
    import numpy as np

    from indexes.atomic import write_text
    from retrieval.dense.encoder import DenseStage, _shard_done, write_shard
    from retrieval.executors import StoreSource

    cache.mkdir(parents=True, exist_ok=True)
    meta = {"encoder": enc.config(), "shard_size": int(spec.shard_size)}
    meta_path = cache / "meta.json"
    if meta_path.is_file():
        old = json.loads(meta_path.read_text())
        if ({**old.get("encoder", {}), "model": None} != {**meta["encoder"], "model": None}
                or old.get("shard_size") != meta["shard_size"]):
            raise InputError("was encoded with a different encoder or shard size; use a new folder", path=cache)
    else:
        write_text(meta_path, json.dumps(meta, indent=2))
    src = StoreSource(store_path)
    docids.extend(d for d, _t in src)
    n = len(docids)
    paths = [cache / f"shard-{i:05d}.npy" for i in range((n + spec.shard_size - 1) // spec.shard_size)]
    done = 0
    while done < len(paths) and _shard_done(paths[done], min(spec.shard_size, n - done * spec.shard_size), enc.dim):
        done += 1
    record = {"executor": "ray", "resumed_shards": done}
    if done == len(paths):
        return paths, record
    skip = done * spec.shard_size

    def rest():
        for i, pair in enumerate(src):
            if i >= skip:
                yield pair

    run = runner.map(DenseStage(enc.config(), spec.batch_size, spec.device), rest(), total=n - skip,
                     desc="encoding", quiet=quiet)
    buf, rows, at, shard = [], 0, skip, done
    for ids, vecs in run:
        if ids != docids[at:at + len(ids)]:
            raise RetrError("the encoded blocks came back out of order (docids differ from the store's)")
        at += len(ids)
        buf.append(np.asarray(vecs, dtype=enc.out_dtype))
        rows += len(ids)
        while rows >= spec.shard_size or (at == n and rows):
            allv = np.concatenate(buf)
            write_shard(paths[shard], allv[:spec.shard_size])
            shard += 1
            buf, rows = ([allv[spec.shard_size:]], rows - spec.shard_size) if rows > spec.shard_size else ([], 0)
    if at != n:
        raise RetrError(f"{n - at} documents came back without vectors")
    return paths, dict(run.record(), resumed_shards=done)


def _inner_product(q, d) -> float:
    """q.d as faiss computes it for one query against a stored float32 vector (its own kernel, so
    the score is the one a Flat index's search gives, to the bit)."""
    import faiss
    import numpy as np

    ix = faiss.IndexFlatIP(len(d))
    ix.add(np.ascontiguousarray(d[None], dtype=np.float32))
    scores, _ = ix.search(np.ascontiguousarray(q[None], dtype=np.float32), 1)
    return float(scores[0, 0])


def _vector_details(q, qk, d, normalized: bool, factory: str) -> dict:
    """What :meth:`DenseRetriever.explain_vector` tells of a query vector ``q`` (``qk``: as scored,
    masked or not) and a passage vector ``d``: norms, cosine, the dimensions that gave most."""
    import numpy as np

    full = float(q @ d)
    qn, dn = float(np.linalg.norm(q)), float(np.linalg.norm(d))
    prod = qk * d
    top = np.argsort(-prod, kind="stable")[:8]
    return {"dim": int(len(q)), "dimensions_counted": int(len(q)), "query_norm": qn, "doc_norm": dn,
            "cosine": full / (qn * dn) if qn and dn else 0.0, "score_all_dimensions": full,
            "normalized": normalized, "factory": factory,
            "top_dimensions": [{"dim": int(i), "query": float(q[i]), "doc": float(d[i]), "product": float(prod[i])}
                               for i in top]}


def query_backend(cfg: Optional[dict] = None) -> dict:
    """The query encoder's backend: ``RETR_QUERY_BACKEND`` when set, else the ``query_backend`` the
    sub-index recorded (an ``auto`` build on a CPU: onnx-int8), else (a folder from before it) the
    passages' backend (``{}``). Queries encoded by another backend than the passages differ from
    them in the last bits (onnx) or by int8 rounding (onnx-int8), which rankings tolerate
    (nDCG@10 within 0.003: benchmarks/results/encode-ndcg.md)."""
    import os

    from retrieval.models import check_backend

    cfg = cfg or {}
    raw = os.environ.get(QUERY_BACKEND_ENV, "").strip()
    if raw:
        b = check_backend(raw)
        if b == "auto":  # the default for queries, whatever the folder recorded
            from retrieval.models import pick_device, resolve_encoding

            b, p = resolve_encoding("auto", "auto", pick_device("auto"), cfg.get("pooling", "mean"), role="queries")
            return {"backend": b, "precision": p}
        return {"backend": b, "precision": "fp32"} if b != "torch" else {"backend": b}
    if not cfg.get("query_backend"):
        return {}
    return {"backend": cfg["query_backend"], "precision": cfg.get("query_precision") or cfg.get("precision", "fp32")}


class DenseRetriever(RetrieverBase):
    """faiss search over vectors from the dense encoder recorded in the manifest.
    The encoder (torch + transformers) loads on the first query. A folder changed since
    it was built or compacted is searched through :class:`indexes.faiss_live.LiveFaiss`."""

    kind = "dense"

    def __init__(self, path: Path, entry: dict, encoder=None):
        from indexes.faiss_live import open_live

        self.path = Path(path)
        self.entry = entry
        self._index = open_live(self.path)
        self._encoder = encoder

    @property
    def encoder(self):
        if self._encoder is None:
            from retrieval.dense.encoder import DenseEncoder

            self._encoder = DenseEncoder.from_config(self.entry["encoder"], quiet=True,
                                                     **query_backend(self.entry["encoder"]))
        return self._encoder

    def encode_queries(self, texts: Sequence[str]):
        from retrieval.models import QUERY_BATCH, apply_query_threads, torch_threads

        texts = list(texts)
        encoder = self.encoder
        default = apply_query_threads()  # the query-time thread policy (once per process)
        # more than a batch of queries (a query file) encodes on torch's own thread count
        with torch_threads(default if len(texts) > QUERY_BATCH else None):
            return encoder.encode(texts, quiet=True).astype("float32", copy=False)

    def search_vectors(self, vectors, k: int, allowed=None) -> List[Scored]:
        """``allowed`` (a filter's documents): the first ``k`` of them in each ranking. A faiss
        index takes it as an ID selector; a changed live index (delta rows, deletion mask) ranks
        deeper, then filters (exact either way)."""
        from indexes.faiss_index import FaissIndex

        if allowed is None or isinstance(self._index, FaissIndex):
            kw = {} if allowed is None else {"allowed": allowed}
            scores, names = self._index.search(vectors, k, **kw)
            return [list(zip(n, map(float, s))) for n, s in zip(names, scores)]
        return first_allowed(lambda depth: self.search_vectors(vectors, depth), k, allowed,
                             max(1, int(self._index.ntotal)))

    def search(self, text: str, k: int) -> Scored:
        return self.search_vectors(self.encode_queries([text]), k)[0]

    def search_filtered(self, text: str, k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` in this retriever's ranking (a faiss ID selector)."""
        return self.search_vectors(self.encode_queries([text]), k, allowed)[0]

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        res = self.search_vectors(self.encode_queries([q.text for q in queries]), k)
        return {q.qid: r for q, r in zip(queries, res)}


    def explain(self, text: str, docid: str, ranked: Scored) -> Explained:
        """The inner product of the encoded query and the vector stored for ``docid`` (read back
        from faiss), the cosine it is when both are normalised, and the dimensions that gave most."""
        return self.explain_vector(self.encode_queries([text])[0], docid)

    def explain_vector(self, q, docid: str, mask=None, selection: Optional[dict] = None) -> Explained:
        """:meth:`explain` for the query vector ``q``; ``mask`` (booleans per dimension): only those
        dimensions count (dimension selection, ``selection`` says how they were chosen)."""
        import numpy as np

        from indexes.faiss_live import lossy
        from retrieval.dense.dimsel.masks import doc_positions, doc_vectors

        pos = doc_positions(self).get(docid)
        if pos is None:
            return Explained(None, notes=["not in this faiss index"])
        d = doc_vectors(self, np.array([pos]))[0].astype(np.float64)
        q = np.asarray(q, dtype=np.float64)
        qk = q if mask is None else np.where(mask, q, 0.0)
        score = _inner_product(qk, d)
        details = _vector_details(q, qk, d, bool(self.entry.get("encoder", {}).get("normalize", True)),
                                  self._index.factory)
        notes = []
        if mask is not None:
            kept = np.flatnonzero(mask)
            details.update(dimensions_counted=int(len(kept)), selection=selection or {},
                           dimensions=[int(i) for i in kept])
            shown = ", ".join(str(int(i)) for i in kept[:40]) + (", ..." if len(kept) > 40 else "")
            notes.append(f"dimension selection kept {len(kept)} of {len(q)} dimensions ({shown}); over all of "
                         f"them q.d would be {details['score_all_dimensions']:.6f}")
        if lossy(self._index.factory):
            notes.append(f"a {self._index.factory} index scores compressed vectors: q.d over the vector read back "
                         "approximates the search's score")
        part = {"label": f"q.d over {details['dimensions_counted']} dimensions", "value": score}
        if mask is not None:
            part["label"] += " (selected)"
            formula = ("inner product of the query and passage vectors over the selected dimensions only (the "
                       "query's others set to 0)")
        else:
            formula = "inner product of the query and passage vectors" + \
                (": their cosine, as both are normalised" if details["normalized"] else "")
            if details["normalized"]:
                part["cosine"] = details["cosine"]
        return Explained(score, [part], formula=formula, details=details, notes=notes,
                         columns=(("cosine", "cosine"),) if "cosine" in part else ())

    def confidence(self, texts: Sequence[str], lists: Sequence[Scored]):
        """Per query, ``("cosine", top score)`` when the vectors are L2-normalised (inner product is
        then cosine; 0 with no hit), else None: an unnormalised inner product has no absolute scale."""
        if not self.entry.get("encoder", {}).get("normalize", True):
            return [None] * len(lists)
        return [("cosine", float(hits[0][1]) if hits else 0.0) for hits in lists]


_writer_encoders: Dict[str, object] = {}  # encoder config -> loaded encoder, for repeated changes in one process
_writer_encoders_lock = threading.Lock()


def _encode_new(entry: dict, docs: Sequence, quiet: bool, executor=None):
    """The vectors of ``docs`` by the sub-index's own encoder: in this process (the model loaded
    once per process, so a service that adds documents often pays the load once), or on the
    executor's Ray workers."""
    from retrieval.executors import runner_of

    runner = runner_of(executor)
    if runner.kind != "local":
        import numpy as np

        from retrieval.dense.encoder import DenseStage

        stage = DenseStage(entry["encoder"], int(entry.get("spec", {}).get("batch_size", 64)),
                           entry.get("spec", {}).get("device", "auto"))
        got = list(runner.map(stage, [(d.docid, d.contents) for d in docs], total=len(docs), desc="encoding",
                              quiet=quiet))
        if [i for ids, _v in got for i in ids] != [d.docid for d in docs]:
            raise RetrError("the encoded blocks came back out of order")
        return np.concatenate([v for _ids, v in got]).astype("float32", copy=False)
    return _writer_encoder(entry).encode([d.contents for d in docs], quiet=quiet).astype("float32", copy=False)


def _writer_encoder(entry: dict):
    """The writer's encoder for a sub-index's entry (one kept loaded, as a change may call again)."""
    from retrieval.dense.encoder import DenseEncoder

    key = json.dumps(entry["encoder"], sort_keys=True, default=str)
    with _writer_encoders_lock:
        enc = _writer_encoders.get(key)
        if enc is None:
            enc = DenseEncoder.from_config(entry["encoder"], quiet=True)
            _writer_encoders.clear()  # one at a time: a model is large
            _writer_encoders[key] = enc
        return enc


class DenseKind(SubIndexKind):
    name = "dense"
    dimsel = True
    uses_model = True

    def build(self, folder: Path, name: str, ctx: BuildContext, spec: DenseSpec) -> dict:
        return build_dense(folder, name, spec, ctx, precomputed=ctx.shared_part() or ctx.precomputed)

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        """Only the new passages are encoded; their vectors go to a delta file of this generation."""
        from indexes.faiss_live import add_delta, open_live

        ids = [d.docid for d in docs]
        pre = ctx.shared_part() or ctx.precomputed  # a sharded change's vectors, else another stage's
        vecs = _reusable(pre, entry["encoder"], ids) if pre else None
        if vecs is None:
            vecs = _encode_new(entry, docs, ctx.quiet, ctx.executor)
        add_delta(folder, vecs, ids, ctx.generation)
        out = dict(entry, faiss=open_live(folder).describe(folder))
        if "truncated" in entry:
            out["truncated"] = int(entry["truncated"]) + over_window(_writer_encoder(entry), (d.contents for d in docs))
        return out

    def encode_documents(self, docs: Sequence, spec=None, entry: Optional[dict] = None, quiet: bool = False,
                         executor=None, threads: int = 2, given=None) -> Optional[dict]:
        """The vectors a build (``spec``: shards of ``spec.shard_size`` texts in the corpus's order, as
        ``_encode_store`` cuts them) or a change (``entry``: the change's documents at once, as
        ``_encode_new``) makes; a vector depends on its batch's padding, so folders encoding their own
        parts of ``docs`` would differ from one folder of them all in the last bits. ``given`` vectors of every document (this
        function's form) stand in for encoding; the build checks their encoder (``_reusable``)."""
        if isinstance(given, dict) and {"config", "docids", "array"} <= set(given) \
                and {d.docid for d in docs} <= set(given["docids"]):
            return given
        if entry is not None:
            return {"config": entry["encoder"], "docids": [d.docid for d in docs],
                    "array": _encode_new(entry, docs, quiet, executor)}
        import tempfile

        import numpy as np

        from retrieval.dense.encoder import DenseEncoder

        spec.validate()
        enc = DenseEncoder(spec.model, pooling=spec.pooling, device=spec.device, max_length=spec.max_length,
                           dtype=spec.dtype, quiet=quiet, sts_dir=spec.sts_dir,
                       precision=spec.precision, backend=spec.backend)
        with tempfile.TemporaryDirectory(prefix="retr-shard-vectors-") as tmp:
            paths = enc.encode_to_shards((d.contents for d in docs), tmp, shard_size=spec.shard_size,
                                         batch_size=spec.batch_size, quiet=quiet, total=len(docs))
            array = np.concatenate([np.load(p) for p in paths])
        return {"config": enc.config(), "docids": [d.docid for d in docs], "array": array,
                "source": "the sharded index's build (encoded once for every shard)"}

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        from indexes.faiss_live import delete_rows, open_live

        delete_rows(folder, docids, ctx.generation)
        return dict(entry, faiss=open_live(folder).describe(folder))

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        """A new faiss file without the masked rows. Exact types (Flat, HNSW, IVF-Flat) are rebuilt
        from their own vectors; compressed ones are encoded again from the document store."""
        from indexes.faiss_live import NotReconstructible, compact

        try:
            fi = compact(folder, quiet=ctx.quiet)
        except NotReconstructible:
            for p in list(Path(folder).iterdir()):  # names only: other generations keep their files
                if p.is_file():
                    p.unlink()
            spec = DenseSpec(**{k: v for k, v in entry.get("spec", {}).items() if k in DenseSpec.__dataclass_fields__})
            spec.model = entry["encoder"]["model"]
            spec.backend = entry["encoder"].get("backend", "torch")  # as the vectors it replaces were encoded
            new = build_dense(folder, entry["path"], spec, ctx)
            return dict(entry, faiss=new["faiss"], encode_seconds=new["encode_seconds"], truncated=new["truncated"])
        return dict(entry, faiss=fi.describe(folder))

    def retriever(self, folder: Path, entry: dict) -> DenseRetriever:
        return DenseRetriever(folder, entry)

    def stats(self, folder: Path, entry: dict) -> Dict[str, Any]:
        """Passages longer than the encoder's window, encoded truncated (counted as they were encoded,
        at the build and each addition; a deletion does not lower it): a long document that is not
        chunked is matched on its beginning alone."""
        if "truncated" not in entry:
            return {}  # built before the count was kept
        return {f"passages_over_{entry.get('config', {}).get('max_length')}_tokens_(truncated)": int(entry["truncated"])}

    def reopen(self, old, folder: Path, entry: dict) -> DenseRetriever:
        same = isinstance(old, DenseRetriever) and old.entry.get("encoder") == entry.get("encoder")
        return DenseRetriever(folder, entry, encoder=old._encoder if same else None)

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        from indexes.faiss_live import open_live

        return {"faiss": int(open_live(folder).ntotal)}

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        from indexes.faiss_live import open_live

        return {"faiss": open_live(folder).docids}

    def with_dimsel(self, index, name: str, dimsel):
        from retrieval.dense.dimsel.search import wrap

        return wrap(index, name, dimsel)


KIND = DenseKind()
