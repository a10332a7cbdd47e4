"""The SPLADE sub-index: SPLADE-max impacts of the bundled SPLADE-tiny in a real Lucene impact index,
ranked as Pyserini's LuceneImpactSearcher ranks, kept right through the live index's changes."""
import json
import shutil

import pytest

import retrieval
from tests.conftest import run_retr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, small_corpus):
    """120 passages of the small SciFact folder (those judged for its queries first) with metadata
    (conftest's ``with_meta``), and its queries."""
    from tests.conftest import with_meta

    src = tmp_path_factory.mktemp("splade-src")
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:120]
    (src / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    out = with_meta(src, tmp_path_factory.mktemp("splade-data"))
    shutil.copy(small_corpus / "queries.jsonl", out / "queries.jsonl")
    return out


@pytest.fixture(scope="module")
def encoder():
    from retrieval.splade.model import SpladeEncoder

    return SpladeEncoder(threads=1)


@pytest.fixture(scope="module")
def index(tmp_path_factory, corpus):
    """BM25 and SPLADE-tiny over the 120 passages, built by `retr index --splade`."""
    path = tmp_path_factory.mktemp("splade") / "IDX"
    r = run_retr("index", "--corpus", corpus / "corpus.jsonl", "--index", path, "--splade", "--quiet")
    assert r.returncode == 0, r.stderr
    return retrieval.open_index(path)


def _queries(corpus, n=12):
    return retrieval.read_queries(corpus / "queries.jsonl")[:n]


def test_splade_weights_are_sparse_expand_and_quantise_as_pyserini(encoder, corpus):
    """SPLADE-max keeps a small share of the vocabulary, adds word-pieces the passage lacks, and an
    impact is round(w / 5 * 256) with nothing at 0 kept."""
    from retrieval.splade.model import to_impacts

    docs = list(retrieval.read_corpus(corpus / "corpus.jsonl"))[:20]
    weights = encoder.weights([d.contents for d in docs])
    vocab = len(encoder.vocab)
    expanded = 0
    for d, w in zip(docs, weights):
        assert 10 < len(w) < 0.05 * vocab, len(w)           # most of the 30,522 weights are zero
        assert all(v > 0 for v in w.values())
        own = set(encoder.tokenizer.tokenize(d.contents))
        expanded += len(set(w) - own - {"[CLS]", "[SEP]"}) > 0
        imp = to_impacts(w)
        assert imp == {t: round(v / 5 * 256) for t, v in w.items() if round(v / 5 * 256) >= 1}
    assert expanded == len(docs)                            # every passage gains terms it does not contain
    # one text's weights do not depend on what it is encoded with
    assert encoder.weights([docs[3].contents]) == [weights[3]]


def test_query_weights_equal_pyserinis_splade_query_encoder(encoder, corpus):
    from indexes import jvm

    jvm.start()
    from pyserini.encode import SpladeQueryEncoder

    ref = SpladeQueryEncoder(str(encoder.model_dir))
    for q in _queries(corpus, 30):
        theirs = {t: w for t, w in ref.encode(q.text).items() if w > 0}
        assert encoder.impacts([q.text])[0] == theirs, q.qid


def test_rankings_equal_pyserinis_lucene_impact_searcher(index, corpus, encoder):
    """Oracle: Pyserini's LuceneImpactSearcher over the same Lucene index, with its own SPLADE query
    encoder: the same documents, in the same order, with the same scores."""
    from indexes import jvm

    jvm.start()
    from pyserini.encode import SpladeQueryEncoder
    from pyserini.search.lucene import LuceneImpactSearcher

    folder = index.path / index.manifest["subindexes"]["splade"]["path"] / "impact"
    ref = LuceneImpactSearcher(str(folder), SpladeQueryEncoder(str(encoder.model_dir)))
    compared = 0
    for q in _queries(corpus):
        ours = index.search(q.text, k=20, retriever="splade", text=False)
        theirs = [h for h in ref.search(q.text, k=20) if h.score > 0]
        assert [h.docid for h in ours] == [h.docid for h in theirs], q.qid
        assert [round(h.score, 3) for h in ours] == [round(h.score, 3) for h in theirs], q.qid
        compared += len(ours)
    assert compared >= 100


def test_an_impact_is_read_back_from_lucene_as_written(index, encoder, corpus):
    """Quantisation round trip: a one-term query of weight 1 scores a passage by its stored impact,
    and an expansion term (absent from the passage) finds the passage."""
    doc = list(retrieval.read_corpus(corpus / "corpus.jsonl"))[7]
    imp = encoder.impacts([doc.contents])[0]
    lucene = index.snapshot().retriever("splade")._lucene()
    own = set(encoder.tokenizer.tokenize(doc.contents))
    expansion = [t for t in sorted(imp, key=imp.get, reverse=True) if t not in own and not t.startswith("[")]
    assert expansion
    for term in [*sorted(imp, key=imp.get, reverse=True)[:5], expansion[0]]:
        hits = dict(lucene.batch([{term: 1}], ["q"], 200)["q"])
        assert hits[doc.docid] == pytest.approx(imp[term]), term


def test_tokens_query_mode_and_fusion_and_filters(index, corpus):
    qs = _queries(corpus, 5)
    r = index.snapshot().retriever("splade")
    assert r.query_terms(["heart attack risk"], "tokens") == [{"heart": 1, "attack": 1, "risk": 1}]
    index.configure("splade", query="tokens")
    try:
        plain = index.search(qs[0].text, k=10, retriever="splade", text=False)
    finally:
        index.configure("splade", query="splade")
    weighted = index.search(qs[0].text, k=10, retriever="splade", text=False)
    assert plain and weighted and [h.docid for h in plain] != [h.docid for h in weighted]
    fused = index.search(qs[0].text, k=10, retriever="bm25+splade", text=False)
    assert len(fused) == 10
    # a filter gives exactly the first k of the allowed documents in the unfiltered ranking
    full = index.search(qs[0].text, k=120, retriever="splade", text=False)
    odd = index.search(qs[0].text, k=5, retriever="splade", text=False, filter={"shard": "odd"})
    assert [h.docid for h in odd] == [h.docid for h in full if int(h.docid) % 2][:5]
    assert index.snapshot().retriever("splade").native_filter
    with pytest.raises(Exception, match="not a SPLADE query weighting"):
        index.configure("splade", query="bogus")


def test_info_shows_postings_and_mean_terms(index):
    r = run_retr("info", "--index", index.path)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if "postings" in l)
    stats = json.loads(run_retr("info", "--index", index.path, "--json").stdout)["subindexes"]["splade"]["stats"]
    assert f"postings {stats['postings']:,}" in line
    assert stats["postings"] > 120 * 50
    assert stats["mean_terms_per_passage"] == round(stats["postings"] / 120, 1)


def test_delete_update_add_then_compact_equal_a_fresh_build(tmp_path, index, corpus):
    """Deleted passages leave the SPLADE index, added and updated ones are encoded as a fresh build
    encodes them, every count agrees, and after compaction the run is the fresh build's TREC file."""
    from retrieval.check import check_index
    from retrieval.splade.subindex import SpladeSpec
    from retrieval.types import Document
    from retrieval.writer import add_documents, compact, delete_documents, index_corpus, update_documents

    path = tmp_path / "IDX"
    shutil.copytree(index.path, path)
    idx = retrieval.open_index(path)
    before = {d for d, *_ in idx.docstore.iter_docs()}
    docs = list(retrieval.read_corpus(corpus / "corpus.jsonl"))
    victim, changed = docs[4], docs[5]
    idx = delete_documents(idx, [victim.docid], quiet=True)
    assert victim.docid not in [h.docid for h in idx.search(victim.contents, k=20, retriever="splade")]
    idx = update_documents(idx, [Document(changed.docid, "zyxwvut quokka habitat", "Quokka")], quiet=True)
    idx = add_documents(idx, [Document("new-1", "marsupial island ecology on rottnest", "Rottnest")], quiet=True)
    assert idx.search("zyxwvut quokka", k=1, retriever="splade")[0].docid == changed.docid
    assert idx.search("rottnest marsupial", k=1, retriever="splade")[0].docid == "new-1"
    rep = check_index(idx.path, full=True, strict=True)
    assert rep.ok and "splade" in rep.checked, rep.problems
    # everything that was there is still there, but the one deleted
    assert {d for d, *_ in idx.docstore.iter_docs()} == (before - {victim.docid}) | {"new-1"}
    assert idx.snapshot().retriever("splade") and len(idx) == 120
    idx = compact(idx, quiet=True)
    assert check_index(idx.path, full=True, strict=True).ok
    final = [Document(d, text, title) for d, title, text, _m in idx.docstore.iter_docs()]
    fresh = index_corpus(final, tmp_path / "F", subindexes={"splade": SpladeSpec()}, quiet=True)
    qs = _queries(corpus) + [retrieval.types.Query("z", "zyxwvut quokka rottnest")]
    runs = [[f"{q} {h.docid} {h.rank} {h.score:.3f}" for q, hs in i.batch_search(qs, k=20, retriever="splade").items()
             for h in hs] for i in (idx, fresh)]
    assert runs[0] == runs[1]


def test_bad_input_is_one_line(tmp_path, corpus):
    not_model = tmp_path / "not-a-model"
    not_model.mkdir()
    (not_model / "config.json").write_text("{}")
    for args, want in [(("--splade", tmp_path / "missing"), "model folder not found"),
                       (("--splade", not_model), "no weights"),
                       (("--splade", "--splade-query", "bogus"), "bogus")]:
        r = run_retr("index", "--corpus", corpus / "corpus.jsonl", "--index", tmp_path / "X", *args, "--quiet")
        assert r.returncode != 0
        assert "Traceback" not in r.stderr and want in r.stderr, r.stderr
        assert len([l for l in r.stderr.splitlines() if l.strip()]) <= 2, r.stderr
        assert not (tmp_path / "X").exists()


def test_a_manifest_naming_another_model_is_refused(tmp_path, index):
    """A folder is untrusted input: a manifest whose SPLADE model is not the one it was built with, or
    names none, fails with one line when the retriever needs the model."""
    path = tmp_path / "IDX"
    shutil.copytree(index.path, path)
    m = json.loads((path / "manifest.json").read_text())
    m["subindexes"]["splade"]["model"]["sha256"] = "0" * 16
    (path / "manifest.json").write_text(json.dumps(m))
    r = run_retr("search", "--index", path, "--retriever", "splade", "heart attack")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "differs from the one this index was built with" in r.stderr, r.stderr


def test_one_thread_holds_for_the_encoding_only(encoder):
    """The encoder's threads=1 is set around each call and undone after it (torch's setting is
    process-wide: set for good, it slowed every later dense encoding of the process)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        w = encoder.weights(["aspirin and heart attacks"])
        assert torch.get_num_threads() == 2
        assert encoder.weights(["aspirin and heart attacks"]) == w
    finally:
        torch.set_num_threads(before)



def test_queries_run_on_onnx_with_torchs_impacts_and_the_build_records_it(index, corpus, encoder, monkeypatch):
    """On a CPU a build records ONNX Runtime for its queries (onnxruntime is in the test extra): the
    retriever's query encoder runs the exported SPLADE graph, whose float weights agree with PyTorch's
    to 1e-5 and whose impacts are PyTorch's for these queries, so it ranks as PyTorch queries do;
    RETR_QUERY_BACKEND=torch gives PyTorch queries back."""
    from retrieval.splade.model import SpladeEncoder

    monkeypatch.delenv("RETR_QUERY_BACKEND", raising=False)
    assert index.manifest["subindexes"]["splade"]["config"]["query_backend"] == "onnx"
    fresh = retrieval.open_index(index.path)
    assert fresh.snapshot().retriever("splade").encoder.backend == "onnx"
    onnx_enc = SpladeEncoder(threads=1, backend="onnx")
    texts = [q.text for q in _queries(corpus, 30)]
    assert onnx_enc.impacts(texts) == encoder.impacts(texts)
    for a, b in zip(onnx_enc.weights(texts), encoder.weights(texts)):
        assert a.keys() == b.keys() and max(abs(a[t] - b[t]) for t in a) < 1e-5
    hits = {q: [(h.docid, h.score) for h in fresh.search(q, k=10, retriever="splade", text=False)] for q in texts[:8]}
    monkeypatch.setenv("RETR_QUERY_BACKEND", "torch")
    torch_idx = retrieval.open_index(index.path)
    assert torch_idx.snapshot().retriever("splade").encoder.backend == "torch"
    assert hits == {q: [(h.docid, h.score) for h in torch_idx.search(q, k=10, retriever="splade", text=False)]
                    for q in texts[:8]}
    monkeypatch.setenv("RETR_QUERY_BACKEND", "onnx-int8")  # no int8 SPLADE graph: its fp32 one
    assert retrieval.open_index(index.path).snapshot().retriever("splade").encoder.backend == "onnx"


def test_query_backend_choices_and_bad_values_are_one_line(tmp_path, corpus, index, monkeypatch):
    """``--backend torch`` keeps SPLADE queries on PyTorch and is recorded; a bad RETR_QUERY_BACKEND, a
    bad spec value and a manifest naming an unknown query backend are each one error line."""
    from indexes.errors import InputError, ParameterError
    from retrieval.splade.subindex import SpladeSpec

    monkeypatch.delenv("RETR_QUERY_BACKEND", raising=False)
    small = tmp_path / "c.jsonl"
    small.write_text("".join((corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:15]),
                     encoding="utf-8")
    r = run_retr("index", "--corpus", small, "--index", tmp_path / "T", "--splade", "--backend", "torch", "--quiet")
    assert r.returncode == 0, r.stderr
    t = retrieval.open_index(tmp_path / "T")
    assert t.manifest["subindexes"]["splade"]["config"]["query_backend"] == "torch"
    assert t.snapshot().retriever("splade").encoder.backend == "torch"
    with pytest.raises(ParameterError, match="not a SPLADE query backend"):
        SpladeSpec(query_backend="tensorrt").validate()
    monkeypatch.setenv("RETR_QUERY_BACKEND", "tensorrt")
    with pytest.raises(InputError, match="not an encoder backend"):
        retrieval.open_index(index.path).snapshot().retriever("splade").encoder
    monkeypatch.delenv("RETR_QUERY_BACKEND")
    path = tmp_path / "IDX"
    shutil.copytree(index.path, path)
    m = json.loads((path / "manifest.json").read_text())
    m["subindexes"]["splade"]["config"]["query_backend"] = "../../bin/sh"
    (path / "manifest.json").write_text(json.dumps(m))
    r = run_retr("search", "--index", path, "--retriever", "splade", "heart attack")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "query backend '../../bin/sh' is not one of" in r.stderr, r.stderr
