"""The SPLADE sub-index: every passage's SPLADE impacts (:mod:`retrieval.splade.model`) in a
real Lucene impact index written through Anserini, the same path DeepCT's impact variants
take (:mod:`indexes.impact`), and its retriever.

    INDEX/<name>/impact/    JsonVectorCollection -impact -pretokenized: word-piece -> round(w / 5 * 256)

A query is scored by the sum over shared word-pieces of query impact x passage impact
(Anserini's ``SimpleImpactSearcher``, which Pyserini's ``LuceneImpactSearcher`` wraps). Query
weights come from the same model (``query="splade"``), or are the counts of the query's
word-pieces (``query="tokens"``, Pyserini's unweighted ``TokFreqQueryEncoder``).
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Sequence

from indexes import impact
from indexes import manifest as mf
from indexes.errors import InputError, ParameterError
from retrieval.kinds import BuildContext, Explained, RetrieverBase, SubIndexKind
from retrieval.splade.model import DEFAULT_MODEL, QUANTIZATION, token_counts
from retrieval.types import Query, Scored

QUERY_MODES = ("splade", "tokens")
QUERY_BACKENDS = ("auto", "torch", "onnx")  # auto: ONNX Runtime where it can run (retrieval.splade.model.query_backend)
LUCENE = "impact"  # the one Lucene index in the sub-index's folder


@dataclass
class SpladeSpec:
    """How to build a SPLADE sub-index."""

    kind: ClassVar[str] = "splade"
    model: str = DEFAULT_MODEL       # "splade-tiny" (bundled) or a local masked-LM folder (`retr train splade`)
    query: str = "splade"            # default query weighting: splade (the model's) | tokens (word-piece counts)
    max_length: int = 256            # word-pieces of a passage the model reads
    device: str = "auto"
    threads: Optional[int] = 1
    index_threads: int = 2
    batch: int = 1                   # texts per forward; 1 keeps impacts byte-identical to earlier builds
    precision: str = "auto"          # auto | fp32 | bf16 | fp16 (recorded resolved in the encoder config)
    query_backend: str = "auto"      # auto | torch | onnx: the queries' (recorded resolved in the config)

    def validate(self) -> "SpladeSpec":
        if self.query not in QUERY_MODES:
            raise ParameterError("{query} {_got!r} is not a SPLADE query weighting (choose from: %s)"
                                 % ", ".join(QUERY_MODES), _got=self.query)
        if not isinstance(self.max_length, int) or not 8 <= self.max_length <= 4096:
            raise ParameterError("{max_length} must be an integer from 8 to 4096, got {_got!r}", _got=self.max_length)
        if not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 1:
            raise ParameterError("{batch} must be a whole number of texts, at least 1, got {_got!r}", _got=self.batch)
        from retrieval.models import resolve_model_path, resolve_precision

        resolve_precision(self.precision, "cpu")  # an unknown name is one line
        if self.query_backend not in QUERY_BACKENDS:
            raise ParameterError("{query_backend} {_got!r} is not a SPLADE query backend (choose from: %s)"
                                 % ", ".join(QUERY_BACKENDS), _got=self.query_backend)
        resolve_model_path(self.model)  # a bundled name or a folder with config, weights and tokenizer
        return self


def _encoder(spec_or_entry, purpose: str = "", threads: Optional[int] = 1, device: str = "auto",
             queries: bool = False):
    """The encoder of a spec, or the one a built sub-index recorded (its weights checked by hash);
    ``queries``: the recorded query encoder (:func:`retrieval.splade.model.query_backend`)."""
    from retrieval.models import ModelDirError, pick_device, resolve_precision
    from retrieval.splade.model import SpladeEncoder, query_backend

    if isinstance(spec_or_entry, SpladeSpec):
        s = spec_or_entry
        return SpladeEncoder(s.model, device=s.device, max_length=s.max_length, threads=s.threads, batch=s.batch,
                             precision=s.precision)
    m = spec_or_entry.get("model") or {}
    name, sha = m.get("name"), m.get("sha256")
    if not isinstance(name, str) or not name:
        raise ModelDirError(f"{purpose}: the manifest names no SPLADE model")
    max_length = (spec_or_entry.get("spec") or {}).get("max_length", 256)
    if not isinstance(max_length, int) or not 8 <= max_length <= 4096:
        raise ModelDirError(f"{purpose}: the manifest's max_length {max_length!r} is not a length")
    recorded = spec_or_entry.get("encoder") or {}  # the build's batch policy and precision (issue 46)
    batch, precision = recorded.get("batch", 1), recorded.get("precision", "fp32")
    backend = "torch"
    if queries:
        dev = pick_device(device)
        backend = query_backend((spec_or_entry.get("config") or {}).get("query_backend"), dev,
                                resolve_precision(precision, dev), batch)
    enc = SpladeEncoder(name, device=device, max_length=max_length, threads=threads, batch=batch,
                        precision=precision, backend=backend)
    if sha and enc.model_hash != sha:
        raise ModelDirError(f"SPLADE model {name} (sha256 {enc.model_hash}) differs from the one this index was "
                            f"built with ({sha}); {purpose} needs that one")
    return enc


def _query_backend(spec: SpladeSpec, enc) -> str:
    """The queries' backend a build records: ``auto`` resolves to ONNX Runtime where it can run for this
    encoder (a CPU, fp32, batch 1, onnxruntime installed), else PyTorch; explicit ``onnx`` where it cannot
    run is one error line."""
    from retrieval.splade.model import can_run_onnx

    if spec.query_backend == "torch":
        return "torch"
    if can_run_onnx(enc.device, enc.precision, enc.batch):
        return "onnx"
    if spec.query_backend == "onnx":
        from retrieval.onnxrt import OnnxUnavailable

        raise OnnxUnavailable(f"SPLADE queries on ONNX Runtime need a CPU, fp32, --splade-batch 1 and onnxruntime "
                              f"(pip install 'retr[onnx]'); this build: {enc.device}, {enc.precision}, batch {enc.batch}")
    return "torch"


def _encode(enc, docs, total: int, executor, quiet: bool):
    """(the run, stream of ``(docid, impacts)``): ``docs`` encoded where ``executor`` says."""
    from retrieval.executors import runner_of

    run = runner_of(executor).map(enc.stage(), docs, total=total, desc="SPLADE encoding", quiet=quiet, threads=None)
    return run, ((d, v) for ids, vecs in run for d, v in zip(ids, vecs))


def shared_impacts(docs: Sequence, spec: Optional[SpladeSpec] = None, entry: Optional[dict] = None,
                   quiet: bool = False, executor=None, threads: int = 2) -> dict:
    """The impacts of ``docs`` (``retrieval.types.Document``) for every shard of a sharded index, made
    once as one folder's build of ``spec`` (the documents in order) or change of the sub-index ``entry``
    (its encoder, the writer's ``threads``, the change's documents at once) makes them: a float weight
    depends on its batch's padding in the last bits, and a shard's own batches could round an impact
    otherwise."""
    enc = _encoder(spec.validate()) if entry is None else _encoder(entry, "adding documents to a SPLADE sub-index",
                                                        threads=threads)
    run, pairs = _encode(enc, [(d.docid, d.contents) for d in docs], len(docs), executor, quiet)
    vectors = dict(pairs)
    what = "build" if entry is None else "change"
    return {"encoder": enc.config(), "vectors": vectors, "encoded_by": run.record(),
            "source": f"the sharded index's {what} (encoded once for every shard)"}


def _write(folder: Path, enc, docs, total: int, ctx: BuildContext, append: bool, encoder: dict):
    """Index the impacts of ``(docid, contents)`` pairs: the shared ones of a sharded build or change
    (``ctx.shared_part()``, when they are ``encoder``'s and hold every document), else encoded where
    ``ctx.executor`` says (``enc()`` makes the encoder); returns (documents, postings written, indexing
    seconds, the run's record, where the impacts came from)."""
    shared = ctx.shared_part()
    ids = [d for d, _t in docs] if shared else []
    if shared and shared.get("encoder") == encoder and all(d in shared["vectors"] for d in ids):
        pairs, record, source = ((d, shared["vectors"][d]) for d in ids), shared["encoded_by"], shared["source"]
    else:
        run, pairs = _encode(enc(), docs, total, ctx.executor, ctx.quiet)
        record, source = None, "encoded"
    n = postings = 0

    def vectors():
        nonlocal n, postings
        for d, v in pairs:
            n += 1
            postings += len(v)
            yield d, v

    secs = impact.index_vectors(vectors(), folder / LUCENE, impact=True, threads=ctx.threads, append=append)
    return n, postings, secs, record or run.record(), source


class SpladeRetriever(RetrieverBase):
    """Searches a SPLADE sub-index; ``configure(query=...)`` switches the query weighting."""

    kind = "splade"
    options = ("query",)
    merge_rule = "anserini"  # integer impacts, Lucene's order and Anserini's tie offsets

    def __init__(self, path: Path, entry: dict, encoder=None):
        self.path = Path(path)
        self.entry = entry
        self.query = (entry.get("config") or {}).get("query", "splade")
        if self.query not in QUERY_MODES:
            raise InputError(f"{self.path}: the manifest's SPLADE query weighting {self.query!r} is not one of "
                             f"{', '.join(QUERY_MODES)}")
        self._searcher: Optional[impact.VectorSearcher] = None
        self._encoder = encoder
        self._lock = threading.Lock()

    def configure(self, query: Optional[str] = None) -> "SpladeRetriever":
        if query is not None and query not in QUERY_MODES:
            raise ParameterError("{query} {_got!r} is not a SPLADE query weighting (choose from: %s)"
                                 % ", ".join(QUERY_MODES), _got=query)
        self.query = query or self.query
        return self

    @property
    def encoder(self):
        with self._lock:
            if self._encoder is None:
                self._encoder = _encoder(self.entry, "SPLADE query encoding", queries=True)
        return self._encoder

    def _lucene(self) -> impact.VectorSearcher:
        with self._lock:
            if self._searcher is None:
                self._searcher = impact.VectorSearcher(self.path / LUCENE, impact=True)
        return self._searcher

    def query_terms(self, texts: Sequence[str], query: Optional[str] = None) -> List[Dict[str, int]]:
        """Integer query weights: the model's impacts (splade) or word-piece counts (tokens)."""
        if (query or self.query) == "tokens":
            return token_counts(self.encoder.tokenizer, texts)
        return self.encoder.impacts(texts)

    def search(self, text: str, k: int) -> Scored:
        return self.batch_search([Query("q", text)], k)["q"]

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        weights = self.query_terms([q.text for q in queries])
        return self._lucene().batch(weights, [q.qid for q in queries], k, threads)

    def search_filtered(self, text: str, k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` in this retriever's ranking."""
        return self._lucene().search_filtered(self.query_terms([text])[0], k, allowed)

    def explain(self, text: str, docid: str, ranked: Scored) -> Explained:
        """Each word-piece the query and the passage share: the query's weight times the passage's
        stored impact, read back from the Lucene impact index."""
        from indexes.lucene import IMPACT_COLUMNS, explain_notes

        weights = self.query_terms([text])[0]
        ex = self._lucene().explain(weights, docid, dict(ranked).get(docid))
        if ex is None:
            return Explained(None, notes=["not in the SPLADE impact index (Anserini skips a passage without "
                                          "a word-piece of impact 1 or more)"])
        how = "the model's impacts" if self.query == "splade" else "word-piece counts"
        return Explained(ex["score"], ex["parts"], columns=IMPACT_COLUMNS, notes=explain_notes(ex),
                         formula=f"sum over the word-pieces the query and the passage share of query weight "
                                 f"({how}) x stored impact (round(w / 5 x 256))",
                         details={"query": self.query, "query_weights": weights, "raw": ex["raw"],
                                  "lucene": ex["lucene"], "unmatched": ex["unmatched"]})

    def with_stats(self, stats) -> "SpladeRetriever":
        """The same retriever answering raw scores for a sharded index's merge (impacts read no statistics)."""
        import copy

        view = copy.copy(self)
        view._searcher = self._lucene().with_stats(stats)
        view._lock = threading.Lock()
        return view

    def close(self) -> None:
        with self._lock:
            if self._searcher is not None:
                self._searcher.close()
                self._searcher = None


class SpladeKind(SubIndexKind):
    name = "splade"
    uses_model = True

    def build(self, folder: Path, name: str, ctx: BuildContext, spec: SpladeSpec) -> dict:
        from retrieval.executors import StoreSource

        spec.validate()
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        enc = _encoder(spec)
        query_backend = _query_backend(spec, enc)  # before encoding: an explicit onnx that cannot run is refused
        src = StoreSource(ctx.store_path)
        total = len(src)
        if not total:
            raise InputError("no documents to encode")
        n, postings, index_s, record, source = _write(folder, lambda: enc, src, total, ctx, append=False,
                                                      encoder=enc.config())
        return {
            "kind": "splade", "path": name, "built_at": mf.now(), "doc_count": n,
            "config": {"query": spec.query, "quantization": QUANTIZATION, "terms": "word-pieces (pre-tokenised)",
                       "query_backend": query_backend},
            "model": {"name": spec.model, "sha256": enc.model_hash}, "encoder": enc.config(),
            "corpus_fingerprint": ctx.fingerprint, "encoded_by": record, "impacts_from": source,
            "index_seconds": round(index_s, 2), "build_seconds": round(time.perf_counter() - t0, 2),
            "spec": asdict(spec),
        }

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        def enc():
            return _encoder(entry, "adding documents to a SPLADE sub-index", threads=ctx.threads)

        *_n, source = _write(folder, enc, [(d.docid, d.contents) for d in docs], len(docs), ctx, append=True,
                             encoder=entry.get("encoder"))
        return dict(entry, added_impacts_from=source)

    def encode_documents(self, docs: Sequence, spec=None, entry: Optional[dict] = None, quiet: bool = False,
                         executor=None, threads: int = 2, given=None) -> Optional[dict]:
        """The impacts of ``docs`` for a build or change, made in one pass (:func:`shared_impacts`)."""
        return shared_impacts(docs, spec=spec, entry=entry, quiet=quiet, executor=executor, threads=threads)

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        impact.delete(folder, [LUCENE], docids)
        return entry

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        impact.expunge(folder, [LUCENE])
        return entry

    def retriever(self, folder: Path, entry: dict) -> SpladeRetriever:
        return SpladeRetriever(folder, entry)

    def reopen(self, old, folder: Path, entry: dict) -> SpladeRetriever:
        same = isinstance(old, SpladeRetriever) and old.entry.get("model") == entry.get("model")
        return SpladeRetriever(folder, entry, encoder=old._encoder if same else None)

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        return impact.counts(folder, [LUCENE])

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        return impact.live(folder, [LUCENE])

    def present(self, folder: Path, entry: dict, docids: Sequence[str]) -> Dict[str, set]:
        return impact.present(folder, [LUCENE], docids)

    def stats(self, folder: Path, entry: dict) -> Dict[str, Any]:
        """Postings and mean word-pieces per passage, Lucene's own counts (deleted passages count
        until `retr compact` merges them away): sparsity is what SPLADE's index costs."""
        from indexes.lucene import postings

        p = postings(folder / LUCENE)
        return {"postings": p["postings"],
                "mean_terms_per_passage": round(p["postings"] / p["max_doc"], 1) if p["max_doc"] else 0.0}


KIND = SpladeKind()
