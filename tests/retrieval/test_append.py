import json
from pathlib import Path

import pytest

import retrieval
from indexes.errors import InputError
from retrieval.writer import add_documents
from retrieval.types import Document


def test_add_documents_to_bm25_and_dense(tmp_path, small_dense_index):
    import shutil

    path = tmp_path / "IDX"
    shutil.copytree(small_dense_index.path, path)
    idx = retrieval.open_index(path)
    new = [Document("new-1", "zyxwvut quokka habitat on rottnest island", "Quokka"),
           Document("new-2", "marsupial populations and island ecology of the quokka")]
    idx2 = add_documents(idx, new, quiet=True)
    assert len(idx2) == 402
    m = idx2.manifest
    assert m["subindexes"]["bm25"]["doc_count"] == 402 == m["subindexes"]["dense"]["doc_count"]
    assert m["corpus"]["fingerprint"] != idx.manifest["corpus"]["fingerprint"]
    assert idx2.search("zyxwvut quokka", k=1)[0].docid == "new-1"
    assert idx2.search("quokka habitat on rottnest island", k=1, retriever="dense")[0].docid == "new-1"
    assert idx2.get("new-2").text.startswith("marsupial")
    with pytest.raises(InputError, match="already in the index"):
        add_documents(idx2, [Document("new-1", "again")], quiet=True)
    assert len(retrieval.open_index(path)) == 402
    assert sorted(p.name for p in tmp_path.iterdir()) == ["IDX"]


def _lucene_docs(path, name="bm25"):
    """The live documents Lucene holds in sub-index ``name`` of the folder at ``path``, in the
    folder of its current generation."""
    from indexes.lucene import doc_count

    m = retrieval.open_index(path).manifest
    return doc_count(Path(path) / m["subindexes"][name]["path"])


def test_add_keeps_every_old_document_and_equals_a_fresh_build(tmp_path, small_corpus):
    """The regression of `retr add` replacing the whole BM25 index with the new documents:
    after an add, the old queries return their old top 10, Lucene holds every document,
    and the run equals a fresh build over the old and new documents together."""
    from retrieval.collections import read_corpus, read_queries

    docs = list(read_corpus(small_corpus / "corpus.jsonl"))
    old, new = docs[:300], docs[300:]
    queries = list(read_queries(small_corpus / "queries.jsonl"))
    idx = retrieval.build_index(old, tmp_path / "A", quiet=True)
    idx2 = add_documents(idx, new, quiet=True)
    assert len(idx2) == 400 == idx2.manifest["subindexes"]["bm25"]["doc_count"] == _lucene_docs(idx2.path)
    for d in old[::37] + new[::23]:  # every document is still there, old and new
        assert idx2.get(d.docid) is not None
        assert d.docid in [h.docid for h in idx2.search(d.contents[:300], k=10, text=False)]
    fresh = retrieval.build_index(docs, tmp_path / "F", quiet=True).batch_search(queries, k=100)
    grown = idx2.batch_search(queries, k=100)
    for q in queries:
        assert [h.docid for h in grown[q.qid]] == [h.docid for h in fresh[q.qid]], q.qid
        assert [round(h.score, 4) for h in grown[q.qid]] == [round(h.score, 4) for h in fresh[q.qid]], q.qid


def test_cli_add_rejects_bad_corpus_and_keeps_index(retr, tmp_path, small_corpus):
    path = tmp_path / "IDX"
    assert retr("index", "--corpus", small_corpus, "--index", path, "-q").returncode == 0
    before = (path / "manifest.json").read_text()
    bad = tmp_path / "new.jsonl"
    bad.write_text('{"_id": "n1", "text": "fine"}\n{"_id": "n2", "text": \n')
    r = retr("add", "--index", path, "--corpus", bad, "-q")
    assert r.returncode == 2 and "new.jsonl:2:" in r.stderr
    assert (path / "manifest.json").read_text() == before
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"_id": "n1", "text": "a brand new passage about zebrafish fins"}) + "\n")
    r = retr("add", "--index", path, "--corpus", good)
    assert r.returncode == 0, r.stderr
    assert "now 401" in r.stderr
    r = retr("search", "--index", path, "zebrafish fins", "--k", "1")
    assert "n1" in r.stdout
    assert _lucene_docs(path) == 401
    r = retr("check", "--index", path, "--strict", "--full")
    assert r.returncode == 0, r.stdout + r.stderr


def test_add_to_a_pruned_folder_applies_its_estimator_and_threshold(retr, tmp_path, small_corpus):
    from retrieval.quality import score_corpus, write_scores
    from retrieval.writer import build_pruned_index

    idx = build_pruned_index(small_corpus, tmp_path / "P", 0.3, "length", quiet=True)
    pr = idx.manifest["pruning"]
    long_text = "zyxwvut quokka habitat " + " ".join(["island ecology of marsupials"] * 60)
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"_id": "long", "text": long_text}) + "\n"
                   + json.dumps({"_id": "short", "text": "zyxwvut"}) + "\n")
    r = retr("add", "--index", tmp_path / "P", "--corpus", new)
    assert r.returncode == 0, r.stderr
    assert "pruned 1 of 2 new documents" in r.stderr and "added 1 documents" in r.stderr
    idx2 = retrieval.open_index(tmp_path / "P")
    assert len(idx2) == len(idx) + 1 and idx2.get("long") is not None and idx2.get("short") is None
    assert [h.docid for h in idx2.search("zyxwvut", k=5)] == ["long"]
    pr2 = idx2.manifest["pruning"]
    assert (pr2["considered"], pr2["dropped"], pr2["kept"]) == (pr["considered"] + 2, pr["dropped"] + 1, len(idx2))
    # every new document below the threshold: the folder is left as it was
    before = (tmp_path / "P" / "manifest.json").read_text()
    rep = {}
    assert len(add_documents(idx2, [Document("tiny", "a b")], quiet=True, report=rep)) == len(idx2)
    assert rep == {"read": 1, "added": 0, "pruned": 1}
    assert (tmp_path / "P" / "manifest.json").read_text() == before
    # a folder pruned with a scores file cannot score new documents
    ids, s = score_corpus(small_corpus, "length", quiet=True)
    write_scores(tmp_path / "s.tsv", ids, s)
    build_pruned_index(small_corpus, tmp_path / "S", 0.3, str(tmp_path / "s.tsv"), quiet=True)
    r = retr("add", "--index", tmp_path / "S", "--corpus", new)
    assert r.returncode == 2 and r.stderr.startswith("retr: error:") and "scores file" in r.stderr


def test_cli_add_to_scifact_keeps_the_old_top_10(retr, tmp_path, scifact_dir):
    """The reproduction from the bug report, through the CLI: 50 Cranfield passages
    added to a SciFact folder leave an unrelated query's top 10 as it was."""
    cran = scifact_dir.parent / "cranfield" / "corpus.jsonl"
    if not cran.exists():
        pytest.skip(f"dataset not found: {cran}")
    lines = cran.read_text(encoding="utf-8").splitlines()[:50]
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps(dict(json.loads(l), _id="cran-" + json.loads(l)["_id"])) + "\n"
                           for l in lines), encoding="utf-8")
    path = tmp_path / "A"
    assert retr("index", "--corpus", scifact_dir, "--index", path, "-q").returncode == 0
    q = "aspirin colorectal cancer"
    before = retrieval.open_index(path).search(q, k=10, text=False)
    r = retr("add", "--index", path, "--corpus", new, "-q")
    assert r.returncode == 0, r.stderr
    idx = retrieval.open_index(path)
    after = idx.search(q, k=10, text=False)
    assert [h.docid for h in after] == [h.docid for h in before] and len(before) == 10
    n = len(idx)
    assert n == 5233 == idx.manifest["subindexes"]["bm25"]["doc_count"] == _lucene_docs(path)
    assert len(idx.docstore) == n
    assert idx.search("aerodynamics of a wing in a slipstream", k=1)[0].docid == "cran-1"
    r = retr("info", "--index", path)
    assert "5,233 docs" in r.stdout, r.stdout
    r = retr("check", "--index", path, "--strict")
    assert r.returncode == 0 and r.stdout.startswith("ok:"), r.stdout + r.stderr
