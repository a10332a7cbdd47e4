"""DeepCT without qrels (issue #19): ``retr train deepct --corpus C`` with no ``--qrels`` trains on
the corpus's titles (HDCT-style: a body term's target is 1 if the passage's title has it); how that
compares with BM25 and with a model of the same size trained on qrels, on SciFact, NFCorpus and
Cranfield (one of the defaults benchmark's experiments, defaults_report.py).

    RETR_BENCH_WORK=... .venv/bin/python benchmarks/bench_defaults_deepct.py

Both models use the tiny body (SPLADE-tiny's BERT, the first 128-token window of each passage; the title
model sees at most TITLE_LIMIT titled passages); the title model searches with the untuned defaults,
the qrels model's mode, k1/b and fusion are tuned on its 10% dev queries, as ``retr index --deepct``
does. A corpus without titles is refused in one line, and the refusal is recorded. Cranfield has no
training split: a seeded half of its queries trains the qrels model, and every system is scored on the
other half. Models and folders are kept under WORK/defaults-deepct. Writes the "deepct" part of
benchmarks/results/defaults.{json,md} (defaults_report.write).
"""
from __future__ import annotations

import argparse
import json
from typing import List

from common import COLLECTIONS, md_table

from eval import evaluate
from eval.significance import compare

import defaults_runs
from defaults_report import write


# ------------------------------------------------------------------ DeepCT part
# bench_deepct.py's TINY body, first 128-token window of each passage only (2 shared, busy cores)
TINY = dict(base="splade-tiny", epochs=3, lr=1e-3, threads=2, max_windows=1)
TITLE_LIMIT = 1000   # title-supervised passages at most (a seeded sample), as `--title-limit`
DEEPCT_COLS = ("scifact", "nfcorpus", "cranfield")
DEEPCT_DIR = defaults_runs.WORK / "defaults-deepct"


def _cranfield_split(col, seed: int = 7):
    """Cranfield has no training split: a seeded half of its judged queries trains the qrels model, and
    every system is scored on the other half."""
    import random

    from eval.io import write_qrels

    qrels = col.qrels()
    qids = sorted(qrels)
    random.Random(seed).shuffle(qids)
    train = {q: qrels[q] for q in qids[: len(qids) // 2]}
    held = {q: qrels[q] for q in qids[len(qids) // 2:]}
    DEEPCT_DIR.mkdir(parents=True, exist_ok=True)
    write_qrels(train, DEEPCT_DIR / f"{col.name}-train-half.tsv")
    return DEEPCT_DIR / f"{col.name}-train-half.tsv", held


def _train(col, folder, qrels_path=None):
    """Train (or reuse) a tiny DeepCT model; ``qrels_path=None`` is `retr train deepct --corpus C` with no
    qrels (title supervision, auto). Returns the model card, or the one-line refusal."""
    from indexes.errors import InputError
    from retrieval.deepct.train import TrainConfig, train_deepct

    out = DEEPCT_DIR / folder
    if (out / "deepct.json").exists():
        return json.loads((out / "deepct.json").read_text())
    print(f"[{col.name}] training {folder} ...", flush=True)
    try:
        with __import__("warnings").catch_warnings():
            __import__("warnings").simplefilter("ignore")
            cfg = TrainConfig(**TINY) if qrels_path else TrainConfig(**TINY, title_limit=TITLE_LIMIT)
            return train_deepct(col.corpus, out, col.queries_path if qrels_path else None, qrels_path, cfg,
                                quiet=True)
    except InputError as e:
        return {"refused": str(e)}


def deepct_part() -> dict:
    import retrieval
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.writer import add_subindex

    out = {}
    for col in (c for c in COLLECTIONS if c.name in DEEPCT_COLS):
        res = {"models": {}}
        title = _train(col, f"{col.name}-tiny-title")
        if "refused" in title:
            res["title_refused"] = title["refused"]
            res["models"]["title"] = None
            print(f"[{col.name}] title supervision refused: {title['refused']}", flush=True)
            out[col.name] = res
            continue
        if "train" in defaults_runs.splits(col):
            qrels_path, evalq = col.qrels_path("train"), col.qrels()
            res["evaluated_on"] = "test queries; qrels model trained on qrels/train.tsv (10% of it held out as dev)"
        else:
            qrels_path, evalq = _cranfield_split(col)
            res["evaluated_on"] = (f"a seeded held-out half of the queries ({len(evalq)}); the qrels model trained on "
                                   "the other half (10% of it held out as dev)")
        qmodel = _train(col, f"{col.name}-tiny-qrels", qrels_path)
        path = DEEPCT_DIR / f"index-{col.name}"
        idx = retrieval.open_index(path) if (path / "manifest.json").exists() else \
            retrieval.build_index(col.corpus, path, empty="skip", quiet=True)
        for sub, folder in (("deepct-title", f"{col.name}-tiny-title"), ("deepct-qrels", f"{col.name}-tiny-qrels")):
            if sub not in idx.retrievers:
                print(f"[{col.name}] indexing {sub} ...", flush=True)
                idx = add_subindex(idx, DeepCTSpec(model=str(DEEPCT_DIR / folder), threads=2), name=sub, quiet=True)
        for key, card, sub in (("title", title, "deepct-title"), ("qrels", qmodel, "deepct-qrels")):
            e = idx.manifest["subindexes"][sub]
            res["models"][key] = {"targets": card.get("targets", {}).get("kind"),
                                  "training_passages": card["data"].get("training_passages"),
                                  "train_seconds": card["training"]["seconds"],
                                  "settings": {k: card["training"]["settings"][k] for k in ("base", "epochs", "lr", "title")},
                                  "mode": f"{e['config']['mode']}-{e['config'].get('scale', 'linear')}",
                                  "k1": e["config"]["k1"], "b": e["config"]["b"], "tuned": bool(e.get("tuning")),
                                  "fusion": str(idx.pipeline(f"bm25+{sub}").fusion)}
        from retrieval.collections import read_queries

        qs = [q for q in read_queries(col.queries_path) if q.qid in evalq]
        systems = {"BM25": "bm25", "DeepCT (titles)": "deepct-title", "BM25 + DeepCT (titles)": "bm25+deepct-title",
                   "DeepCT (qrels)": "deepct-qrels", "BM25 + DeepCT (qrels)": "bm25+deepct-qrels"}
        scores = {}
        for label, spec in systems.items():
            run = {q: {h.docid: h.score for h in hs} for q, hs in idx.batch_search(qs, k=1000, retriever=spec,
                                                                                 threads=2).items()}
            pq = evaluate(evalq, run, ["nDCG@10", "R@100"], per_query=True)
            scores[label] = pq
        res["queries"] = len(qs)
        res["systems"] = {}
        for m in ("nDCG@10", "R@100"):
            rows = compare({k: {q: v[m] for q, v in s.items()} for k, s in scores.items()}, baseline="BM25",
                           test="perm")
            for r in rows:
                res["systems"].setdefault(r["system"], {})[m] = {"mean": r["mean"], "delta": r.get("delta"),
                                                               "p_holm": r.get("p_holm")}
            tq = compare({k: {q: v[m] for q, v in scores[k].items()} for k in ("DeepCT (qrels)", "DeepCT (titles)")},
                         baseline="DeepCT (qrels)", test="perm")[1]
            res.setdefault("titles_vs_qrels", {})[m] = {"delta": tq["delta"], "p": tq["p_holm"]}
        out[col.name] = res
        print(col.name, {k: round(v["nDCG@10"]["mean"], 4) for k, v in res["systems"].items()}, flush=True)
    return {"tiny": TINY, "title_limit": TITLE_LIMIT, "collections": out}


def render(f: dict) -> List[str]:
    """The DeepCT section of defaults.md."""
    md = ["## DeepCT without qrels: title supervision", "",
          "`retr train deepct --corpus C` with no `--qrels` trains on titles (HDCT-style: a body term's target is 1 "
          "if the passage's title has it) and says so; a corpus without titles is refused in one line. Both "
          f"models use the tiny body (SPLADE-tiny's BERT, 2 layers; {f['tiny']}: the first 128-token window of "
          f"each passage), not MiniLM; the title model sees at most {f.get('title_limit')} titled passages (a seeded "
          "sample), for the 2 shared CPU cores. The title model has "
          "no dev queries, so it searches with the untuned defaults (mode, k1/b, and the default fusion); the "
          "qrels model's mode, k1/b and fusion are tuned on its 10% dev queries, as `retr index --deepct` does. "
          "Δ and p: paired randomization test against BM25, Holm-corrected; `titles − qrels`: against the qrels "
          "model.", ""]
    for name, r in f["collections"].items():
        md.append(f"### {name}")
        md.append("")
        if r["models"].get("title") is None:
            md += [f"No titles: refused (`retr: error: {r['title_refused']}`).", ""]
            continue
        md += [f"Evaluated on {r['evaluated_on']}; {r['queries']} queries.", "",
               md_table(["system", "nDCG@10 (Δ, p)", "R@100 (Δ, p)"],
                        [[k] + [f"{v[m]['mean']:.4f}" + ("" if v[m]["delta"] is None else
                                                          f" ({v[m]['delta']:+.4f}, p={v[m]['p_holm']:.3f})")
                                for m in ("nDCG@10", "R@100")] for k, v in r["systems"].items()]), "",
               "DeepCT alone, titles − qrels: " + ", ".join(
                   f"{m} {v['delta']:+.4f} (p={v['p']:.3f})" for m, v in r["titles_vs_qrels"].items()) + ".", "",
               md_table(["model", "targets", "passages", "train s", "mode", "k1/b", "tuned", "fusion"],
                        [[k, v["targets"], v["training_passages"], v["train_seconds"], v["mode"],
                          f"{v['k1']}/{v['b']}", v["tuned"], v["fusion"]] for k, v in r["models"].items()]), ""]
    return md


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    write({"deepct": deepct_part()})


if __name__ == "__main__":
    main()
