"""The DeepCT sub-index (Dai & Callan 2019): passage term weights from a DeepCT
model, written into real Lucene indexes through Anserini, and its retriever.

    INDEX/deepct/weights.jsonl.gz     raw term weights per passage (to derive variants without re-encoding);
                                      passages added later: weights-g<N>.jsonl.gz, one file per generation,
                                      merged into weights.jsonl.gz by compaction
    INDEX/deepct/impact-linear/       JsonVectorCollection -impact -pretokenized, tf = round(w*100)
    INDEX/deepct/impact-sqrt/         the same with round(sqrt(w)*100)
    INDEX/deepct/bm25-linear/         JsonVectorCollection -pretokenized (no -impact): the weights become
    INDEX/deepct/bm25-sqrt/           pseudo term frequencies under BM25 (k1/b tuned)

Terms are BERT words passed through Anserini's English analyzer (see
:mod:`retrieval.deepct.targets`); queries go through the same function, and are
then matched with a whitespace analyzer (the index is pre-tokenised), so stems
are never stemmed twice. With DeepCT-Query the model weights the query terms too.

The manifest gets two entries over the same folder: ``deepct`` (plain query
terms) and ``deepct-query`` (DeepCT-Query weights), both ``kind: "deepct"``.
"""
from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Dict, Iterable, List, Optional, Sequence, Tuple

from indexes import manifest as mf
from indexes.atomic import atomic_path
from indexes.errors import InputError, ParameterError, RetrError
from indexes.lucene import LuceneIndex, build_lucene
from retrieval.kinds import BuildContext, RetrieverBase, SubIndexKind
from retrieval.progress import progress
from retrieval.types import Query, Scored

MODES = ("impact", "bm25")
SCALES = ("linear", "sqrt")
QUERY_MODES = ("plain", "deepct")
DEFAULT_MODE = "bm25"            # fallback without held-out queries: BM25 over pseudo-tf beat impacts on
                                 # SciFact (both bodies) and NFCorpus (benchmarks/results/deepct.md)
DEFAULT_K1, DEFAULT_B = 20.0, 0.9  # BM25 over pseudo-tf when no dev queries are at hand to tune on
K1_GRID = (0.9, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0)
B_GRID = (0.4, 0.6, 0.75, 0.9, 1.0)
QUERY_FACTOR = 10.0              # DeepCT-Query: query term weight = max(1, round(w * 10))
WEIGHTS_FILE = "weights.jsonl.gz"


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

    def validate(self) -> "DeepCTSpec":
        if self.mode not in MODES + ("auto",):
            raise InputError(f"unknown DeepCT mode {self.mode!r} (choose from: auto, {', '.join(MODES)})")
        if self.scale not in SCALES + ("auto",):
            raise InputError(f"unknown DeepCT scale {self.scale!r} (choose from: auto, {', '.join(SCALES)})")
        if self.batch_size < 1:
            raise InputError("batch size must be positive")
        from retrieval.deepct.model import load_model  # noqa: F401  (fail early on a bad folder below)
        from retrieval.deepct.model import is_deepct_dir
        from retrieval.models import ModelDirError, resolve_model_path

        p = Path(self.model).expanduser()
        if not p.exists():
            raise ModelDirError(f"DeepCT model folder not found: {p}")
        resolve_model_path(p)  # config, weights, tokenizer
        if not is_deepct_dir(p):
            raise ModelDirError(f"{p}: not a DeepCT model (no deepct_head.safetensors); train one with "
                                "`retr train deepct`")
        return self


# ----------------------------------------------------------------------------------- Lucene
def _index_vectors(vectors, folder: Path, impact: bool, threads: int, append: bool = False) -> float:
    """JsonVectorCollection -> Lucene; with ``impact`` an impact index, else a BM25
    index whose term frequencies are the weights (whitespace-analysed, pre-tokenised).
    ``append`` adds the documents to the index already in ``folder``."""
    return float(build_lucene(vectors, folder, threads=threads, impact=impact, pretokenized=True,
                              append=append)["seconds"])


class _Searcher:
    """One Lucene variant of the DeepCT folder: impact (integer query weights) or
    BM25 (whitespace analyser, repeated query terms), ranked as Anserini's
    SimpleImpactSearcher / SimpleSearcher rank (see :class:`indexes.lucene.LuceneIndex`)."""

    def __init__(self, path: Path, impact: bool, k1: float, b: float):
        self.impact = impact
        self._index = LuceneIndex(path, impact=impact, k1=k1, b=b, analyzer=None if impact else "whitespace")
        self._lock = threading.Lock()

    def set_bm25(self, k1: float, b: float) -> None:
        if not self.impact:
            self._index.set_bm25(float(k1), float(b))

    def _query(self, weights: Dict[str, int]):
        if self.impact:
            return weights
        # BM25: Anserini's bag-of-words query boosts a term by its count in the query text
        return " ".join(t for t, w in weights.items() for _ in range(int(w)))

    def batch(self, weights: Sequence[Dict[str, int]], qids: Sequence[str], k: int, threads: int
              ) -> Dict[str, Scored]:
        todo = [(q, w) for q, w in zip(qids, weights) if w]
        out: Dict[str, Scored] = {q: [] for q in qids}
        if not todo:
            return out
        with self._lock:
            res = self._index.batch_search([self._query(w) for _, w in todo], [str(q) for q, _ in todo], k, threads)
        out.update(res)
        return out


    def search_filtered(self, weights: Dict[str, int], k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` in this variant's ranking (Lucene FILTER clause)."""
        if not weights:
            return []
        with self._lock:
            return self._index.search_filtered(self._query(weights), k, allowed)


def variant_name(mode: str, scale: str) -> str:
    return f"{mode}-{scale}"


# ----------------------------------------------------------------------------------- build
def _write_deepct(folder: Path, pairs: Iterable[Tuple[str, Dict[str, float]]], threads: int,
                  append: bool = False, generation: int = 0) -> Tuple[List[str], Dict[str, int], Dict[str, float], int]:
    """Store the raw weights of ``(docid, weights)`` pairs and write (or, with ``append``, extend)
    every Lucene variant; returns (docids, bytes per variant, indexing seconds per variant,
    documents without terms). ``pairs`` is a stream: weights and each scale's impacts are
    written to disk as they come, so memory stays flat whatever the corpus size. Added
    weights go to a file of their own, ``weights-g<N>.jsonl.gz``: the folder is a hard-link
    copy of the previous generation's, whose files must not change."""
    from retrieval.deepct.model import to_impacts

    ids: List[str] = []
    spools = {scale: folder / f".impacts-{scale}.jsonl" for scale in SCALES}
    empty = 0
    files = {scale: open(p, "w", encoding="utf-8") for scale, p in spools.items()}
    try:
        def rows():
            nonlocal empty
            for d, w in pairs:
                ids.append(d)
                for scale, fh in files.items():
                    imp = to_impacts(w, scale)
                    if scale == "linear" and not imp:
                        empty += 1
                    fh.write(json.dumps([d, imp]) + "\n")
                yield d, w

        _write_weights(folder / (f"weights-g{int(generation)}.jsonl.gz" if append else WEIGHTS_FILE), rows())
        for fh in files.values():
            fh.close()

        def read(scale):
            with open(spools[scale], encoding="utf-8") as fh:
                for line in fh:
                    d, imp = json.loads(line)
                    yield d, imp

        sizes, index_s = {}, {}
        for scale in SCALES:
            for mode in MODES:
                v = variant_name(mode, scale)
                # an empty vector would make Anserini skip the document; keep it findable by id only
                index_s[v] = round(_index_vectors(read(scale), folder / v, impact=(mode == "impact"),
                                                  threads=threads, append=append), 2)
                sizes[v] = mf.folder_size(folder / v)
    finally:
        for scale, fh in files.items():
            fh.close()
            spools[scale].unlink(missing_ok=True)
    return ids, sizes, index_s, empty


def _weights(enc, docs, total: Optional[int], runner, quiet: bool, desc: str = "DeepCT encoding"):
    """``(BlockRun, stream of (docid, term weights))``: the model runs where ``runner`` says,
    the words are stemmed here (the analyzer needs the JVM, which stays in this process)."""
    from retrieval.deepct.model import terms_of_words

    run = runner.map(enc.stage(), docs, total=total, desc=desc, quiet=quiet, threads=None)

    def stream():
        for ids, words in run:
            yield from zip(ids, terms_of_words(words, enc.prep.an))

    return run, stream()


def _write_weights(path: Path, rows) -> None:
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        for d, w in rows:
            f.write(json.dumps({"id": d, "w": {t: round(v, 5) for t, v in w.items()}}) + "\n")


def _weight_files(folder: Path) -> List[Path]:
    import re

    extra = sorted((int(m.group(1)), p) for p in Path(folder).iterdir()
                   if (m := re.match(r"^weights-g(\d+)\.jsonl\.gz$", p.name)))
    base = Path(folder) / WEIGHTS_FILE
    return ([base] if base.exists() else []) + [p for _g, p in extra]


def read_weights(folder: Path):
    """``(docid, {term: weight})`` of every passage the folder's weight files hold, in the order
    they were written (the build's, then each addition's); a later row of a docid replaces an
    earlier one (an update), and deleted documents are still there until compaction."""
    for p in _weight_files(folder):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                yield o["id"], o["w"]


def build_deepct(folder: Path, name: str, store_path: Path, spec: DeepCTSpec, fingerprint: str,
                 quiet: bool = False, executor=None) -> dict:
    """Encode every document of the store with the DeepCT model and write the
    Lucene variants into ``folder``; returns the manifest entry. ``executor``: an
    opened runner of :mod:`retrieval.executors` (None: in-process)."""
    from retrieval.deepct.model import DeepCTEncoder
    from retrieval.executors import StoreSource, runner_of

    spec.validate()
    t0 = time.perf_counter()
    enc = DeepCTEncoder(spec.model, device=spec.device, max_length=spec.max_length, batch_size=spec.batch_size,
                        stride=spec.stride, threads=spec.threads)
    src = StoreSource(store_path)
    n = len(src)
    if not n:
        raise InputError("no documents to encode")
    run, pairs = _weights(enc, src, n, runner_of(executor), quiet)
    ids, sizes, index_s, empty = _write_deepct(folder, pairs, spec.index_threads)
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
        "encode_seconds": round(encode_s, 2), "encoded_by": run.record(), "spec": asdict(spec),
    }
    if spec.tune and (spec.k1 is None or spec.b is None):
        apply_tuning(entry, tune_bm25(folder, entry, enc.card, ids, quiet=quiet,
                                      scales=SCALES if spec.scale == "auto" else (spec.scale,)), spec)
    entry["build_seconds"] = round(time.perf_counter() - t0, 2)
    return entry


def apply_tuning(entry: dict, tuning: Optional[dict], spec: DeepCTSpec) -> None:
    """Set the entry's default k1/b and, where the spec leaves them on auto, its mode
    and scale from ``tune_bm25``'s dev-query scores (no-op without dev queries)."""
    if not tuning:
        return
    entry["tuning"] = tuning
    cfg, best, m = entry["config"], tuning["best"], tuning["measure"]
    cfg["k1"], cfg["b"] = best["k1"], best["b"]
    # candidates in order of preference on a tie: the documented default mode first, linear before sqrt
    cands = []
    if spec.mode in ("auto", "bm25"):
        cands.append((best[m], "bm25", best["scale"]))
    if spec.mode in ("auto", "impact"):
        cands += [(tuning[f"impact-{s}"], "impact", s) for s in tuning["scales"]]
    _v, cfg["mode"], cfg["scale"] = max(cands, key=lambda c: c[0])  # max keeps the first of equals
    tuning["mode_choice"] = (f"{cfg['mode']}-{cfg['scale']} (dev {m}: "
                             + ", ".join(f"{mo}-{sc} {x}" for x, mo, sc in cands) + ")")


def dev_queries_of(card: dict, docids: Sequence[str]) -> Optional[Tuple[List[Query], Dict[str, Dict[str, int]]]]:
    """The held-out training queries recorded in a model card, with their qrels,
    when the files are still there and the qrels point into this corpus."""
    from retrieval.collections import read_queries
    from retrieval.deepct.targets import read_qrels_pairs

    data = card.get("data", {})
    dev = data.get("dev_queries") or []
    qp, rp = data.get("queries"), data.get("qrels")
    if not dev or not qp or not rp or not Path(qp).exists() or not Path(rp).exists():
        return None
    qrels = {q: j for q, j in read_qrels_pairs(rp).items() if q in set(dev)}
    known = set(docids)
    judged = sum(1 for j in qrels.values() for d in j if d in known)
    total = sum(len(j) for j in qrels.values())
    if not total or judged < 0.5 * total:
        return None  # the model was trained for another corpus
    qs = [q for q in read_queries(qp) if q.qid in qrels]
    return (qs, qrels) if qs else None


def tune_bm25(folder: Path, entry: dict, card: dict, docids: Sequence[str], quiet: bool = True,
              measure: str = "nDCG@10", scales: Sequence[str] = SCALES) -> Optional[dict]:
    """Grid-search scale x k1 x b of BM25-over-pseudo-tf on the model's held-out
    training queries (never test queries); also scores the impact variants of
    each scale, so that the mode and scale can be chosen from the same queries."""
    from eval import evaluate

    got = dev_queries_of(card, docids)
    if got is None:
        return None
    qs, qrels = got
    r = DeepCTRetriever(folder, entry)
    plain = r.query_terms([q.text for q in qs])
    qids = [q.qid for q in qs]
    out = {"queries": len(qs), "measure": measure, "source": card.get("data", {}).get("qrels"),
           "scales": list(scales), "grid": {}}
    for scale in scales:
        run = r._searcher("impact", scale).batch(plain, qids, 1000, 2)
        out[f"impact-{scale}"] = round(evaluate(qrels, _run(run), [measure])[measure], 4)
    best = None
    grid = [(sc, k1, b) for sc in scales for k1 in K1_GRID for b in B_GRID]
    for scale, k1, b in progress(grid, desc="tuning scale, k1, b on dev queries", quiet=quiet):
        s = r._searcher("bm25", scale)
        s.set_bm25(k1, b)
        v = evaluate(qrels, _run(s.batch(plain, qids, 1000, 2)), [measure])[measure]
        out["grid"][f"{scale}:{k1}/{b}"] = round(v, 4)
        if best is None or v > best[0] + 1e-12:  # the first of equals: linear before sqrt, small k1 first
            best = (v, scale, k1, b)
    out["best"] = {"scale": best[1], "k1": best[2], "b": best[3], measure: round(best[0], 4)}
    return out


def _run(res: Dict[str, Scored]) -> Dict[str, Dict[str, float]]:
    return {q: {d: s for d, s in hits} for q, hits in res.items()}


def with_alias(name: str, entry: dict) -> Dict[str, dict]:
    """``name`` and its DeepCT-Query alias ``<name>-query`` over the same folder."""
    q_entry = dict(entry, config=dict(entry["config"], query="deepct"), alias_of=name)
    q_entry.pop("tuning", None)
    return {name: entry, f"{name}-query": q_entry}


def _record(path: Path, name: str, entry: dict, tune_fusion: bool, quiet: bool):
    """Write ``name`` and its DeepCT-Query alias into the manifest, then tune the fusion."""
    from indexes import folder as owner
    from retrieval.index import Index

    def record(ch):
        if ch.old["subindexes"].get(name, {}).get("path") != entry["path"]:
            raise InputError(f"sub-index {name!r} changed (another writer) while it was being tuned; run it again",
                             path)
        for n, e in with_alias(name, entry).items():
            ch.new["subindexes"][n] = e

    owner.commit_manifest(path, record)  # a generation of its own: readers of the current one keep it
    idx = Index.open(path)
    if tune_fusion and "bm25" in idx.retrievers:
        tune_default_fusion(idx, name, quiet=quiet)
    return Index.open(path)


def retune_deepct(index, name: str = "deepct", mode: str = "auto", scale: str = "auto", quiet: bool = True,
                  tune_fusion: bool = True):
    """Choose a built DeepCT sub-index's defaults again (mode, scale, k1/b, then the
    ``bm25+<name>`` fusion) on its model's held-out training queries, without
    re-encoding: every variant is already on disk. For folders built before the
    scale was tuned, or to pin a mode/scale. Returns the reopened index."""
    from retrieval.deepct.model import CARD_FILE

    entry = index.manifest["subindexes"].get(name)
    if entry is None or entry.get("kind") != "deepct" or entry.get("alias_of"):
        raise InputError(f"{index.path}: no DeepCT sub-index named {name!r}")
    card_path = Path(entry["model"]["path"]) / CARD_FILE
    if not card_path.is_file():
        raise InputError(f"{card_path}: the DeepCT model card is missing; its dev queries are needed to tune")
    if mode not in MODES + ("auto",) or scale not in SCALES + ("auto",):
        raise InputError(f"mode must be auto|{'|'.join(MODES)} and scale auto|{'|'.join(SCALES)}")
    entry = json.loads(json.dumps(entry))  # a private copy
    spec_d = dict(entry.get("spec", {}), mode=mode, scale=scale, k1=None, b=None, tune=True)
    spec = DeepCTSpec(**{k: v for k, v in spec_d.items() if k in DeepCTSpec.__dataclass_fields__})
    tuning = tune_bm25(index.path / entry["path"], entry, json.loads(card_path.read_text()),
                       [d for d, *_ in index.docstore.iter_docs()], quiet=quiet,
                       scales=SCALES if scale == "auto" else (scale,))
    if tuning is None:
        raise InputError(f"{card_path}: the model card names no held-out training queries for this corpus")
    apply_tuning(entry, tuning, spec)
    entry["spec"] = asdict(spec)
    return _record(index.path, name, entry, tune_fusion, quiet)


def tune_default_fusion(idx, name: str = "deepct", quiet: bool = True) -> Optional[dict]:
    """Tune ``bm25+<name>`` (retrieval.tune) on the model card's held-out training
    queries and store it as the folder's default fusion; None without such queries."""
    from retrieval.deepct.model import CARD_FILE
    from retrieval.tune import tune

    entry = idx.manifest["subindexes"][name]
    card_path = Path(entry["model"]["path"]) / CARD_FILE
    if not card_path.is_file():
        return None
    got = dev_queries_of(json.loads(card_path.read_text()), [d for d, *_ in idx.docstore.iter_docs()])
    if got is None:
        return None
    qs, qrels = got
    return tune(idx, qs, qrels, retriever=f"bm25+{name}", qrels_path=entry["model"]["path"] + " (dev split)",
                save=True, quiet=quiet)


def entry_encoder(entry: dict, purpose: str, threads: Optional[int] = 1, stride: bool = False):
    """The DeepCT encoder a sub-index was built with (same weights, checked by hash, same
    window); ``stride`` also restores the window step, which only passage encoding uses."""
    from retrieval.deepct.model import DeepCTEncoder
    from retrieval.models import ModelDirError

    m, cfg = entry.get("model", {}), entry.get("encoder", {})
    if not m.get("path") or not Path(m["path"]).exists():
        raise ModelDirError(f"{purpose} needs the model this index was built with; not found: {m.get('path')}")
    enc = DeepCTEncoder(m["path"], max_length=cfg.get("max_length"), threads=threads,
                        stride=cfg.get("stride") if stride else None)
    if m.get("sha256") and enc.model_hash != m["sha256"]:
        raise ModelDirError(f"model at {m['path']} (sha256 {enc.model_hash}) differs from the one this "
                            f"index was built with ({m['sha256']})")
    return enc


def append_deepct(folder: Path, entry: dict, docs: Sequence[Tuple[str, str]], threads: int = 2,
                  quiet: bool = True, generation: int = 0, executor=None) -> dict:
    """Encode ``(docid, contents)`` pairs with the sub-index's own model and append them
    to its stored weights and every Lucene variant; returns the updated entry. The
    defaults (mode, scale, k1/b) stay as tuned; the new documents are not tuned on."""
    from retrieval.executors import runner_of

    enc = entry_encoder(entry, "adding documents to a DeepCT sub-index", threads=threads, stride=True)
    _run, pairs = _weights(enc, docs, len(docs), runner_of(executor), quiet)
    _ids, sizes, _secs, empty = _write_deepct(folder, pairs, threads, append=True, generation=generation)
    return dict(entry, variant_bytes=sizes,
                documents_without_terms=int(entry.get("documents_without_terms", 0)) + empty)


# ----------------------------------------------------------------------------------- search
class DeepCTRetriever(RetrieverBase):
    """Searches a DeepCT sub-index. ``configure`` switches mode (impact | bm25),
    scale (linear | sqrt), query weighting (plain | deepct) and BM25 k1/b."""

    kind = "deepct"
    options = ("k1", "b", "mode", "scale", "query")  # what Index.configure may set

    def __init__(self, path: Path, entry: dict):
        self.path = Path(path)
        self.entry = entry
        cfg = entry.get("config", {})
        self.mode = cfg.get("mode", DEFAULT_MODE)
        self.scale = cfg.get("scale", "linear")
        self.query = cfg.get("query", "plain")
        self.k1 = float(cfg.get("k1", DEFAULT_K1))
        self.b = float(cfg.get("b", DEFAULT_B))
        self._searchers: Dict[str, _Searcher] = {}
        self._encoder = None
        self._lock = threading.Lock()

    def configure(self, k1: Optional[float] = None, b: Optional[float] = None, mode: Optional[str] = None,
                  scale: Optional[str] = None, query: Optional[str] = None) -> "DeepCTRetriever":
        if mode is not None and mode not in MODES:
            raise InputError(f"unknown DeepCT mode {mode!r} (choose from: {', '.join(MODES)})")
        if scale is not None and scale not in SCALES:
            raise InputError(f"unknown DeepCT scale {scale!r} (choose from: {', '.join(SCALES)})")
        if query is not None and query not in QUERY_MODES:
            raise InputError(f"unknown query weighting {query!r} (choose from: {', '.join(QUERY_MODES)})")
        from retrieval.bm25 import check_bm25

        check_bm25(k1, b)
        if (k1 is not None or b is not None) and (mode or self.mode) != "bm25":
            raise ParameterError("{k1}/{b} apply to the DeepCT sub-index only in bm25 mode (its default mode is "
                                 "{_mode!r})", _mode=self.mode)
        self.mode, self.scale, self.query = mode or self.mode, scale or self.scale, query or self.query
        self.k1 = self.k1 if k1 is None else float(k1)
        self.b = self.b if b is None else float(b)
        return self

    def _searcher(self, mode: str, scale: str) -> _Searcher:
        v = variant_name(mode, scale)
        with self._lock:
            s = self._searchers.get(v)
            if s is None:
                if not (self.path / v).exists():
                    raise RetrError(f"{self.path}: DeepCT variant {v!r} is missing")
                s = self._searchers[v] = _Searcher(self.path / v, mode == "impact", self.k1, self.b)
        return s

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = entry_encoder(self.entry, "DeepCT-Query", threads=1)
        return self._encoder

    def query_terms(self, texts: Sequence[str], query: Optional[str] = None) -> List[Dict[str, int]]:
        """Integer query term weights: counts (plain) or DeepCT-Query weights."""
        from retrieval.deepct.targets import analyzer

        if (query or self.query) == "deepct":
            out = []
            for w, text in zip(self.encoder.query_weights(list(texts)), texts):
                q = {t: max(1, round(v * QUERY_FACTOR)) for t, v in w.items()}
                out.append(q)
            return out
        an = analyzer()
        return [dict(Counter(an.terms(t))) for t in texts]

    def search(self, text: str, k: int) -> Scored:
        return self.batch_search([Query("q", text)], k)["q"]

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        s = self._searcher(self.mode, self.scale)
        s.set_bm25(self.k1, self.b)
        weights = self.query_terms([q.text for q in queries])
        return s.batch(weights, [q.qid for q in queries], k, threads)

    def close(self) -> None:
        with self._lock:
            for s in self._searchers.values():
                s._index.close()
            self._searchers.clear()


    def search_filtered(self, text: str, k: int, allowed) -> Scored:
        """The first ``k`` documents of ``allowed`` in this retriever's ranking."""
        s = self._searcher(self.mode, self.scale)
        s.set_bm25(self.k1, self.b)
        return s.search_filtered(self.query_terms([text])[0], k, allowed)


class DeepCTKind(SubIndexKind):
    name = "deepct"
    alias_fields = ("variant_bytes", "documents_without_terms")  # the -query alias shares these folders

    def build(self, folder: Path, name: str, ctx: BuildContext, spec: DeepCTSpec) -> dict:
        return build_deepct(folder, name, ctx.store_path, spec, ctx.fingerprint, quiet=ctx.quiet,
                            executor=ctx.executor)

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        if entry.get("alias_of"):  # deepct-query shares its target's folder: the writer mirrors the target
            return entry
        return append_deepct(folder, entry, [(d.docid, d.contents) for d in docs], threads=ctx.threads,
                             quiet=ctx.quiet, generation=ctx.generation, executor=ctx.executor)

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        if entry.get("alias_of"):
            return entry
        from indexes.lucene import change_index

        for v in _variants(entry):
            change_index(folder / v, delete=docids)
        return dict(entry, variant_bytes={v: mf.folder_size(folder / v) for v in _variants(entry)})

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        """Every variant with its deleted documents expunged; one weights file holding the live
        passages' latest weights, in the document store's order (as a fresh build writes it)."""
        if entry.get("alias_of"):
            return entry
        from indexes.lucene import change_index
        from retrieval.deepct.model import to_impacts

        for v in _variants(entry):
            change_index(folder / v, expunge=True)
        latest = dict(read_weights(folder))
        order = [d for d, _t in ctx.docs()]
        missing = [d for d in order if d not in latest]
        if missing:
            raise RetrError(f"{folder}: no stored DeepCT weights for {len(missing)} document(s) "
                            f"(first: {missing[0]!r})")
        old = _weight_files(folder)
        _write_weights(folder / WEIGHTS_FILE, ((d, latest[d]) for d in order))
        for p in old:
            if p.name != WEIGHTS_FILE:
                p.unlink()
        empty = sum(1 for d in order if not to_impacts(latest[d], "linear"))
        return dict(entry, variant_bytes={v: mf.folder_size(folder / v) for v in _variants(entry)},
                    documents_without_terms=empty)

    def retriever(self, folder: Path, entry: dict) -> DeepCTRetriever:
        return DeepCTRetriever(folder, entry)

    def reopen(self, old, folder: Path, entry: dict) -> DeepCTRetriever:
        r = DeepCTRetriever(folder, entry)
        if isinstance(old, DeepCTRetriever) and old.entry.get("model") == entry.get("model"):
            r._encoder = old._encoder
        return r

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        from indexes.lucene import doc_count

        return {v: doc_count(folder / v) for v in _variants(entry)}

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        from indexes.lucene import live_ids

        return {v: live_ids(folder / v) for v in _variants(entry)}

    def present(self, folder: Path, entry: dict, docids: Sequence[str]) -> Dict[str, set]:
        from indexes.lucene import present_ids

        return {v: set(present_ids(folder / v, docids)) for v in _variants(entry)}

    def entries(self, name: str, entry: dict) -> Dict[str, dict]:
        return with_alias(name, entry)

    def after_add(self, index, name: str, spec: DeepCTSpec, quiet: bool = False) -> None:
        """Tune ``bm25+<name>`` on the model's held-out training queries, when there are any."""
        if spec.tune_fusion and "bm25" in index.retrievers:
            tune_default_fusion(index, name, quiet=quiet)


def _variants(entry: dict) -> List[str]:
    return list(entry.get("config", {}).get("variants", []))


KIND = DeepCTKind()
