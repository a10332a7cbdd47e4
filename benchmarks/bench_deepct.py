"""DeepCT benchmark: effectiveness of DeepCT-Index (impact and BM25-over-pseudo-tf,
linear and sqrt), DeepCT-Query and BM25+DeepCT fusion against BM25 on four
collections, with paired tests, and the cost (training time, encoding
throughput vs a bare model loop, index size, query latency) measured in the same run.

    .venv/bin/python benchmarks/bench_deepct.py [--collections scifact ...]

Training data, never test queries:
- scifact, nfcorpus: qrels/train.tsv (10% of those queries held out as dev for k1/b and fusion tuning);
- cranfield: HDCT title weak supervision over the whole corpus (no queries), defaults for k1/b/fusion;
- vaswani (no titles): a seeded 50/50 split of its 93 queries; the model trains on one half, and
  every system is evaluated on the other (held-out) half only.
Models are cached under work/bench/deepct-models; the DeepCT sub-indexes are added to the shared
benchmark index of each collection (common.bench_index). Writes benchmarks/results/deepct.{json,md}.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings
from pathlib import Path

from common import WORK, by_name, machine, md_table, run_dict, write_results

from eval import evaluate
from eval.significance import compare
from retrieval.fusion import DEFAULT_FUSION

MEASURES = ["nDCG@10", "R@100", "R@1000"]
MODELS = WORK / "deepct-models"
SPLITS = WORK / "deepct-splits"
TINY = dict(base="splade-tiny", epochs=3, lr=1e-3)


def plans(name):
    """(sub-index name, model folder, TrainConfig kwargs, training data) per collection."""
    if name == "scifact":
        return [("deepct", "scifact", {}, "train"), ("deepct-tiny", "scifact-tiny", TINY, "train")]
    if name == "nfcorpus":
        return [("deepct", "nfcorpus", {"threads": 2}, "train"), ("deepct-tiny", "nfcorpus-tiny", TINY, "train")]
    if name == "cranfield":
        return [("deepct-tiny", "cranfield-tiny-title", dict(TINY, title="only"), "title")]
    if name == "vaswani":
        return [("deepct-tiny", "vaswani-tiny-split", dict(TINY, dev_fraction=0.2), "split")]
    raise ValueError(name)


def vaswani_split(col, seed=7):
    """Seeded 50/50 query split; returns (train qrels path, held-out qrels)."""
    from eval.io import write_qrels

    qrels = col.qrels()
    ids = sorted(qrels)
    random.Random(seed).shuffle(ids)
    half = len(ids) // 2
    train, held = {q: qrels[q] for q in ids[:half]}, {q: qrels[q] for q in ids[half:]}
    SPLITS.mkdir(parents=True, exist_ok=True)
    write_qrels(train, SPLITS / f"{col.name}-train.tsv")
    write_qrels(held, SPLITS / f"{col.name}-heldout.tsv")
    return SPLITS / f"{col.name}-train.tsv", held


def train(col, folder, kwargs, data):
    from retrieval.deepct.train import TrainConfig, train_deepct

    out = MODELS / folder
    if (out / "deepct.json").exists():
        import json

        return json.loads((out / "deepct.json").read_text())
    print(f"[{col.name}] training {folder} ...", flush=True)
    cfg = TrainConfig(**kwargs)
    if data == "title":
        return train_deepct(col.corpus, out, None, None, cfg, quiet=True)
    qrels = col.qrels_path("train") if data == "train" else vaswani_split(col)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train_deepct(col.corpus, out, col.queries_path, qrels, cfg, quiet=True)


def throughput(model_dir, texts):
    """Passages/s of DeepCTEncoder.encode vs bare model(**batch) loops over the same texts in this
    run: one over the very windows DeepCT scores (so the ratio is retr's own overhead: word/term
    mapping and max-pooling), one truncating each passage at max_length (what a naive loop does)."""
    import torch

    from retrieval.deepct.model import DeepCTEncoder, pad_batch

    enc = DeepCTEncoder(model_dir, threads=1)
    enc.encode(texts[:8])  # warm caches, JVM
    t0 = time.perf_counter()
    enc.encode(texts)
    ours = time.perf_counter() - t0
    tok, body = enc.tokenizer, enc.model.body
    wins = sorted((w for p in enc.prep.prepare(texts) for w in p.windows), key=lambda w: len(w.ids))
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(wins), enc.batch_size):
            ids, mask = pad_batch(wins[i:i + enc.batch_size], enc.pad_id)
            body(input_ids=ids, attention_mask=mask)
    bare_win = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.inference_mode():
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for i in range(0, len(order), 32):
            batch = tok([texts[j] for j in order[i:i + 32]], truncation=True, max_length=enc.max_length,
                        padding=True, return_tensors="pt")
            body(**batch)
    bare = time.perf_counter() - t0
    return {"passages": len(texts), "windows": len(wins), "deepct_per_s": round(len(texts) / ours, 1),
            "bare_model_per_s": round(len(texts) / bare, 1), "time_ratio": round(ours / bare, 2),
            "bare_same_windows_per_s": round(len(texts) / bare_win, 1),
            "time_ratio_same_windows": round(ours / bare_win, 2),
            "note": "ours scores every window of long passages (no truncation) and maps words to terms; "
                    "'same windows' runs the body alone over exactly those windows, the other bare loop "
                    "truncates at max_length"}


def latency(idx, names, qs, n=100):
    out = {}
    for name in names:
        r = idx.snapshot().retriever(name)
        r.search(qs[0].text, 10)
        ts = []
        for q in qs[:n]:
            t0 = time.perf_counter()
            r.search(q.text, 10)
            ts.append((time.perf_counter() - t0) * 1000)
        out[name] = round(statistics.median(ts), 3)
    return out


def run_collection(col, threads, rebuild=False, retune=False):
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.deepct.tuning import retune_deepct
    from retrieval.writer import add_subindex

    from common import bench_index

    # the shared index; when its BM25 part exists, open it without waiting for another
    # benchmark's dense encoding (sub-index entries are added under the manifest lock)
    import retrieval

    idx = retrieval.open_index(WORK / col.name) if (WORK / col.name / "manifest.json").exists() else bench_index(col)
    qs_all = col.queries()
    qrels = col.qrels()
    eval_note = "test queries"
    if col.name == "vaswani":
        _p, qrels = vaswani_split(col)
        qs_all = [q for q in qs_all if q.qid in qrels]
        eval_note = f"held-out half of the queries ({len(qrels)}); the other half trained the model"
    res = {"queries": len(qs_all), "evaluated_on": eval_note, "models": {}, "systems": {}}
    runs = {"BM25": run_dict(idx.batch_search(qs_all, k=1000, retriever="bm25", threads=threads))}
    for sub, folder, kwargs, data in plans(col.name):
        t0 = time.perf_counter()
        card = train(col, folder, kwargs, data)
        from retrieval.deepct.model import deepct_hash
        stale = sub in idx.retrievers and \
            idx.manifest["subindexes"][sub].get("model", {}).get("sha256") != deepct_hash(MODELS / folder)
        stale = stale or (rebuild and sub in idx.retrievers)
        if sub not in idx.retrievers or stale:  # a retrained model replaces its sub-index
            print(f"[{col.name}] indexing {sub} ...", flush=True)
            idx = add_subindex(idx, DeepCTSpec(model=str(MODELS / folder), threads=threads), name=sub, quiet=True, overwrite=stale)
        elif retune and idx.manifest["subindexes"][sub].get("tuning"):  # choose the defaults again, same weights
            print(f"[{col.name}] re-tuning {sub} ...", flush=True)
            idx = retune_deepct(idx, sub)
        e = idx.manifest["subindexes"][sub]
        res["models"][sub] = {
            "model": folder, "base": card.get("base_model", "").split("/")[-1] or card.get("base_model"),
            "targets": card.get("targets", {}).get("kind"), "training_passages": card["data"].get("training_passages"),
            "train_seconds": card["training"]["seconds"], "final_loss": card["training"]["final_loss"],
            "settings": {k: card["training"]["settings"][k] for k in ("base", "epochs", "lr", "max_length", "title")},
            "encode_seconds": e.get("encode_seconds"), "default_mode": e["config"]["mode"],
            "default_scale": e["config"].get("scale", "linear"),
            "k1": e["config"]["k1"], "b": e["config"]["b"], "tuning": e.get("tuning"),
            "fusion": idx.manifest.get("pipelines", {}).get(f"bm25+{sub}", {}).get("spec", f"{DEFAULT_FUSION} (untuned)"),
            "variant_bytes": e["variant_bytes"],
            "bm25_bytes": idx.info()["subindexes"]["bm25"]["size_bytes"],
        }
        r = idx.snapshot().retriever(sub)
        tag = "" if sub == "deepct" else f" [{sub}]"
        for mode in ("impact", "bm25"):
            for scale in ("linear", "sqrt"):
                r.configure(mode=mode, scale=scale, query="plain")
                runs[f"DeepCT-Index {mode}-{scale}{tag}"] = run_dict(
                    idx.batch_search(qs_all, k=1000, retriever=sub, threads=threads))
        default = f'{e["config"]["mode"]}-{e["config"].get("scale", "linear")}'
        r.configure(mode=e["config"]["mode"], scale=e["config"].get("scale", "linear"), query="plain")
        runs[f"DeepCT-Index ({default}) + DeepCT-Query{tag}"] = run_dict(
            idx.batch_search(qs_all, k=1000, retriever=f"{sub}-query", threads=threads))
        runs[f"BM25 + DeepCT fused{tag}"] = run_dict(
            idx.batch_search(qs_all, k=1000, retriever=f"bm25+{sub}", threads=threads))
        print(f"[{col.name}] {sub} done in {time.perf_counter() - t0:.0f} s", flush=True)
    per_q = {name: evaluate(qrels, run, MEASURES, per_query=True) for name, run in runs.items()}
    for m in MEASURES:
        rows = compare({n: {q: v[m] for q, v in pq.items()} for n, pq in per_q.items()}, "BM25")
        for row in rows:
            s = res["systems"].setdefault(row["system"], {})
            s[m] = round(row["mean"], 4)
            if not row.get("baseline"):
                s[f"{m} delta"] = round(row["delta"], 4)
                s[f"{m} p_holm"] = round(row["p_holm"], 4)
    # cost
    texts = [f"{title} {text}".strip() for _d, title, text, _m in _first(idx.docstore.iter_docs(), 200)]
    subs = [p[0] for p in plans(col.name)]
    res["throughput"] = {s: throughput(MODELS / [p[1] for p in plans(col.name) if p[0] == s][0], texts)
                         for s in subs}
    res["latency_ms_p50"] = latency(idx, ["bm25"] + subs + [f"{s}-query" for s in subs], qs_all)
    return res


def _first(it, n):
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x


def markdown(out):
    lines = ["# DeepCT (Dai & Callan 2019) vs BM25", "",
             "Generated by `benchmarks/bench_deepct.py`. Paired t-test against BM25 per measure, "
             "Holm-corrected within each measure; `*` = significant at 0.05. BM25 is the shared Lucene "
             "index (k1=0.9, b=0.4). DeepCT variants: impact = Anserini impact index (score = sum of query "
             "term count x round(w*100)); bm25 = the same integers as term frequencies under BM25 "
             "(k1/b tuned on held-out training queries when there are any; the default mode and scale, used "
             "by DeepCT-Query and the fusion, are chosen on the same queries). `[deepct-tiny]` = a model "
             "on the SPLADE-tiny body (2 layers, 128 hidden); plain `DeepCT` = the default MiniLM-L6 model.", ""]
    for col, r in out["collections"].items():
        lines += [f"## {col} ({r['queries']} queries: {r['evaluated_on']})", ""]
        rows = []
        for name, s in r["systems"].items():
            row = [name]
            for m in MEASURES:
                v = f"{s[m]:.4f}"
                if f"{m} delta" in s:
                    v += f" ({s[f'{m} delta']:+.4f}{'*' if s[f'{m} p_holm'] < 0.05 else ''})"
                row.append(v)
            rows.append(row)
        lines += [md_table(["system"] + MEASURES, rows), ""]
        mrows = []
        for sub, m in r["models"].items():
            t = m.get("tuning") or {}
            best = t.get("best", {})
            dev = (f"dev nDCG@10 impact-linear {t.get('impact-linear')}, impact-sqrt {t.get('impact-sqrt')}, "
                   f"bm25 best {best.get('scale', 'linear')} {best.get('nDCG@10')} ({t.get('queries')} q)"
                   ) if t else "no dev queries"
            mrows.append([sub, m["base"], m["targets"], m["training_passages"], m["train_seconds"], m["final_loss"],
                          f"{m['default_mode']}-{m.get('default_scale', 'linear')}", f"{m['k1']}/{m['b']}",
                          m["fusion"], dev])
        lines += [md_table(["sub-index", "base", "targets", "passages", "train s", "final loss", "default",
                            "k1/b", "fusion (tuned on dev)", "default-mode evidence"], mrows), ""]
        crow = []
        for sub, m in r["models"].items():
            tp = r["throughput"][sub]
            crow.append([sub, tp["deepct_per_s"], tp.get("bare_same_windows_per_s", "–"),
                         tp.get("time_ratio_same_windows", "–"), tp["bare_model_per_s"], tp["time_ratio"],
                         round(m["variant_bytes"]["impact-linear"] / m["bm25_bytes"], 2),
                         round(m["variant_bytes"]["bm25-linear"] / m["bm25_bytes"], 2),
                         r["latency_ms_p50"][sub], r["latency_ms_p50"][f"{sub}-query"], r["latency_ms_p50"]["bm25"]])
        lines += [md_table(["sub-index", "encode passages/s", "bare body, same windows /s", "ratio (same windows)",
                            "bare body, truncated /s", "ratio (truncated)",
                            "impact index / BM25 size", "pseudo-tf index / BM25 size", "query ms p50",
                            "with DeepCT-Query ms p50", "BM25 ms p50"], crow), ""]
    lines += [f"Machine: {out['machine']}. Timings are ratios within this run on a shared, busy 2-core host."]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the collections' DeepCT sub-indexes")
    ap.add_argument("--retune", action="store_true",
                    help="choose the built sub-indexes' defaults (mode, scale, k1/b, fusion) again on dev queries")
    args = ap.parse_args()
    out = {"machine": machine(), "collections": {}}
    import json

    prev = Path(__file__).resolve().parent / "results" / "deepct.json"
    for col in by_name(args.collections):
        res = run_collection(col, args.threads, args.rebuild, args.retune)
        # re-read just before writing: results of other collections (earlier or parallel runs) stay
        if prev.exists() and args.collections:
            out["collections"] = json.loads(prev.read_text()).get("collections", {})
        out["collections"][col.name] = res
        order = [c.name for c in by_name(None)]
        out["collections"] = {k: out["collections"][k] for k in sorted(out["collections"], key=order.index)}
        write_results("deepct", out, markdown(out))


if __name__ == "__main__":
    main()
