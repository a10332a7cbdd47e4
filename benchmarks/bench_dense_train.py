"""Training the dense encoder (issue #26): MiniLM as shipped, fine-tuned on training qrels, MLM
pre-training (random or ROM masking) with and without fine-tuning; each scored alone and fused with
BM25 on the test queries, with paired randomization tests against MiniLM as shipped.

Each cell (collection x recipe) is trained, indexed and scored once and cached under
WORK/dense_train/<collection>/<cell>/ (model, index, result.json). Its result, per-query scores
included, is also kept in benchmarks/results/dense_train_cells/<collection>/<cell>.json, and the
results file is made from every kept cell, so cells can be run in several sittings, on several
machines:

    python benchmarks/bench_dense_train.py --collections scifact --cells minilm ft random+ft
    python benchmarks/bench_dense_train.py --report      # rewrite the results from the cached cells

Fusion: the untuned default, and the fusion tuned (bench_hybrid's grid) on the held-out slice of the
training queries that fine-tuning did not train on (the same slice for every encoder, so the tuned
weights never see the queries an encoder was trained on). Wall times are this machine's (2 cores).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from common import COLLECTIONS, RESULTS, WORK, by_name, machine, md_table, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hybrid import MEASURES, best_fusion, fused_run, lists_for, per_query  # noqa: E402

from eval.significance import compare  # noqa: E402
from retrieval.fusion import DEFAULT_FUSION  # noqa: E402

#: cell -> (pretrain, importance, fine-tune)
CELLS = {
    "minilm": ("none", None, False),
    "ft": ("none", None, True),
    "random+ft": ("random", None, True),
    "rom-bm25+ft": ("rom", "bm25", True),
    "rom-deepct+ft": ("rom", "deepct", True),
    "random": ("random", None, False),
    "rom-bm25": ("rom", "bm25", False),
    "rom-deepct": ("rom", "deepct", False),
}
TRAIN = {"scifact": "train", "nfcorpus": "train"}
#: the pre-training budget, the same for both strategies: passages per epoch (a seeded sample), epochs
PRETRAIN = {"pretrain_passages": 2000, "pretrain_epochs": 1}
#: fine-tuning runs with DenseTrainConfig's defaults, the settings `retr train dense` uses, but for
#: these per-collection settings: NFCorpus's training qrels hold ~43 relevant passages a query (110k
#: examples), so each query brings one of them, redrawn each epoch
FINETUNE = {"nfcorpus": {"positives_per_query": 1}}
OUT = WORK / "dense_train"
KEPT = RESULTS / "dense_train_cells"


def _deepct_model(col) -> Path:
    """A DeepCT model for ROM's importance: trained on the collection's training qrels (or, without
    any, on its titles), cached."""
    from retrieval.deepct.train import TrainConfig, train_deepct

    path = OUT / col.name / "deepct-model"
    if not (path / "deepct.json").is_file():
        split = TRAIN.get(col.name)
        q, r = (col.queries_path, col.qrels_path(split)) if split else (None, None)
        train_deepct(col.corpus, path, q, r, TrainConfig(), overwrite=True)
    return path


def train_cell(col, cell: str) -> tuple:
    """The model folder of ``cell`` (trained now unless cached) and its card (None for MiniLM)."""
    from retrieval.dense.training import train

    pretrain, importance, finetune = CELLS[cell]
    if cell == "minilm":
        return None, None
    path = OUT / col.name / cell / "model"
    if not (path / "retr_train.json").is_file():
        # an interrupted run continues from its last finished epoch (the same model as uninterrupted)
        again = {"resume": True} if (path / ".checkpoint" / "state.pt").is_file() else {"overwrite": True}
        split = TRAIN.get(col.name)
        if finetune and not split:
            raise SystemExit(f"{col.name} has no training qrels: {cell} needs them")
        if finetune and pretrain != "none":
            # X+ft fine-tunes cell X's model: the very body that `--pretrain X` with qrels would
            # pre-train and then fine-tune (same seed and budget), trained once for both cells
            first, _ = train_cell(col, cell[:-len("+ft")])
            train(col.corpus, path, col.queries_path, col.qrels_path(split), base=str(first), **again,
                  **FINETUNE.get(col.name, {}))
        else:
            imp = f"deepct:{_deepct_model(col)}" if importance == "deepct" else "bm25"
            args = (col.queries_path, col.qrels_path(split)) if finetune else (None, None)
            budget = PRETRAIN if pretrain != "none" else {}
            more = FINETUNE.get(col.name, {}) if finetune else {}
            train(col.corpus, path, *args, pretrain=pretrain, importance=imp, **again, **budget, **more)
    return path, json.loads((path / "retr_train.json").read_text())


def adopt(col, cell: str, folder: Path) -> None:
    """Use a model trained elsewhere (the README recipe in a fresh clone, a GPU machine) as ``cell``'s,
    when its card shows the settings the cell trains with (the device and thread count aside) and the
    same corpus and qrels; otherwise refuse."""
    from retrieval.dense.train_config import DenseTrainConfig
    from retrieval.dense.training import _file_hash

    pretrain, importance, finetune = CELLS[cell]
    if pretrain != "none" or not finetune:
        raise SystemExit(f"--trained: only fine-tuning cells without pre-training can be adopted, not {cell}")
    card = json.loads((folder / "retr_train.json").read_text())
    want = vars(DenseTrainConfig(**FINETUNE.get(col.name, {})))
    got = card["settings"]
    diff = sorted(k for k in want if k not in ("device", "threads") and got.get(k) != want[k])
    data = card["data"]
    if (diff or data["qrels_sha256"] != _file_hash(col.qrels_path(TRAIN[col.name]))
            or data["corpus_sha256"] not in (_file_hash(col.corpus), _file_hash(col.root))):
        raise SystemExit(f"--trained {cell}={folder}: trained with other settings or data ({', '.join(diff)})")
    dest = OUT / col.name / cell / "model"
    shutil.rmtree(dest.parent, ignore_errors=True)
    shutil.copytree(folder, dest)
    (dest.parent / "adopted_from").write_text(str(folder.resolve()) + "\n")


def tuning_queries(col):
    """The held-out slice of the training queries (retrieval.pairs.split_dev, as training cuts it)."""
    from retrieval.pairs import split_dev
    from retrieval.dense.training import DenseTrainConfig

    split = TRAIN.get(col.name)
    if not split:
        return [], {}
    cfg = DenseTrainConfig()
    qrels = col.qrels(split)
    judged = [q for q in col.queries(split) if any(g >= cfg.min_rel for g in qrels[q.qid].values())]
    _, dev = split_dev(judged, cfg.dev_share, cfg.seed)
    return dev, {q.qid: qrels[q.qid] for q in dev}


def score_cell(col, cell: str) -> dict:
    import retrieval
    from retrieval.dense.subindex import DenseSpec

    res_path = OUT / col.name / cell / "result.json"
    if res_path.is_file():
        return json.loads(res_path.read_text())
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    model, card = train_cell(col, cell)
    t_train = time.perf_counter() - t0
    idx_path = OUT / col.name / cell / "index"
    shutil.rmtree(idx_path, ignore_errors=True)
    t1 = time.perf_counter()
    idx = retrieval.build_index(col.corpus, idx_path, subindexes={"dense": DenseSpec(model=str(model) if model else None)},
                                empty="skip", quiet=True)   # Cranfield has empty documents; training skips them too
    t_index = time.perf_counter() - t1
    qrels, qs = col.qrels(), col.queries()
    qids = [q.qid for q in qs]
    lists = lists_for(idx, qs)
    runs = {"dense": {q: dict(lists["dense"][q]) for q in qids}, "bm25": {q: dict(lists["bm25"][q]) for q in qids},
            "fusion (untuned)": fused_run(lists, qids, DEFAULT_FUSION)}
    dev, dev_qrels = tuning_queries(col)
    tuned = None
    if dev:
        dl = lists_for(idx, dev)
        f, v = best_fusion(dl, dev_qrels, [q.qid for q in dev])
        runs["fusion (tuned)"] = fused_run(lists, qids, f)
        tuned = {"fusion": str(f), "dev_ndcg10": round(v, 4), "dev_queries": len(dev)}
    per = {name: per_query(qrels, run) for name, run in runs.items()}
    out = {"cell": cell, "collection": col.name, "queries": len(qs), "per_query": per,
           "means": {n: {m: statistics.fmean(v[m] for v in s.values()) for m in MEASURES} for n, s in per.items()},
           "tuned": tuned, "seconds": {"train_total": round(t_train, 1), "index_bm25_and_dense": round(t_index, 1)},
           "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)], "card": card}
    adopted = OUT / col.name / cell / "adopted_from"
    if adopted.is_file():
        out["adopted_from"] = adopted.read_text().strip()
    res_path.write_text(json.dumps(out) + "\n")
    keep = KEPT / col.name / f"{cell}.json"
    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.write_text(json.dumps(_rounded(out), sort_keys=True) + "\n")
    return out


def _rounded(out: dict) -> dict:
    """The cell's result with per-query scores to 6 decimals (what the kept file holds)."""
    per = {run: {q: {m: round(v, 6) for m, v in ms.items()} for q, ms in qs.items()}
           for run, qs in out["per_query"].items()}
    return dict(out, per_query=per)


def kept_cells(col) -> dict:
    """Every cell of ``col`` with a result: the work folder's, else the one kept in the results."""
    cells = {}
    for cell in CELLS:
        for f in (OUT / col.name / cell / "result.json", KEPT / col.name / f"{cell}.json"):
            if f.is_file():
                cells[cell] = json.loads(f.read_text())
                break
    return cells


def _p(p: float) -> str:
    return " (p < 0.001)" if p < 0.001 else f" (p {p:.3f})"


#: the questions the table asks of one cell against another: ROM against random masking at the same budget,
#: and pre-training before fine-tuning against fine-tuning alone
HEAD_TO_HEAD = [("rom-bm25", "random"), ("rom-deepct", "random"), ("rom-bm25+ft", "random+ft"),
                ("rom-deepct+ft", "random+ft"), ("random+ft", "ft"), ("rom-bm25+ft", "ft"), ("rom-deepct+ft", "ft")]


def head_to_head(cells: dict) -> list:
    """Dense nDCG@10 of each HEAD_TO_HEAD pair both of whose cells ran: delta, its 95% bootstrap CI and the
    paired randomization test's p (each pair its own question, so no correction across pairs)."""
    rows = []
    for a, b in HEAD_TO_HEAD:
        if a in cells and b in cells:
            scores = {c: {q: v["nDCG@10"] for q, v in cells[c]["per_query"]["dense"].items()} for c in (a, b)}
            r = compare(scores, b, test="perm")[1]
            rows.append([f"{a} vs {b}", f"{r['delta']:+.4f}", f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]",
                         f"{r['p']:.3f}"])
    return rows


def report() -> None:
    from retrieval.dense.train_config import DenseTrainConfig

    dft = DenseTrainConfig()
    payload = {"machine": machine(), "pretrain_budget": PRETRAIN,
               "finetune_defaults": {"epochs": dft.epochs, "lr": dft.lr, "batch_size": dft.batch_size},
               "collections": {}}
    md = ["# Training the dense encoder (issue #26)", "",
          "`python benchmarks/bench_dense_train.py` (cells cached under work/bench/dense_train, their results kept in "
          "benchmarks/results/dense_train_cells/). Test queries "
          "score every run; training used the training qrels only. p: paired randomization test against "
          "MiniLM as shipped on the same run type (Holm-corrected over the cells), 10,000 resamples. "
          f"Pre-training budget: {PRETRAIN['pretrain_passages']} passages x {PRETRAIN['pretrain_epochs']} epoch, "
          f"15% of each passage's tokens masked (the same count for random and ROM). Fine-tuning: "
          f"`retr train dense`'s defaults ({dft.epochs} epochs at lr {dft.lr:g}, batch {dft.batch_size}, "
          f"{dft.max_length} passage tokens), the epoch best on the held-out training queries kept; each cell's "
          "settings are in its model card. Seconds are wall time on this machine's 2 CPU cores (no GPU was lent); "
          "`load_average` in each kept cell says whether other jobs shared the cores (then its seconds are upper "
          "bounds).", ""]
    for col in COLLECTIONS:
        cells = kept_cells(col)
        if not cells:
            continue
        rows = []
        tests = {}
        if "minilm" in cells:
            for run in ("dense", "fusion (untuned)", "fusion (tuned)"):
                for m in ("nDCG@10", "R@100"):
                    scores = {c: {q: v[m] for q, v in r["per_query"][run].items()}
                              for c, r in cells.items() if run in r["per_query"]}
                    if len(scores) > 1:
                        tests[(run, m)] = {r["system"]: r for r in compare(scores, "minilm", test="perm")}
        for c, r in cells.items():
            card = r["card"] or {}
            sec = dict(card.get("seconds", {}))
            first = cells.get(c[:-len("+ft")], {}).get("card") if c.endswith("+ft") else None
            if first:  # X+ft fine-tuned cell X's model: its pre-training is X's
                sec.update({k: v for k, v in first["seconds"].items() if k.startswith("pretrain")})
            row = [c]
            for run in ("dense", "fusion (untuned)", "fusion (tuned)"):
                for m in ("nDCG@10", "R@100"):
                    v = r["means"].get(run, {}).get(m)
                    p = tests.get((run, m), {}).get(c, {}).get("p_holm")
                    row.append("-" if v is None else f"{v:.4f}" + ("" if p is None or c == "minilm" else _p(p)))
            row += [f"{sec.get('pretrain', 0) + sec.get('pretrain_prep', 0):.0f}",
                    f"{sec.get('finetune', 0) + sec.get('finetune_prep', 0):.0f}",
                    f"{r['seconds']['index_bm25_and_dense']:.0f}"]
            rows.append(row)
        bm25 = next(iter(cells.values()))["means"]["bm25"]
        md += [f"## {col.name} ({next(iter(cells.values()))['queries']} test queries; BM25 nDCG@10 "
               f"{bm25['nDCG@10']:.4f}, R@100 {bm25['R@100']:.4f})", "",
               md_table(["encoder", "dense nDCG@10", "dense R@100", "untuned fusion nDCG@10", "untuned R@100",
                         "tuned fusion nDCG@10", "tuned R@100", "pre-train s", "fine-tune s", "index s"], rows), ""]
        pairs = head_to_head(cells)
        if pairs:
            md += ["Head to head (dense nDCG@10 on the test queries):", "",
                   md_table(["cells", "delta", "95% CI", "p"], pairs), ""]
        for c, r in cells.items():
            card = r["card"] or {}
            d = card.get("data", {})
            if "mlm_before" in d:
                md.append(f"- {c}: MLM head {d['mlm_head']}; masked-token loss/accuracy on 256 passages "
                          f"{d['mlm_before']['loss']}/{d['mlm_before']['accuracy']} before, "
                          f"{d['mlm_after']['loss']}/{d['mlm_after']['accuracy']} after")
            if card.get("history", {}).get("finetune"):
                h, st = card["history"]["finetune"], card["settings"]
                cap = (f", {st['positives_per_query']} relevant passage(s) a query an epoch"
                       if st.get("positives_per_query") else "")
                md.append(f"- {c}: fine-tuned {st['epochs']} epochs at lr {st['lr']:g}{cap}; held-out nDCG@10 base "
                          f"{d.get('dev_ndcg10_base')}, by epoch {[e['dev_ndcg10'] for e in h]}, kept epoch "
                          f"{card['best_epoch']}")
            if r.get("adopted_from"):
                md.append(f"- {c}: the model was trained outside the benchmark, with the same settings and data "
                          f"(`--trained`, from {r['adopted_from']}); its seconds are that run's")
            if r.get("tuned"):
                md.append(f"- {c}: tuned fusion {r['tuned']['fusion']} (on {r['tuned']['dev_queries']} held-out "
                          f"training queries, nDCG@10 {r['tuned']['dev_ndcg10']})")
        md.append("")
        payload["collections"][col.name] = {c: {k: v for k, v in r.items() if k != "per_query"}
                                            for c, r in cells.items()}
    write_results("dense_train", payload, "\n".join(md))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", nargs="*", default=["scifact"])
    ap.add_argument("--cells", nargs="*", default=list(CELLS))
    ap.add_argument("--report", action="store_true", help="Only rewrite the results from the cached cells.")
    ap.add_argument("--trained", nargs="*", default=[], metavar="CELL=MODEL",
                    help="Score MODEL (trained elsewhere with the same settings and data) as CELL of the first "
                         "collection, instead of training it here.")
    a = ap.parse_args()
    for item in a.trained:
        cell, _, folder = item.partition("=")
        adopt(by_name(a.collections)[0], cell, Path(folder))
    if not a.report:
        for col in by_name(a.collections):
            for cell in a.cells:
                if CELLS[cell][2] and col.name not in TRAIN:
                    continue
                t = time.perf_counter()
                r = score_cell(col, cell)
                print(f"{col.name} {cell}: dense nDCG@10 {r['means']['dense']['nDCG@10']:.4f} "
                      f"({time.perf_counter() - t:.0f} s)", flush=True)
    report()


if __name__ == "__main__":
    main()
