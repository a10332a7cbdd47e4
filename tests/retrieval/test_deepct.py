"""DeepCT: targets, impacts, training, the Lucene sub-index, CLI and API, bad input.

Real SPLADE-tiny body (2 layers, 128 hidden), real Lucene via Anserini, tiny data."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import run_retr


# ------------------------------------------------------------------------------------------ data
@pytest.fixture(scope="module")
def tiny_beir(tmp_path_factory, scifact_dir):
    """90 SciFact passages: those judged for 25 training queries plus others; qrels/train.tsv
    has one extra line pointing to a document that is not in the corpus."""
    out = tmp_path_factory.mktemp("deepct-data")
    pairs = [l.split("\t") for l in (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()[1:]][:25]
    wanted = {d for _q, d, _r in pairs}
    docs, rest = [], []
    for line in open(scifact_dir / "corpus.jsonl", encoding="utf-8"):
        (docs if json.loads(line)["_id"] in wanted else rest).append(line)
    (out / "corpus.jsonl").write_text("".join(docs + rest[:90 - len(docs)]), encoding="utf-8")
    qids = {q for q, _d, _r in pairs}
    (out / "queries.jsonl").write_text("".join(l for l in open(scifact_dir / "queries.jsonl", encoding="utf-8")
                                               if json.loads(l)["_id"] in qids), encoding="utf-8")
    (out / "qrels").mkdir()
    body = "".join(f"{q}\t{d}\t{r}\n" for q, d, r in pairs)
    (out / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + body + f"{pairs[0][0]}\tNO-SUCH-DOC\t1\n")
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + body)
    return out


def _cfg(**kw):
    from retrieval.deepct.train import TrainConfig

    base = dict(base="splade-tiny", epochs=3, lr=1e-3, batch_size=8, max_length=64, dev_fraction=0.0,
                max_windows=1, checkpoint_every=1000)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_beir):
    """Trained through the CLI (which must warn about, count and skip the unknown document)."""
    out = tmp_path_factory.mktemp("deepct-model") / "M"
    r = run_retr("train", "deepct", "--corpus", tiny_beir, "--queries", tiny_beir / "queries.jsonl",
                 "--qrels", tiny_beir / "qrels" / "train.tsv", "--output", out, "--base", "splade-tiny",
                 "--epochs", "2", "--lr", "1e-3", "--max-length", "64", "--dev-fraction", "0.2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "retr: warning:" in r.stderr and "1 unknown documents" in r.stderr
    assert "Traceback" not in r.stderr
    return out


# ------------------------------------------------------------------------------------- targets
def test_query_term_recall_on_hand_made_example():
    from retrieval.deepct.targets import QrelsWarning, query_term_recall

    docs = {"d1": "Cats chase the mice quickly.", "d2": "The dog barks."}
    queries = {"q1": "cat chasing", "q2": "Mice!", "q3": "dog", "q4": "unknown doc"}
    qrels = {"q1": {"d1": 1}, "q2": {"d1": 2}, "q3": {"d2": 0}, "q4": {"dX": 1}, "q5": {"d1": 1}}
    with pytest.warns(QrelsWarning, match="2 relevant qrels skipped: 1 unknown documents"):
        t = query_term_recall(docs, queries, qrels, min_rel=1)
    # d1 has two relevant queries: q1 matches cat+chase (stemmed), q2 matches mice; "the" is a stopword
    assert t.by_doc == {"d1": {"cat": 0.5, "chase": 0.5, "mice": 0.5, "quickli": 0.0}}
    assert t.stats["unknown_documents"] == 1 and t.stats["unknown_queries"] == 1 and t.stats["skipped_pairs"] == 2
    # with min_rel=2 only q2 counts, and grade 0 never does
    t2 = query_term_recall(docs, queries, {"q1": {"d1": 1}, "q2": {"d1": 2}}, min_rel=2)
    assert t2.by_doc["d1"] == {"cat": 0.0, "chase": 0.0, "mice": 1.0, "quickli": 0.0}


def test_title_weak_supervision_uses_title_as_pseudo_query():
    from retrieval.deepct.targets import title_targets
    from retrieval.types import Document

    docs = [Document("a", "wing flutter . the flutter of wings at high speed", "Wing flutter ."),
            Document("b", "no title here")]
    t, bodies = title_targets(docs)
    assert set(t.by_doc) == {"a"}
    assert bodies["a"] == "the flutter of wings at high speed"  # leading copy of the title removed
    assert t.by_doc["a"] == {"flutter": 1.0, "wing": 1.0, "high": 0.0, "speed": 0.0}


def test_terms_match_the_bm25_analyzer_on_words():
    from retrieval.deepct.targets import analyzer

    an = analyzer()
    assert an.terms("The Diffusion-weighted MRIs, café!") == ["diffus", "weight", "mri", "cafe"]


# ------------------------------------------------------------------------------------- impacts
def test_impacts_are_integers_and_follow_the_rules():
    from retrieval.deepct.model import to_impacts

    w = {"a": 0.004, "b": 0.5, "c": -0.2, "d": 1.234, "e": 0.00499}
    lin = to_impacts(w)
    assert lin == {"b": 50, "d": 123}  # round(w*100); under 1 dropped (a -> 0.4, e -> 0.499, c negative)
    assert all(type(v) is int for v in lin.values())
    sq = to_impacts(w, "sqrt")
    assert sq == {"a": 6, "b": 71, "d": 111, "e": 7}
    with pytest.raises(ValueError):
        to_impacts(w, "log")


def test_encoder_takes_first_piece_max_over_repeats_and_windows(model_dir):
    from retrieval.deepct.model import DeepCTEncoder

    enc = DeepCTEncoder(model_dir, max_length=24, threads=1)  # 22 pieces per window
    words = [f"zz{i}x" for i in range(60)]  # several pieces each: many windows
    text = " ".join(words) + " amoxicillin"
    [w] = enc.encode([text])
    assert "amoxicillin" in w  # the last word is scored: no truncation
    assert len(w) == 61
    assert len(enc.prep.prepare([text])[0].windows) > 5


def test_one_thread_holds_for_the_encoding_only(model_dir):
    """threads=1 (for the same floats everywhere) is set around each encoding and undone after it:
    set once for the process, it left every later dense encoding in a server on one thread."""
    import torch
    from retrieval.deepct.model import DeepCTEncoder

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        enc = DeepCTEncoder(model_dir, max_length=24, threads=1)
        assert torch.get_num_threads() == 2
        a = enc.encode(["amoxicillin for otitis media in children"])
        assert torch.get_num_threads() == 2
        assert enc.encode(["amoxicillin for otitis media in children"]) == a
    finally:
        torch.set_num_threads(before)
    # a repeated term keeps the max of its occurrences' weights
    [a, b, both] = enc.encode(["fever in children", "fever", "fever in children fever"])
    assert both["fever"] >= max(a["fever"], 0) - 1e-6


# ------------------------------------------------------------------------------------ training
def test_training_lowers_loss_is_deterministic_and_resumes(tmp_path, tiny_beir):
    from safetensors.torch import load_file

    from retrieval.deepct.train import train_deepct

    args = (tiny_beir, )
    kw = dict(queries=tiny_beir / "queries.jsonl", qrels=tiny_beir / "qrels" / "train.tsv", quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        card = train_deepct(*args, tmp_path / "a", cfg=_cfg(), **kw)
        losses = card["training"]["epoch_losses"]
        assert len(losses) == 3 and losses[-1] < losses[0]
        assert card["training"]["final_loss"] == losses[-1]
        # interrupted after 2 steps, then resumed: same weights as one uninterrupted run
        part = train_deepct(*args, tmp_path / "b", cfg=_cfg(), stop_after_steps=2, **kw)
        assert part["stopped_at_step"] == 2 and (tmp_path / "b" / ".checkpoint" / "state.pt").exists()
        card_b = train_deepct(*args, tmp_path / "b", cfg=_cfg(), **kw)
    assert not (tmp_path / "b" / ".checkpoint").exists()
    ha, hb = (load_file(str(tmp_path / x / "deepct_head.safetensors")) for x in "ab")
    assert all(torch.equal(ha[k], hb[k]) for k in ha)
    wa, wb = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert card_b["training"]["epoch_losses"] == losses
    for key in ("base_model", "data", "targets", "training"):
        assert key in card
    # the card points at its data absolutely, so the held-out queries are found from any directory
    assert Path(card["data"]["queries"]).is_absolute() and Path(card["data"]["qrels"]).is_absolute()
    assert (tmp_path / "a" / "README.md").read_text().startswith("# DeepCT")


# ------------------------------------------------------------------------------- sub-index
def test_heavily_weighted_term_is_returned_first(tmp_path):
    from indexes.impact import index_vectors
    from retrieval.deepct.subindex import DeepCTRetriever
    from retrieval.types import Query

    vecs = {"d1": {"zebra": 5, "cat": 90}, "d2": {"zebra": 80, "dog": 3}, "d3": {"zebra": 30}, "d4": {"cat": 7}}
    for v in ("impact-linear", "bm25-linear"):
        index_vectors(vecs.items(), tmp_path / v, impact=v.startswith("impact"), threads=1)
    entry = {"kind": "deepct", "config": {"mode": "impact", "scale": "linear", "k1": 10.0, "b": 0.9}}
    r = DeepCTRetriever(tmp_path, entry)
    hits = r.search("Zebras?", 10)  # analysed like the passages: zebras -> zebra
    assert [d for d, _ in hits] == ["d2", "d3", "d1"]
    assert [s for _, s in hits] == [80.0, 30.0, 5.0]  # impact score = query count x impact
    r.configure(mode="bm25")
    assert [d for d, _ in r.search("zebra", 10)] == ["d2", "d3", "d1"]
    res = r.batch_search([Query("q1", "cat"), Query("q2", "the of")], 10)
    assert [d for d, _ in res["q1"]] == ["d1", "d4"] and res["q2"] == []


def test_index_with_deepct_answers_through_cli_and_api(tmp_path, tiny_beir, model_dir):
    import retrieval

    idx_dir = tmp_path / "IDX"
    r = run_retr("index", "--corpus", tiny_beir, "--index", idx_dir, "--deepct", model_dir, "--quiet")
    assert r.returncode == 0, r.stderr
    idx = retrieval.open_index(idx_dir)
    assert {"bm25", "deepct", "deepct-query"} <= set(idx.retrievers)
    e = idx.manifest["subindexes"]["deepct"]
    assert e["kind"] == "deepct" and e["doc_count"] == 90 and e["model"]["sha256"]
    assert "tuning" in e and e["config"]["k1"] == e["tuning"]["best"]["k1"]  # tuned on the dev split
    # mode and scale are chosen on the same dev queries: the default is the best-scoring variant there
    t = e["tuning"]
    assert t["scales"] == ["linear", "sqrt"] and len(t["grid"]) == 2 * 7 * 5
    scores = {("bm25", t["best"]["scale"]): t["best"]["nDCG@10"],
              ("impact", "linear"): t["impact-linear"], ("impact", "sqrt"): t["impact-sqrt"]}
    assert scores[(e["config"]["mode"], e["config"]["scale"])] == max(scores.values())
    assert t["best"]["nDCG@10"] == max(v for k, v in t["grid"].items() if k.startswith(t["best"]["scale"]))
    run = tmp_path / "run.trec"
    r = run_retr("search", "--index", idx_dir, "--queries", tiny_beir / "queries.jsonl", "--retriever", "deepct",
                 "--output", run, "--k", "5", "--quiet")
    assert r.returncode == 0, r.stderr
    lines = [l.split() for l in run.read_text().splitlines()]
    qs = retrieval.read_queries(tiny_beir / "queries.jsonl")
    assert {p[0] for p in lines} == {q.qid for q in qs}
    api = idx.batch_search(qs, k=5, retriever="deepct")
    cli_top = {p[0]: p[2] for p in lines if p[3] == "1"}
    assert cli_top == {q: hits[0].docid for q, hits in api.items() if hits}
    # a query made of one passage's title finds that passage first (API, with text)
    doc = next(iter(retrieval.read_corpus(tiny_beir)))
    assert idx.search(doc.title, k=3, retriever="deepct")[0].docid == doc.docid
    assert idx.search(doc.title, k=3, retriever="deepct-query")[0].docid == doc.docid
    r = run_retr("search", "--index", idx_dir, "--retriever", "bm25+deepct", doc.title, "--k", "3")
    assert r.returncode == 0, r.stderr
    assert doc.docid in r.stdout.splitlines()[0]

    # per-search overrides of mode and scale from the CLI match the API's configure
    run2 = tmp_path / "run2.trec"
    r = run_retr("search", "--index", idx_dir, "--queries", tiny_beir / "queries.jsonl", "--retriever", "deepct",
                 "--deepct-mode", "impact", "--deepct-scale", "sqrt", "--output", run2, "--k", "5", "--quiet")
    assert r.returncode == 0, r.stderr
    idx.snapshot().retriever("deepct").configure(mode="impact", scale="sqrt")
    api2 = idx.batch_search(qs, k=5, retriever="deepct")
    got = {(p[0], p[2]): float(p[4]) for p in (l.split() for l in run2.read_text().splitlines())}
    assert got == {(q, h.docid): pytest.approx(h.score, abs=1e-5) for q, hs in api2.items() for h in hs}
    assert all(abs(s - round(s)) < 1e-3 for s in got.values())  # impact scores: sums of integers (float32)
    r = run_retr("search", "--index", idx_dir, "--retriever", "bm25", "--deepct-scale", "sqrt", "x")
    assert r.returncode == 2 and "--deepct-scale applies to no retriever of bm25" in r.stderr

    # re-choosing the defaults of the built sub-index (no re-encoding): pinned, then back to auto
    from retrieval.deepct.tuning import retune_deepct

    pinned = retune_deepct(idx, mode="impact", scale="sqrt")
    for name in ("deepct", "deepct-query"):
        assert pinned.manifest["subindexes"][name]["config"]["mode"] == "impact"
        assert pinned.manifest["subindexes"][name]["config"]["scale"] == "sqrt"
    assert pinned.manifest["subindexes"]["deepct-query"]["config"]["query"] == "deepct"
    assert pinned.snapshot().retriever("deepct").search(doc.title, 3)[0][0] == doc.docid
    back = retune_deepct(pinned)
    assert back.manifest["subindexes"]["deepct"]["config"] == e["config"]
    r = run_retr("deepct-tune", "--index", idx_dir, "--mode", "impact", "--scale", "linear", "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("deepct: impact-linear") and "dev queries" in r.stdout
    assert retrieval.open_index(idx_dir).manifest["subindexes"]["deepct"]["config"]["scale"] == "linear"
    r = run_retr("deepct-tune", "--index", idx_dir, "--name", "dense")
    assert r.returncode == 2 and "no DeepCT sub-index named 'dense'" in r.stderr
    back = retune_deepct(retrieval.open_index(idx_dir))
    assert back.manifest["subindexes"]["deepct"]["config"] == e["config"]
    assert back.manifest["subindexes"]["deepct"]["model"] == e["model"]
    with pytest.raises(retrieval.InputError, match="no DeepCT sub-index"):
        retune_deepct(back, name="bm25")


# ------------------------------------------------------------------------------------ bad input
def test_missing_model_dir_fails_clearly(tmp_path, tiny_beir):
    r = run_retr("index", "--corpus", tiny_beir, "--index", tmp_path / "I", "--deepct", tmp_path / "nope")
    assert r.returncode == 2 and r.stderr.startswith("retr: error:") and "not found" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "I").exists()


def test_model_without_tokenizer_or_head_fails_clearly(tmp_path, model_dir):
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.deepct.model import load_model
    from retrieval.models import ModelDirError, bundled_model_path

    broken = tmp_path / "M"
    shutil.copytree(model_dir, broken)
    for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        (broken / f).unlink(missing_ok=True)
    with pytest.raises(ModelDirError, match="tokenizer"):
        DeepCTSpec(model=str(broken)).validate()
    with pytest.raises(ModelDirError, match="tokenizer"):
        load_model(broken)
    with pytest.raises(ModelDirError, match="not a DeepCT model"):
        load_model(bundled_model_path("splade-tiny"))


def test_training_without_any_usable_qrels_fails_clearly(tmp_path, tiny_beir):
    (tmp_path / "q.tsv").write_text("query-id\tcorpus-id\tscore\nX\tNO-SUCH-DOC\t1\n")
    r = run_retr("train", "deepct", "--corpus", tiny_beir, "--queries", tiny_beir / "queries.jsonl",
                 "--qrels", tmp_path / "q.tsv", "--output", tmp_path / "M", "--base", "splade-tiny", "--quiet")
    assert r.returncode == 2 and "no training passages" in r.stderr and "Traceback" not in r.stderr


def test_training_on_test_qrels_is_refused_with_one_line(tmp_path, tiny_beir):
    r = run_retr("train", "deepct", "--corpus", tiny_beir, "--queries", tiny_beir / "queries.jsonl",
                 "--qrels", tiny_beir / "qrels" / "test.tsv", "--output", tmp_path / "M", "--base", "splade-tiny")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith("retr: error: ") and "test qrels" in err[0], r.stderr
    assert not (tmp_path / "M").exists()


def test_retr_add_grows_the_deepct_sub_index(tmp_path, tiny_beir, model_dir):
    import gzip

    from retrieval.writer import add_documents
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.deepct.weights import read_weights
    from retrieval.types import Document

    from retrieval.writer import index_corpus

    idx = index_corpus(tiny_beir, tmp_path / "IDX", subindexes={"deepct": DeepCTSpec(model=str(model_dir))},
                       quiet=True)
    before = idx.manifest["subindexes"]["deepct"]
    new = [Document("new-1", "zyxwvut quokka habitat on rottnest island", "Quokka"),
           Document("new-2", "marsupial populations and island ecology")]
    idx2 = add_documents(idx, new, quiet=True)
    m = idx2.manifest["subindexes"]
    assert m["deepct"]["doc_count"] == m["deepct-query"]["doc_count"] == m["bm25"]["doc_count"] == 92
    assert m["deepct"]["config"] == before["config"]  # the tuned defaults stay
    assert m["deepct-query"]["variant_bytes"] == m["deepct"]["variant_bytes"] != before["variant_bytes"]
    folder = idx2.path / m["deepct"]["path"]
    assert m["deepct-query"]["path"] == m["deepct"]["path"] != before["path"]  # the new generation's folder
    with gzip.open(folder / "weights.jsonl.gz", "rt", encoding="utf-8") as f:  # the built file, unchanged
        assert len([json.loads(l)["id"] for l in f]) == 90
    rows = [d for d, _w in read_weights(folder)]  # the added weights are in a file of their own
    assert len(rows) == 92 and rows[-2:] == ["new-1", "new-2"]
    from indexes.lucene import doc_count

    for v in m["deepct"]["config"]["variants"]:  # every variant holds the old documents and the new
        assert doc_count(folder / v) == 92, v
    for mode in ("impact", "bm25"):
        for scale in ("linear", "sqrt"):
            idx2.snapshot().retriever("deepct").configure(mode=mode, scale=scale)
            assert idx2.search("zyxwvut quokka", k=1, retriever="deepct")[0].docid == "new-1", (mode, scale)
    # the alias shares the grown folder (plain query terms: a 2-epoch model may weight a query term at 0)
    idx2.snapshot().retriever("deepct-query").configure(query="plain")
    assert idx2.search("zyxwvut", k=1, retriever="deepct-query")[0].docid == "new-1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["IDX"]


def test_deepct_delete_update_compact_equal_a_fresh_build(tmp_path, tiny_beir, model_dir):
    """Deleted passages leave every DeepCT variant at once; updated ones are encoded again, alone;
    after compaction every variant's run is the TREC file of a fresh build of the final corpus."""
    import retrieval
    from retrieval.check import check_index
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.deepct.weights import read_weights
    from retrieval.types import Document
    from retrieval.writer import compact, delete_documents, index_corpus, update_documents

    spec = DeepCTSpec(model=str(model_dir), tune=False)
    idx = index_corpus(tiny_beir, tmp_path / "IDX", subindexes={"deepct": spec}, quiet=True)
    docs = list(retrieval.read_corpus(tiny_beir))
    victim, changed = docs[4], docs[5]
    idx = delete_documents(idx, [victim.docid], quiet=True)
    variants = [(m, s) for m in ("impact", "bm25") for s in ("linear", "sqrt")]
    for mode, scale in variants:
        idx.configure("deepct", mode=mode, scale=scale)
        assert victim.docid not in [h.docid for h in idx.search(victim.title, k=10, retriever="deepct")], mode
    idx = update_documents(idx, [Document(changed.docid, "zyxwvut quokka habitat", "Quokka"),
                                 Document("new-1", "marsupial island ecology on rottnest")], quiet=True)
    rep = check_index(idx.path, full=True, strict=True)
    assert rep.ok and "deepct" in rep.checked, rep.problems
    for mode, scale in variants:
        idx.configure("deepct", mode=mode, scale=scale)
        assert idx.search("zyxwvut quokka", k=1, retriever="deepct")[0].docid == changed.docid, (mode, scale)
    idx = compact(idx, quiet=True)
    assert check_index(idx.path, full=True, strict=True).ok
    folder = idx.path / idx.manifest["subindexes"]["deepct"]["path"]
    final = [Document(d, text, title) for d, title, text, _m in idx.docstore.iter_docs()]
    assert [d for d, _w in read_weights(folder)] == [d.docid for d in final]  # one file, the store's order
    assert sorted(p.name for p in folder.iterdir() if p.is_file()) == ["weights.jsonl.gz"]
    fresh = index_corpus(final, tmp_path / "F", subindexes={"deepct": spec}, quiet=True)
    qs = retrieval.read_queries(tiny_beir / "queries.jsonl")
    for mode, scale in variants:
        runs = []
        for i in (idx, fresh):
            i.configure("deepct", mode=mode, scale=scale)
            runs.append([f"{q} {h.docid} {h.rank} {h.score:.5f}" for q, hs in
                         i.batch_search(qs, k=20, retriever="deepct").items() for h in hs])
        assert runs[0] == runs[1], (mode, scale)


def test_training_without_qrels_uses_titles_and_says_so(tmp_path, tiny_beir):
    """`retr train deepct --corpus C` with no --qrels trains on titles (the card records title=only and
    title targets) and prints one note; a corpus without titles is refused in one error line."""
    out = tmp_path / "T"
    r = run_retr("train", "deepct", "--corpus", tiny_beir, "--output", out, "--base", "splade-tiny",
                 "--epochs", "1", "--lr", "1e-3", "--max-length", "64", "--quiet")
    assert r.returncode == 0, r.stderr
    notes = [l for l in r.stderr.splitlines() if l.startswith("retr: note: ")]
    assert len(notes) == 1 and "titles" in notes[0] and "Traceback" not in r.stderr
    card = json.loads((out / "deepct.json").read_text())
    assert card["training"]["settings"]["title"] == "only"
    assert card["targets"]["kind"] == "title weak supervision (HDCT)"
    titled = sum(1 for l in (tiny_beir / "corpus.jsonl").read_text().splitlines() if json.loads(l)["title"].strip())
    assert card["data"]["training_passages"] == titled > 0
    # with qrels, auto means no title supervision
    from retrieval.deepct.train import TrainConfig, resolve_title

    assert resolve_title(TrainConfig(), "queries.jsonl").title == "off"
    assert resolve_title(TrainConfig(title="extra"), None).title == "extra"
    # a corpus without titles: one error line, nothing written
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({"_id": json.loads(l)["_id"], "title": "", "text": json.loads(l)["text"]}) + "\n"
                            for l in (tiny_beir / "corpus.jsonl").read_text().splitlines()))
    r = run_retr("train", "deepct", "--corpus", bare, "--output", tmp_path / "N", "--base", "splade-tiny")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith("retr: error: ") and "title" in err[0], r.stderr
    assert not (tmp_path / "N").exists() or not any((tmp_path / "N").iterdir())


# ------------------------------------------------------------------------- retuning under a reader
def test_retune_in_another_process_leaves_an_open_reader_on_its_generation(tmp_path, tiny_beir, model_dir):
    """`retune_deepct` pinning another default, run in another process while readers are open: a
    reader that does not follow answers byte for byte as before, from the same generation, until it
    refreshes; then it answers with the new default, exactly the pinned variant with the new k1/b;
    a reader that follows moves on its next search; `retr check` passes."""
    import subprocess
    import sys

    import retrieval
    from retrieval.check import check_index
    from tests.conftest import ROOT

    idx_dir = tmp_path / "IDX"
    r = run_retr("index", "--corpus", tiny_beir, "--index", idx_dir, "--deepct", model_dir, "--quiet")
    assert r.returncode == 0, r.stderr
    qs = retrieval.read_queries(tiny_beir / "queries.jsonl")[:6]

    def results(i):
        return {name: [(q, h.docid, h.rank, repr(h.score)) for q, hs in
                       i.batch_search(qs, k=10, retriever=name).items() for h in hs]
                for name in ("deepct", "bm25+deepct")}

    reader = retrieval.open_index(idx_dir, auto_refresh=False)
    pinned = retrieval.open_index(idx_dir, auto_refresh=False)  # stays on this generation, configured below
    follower = retrieval.open_index(idx_dir)                     # each search moves to the newest generation
    before, gen = results(reader), reader.generation
    assert results(follower) == before and all(before.values())
    old = reader.manifest["subindexes"]["deepct"]["config"]
    mode = "impact" if old["mode"] == "bm25" else "bm25"  # the variant the default is not, in both respects
    scale = "sqrt" if old["scale"] == "linear" else "linear"

    code = ("import sys, retrieval; from retrieval.deepct.tuning import retune_deepct; "
            "retune_deepct(retrieval.open_index(sys.argv[1]), mode=sys.argv[2], scale=sys.argv[3])")
    p = subprocess.run([sys.executable, "-c", code, str(idx_dir), mode, scale], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr

    assert reader.generation == gen and results(reader) == before  # its generation, byte for byte
    assert reader.manifest["subindexes"]["deepct"]["config"] == old
    fresh = retrieval.open_index(idx_dir)
    new = fresh.manifest["subindexes"]["deepct"]["config"]
    assert fresh.generation > gen and (new["mode"], new["scale"]) == (mode, scale)
    assert fresh.manifest["subindexes"]["deepct-query"]["config"]["mode"] == mode

    assert reader.refresh() and reader.generation == fresh.generation
    after = results(reader)
    assert after["deepct"] != before["deepct"] and after == results(fresh) == results(follower)
    # the new default is the pinned variant with the retuned k1/b, as the old generation configured so answers
    pinned.configure("deepct", mode=mode, scale=scale, **({"k1": new["k1"], "b": new["b"]} if mode == "bm25" else {}))
    assert pinned.generation == gen and results(pinned)["deepct"] == after["deepct"]

    rep = check_index(idx_dir, full=True, strict=True)
    assert rep.ok and "deepct" in rep.checked, rep.problems
    for i in (reader, pinned, follower, fresh):
        i.close()
    assert check_index(idx_dir, full=True, strict=True).ok
