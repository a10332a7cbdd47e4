"""Choosing a DeepCT sub-index's defaults on its model's held-out training queries
(never test queries): the mode and weight scale, BM25's k1/b over pseudo term
frequencies, then the folder's default ``bm25+<name>`` fusion.

A build tunes (``DeepCTSpec.tune``, :func:`tune_bm25` then :func:`apply_tuning`);
:func:`retune_deepct` chooses again on a built folder, without re-encoding (every
variant is on disk), as a manifest-only generation of its own.

The kind (:mod:`retrieval.deepct.subindex`) imports this module, so this one reaches
the kind, where it needs its spec, through the registry (:func:`retrieval.kinds.kind_of`).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

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
    plain = plain_query_terms([q.text for q in qs])
    qids = [q.qid for q in qs]
    out = {"queries": len(qs), "measure": measure, "source": card.get("data", {}).get("qrels"),
           "scales": list(scales), "grid": {}}
    cfg = entry.get("config", {})
    k1_0, b_0 = float(cfg.get("k1", DEFAULT_K1)), float(cfg.get("b", DEFAULT_B))
    opened: Dict[str, object] = {}

    def searcher(mode: str, scale: str):
        v = variant_name(mode, scale)
        if v not in opened:
            opened[v] = open_variant(folder, mode, scale, k1_0, b_0)
        return opened[v]

    try:
        for scale in scales:
            run = searcher("impact", scale).batch(plain, qids, 1000, 2)
            out[f"impact-{scale}"] = round(evaluate(qrels, _run(run), [measure])[measure], 4)
        best = None
        grid = [(sc, k1, b) for sc in scales for k1 in K1_GRID for b in B_GRID]
        for scale, k1, b in progress(grid, desc="tuning scale, k1, b on dev queries", quiet=quiet):
            s = searcher("bm25", scale)
            s.set_bm25(k1, b)
            v = evaluate(qrels, _run(s.batch(plain, qids, 1000, 2)), [measure])[measure]
            out["grid"][f"{scale}:{k1}/{b}"] = round(v, 4)
            if best is None or v > best[0] + 1e-12:  # the first of equals: linear before sqrt, small k1 first
                best = (v, scale, k1, b)
    finally:
        for s in opened.values():
            s.close()
    out["best"] = {"scale": best[1], "k1": best[2], "b": best[3], measure: round(best[0], 4)}
    return out


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
    from retrieval.kinds import kind_of

    entry = index.manifest["subindexes"].get(name)
    if entry is None or entry.get("kind") != "deepct" or entry.get("alias_of"):
        raise InputError(f"{index.path}: no DeepCT sub-index named {name!r}")
    card_path = Path(entry["model"]["path"]) / CARD_FILE
    if not card_path.is_file():
        raise InputError(f"{card_path}: the DeepCT model card is missing; its dev queries are needed to tune")
    if mode not in MODES + ("auto",) or scale not in SCALES + ("auto",):
        raise ParameterError("{mode} must be auto|%s and {scale} auto|%s (got {_mode!r}, {_scale!r})"
                             % ("|".join(MODES), "|".join(SCALES)), _mode=mode, _scale=scale)
    entry = json.loads(json.dumps(entry))  # a private copy
    spec = kind_of(entry).spec_of(entry, mode=mode, scale=scale, k1=None, b=None, tune=True)
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
