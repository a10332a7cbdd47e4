"""Choosing a DeepCT sub-index's defaults on its model's held-out training queries
(never test queries): the mode and weight scale, BM25's k1/b over pseudo term
frequencies, then the folder's default ``bm25+<name>`` fusion.

A build tunes (``DeepCTSpec.tune``, :func:`tune_bm25` then :func:`apply_tuning`);
:func:`retune_deepct` chooses again on a built folder, without re-encoding (every
variant is on disk), as a manifest-only generation of its own.

Choosing again (:func:`retune_deepct`) and a sharded build's choice (issue #30) take one path over any
:class:`retrieval.searcher.Searcher`, a folder or a sharded folder alike: :func:`choose` runs the same
grid through the index's own search (:func:`search_runs`; a sharded index's global statistics make every
run equal the run of one folder holding every document) and the same fusion tuning, and returns the
choice as one edit of the index's record, which ``begin_change`` commits (a folder: one generation; a
sharded index: every shard, one commit). A sharded build builds its shards without choosing
(``DeepCTKind.untuned``) and asks ``DeepCTKind.choose`` once over the whole index: a shard's own
documents and statistics would choose otherwise, and its default runs would then differ from the folder's.

The kind (:mod:`retrieval.deepct.subindex`) imports this module, so this one reaches
the kind, where it needs its spec, through the registry (:func:`retrieval.kinds.kind_of`).
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from indexes.errors import InputError, ParameterError
from retrieval.deepct.weights import (DEFAULT_B, DEFAULT_K1, MODES, SCALES, open_variant, plain_query_terms,
                                      variant_name)
from retrieval.progress import progress
from retrieval.types import Query, Scored

K1_GRID = (0.9, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0)
B_GRID = (0.4, 0.6, 0.75, 0.9, 1.0)


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


#: ``run(queries, mode, scale, k1, b)``: each query's first 1000 ``(docid, score)`` in the variant
#: ``mode-scale`` (k1/b: BM25 over pseudo term frequencies; None in impact mode), as a search of the
#: sub-index's default retriever with those options returns them (:func:`folder_runs`, :func:`search_runs`)
Runs = Callable[[Sequence[Query], str, str, Optional[float], Optional[float]], Dict[str, Scored]]


def tune_bm25(run: Runs, entry: dict, card: dict, docids: Sequence[str], quiet: bool = True,
              measure: str = "nDCG@10", scales: Sequence[str] = SCALES) -> Optional[dict]:
    """Grid-search scale x k1 x b of BM25-over-pseudo-tf on the model's held-out
    training queries (never test queries); also scores the impact variants of
    each scale, so that the mode and scale can be chosen from the same queries.
    ``run`` searches one configuration: one folder's variants (:func:`folder_runs`) or a
    searcher's search of the sub-index (:func:`search_runs`), which rank alike."""
    from eval import evaluate

    got = dev_queries_of(card, docids)
    if got is None:
        return None
    qs, qrels = got
    out = {"queries": len(qs), "measure": measure, "source": card.get("data", {}).get("qrels"),
           "scales": list(scales), "grid": {}}
    for scale in scales:  # the impact variants first: a run's options only grow (k1/b come with bm25)
        v = evaluate(qrels, _run(run(qs, "impact", scale, None, None)), [measure])[measure]
        out[f"impact-{scale}"] = round(v, 4)
    best = None
    grid = [(sc, k1, b) for sc in scales for k1 in K1_GRID for b in B_GRID]
    for scale, k1, b in progress(grid, desc="tuning scale, k1, b on dev queries", quiet=quiet):
        v = evaluate(qrels, _run(run(qs, "bm25", scale, k1, b)), [measure])[measure]
        out["grid"][f"{scale}:{k1}/{b}"] = round(v, 4)
        if best is None or v > best[0] + 1e-12:  # the first of equals: linear before sqrt, small k1 first
            best = (v, scale, k1, b)
    out["best"] = {"scale": best[1], "k1": best[2], "b": best[3], measure: round(best[0], 4)}
    return out


@contextlib.contextmanager
def folder_runs(folder: Path, entry: dict) -> Iterator[Runs]:
    """:data:`Runs` over one folder's DeepCT variants (plain query terms), closed afterwards."""
    cfg = entry.get("config", {})
    k1_0, b_0 = float(cfg.get("k1", DEFAULT_K1)), float(cfg.get("b", DEFAULT_B))
    opened: Dict[str, object] = {}

    def run(qs: Sequence[Query], mode: str, scale: str, k1: Optional[float], b: Optional[float]):
        v = variant_name(mode, scale)
        if v not in opened:
            opened[v] = open_variant(folder, mode, scale, k1_0, b_0)
        s = opened[v]
        if k1 is not None:
            s.set_bm25(k1, b)
        return s.batch(plain_query_terms([q.text for q in qs]), [q.qid for q in qs], 1000, 2)

    try:
        yield run
    finally:
        for s in opened.values():
            s.close()


def search_runs(index, name: str) -> Runs:
    """:data:`Runs` through ``index``'s search of ``name`` (a :class:`retrieval.searcher.Searcher`; a
    sharded index's: global statistics, an exact merge), configured for each run: rankings equal to
    :func:`folder_runs`' on one folder holding the same documents."""
    def run(qs: Sequence[Query], mode: str, scale: str, k1: Optional[float], b: Optional[float]):
        index.configure(name, mode=mode, scale=scale, k1=k1, b=b)
        res = index.batch_search(list(qs), k=1000, retriever=name, threads=2)
        return {q: [(h.docid, h.score) for h in hits] for q, hits in res.items()}

    return run


def _run(res: Dict[str, Scored]) -> Dict[str, Dict[str, float]]:
    return {q: {d: s for d, s in hits} for q, hits in res.items()}


def apply_tuning(entry: dict, tuning: Optional[dict], spec) -> None:
    """Set the entry's default k1/b and, where the spec (a ``DeepCTSpec``) leaves them on
    auto, its mode and scale from ``tune_bm25``'s dev-query scores (no-op without dev queries)."""
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


def with_alias(name: str, entry: dict) -> Dict[str, dict]:
    """``name`` and its DeepCT-Query alias ``<name>-query`` over the same folder."""
    q_entry = dict(entry, config=dict(entry["config"], query="deepct"), alias_of=name)
    q_entry.pop("tuning", None)
    return {name: entry, f"{name}-query": q_entry}


def retune_deepct(index, name: str = "deepct", mode: str = "auto", scale: str = "auto", quiet: bool = True,
                  tune_fusion: bool = True):
    """Choose a built DeepCT sub-index's defaults again (mode, scale, k1/b, then the
    ``bm25+<name>`` fusion) on its model's held-out training queries, without
    re-encoding: every variant is already on disk. For folders built before the
    scale was tuned, or to pin a mode/scale. Returns the reopened index. ``index``: any
    :class:`retrieval.searcher.Searcher` opened by its folder, a folder's or a sharded folder's (tuned
    through its search, :func:`choose`; recorded as one change of its record: ``begin_change``)."""
    from retrieval.kinds import kind_of

    if index.path is None:
        raise InputError("a sharded index opened over remote shards cannot be tuned; tune it by its folder")
    entry = index.manifest["subindexes"].get(name)
    if entry is None or entry.get("kind") != "deepct" or entry.get("alias_of"):
        raise InputError(f"{index.path}: no DeepCT sub-index named {name!r}")
    card_path = _card_path(entry)
    if not card_path.is_file():
        raise InputError(f"{card_path}: the DeepCT model card is missing; its dev queries are needed to tune")
    if mode not in MODES + ("auto",) or scale not in SCALES + ("auto",):
        raise ParameterError("{mode} must be auto|%s and {scale} auto|%s (got {_mode!r}, {_scale!r})"
                             % ("|".join(MODES), "|".join(SCALES)), _mode=mode, _scale=scale)
    spec = kind_of(entry).spec_of(entry, mode=mode, scale=scale, k1=None, b=None, tune=True)
    commit = index.begin_change("retune")  # (what the choice reads; refused on a lone shard of a sharded index)
    with type(index).open(index.path) as work:  # configured run by run: not the caller's index
        edit = choose(work, name, spec, tune_fusion, quiet, need_queries=True)
    commit(edit)
    return type(index).open(index.path)


def _card_path(entry: dict) -> Path:
    from retrieval.deepct.model import CARD_FILE

    return Path(entry["model"]["path"]) / CARD_FILE


def tune_default_fusion(idx, name: str = "deepct", quiet: bool = True) -> Optional[dict]:
    """Tune ``bm25+<name>`` (retrieval.tune) on the model card's held-out training
    queries and store it as the folder's default fusion; None without such queries."""
    return _tune_fusion(idx, name, idx.manifest["subindexes"][name], [d for d, *_ in idx.docstore.iter_docs()],
                        quiet, save=True)


def _tune_fusion(idx, name: str, entry: dict, docids: Sequence[str], quiet: bool, save: bool) -> Optional[dict]:
    """``retrieval.tune.tune`` of ``bm25+<name>`` on the dev queries over ``docids`` (``idx``: any
    Searcher); its report, stored when ``save``; None without such queries."""
    from retrieval.tune import tune

    card_path = _card_path(entry)
    if not card_path.is_file():
        return None
    got = dev_queries_of(json.loads(card_path.read_text()), docids)
    if got is None:
        return None
    qs, qrels = got
    return tune(idx, qs, qrels, retriever=f"bm25+{name}", qrels_path=entry["model"]["path"] + " (dev split)",
                save=save, quiet=quiet)


# ------------------------------------------------------------------------- through a Searcher
def tunes(spec) -> bool:
    """Whether a build of ``spec`` (a ``DeepCTSpec``) chooses anything on the dev queries."""
    return bool((spec.tune and (spec.k1 is None or spec.b is None)) or spec.tune_fusion)


def choose(index, name: str, spec, tune_fusion: bool, quiet: bool = True, need_queries: bool = False):
    """What one folder's build (or retune) of ``spec`` chooses, chosen over ``index`` (any
    :class:`retrieval.searcher.Searcher` opened by its folder: a folder, or a sharded folder as a
    whole) through its search: :func:`tune_bm25` with :func:`search_runs`, :func:`apply_tuning`, then
    the ``bm25+<name>`` fusion (``retrieval.tune``) with those defaults. Returns ``edit(change)``,
    which records the choice in a manifest change (a sharded index's: the same in every shard);
    ``index`` is left configured for the grid's last run. ``need_queries``: an error when the model
    card names no dev queries for this corpus (a retune), else nothing is tuned."""
    entry = json.loads(json.dumps(index.manifest["subindexes"][name]))
    docids = [d for ix in index.local() for d, *_ in ix.docstore.iter_docs()]
    card_path = _card_path(entry)
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    tuning = None
    if spec.tune and (spec.k1 is None or spec.b is None):
        tuning = tune_bm25(search_runs(index, name), entry, card, docids, quiet=quiet,
                           scales=SCALES if spec.scale == "auto" else (spec.scale,))
        if tuning is None and need_queries:
            raise InputError(f"{card_path}: the model card names no held-out training queries for this corpus")
        apply_tuning(entry, tuning, spec)
    report = None
    if tune_fusion and "bm25" in index.retrievers:
        with type(index).open(index.path) as fresh:  # every retriever at its defaults, DeepCT's as chosen
            cfg = entry["config"]
            fresh.configure(name, mode=cfg["mode"], scale=cfg["scale"],
                            **({"k1": cfg["k1"], "b": cfg["b"]} if cfg["mode"] == "bm25" else {}))
            report = _tune_fusion(fresh, name, entry, docids, quiet, save=False)
    chosen = {k: entry["config"][k] for k in ("mode", "scale", "k1", "b")}

    def edit(ch) -> None:
        old = ch.old["subindexes"].get(name)
        if old is None or old.get("path") != entry["path"]:
            raise InputError(f"sub-index {name!r} changed (another writer) while it was being tuned; run it again",
                             ch.path)
        new = dict(old, config=dict(old["config"], **chosen), spec=asdict(spec))
        if tuning:
            new["tuning"] = tuning
        for n, e in with_alias(name, new).items():
            ch.new["subindexes"][n] = e
        if report:
            ch.new.setdefault("pipelines", {})[f"bm25+{name}"] = report

    return edit

