"""The DeepCT sub-index (Dai & Callan 2019): passage term weights from a DeepCT
model, written into real Lucene indexes through Anserini, and its retriever.

The folder's files and variants are :mod:`retrieval.deepct.weights`' (the Lucene
side of them :mod:`indexes.impact`'s); choosing the defaults on held-out queries
is :mod:`retrieval.deepct.tuning`'s. Here: the spec, the build and additions, the
retriever, and the kind that the writer and the reader drive.

Terms are BERT words passed through Anserini's English analyzer (see
:mod:`retrieval.deepct.targets`); queries go through the same function, and are
then matched with a whitespace analyzer (the index is pre-tokenised), so stems
are never stemmed twice. With DeepCT-Query the model weights the query terms too.

The manifest gets two entries over the same folder: ``deepct`` (plain query
terms) and ``deepct-query`` (DeepCT-Query weights), both ``kind: "deepct"``.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple

from indexes import impact
from indexes import manifest as mf
from indexes.errors import InputError, ParameterError
from retrieval.deepct.tuning import (apply_tuning, choose, folder_runs, tune_bm25, tune_default_fusion,
                                     tunes, with_alias)
from retrieval.deepct.weights import (DEFAULT_B, DEFAULT_K1, DEFAULT_MODE, MODES, SCALES, compact_weights,
                                      open_variant, plain_query_terms, term_weights, variant_name, variants_of,
                                      write_variants)
from retrieval.kinds import BuildContext, Explained, RetrieverBase, SubIndexKind
from retrieval.types import Query, Scored

QUERY_MODES = ("plain", "deepct")
QUERY_FACTOR = 10.0              # DeepCT-Query: query term weight = max(1, round(w * 10))


@dataclass
class DeepCTSpec:
    """How to build a DeepCT sub-index."""

    kind: ClassVar[str] = "deepct"
    model: str                       # folder written by `retr train deepct`
    mode: str = "auto"               # default retrieval mode: impact | bm25 | auto (the better one on the
                                     # model's held-out training queries, else DEFAULT_MODE)
    scale: str = "auto"              # default impact scale: linear | sqrt | auto (the better one on the
                                     # model's held-out training queries, else linear)
    k1: Optional[float] = None       # BM25-over-pseudo-tf k1/b; None: tuned on the model's dev queries
    b: Optional[float] = None
    tune: bool = True                # grid-search scale x k1/b on the model card's held-out training queries
    batch_size: int = 32
    max_length: Optional[int] = None  # window size [default: the training max length]
    stride: Optional[int] = None     # window step [default: 3/4 of the window]
    device: str = "auto"
    threads: Optional[int] = 1
    index_threads: int = 2
    tune_fusion: bool = True         # then tune bm25+<name>'s default fusion on the same held-out queries
    precision: str = "auto"          # auto | fp32 | bf16 | fp16 (recorded resolved in the encoder config)

    def validate(self) -> "DeepCTSpec":
        if self.mode not in MODES + ("auto",):
            raise ParameterError("{mode} {_got!r} is not a DeepCT mode (choose from: auto, %s)" % ", ".join(MODES),
                                 _got=self.mode)
        if self.scale not in SCALES + ("auto",):
            raise ParameterError("{scale} {_got!r} is not a DeepCT weight scale (choose from: auto, %s)"
                                 % ", ".join(SCALES), _got=self.scale)
        if self.batch_size < 1:
            raise ParameterError("{batch_size} must be positive, got {_got}", _got=self.batch_size)
        from retrieval.deepct.model import is_deepct_dir
        from retrieval.models import ModelDirError, resolve_model_path, resolve_precision

        resolve_precision(self.precision, "cpu")  # an unknown name is one line

        p = Path(self.model).expanduser()
        if not p.exists():
            raise ModelDirError(f"DeepCT model folder not found: {p}")
        resolve_model_path(p)  # config, weights, tokenizer
        if not is_deepct_dir(p):
            raise ModelDirError(f"{p}: not a DeepCT model (no deepct_head.safetensors); train one with "
                                "`retr train deepct`")
        return self


# ----------------------------------------------------------------------------------- build
def _spec_encoder(spec: DeepCTSpec):
    from retrieval.deepct.model import DeepCTEncoder

    return DeepCTEncoder(spec.model, device=spec.device, max_length=spec.max_length, batch_size=spec.batch_size,
                         stride=spec.stride, threads=spec.threads, precision=spec.precision)


def shared_weights(docs: Sequence, spec: Optional[DeepCTSpec] = None, entry: Optional[dict] = None,
                   quiet: bool = False, executor=None, threads: int = 2) -> dict:
    """The term weights of ``docs`` (``retrieval.types.Document``) for every shard of a sharded index,
    made once as one folder makes them: a build of ``spec`` (the spec's encoder over the documents in
    order, as :func:`build_deepct` reads its store) or a change of the sub-index ``entry`` (its own
    encoder, the writer's ``threads``, the change's documents at once, as :func:`append_deepct`). A
    weight depends on its batch's padding in the last float bits, so shards encoding their own parts
    would store other weights than one folder (and BM25 over sqrt pseudo-tf would round otherwise)."""
    from retrieval.executors import runner_of

    t0 = time.perf_counter()
    if entry is not None:
        enc = entry_encoder(entry, "adding documents to a DeepCT sub-index", threads=threads, stride=True)
    else:
        spec.validate()
        enc = _spec_encoder(spec)
    run, pairs = term_weights(enc, [(d.docid, d.contents) for d in docs], len(docs), runner_of(executor), quiet)
    weights = dict(pairs)
    what = "build" if entry is None else "change"
    return {"encoder": enc.config(), "weights": weights, "encoded_by": run.record(),
            "encode_seconds": round(time.perf_counter() - t0, 2),
            "source": f"the sharded index's {what} (encoded once for every shard)"}


def _from_shared(shared: Optional[dict], encoder: dict, docids: Sequence[str]):
    """The stream of ``(docid, weights)`` of ``docids`` from ``shared`` (:func:`shared_weights`), when its
    encoder is ``encoder`` and it holds every one of them; else None (the caller encodes)."""
    if not shared or shared.get("encoder") != encoder:
        return None
    w = shared["weights"]
    if any(d not in w for d in docids):
        return None
    return ((d, w[d]) for d in docids)


def build_deepct(folder: Path, name: str, store_path: Path, spec: DeepCTSpec, fingerprint: str,
                 quiet: bool = False, executor=None, shared: Optional[dict] = None) -> dict:
    """Encode every document of the store with the DeepCT model and write the
    Lucene variants into ``folder``; returns the manifest entry. ``executor``: an
    opened runner of :mod:`retrieval.executors` (None: in-process). ``shared``: the weights
    a sharded index made for every shard (:func:`shared_weights`), used instead of encoding
    when they are this encoder's and cover the store; the entry's ``weights_from`` says which."""
    from retrieval.executors import StoreSource, runner_of

    spec.validate()
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    enc = _spec_encoder(spec)
    src = StoreSource(store_path)
    n = len(src)
    if not n:
        raise InputError("no documents to encode")
    pairs = _from_shared(shared, enc.config(), [d for d, _t in src]) if shared else None
    run = None
    if pairs is None:
        run, pairs = term_weights(enc, src, n, runner_of(executor), quiet)
    ids, sizes, index_s, empty = write_variants(folder, pairs, spec.index_threads)
    encode_s = time.perf_counter() - t0 - sum(index_s.values())
    entry = {
        "kind": "deepct", "path": name, "built_at": mf.now(), "doc_count": len(ids),
        "config": {"mode": DEFAULT_MODE if spec.mode == "auto" else spec.mode,
                   "scale": "linear" if spec.scale == "auto" else spec.scale, "query": "plain",
                   "k1": spec.k1 if spec.k1 is not None else DEFAULT_K1,
                   "b": spec.b if spec.b is not None else DEFAULT_B,
                   "analyzer": "bert-words+anserini-english (query side: same, whitespace-matched)",
                   "impact_factor": 100, "query_factor": QUERY_FACTOR, "variants": sorted(sizes)},
        "model": {"path": str(enc.model_dir), "sha256": enc.model_hash, "base": enc.card.get("base_model"),
                  "training": enc.card.get("training", {}).get("settings")},
        "encoder": enc.config(), "corpus_fingerprint": fingerprint,
        "documents_without_terms": empty, "variant_bytes": sizes, "index_seconds": index_s,
        "encode_seconds": round(encode_s, 2), "encoded_by": run.record() if run else shared["encoded_by"],
        "weights_from": "encoded" if run else shared["source"], "spec": asdict(spec),
    }
    if spec.tune and (spec.k1 is None or spec.b is None):
        with folder_runs(folder, entry) as run:
            apply_tuning(entry, tune_bm25(run, entry, enc.card, ids, quiet=quiet,
                                          scales=SCALES if spec.scale == "auto" else (spec.scale,)), spec)
    entry["build_seconds"] = round(time.perf_counter() - t0, 2)
    return entry


def entry_encoder(entry: dict, purpose: str, threads: Optional[int] = 1, stride: bool = False):
    """The DeepCT encoder a sub-index was built with (same weights, checked by hash, same
    window); ``stride`` also restores the window step, which only passage encoding uses."""
    from retrieval.deepct.model import DeepCTEncoder
    from retrieval.models import ModelDirError

    m, cfg = entry.get("model", {}), entry.get("encoder", {})
    if not m.get("path") or not Path(m["path"]).exists():
        raise ModelDirError(f"{purpose} needs the model this index was built with; not found: {m.get('path')}")
    enc = DeepCTEncoder(m["path"], max_length=cfg.get("max_length"), threads=threads,
                        stride=cfg.get("stride") if stride else None, precision=cfg.get("precision", "fp32"))
    if m.get("sha256") and enc.model_hash != m["sha256"]:
        raise ModelDirError(f"model at {m['path']} (sha256 {enc.model_hash}) differs from the one this "
                            f"index was built with ({m['sha256']})")
    return enc


def append_deepct(folder: Path, entry: dict, docs: Sequence[Tuple[str, str]], threads: int = 2,
                  quiet: bool = True, generation: int = 0, executor=None, shared: Optional[dict] = None) -> dict:
    """Encode ``(docid, contents)`` pairs with the sub-index's own model and append them
    to its stored weights and every Lucene variant; returns the updated entry. The
    defaults (mode, scale, k1/b) stay as tuned; the new documents are not tuned on.
    ``shared``: a sharded change's weights (:func:`shared_weights`), used instead of encoding
    when they are this sub-index's encoder's and hold every document; ``added_weights_from``
    records where this change's weights came from."""
    from retrieval.executors import runner_of

    pairs = _from_shared(shared, entry.get("encoder"), [d for d, _t in docs]) if shared else None
    source = "encoded" if pairs is None else shared["source"]
    if pairs is None:
        enc = entry_encoder(entry, "adding documents to a DeepCT sub-index", threads=threads, stride=True)
        _run, pairs = term_weights(enc, docs, len(docs), runner_of(executor), quiet)
    _ids, sizes, _secs, empty = write_variants(folder, pairs, threads, append=True, generation=generation)
    return dict(entry, variant_bytes=sizes, added_weights_from=source,
                documents_without_terms=int(entry.get("documents_without_terms", 0)) + empty)


# ----------------------------------------------------------------------------------- search
class DeepCTRetriever(RetrieverBase):
    """Searches a DeepCT sub-index. ``configure`` switches mode (impact | bm25),
    scale (linear | sqrt), query weighting (plain | deepct) and BM25 k1/b."""

    kind = "deepct"
    options = ("k1", "b", "mode", "scale", "query")  # what Index.configure may set
    merge_rule = "anserini"  # Lucene's order, raw scores merged then rounded as Anserini rounds
    _shard: Optional[tuple] = None  # (stats,) in a with_stats view: a sharded index's summed statistics

    def __init__(self, path: Path, entry: dict):
        self.path = Path(path)
        self.entry = entry
        cfg = entry.get("config", {})
        self.mode = cfg.get("mode", DEFAULT_MODE)
        self.scale = cfg.get("scale", "linear")
        self.query = cfg.get("query", "plain")
        self.k1 = float(cfg.get("k1", DEFAULT_K1))
        self.b = float(cfg.get("b", DEFAULT_B))
        self._searchers: Dict[str, impact.VectorSearcher] = {}
        self._encoder = None
        self._lock = threading.Lock()

    def configure(self, k1: Optional[float] = None, b: Optional[float] = None, mode: Optional[str] = None,
                  scale: Optional[str] = None, query: Optional[str] = None) -> "DeepCTRetriever":
        if mode is not None and mode not in MODES:
            raise ParameterError("{mode} {_got!r} is not a DeepCT mode (choose from: %s)" % ", ".join(MODES),
                                 _got=mode)
        if scale is not None and scale not in SCALES:
            raise ParameterError("{scale} {_got!r} is not a DeepCT weight scale (choose from: %s)"
                                 % ", ".join(SCALES), _got=scale)
        if query is not None and query not in QUERY_MODES:
            raise ParameterError("{query} {_got!r} is not a DeepCT query weighting (choose from: %s)"
                                 % ", ".join(QUERY_MODES), _got=query)
        from indexes.lucene import check_bm25

        check_bm25(k1, b)
        if (k1 is not None or b is not None) and (mode or self.mode) != "bm25":
            raise ParameterError("{k1}/{b} apply to the DeepCT sub-index only in bm25 mode (its default mode is "
                                 "{_mode!r})", _mode=self.mode)
        self.mode, self.scale, self.query = mode or self.mode, scale or self.scale, query or self.query
        self.k1 = self.k1 if k1 is None else float(k1)
        self.b = self.b if b is None else float(b)
        return self

    def _searcher(self, mode: str, scale: str) -> impact.VectorSearcher:
        v = variant_name(mode, scale)
        with self._lock:
            s = self._searchers.get(v)
            if s is None:
                s = self._searchers[v] = open_variant(self.path, mode, scale, self.k1, self.b)
        return s if self._shard is None else s.with_stats(self._shard[0])

    def collection_stats(self, texts: Sequence[str]) -> Optional[dict]:
        """What BM25 over pseudo term frequencies reads for these queries in the variant searched (None in
        impact mode); a sharded index sums them over its shards."""
        s = self._searcher(self.mode, self.scale)
        s.set_bm25(self.k1, self.b)
        return s.collection_stats(self.query_terms(list(texts)))

    def with_stats(self, stats) -> "DeepCTRetriever":
        """The same retriever scoring with a sharded index's summed ``stats``, raw float scores."""
        import copy

        view = copy.copy(self)
        view._shard = (stats,)
        return view

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = entry_encoder(self.entry, "DeepCT-Query", threads=1)
        return self._encoder

    def query_terms(self, texts: Sequence[str], query: Optional[str] = None) -> List[Dict[str, int]]:
        """Integer query term weights: counts (plain) or DeepCT-Query weights."""
        if (query or self.query) == "deepct":
            out = []
            for w, text in zip(self.encoder.query_weights(list(texts)), texts):
                q = {t: max(1, round(v * QUERY_FACTOR)) for t, v in w.items()}
                out.append(q)
            return out
        return plain_query_terms(texts)

    def search(self, text: str, k: int) -> Scored:
        return self.batch_search([Query("q", text)], k)["q"]

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        s = self._searcher(self.mode, self.scale)
        s.set_bm25(self.k1, self.b)
        weights = self.query_terms([q.text for q in queries])
        return s.batch(weights, [q.qid for q in queries], k, threads)

    def explain(self, text: str, docid: str, ranked: Scored) -> Explained:
        """Each query term the passage has, in the variant searched (mode and scale): in impact mode
        the query weight times the stored impact; in bm25 mode Lucene's BM25 explanation over the
        pseudo term frequencies (the stored weights)."""
        from indexes.lucene import BM25_COLUMNS, IMPACT_COLUMNS, explain_notes

        s = self._searcher(self.mode, self.scale)
        s.set_bm25(self.k1, self.b)
        weights = self.query_terms([text])[0]
        ex = s.explain(weights, docid, dict(ranked).get(docid))
        if ex is None:
            return Explained(None, notes=["not in this DeepCT variant (Anserini skips a passage without a term "
                                          "of weight 1 or more)"])
        qw = "DeepCT-Query weight" if self.query == "deepct" else "the term's count in the query"
        if self.mode == "impact":
            formula = f"sum over the query's terms of query weight ({qw}) x stored impact ({self.scale} scale)"
        else:
            formula = (f"BM25 (k1={self.k1:g}, b={self.b:g}) over pseudo term frequencies (the stored {self.scale} "
                       f"weights): sum of qw ({qw}) x idf x tf-part, tf-part = tf / (tf + k1 x len-norm)")
        return Explained(ex["score"], ex["parts"], formula=formula, notes=explain_notes(ex),
                         columns=IMPACT_COLUMNS if self.mode == "impact" else BM25_COLUMNS,
                         details={**ex["statistics"], "mode": self.mode, "scale": self.scale, "query": self.query,
                                  "k1": self.k1, "b": self.b, "query_weights": weights, "raw": ex["raw"],
                                  "lucene": ex["lucene"], "unmatched": ex["unmatched"]})

    def close(self) -> None:
        if self._shard is not None:  # a view: the searchers are its retriever's
            return
        with self._lock:
            for s in self._searchers.values():
                s.close()
            self._searchers.clear()

    def search_filtered(self, text: str, k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` in this retriever's ranking."""
        s = self._searcher(self.mode, self.scale)
        s.set_bm25(self.k1, self.b)
        return s.search_filtered(self.query_terms([text])[0], k, allowed)


class DeepCTKind(SubIndexKind):
    name = "deepct"
    uses_model = True
    alias_fields = ("variant_bytes", "documents_without_terms")  # the -query alias shares these folders

    def build(self, folder: Path, name: str, ctx: BuildContext, spec: DeepCTSpec) -> dict:
        return build_deepct(folder, name, ctx.store_path, spec, ctx.fingerprint, quiet=ctx.quiet,
                            executor=ctx.executor, shared=ctx.shared_part())

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        if entry.get("alias_of"):  # deepct-query shares its target's folder: the writer mirrors the target
            return entry
        return append_deepct(folder, entry, [(d.docid, d.contents) for d in docs], threads=ctx.threads,
                             quiet=ctx.quiet, generation=ctx.generation, executor=ctx.executor,
                             shared=ctx.shared_part())

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        if entry.get("alias_of"):
            return entry
        return dict(entry, variant_bytes=impact.delete(folder, variants_of(entry), docids))

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        """Every variant with its deleted documents expunged; one weights file holding the live
        passages' latest weights, in the document store's order (as a fresh build writes it)."""
        if entry.get("alias_of"):
            return entry
        sizes = impact.expunge(folder, variants_of(entry))
        empty = compact_weights(folder, [d for d, _t in ctx.docs()])
        return dict(entry, variant_bytes=sizes, documents_without_terms=empty)

    def retriever(self, folder: Path, entry: dict) -> DeepCTRetriever:
        return DeepCTRetriever(folder, entry)

    def reopen(self, old, folder: Path, entry: dict) -> DeepCTRetriever:
        r = DeepCTRetriever(folder, entry)
        if isinstance(old, DeepCTRetriever) and old.entry.get("model") == entry.get("model"):
            r._encoder = old._encoder
        return r

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        return impact.counts(folder, variants_of(entry))

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        return impact.live(folder, variants_of(entry))

    def present(self, folder: Path, entry: dict, docids: Sequence[str]) -> Dict[str, set]:
        return impact.present(folder, variants_of(entry), docids)

    def entries(self, name: str, entry: dict) -> Dict[str, dict]:
        return with_alias(name, entry)

    def after_add(self, index, name: str, spec: DeepCTSpec, quiet: bool = False) -> None:
        """Tune ``bm25+<name>`` on the model's held-out training queries, when there are any."""
        if spec.tune_fusion and "bm25" in index.retrievers:
            tune_default_fusion(index, name, quiet=quiet)

    def encode_documents(self, docs: Sequence, spec=None, entry: Optional[dict] = None, quiet: bool = False,
                         executor=None, threads: int = 2, given=None) -> Optional[dict]:
        """The term weights of ``docs`` for a build or change, made in one pass (:func:`shared_weights`)."""
        if entry is not None and entry.get("alias_of"):
            return None
        return shared_weights(docs, spec=spec, entry=entry, quiet=quiet, executor=executor, threads=threads)

    def untuned(self, spec: DeepCTSpec) -> DeepCTSpec:
        """``spec`` without tuning: :meth:`choose` chooses afterwards, once, over the whole index."""
        return replace(spec, tune=False, tune_fusion=False) if tunes(spec) else spec

    def choose(self, index, name: str, spec: DeepCTSpec, quiet: bool = False):
        """The mode, scale, k1/b and ``bm25+<name>`` fusion one folder's build of ``spec`` would
        choose, chosen on the model's held-out training queries through ``index``'s search
        (:func:`retrieval.deepct.tuning.choose`)."""
        if not tunes(spec):
            return None
        return choose(index, name, spec, spec.tune_fusion, quiet=quiet)

    def spec_of(self, entry: dict, **changes) -> DeepCTSpec:
        """The spec ``entry`` records (the fields :class:`DeepCTSpec` has), with ``changes``."""
        d = dict(entry.get("spec", {}), **changes)
        return DeepCTSpec(**{k: v for k, v in d.items() if k in DeepCTSpec.__dataclass_fields__})


KIND = DeepCTKind()
