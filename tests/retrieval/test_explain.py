"""`retr explain` / Index.explain / POST /v1/NAME/explain: every kind's explanation adds up to the score its
search returned, at the rank it returned, and fusion's arithmetic gives the fused score and rank.

One real folder over 120 SciFact passages with every kind: BM25, dense (MiniLM), SPLADE-tiny and DeepCT
(a model trained here for a few seconds on titles, over SPLADE-tiny's body)."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

import retrieval
from tests.conftest import run_retr

TOL = 1e-5  # relative: the parts add up to the returned score to float precision


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, small_corpus):
    """120 passages of the small SciFact folder (those judged for its queries first), with metadata."""
    from tests.conftest import with_meta

    src = tmp_path_factory.mktemp("explain-src")
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:120]
    (src / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    out = with_meta(src, tmp_path_factory.mktemp("explain-data"))
    shutil.copy(small_corpus / "queries.jsonl", out / "queries.jsonl")
    return out


@pytest.fixture(scope="module")
def index(tmp_path_factory, corpus, small_dense_index):
    from retrieval.deepct.subindex import DeepCTSpec
    from retrieval.deepct.train import TrainConfig, train_deepct
    from retrieval.dense.subindex import DenseSpec
    from retrieval.splade.subindex import SpladeSpec
    from retrieval.writer import add_subindex

    model = tmp_path_factory.mktemp("explain-deepct") / "M"
    train_deepct(corpus / "corpus.jsonl", model, quiet=True,
                 cfg=TrainConfig(base="splade-tiny", epochs=1, max_length=64, dev_fraction=0.0, max_windows=1,
                                 title_limit=40, batch_size=16))
    from tests.conftest import encoded_by

    # MiniLM's vectors of these passages: the shared dense index encoded them in this session
    pre = encoded_by(small_dense_index)
    idx = retrieval.build_index(corpus / "corpus.jsonl", tmp_path_factory.mktemp("explain") / "IDX", quiet=True,
                                subindexes={"dense": DenseSpec()}, precomputed=pre)
    assert idx.manifest["subindexes"]["dense"]["vectors_from"] == pre["source"]
    idx = add_subindex(idx, SpladeSpec(), quiet=True)
    return add_subindex(idx, DeepCTSpec(model=str(model), mode="impact", scale="linear", k1=0.9, b=0.4, tune=False,
                                        tune_fusion=False), quiet=True)


@pytest.fixture(scope="module")
def queries(corpus):
    return [q.text for q in retrieval.read_queries(corpus / "queries.jsonl")[:3]]


def _close(a, b, tol=TOL):
    return a == pytest.approx(b, rel=tol, abs=1e-9)


def _check_member(m, raw_score):
    """A member in its list: its score is the one the search returned, and its parts add up to it."""
    assert m["in_list"] and m["score"] == raw_score
    assert _close(sum(p["value"] for p in m["parts"]), m["score"])
    assert _close(m["explained"], m["score"])


def _check_fusion(f, score, rank):
    """The fusion section's arithmetic gives the fused score the search returned, at its rank."""
    contributions = [e["contribution"] for e in f["lists"].values() if e["contribution"] is not None]
    assert _close(sum(contributions), f["sum"])
    for e in f["lists"].values():
        if f["method"] == "rrf":
            assert e["contribution"] is None if e["rank"] is None else \
                _close(e["contribution"], e["weight"] / (f["k"] + e["rank"]))
        else:
            took = e["floor"] if e["normalised"] is None else e["normalised"]
            assert _close(e["contribution"], e["weight"] * took)
            if f["norm"] == "minmax" and e["normalised"] is not None:
                lo, hi = e["norm"]["min"], e["norm"]["max"]
                assert _close(e["normalised"], (e["raw"] - lo) / (hi - lo))
    fused = f["sum"] * f["multiplier"] if f["method"] == "combmnz" else f["sum"]
    assert _close(fused, score) and f["score"] == score and f["rank"] == rank


SPECS = [("bm25", {}), ("splade", {}), ("dense", {}), ("deepct", {}), ("deepct", {"mode": "bm25"}),
         ("deepct-query", {}), ("bm25+dense", {}), ("bm25+splade", {}), ("bm25+dense:rrf(k=60)", {}),
         ("bm25+splade:weighted(bm25=0.3,splade=0.7,norm=zscore)", {}), ("bm25+deepct:combsum(norm=minmax)", {})]


@pytest.mark.parametrize("spec,options", SPECS, ids=[s + (":" + ",".join(o.values()) if o else "") for s, o in SPECS])
def test_the_explanation_adds_up_to_the_score_and_rank_the_search_returned(index, queries, spec, options):
    member = spec.split(":")[0].split("+")
    if options:
        index.configure(member[-1], **options)
    try:
        seen = 0
        for q in queries:
            hits = index.search(q, k=8, retriever=spec, text=False)
            for h in hits:
                out = index.explain(q, h.docid, retriever=spec)
                assert out["docid"] == h.docid and out["rank"] == h.rank and _close(out["score"], h.score)
                assert set(out["retrievers"]) == set(member)
                for name, m in out["retrievers"].items():
                    if m["in_list"]:
                        _check_member(m, h.scores[name] if h.scores else h.score)
                if out["fusion"] is not None:
                    _check_fusion(out["fusion"], h.score, h.rank)
                else:
                    assert out["retrievers"][spec]["score"] == h.score  # bit for bit
                seen += 1
        assert seen >= 10
    finally:
        if options:
            index.configure(member[-1], mode="impact")


def test_bm25_terms_are_lucenes_figures(index, queries):
    """Each term's figures make its score by BM25's formula, the shares add up to 1, and Lucene's own
    total of the query equals the sum the search rounded."""
    hits = index.search(queries[0], k=5, retriever="bm25", text=False)
    for h in hits:
        m = index.explain(queries[0], h.docid)["retrievers"]["bm25"]
        d = m["details"]
        assert d["k1"] == 0.9 and d["b"] == 0.4 and d["docs"] == 120 and _close(d["lucene"], d["raw"], 1e-6)
        terms = [p for p in m["parts"] if "idf" in p]
        assert terms and _close(sum(p["share"] for p in terms), 1.0)
        for p in terms:
            assert p["tf"] >= 1 and 1 <= p["df"] <= 120
            assert _close(p["idf"], math.log(1 + (120 - p["df"] + 0.5) / (p["df"] + 0.5)))
            assert _close(p["length_norm"], 1 - 0.4 + 0.4 * p["dl"] / d["avgdl"])
            assert _close(p["tf_part"], p["tf"] / (p["tf"] + 0.9 * p["length_norm"]))
            assert _close(p["value"], p["query_weight"] * p["idf"] * p["tf_part"])
        assert set(d["unmatched"]).isdisjoint(p["label"] for p in terms)
        assert "BM25Similarity" in d["lucene_explanation"]


def test_impact_terms_are_the_query_weight_times_the_stored_impact(index, queries):
    """SPLADE: each shared word-piece's query weight is the model's, and its stored impact is what a
    one-term query of weight 1 scores the passage (read from Lucene without explain)."""
    r = index.snapshot().retriever("splade")
    weights = r.query_terms([queries[0]])[0]
    lucene = r._lucene()
    for h in index.search(queries[0], k=3, retriever="splade", text=False):
        m = index.explain(queries[0], h.docid, retriever="splade")["retrievers"]["splade"]
        terms = [p for p in m["parts"] if "impact" in p]
        assert terms and {p["label"] for p in terms} | set(m["details"]["unmatched"]) == set(weights)
        for p in terms:
            assert p["query_weight"] == weights[p["label"]] and p["value"] == p["query_weight"] * p["impact"]
            alone = dict(lucene.batch([{p["label"]: 1}], ["q"], 120)["q"])
            assert alone[h.docid] == pytest.approx(p["impact"], abs=1e-4)  # less Anserini's tie offset


def test_dense_is_the_inner_product_and_dimension_selection_says_which_dimensions(index, queries, corpus):
    from retrieval.dense.dimsel.masks import keep_count

    from retrieval.dense.encoder import DenseEncoder

    r = index.snapshot().retriever("dense")
    q = r.encode_queries([queries[1]])[0]
    docs = {d.docid: d for d in retrieval.read_corpus(corpus / "corpus.jsonl")}
    # a passage encoded again by the passages' recorded encoder (queries may run another backend: onnx-int8)
    passages = DenseEncoder.from_config(index.manifest["subindexes"]["dense"]["encoder"], quiet=True)
    again = lambda text: passages.encode([text], quiet=True)[0]  # noqa: E731
    hits = index.search(queries[1], k=3, retriever="dense", text=False)
    for h in hits:
        m = index.explain(queries[1], h.docid, retriever="dense")["retrievers"]["dense"]
        v = again(docs[h.docid].contents)  # the passage encoded again, not read from faiss
        assert _close(m["score"], float(q @ v), 1e-4) and _close(m["details"]["cosine"], float(q @ v), 1e-4)
    sel = {"mode": "prf", "alpha": 0.25}
    for h in index.search(queries[1], k=3, retriever="dense", text=False, dimsel=sel):
        out = index.explain(queries[1], h.docid, retriever="dense", dimsel=sel)
        m = out["retrievers"]["dense"]
        assert out["rank"] == h.rank and m["score"] == h.score
        dims = m["details"]["dimensions"]
        assert len(dims) == m["details"]["dimensions_counted"] == keep_count(384, 0.25)
        assert _close(m["score"], float(q[dims] @ again(docs[h.docid].contents)[dims]), 1e-4)
        assert any("kept 96 of 384" in n for n in m["notes"])


def test_a_document_outside_a_list_s_depth_says_so(index, queries):
    q = queries[0]
    deep = index.search(q, k=60, retriever="bm25", text=False)
    far = deep[40]
    out = index.explain(q, far.docid, retriever="bm25", depth=10)
    m = out["retrievers"]["bm25"]
    assert out["rank"] is None and m["rank"] is None and not m["in_list"]
    assert any("not in its top 10" in n for n in m["notes"])
    assert _close(m["score"], far.score) and _close(m["explained"], far.score)  # still explained
    # fused: in one member's top 10 only, the other list takes it as missing
    dense10 = {h.docid for h in index.search(q, k=10, retriever="dense", text=False)}
    bm10 = [h for h in index.search(q, k=10, retriever="bm25", text=False) if h.docid not in dense10]
    assert bm10
    for spec in ("bm25+dense", "bm25+dense:rrf(k=60)"):
        out = index.explain(q, bm10[0].docid, retriever=spec, depth=10)
        fused = index.search(q, k=10, retriever=spec, depth=10, text=False)  # lists of max(k, depth)
        got = next(h for h in fused if h.docid == bm10[0].docid)
        assert out["rank"] == got.rank and _close(out["score"], got.score)
        missing = out["fusion"]["lists"]["dense"]
        assert missing["rank"] is None and not out["retrievers"]["dense"]["in_list"]
        assert (missing["contribution"] is None) == (out["fusion"]["method"] == "rrf")
        _check_fusion(out["fusion"], got.score, got.rank)
    # in no member's list: the fusion never sees it
    out = index.explain(q, far.docid, retriever="bm25+dense", depth=10)
    if far.docid not in dense10:
        assert out["score"] is None and out["rank"] is None and out["notes"]


def test_a_filter_explains_the_filtered_ranking(index, queries):
    flt = {"shard": "odd"}
    hits = index.search(queries[0], k=5, retriever="bm25+splade", text=False, filter=flt)
    for h in hits:
        out = index.explain(queries[0], h.docid, retriever="bm25+splade", filter=flt)
        assert out["rank"] == h.rank and _close(out["score"], h.score)
    even = next(d for d in index.search(queries[0], k=40, retriever="bm25", text=False) if int(d.docid) % 2 == 0)
    out = index.explain(queries[0], even.docid, retriever="bm25", filter=flt)
    assert out["rank"] is None and any("filter does not allow it" in n for n in out["retrievers"]["bm25"]["notes"])


def test_cli_prints_tables_and_the_fused_score_and_json_equals_the_api(index, queries, capsys):
    from cli.main import main

    q = queries[0]
    top = index.search(q, k=3, retriever="bm25+dense", text=False)[2]
    assert main(["explain", "--index", str(index.path), "--query", q, "--docid", top.docid,
                 "--retriever", "bm25+dense"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("bm25 (bm25): score ") and any(l.startswith("dense (dense): score ") for l in text)
    assert any("term / part" in l and "idf" in l for l in text)
    assert any(l.startswith("fusion combmnz(") for l in text)
    assert text[-1].startswith(f"fused score {top.score:.4f} at rank 3")
    assert main(["explain", "--index", str(index.path), "--query", q, "--docid", top.docid,
                 "--retriever", "bm25+splade", "--json", "--splade-query", "tokens"]) == 0
    got = json.loads(capsys.readouterr().out)
    index.configure("splade", query="tokens")
    try:
        want = index.explain(q, top.docid, retriever="bm25+splade")
    finally:
        index.configure("splade", query="splade")
    assert got == json.loads(json.dumps(want))
    assert {"docid", "score", "rank", "retrievers"} <= set(got)


@pytest.mark.parametrize("args,message", [
    (["--docid", "NO-SUCH-DOC"], "no document 'NO-SUCH-DOC' in the index"),
    (["--docid", "{first}", "--retriever", "bm25+nope"], "index has no 'nope' sub-index"),
    (["--docid", "{first}", "--retriever", "bm25+dense:rrf(k=0)"], "rrf k must be >= 1"),
])
def test_bad_input_is_one_line(index, queries, args, message):
    first = index.search(queries[0], k=1, text=False)[0].docid
    r = run_retr("explain", "--index", index.path, "--query", queries[0], *[a.format(first=first) for a in args])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("retr: error: ") and message in r.stderr, r.stderr


def _same(a, b):
    """JSON equal, floats to 1e-5 (the server encodes dense queries in its own process)."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert _close(a, b, 1e-5)
    else:
        assert a == b


def test_http_explain_answers_the_same_json_and_404_for_an_unknown_document(index, queries, tmp_path):
    from tests.server.conftest import Server

    s = Server("--index", f"ex={index.path}", tmp=tmp_path)
    try:
        q = queries[1]
        for spec, extra in [("bm25+dense", {}), ("deepct", {}), ("dense", {"dimsel": {"mode": "prf", "alpha": 0.5}})]:
            docid = index.search(q, k=4, retriever=spec, text=False, **extra)[3].docid
            r = s.post("/v1/ex/explain", json={"query": q, "docid": docid, "retriever": spec, **extra})
            assert r.status_code == 200, r.text
            _same(r.json(), json.loads(json.dumps(index.explain(q, docid, retriever=spec, **extra))))
        client = retrieval.Client(s.url, index="ex")
        _same(client.explain(q, docid, retriever="bm25+splade:rrf", depth=20),
              json.loads(json.dumps(index.explain(q, docid, retriever="bm25+splade:rrf", depth=20))))
        with pytest.raises(retrieval.RetrError, match="no document"):
            client.explain(q, "NO-SUCH-DOC")
        r = s.post("/v1/ex/explain", json={"query": q, "docid": docid, "filter": {"shard": "odd"}, "depth": 5})
        assert r.status_code == 200 and r.json()["depth"] == 5
        r = s.post("/v1/ex/explain", json={"query": q, "docid": "NO-SUCH-DOC"})
        assert r.status_code == 404 and r.json() == {"error": {"status": 404,
                                                                "message": "no document 'NO-SUCH-DOC' in the index"}}
        r = s.post("/v1/ex/explain", json={"query": q, "docid": docid, "retriever": "bm25+nope"})
        assert r.status_code == 400 and "no 'nope' sub-index" in r.json()["error"]["message"]
        r = s.post("/v1/ex/explain", json={"query": q})
        assert r.status_code == 422
        doc = s.get("/openapi.json").json()
        op = doc["paths"]["/v1/{index}/explain"]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ExplainRequest")
        assert "404" in op["responses"] and "ExplainResponse" in doc["components"]["schemas"]
    finally:
        s.stop()


def test_the_parts_are_numbers_json_can_carry(index, queries):
    out = index.explain(queries[0], index.search(queries[0], k=1, retriever="bm25+splade", text=False)[0].docid,
                        retriever="bm25+splade")
    text = json.dumps(out, allow_nan=False)  # no numpy scalars, no NaN
    assert np.isfinite(json.loads(text)["score"])


def test_an_updated_document_is_explained_from_its_live_version(tmp_path, corpus, queries):
    """After an update Lucene holds the old version (deleted) and the new one under the same id: the
    explanation reads the live one, and still adds up to the score the search returns."""
    from retrieval.writer import update_documents

    idx = retrieval.build_index(corpus / "corpus.jsonl", tmp_path / "LIVE", quiet=True)
    top = idx.search(queries[0], k=2, text=False)[1]
    doc = idx.get(top.docid)
    idx = update_documents(idx, [retrieval.Document(doc.docid, doc.text + " " + doc.text, doc.title)], quiet=True)
    hit = next(h for h in idx.search(queries[0], k=10, text=False) if h.docid == top.docid)
    assert hit.score != top.score
    out = idx.explain(queries[0], top.docid)
    assert out["rank"] == hit.rank and out["score"] == hit.score
    assert _close(sum(p["value"] for p in out["retrievers"]["bm25"]["parts"]), hit.score)
