"""A folder of documents as a corpus (retrieval.documents) and chunking (retrieval.chunking): real
files written here (a PDF by fpdf2, read back by pypdf; HTML through Beautiful Soup), real BM25 and
MiniLM indexes, the real CLI."""
from __future__ import annotations

import hashlib
import json
import warnings
from datetime import datetime, timezone
from pathlib import Path

import pytest

from indexes.errors import InputError, ParameterError
from retrieval.collections import read_corpus
from retrieval.documents import DocumentWarning, document_id
from tests.conftest import run_retr

SENTENCES = [
    "A puppy learns to sit when the reward comes within a second of the action.",
    "Short sessions of five minutes keep a young dog attentive and eager.",
    "Walking on a loose leash takes weeks of patient practice in quiet streets.",
    "Recall is trained in a fenced park before it is tried in an open field.",
    "Owners who stay calm get calmer dogs, as the animals read their tone.",
    "Treats are cut small so that a session can hold many repetitions.",
]
ANSWER = "The secret command for the obedience trial is zanzibar."
PDF_TEXT = "Revenue grew by twelve percent because widget sales doubled in the northern region."


def _guide() -> str:
    paras = []
    for p in range(14):
        paras.append(" ".join(SENTENCES[(p + i) % len(SENTENCES)] for i in range(5)))
    paras.append("In the end, " + ANSWER)
    return "# Dog Training Guide\n\n" + "\n\n".join(paras) + "\n"


def write_pdf(path: Path, title: str, text: str) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title(title)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.multi_cell(0, 8, text)
    pdf.output(str(path))


def make_folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "guide.md").write_text(_guide(), encoding="utf-8")
    (root / "notes.txt").write_text("Cats sleep sixteen hours a day and hunt at dusk.\n", encoding="utf-8")
    (root / "page.html").write_text(
        "<html><head><title>Feline facts</title><style>p {color: red}</style></head><body>"
        "<h1>Whiskers</h1><p>A cat's whiskers sense air currents.</p><script>var hidden = 'scripttext';</script>"
        "</body></html>", encoding="utf-8")
    write_pdf(root / "report.pdf", "Quarterly Report", PDF_TEXT)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage without end")
    (root / "latin1.txt").write_bytes("caf\u00e9 cr\u00e8me br\u00fbl\u00e9e".encode("latin-1"))
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a document type")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("# Secret\n\nnever indexed\n", encoding="utf-8")
    (root / ".dotfile.md").write_text("# Dot\n\nnever indexed\n", encoding="utf-8")
    (root / "drafts").mkdir()
    (root / "drafts" / "draft.md").write_text("Draft title\n===========\n\nA draft about parrots.\n",
                                              encoding="utf-8")
    (root / "sub dir").mkdir()
    (root / "sub dir" / "50% off.md").write_text("## Sale\n\nEverything about hamsters is half price.\n",
                                                 encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def docs_dir(tmp_path_factory) -> Path:
    return make_folder(tmp_path_factory.mktemp("docs") / "docs")


@pytest.fixture(scope="module")
def docs_index(tmp_path_factory, docs_dir):
    import retrieval

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DocumentWarning)
        return retrieval.build_index(docs_dir, tmp_path_factory.mktemp("docsidx") / "IDX", quiet=True)


def _read(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DocumentWarning)
        docs = list(read_corpus(path, **kw))
    return docs, [str(w.message) for w in caught if issubclass(w.category, DocumentWarning)]


def test_ids_titles_metadata_and_one_warning_per_unreadable_file(docs_dir):
    docs, warned = _read(docs_dir, chunk=False)
    assert sorted(warned) == sorted(
        [m for m in warned if m.startswith(str(docs_dir / "broken.pdf")) or m.startswith(str(docs_dir / "latin1.txt"))])
    assert len(warned) == 2 and any("broken.pdf" in w for w in warned) and any("latin1.txt" in w and "UTF-8" in w
                                                                                for w in warned)
    by_id = {d.docid: d for d in docs}
    assert set(by_id) == {"guide.md", "notes.txt", "page.html", "report.pdf", "drafts/draft.md",
                          "sub%20dir/50%25%20off.md"}
    assert by_id["sub%20dir/50%25%20off.md"].metadata["path"] == "sub dir/50% off.md"
    assert document_id("sub dir/50% off.md") == "sub%20dir/50%25%20off.md"
    titles = {i: d.title for i, d in by_id.items()}
    assert titles == {"guide.md": "Dog Training Guide", "notes.txt": "notes.txt", "page.html": "Feline facts",
                      "report.pdf": "Quarterly Report", "drafts/draft.md": "Draft title",
                      "sub%20dir/50%25%20off.md": "Sale"}
    html = by_id["page.html"].text
    assert "whiskers sense air currents" in html and "scripttext" not in html and "color: red" not in html
    assert " ".join(by_id["report.pdf"].text.split()) == PDF_TEXT  # pypdf reads back what fpdf2 wrote
    for d in docs:
        f = docs_dir / d.metadata["path"]
        data = f.read_bytes()
        assert d.metadata["sha256"] == hashlib.sha256(data).hexdigest()
        assert d.metadata["size"] == len(data)
        assert d.metadata["title"] == d.title
        mtime = datetime.fromisoformat(d.metadata["modified"])
        assert abs(mtime.timestamp() - f.stat().st_mtime) < 1 and mtime.tzinfo == timezone.utc
    assert by_id["guide.md"].text == (docs_dir / "guide.md").read_text(encoding="utf-8")


def test_include_and_exclude_globs(docs_dir):
    docs, _ = _read(docs_dir, chunk=False, include=["*.md"], exclude=["drafts/*"])
    assert sorted(d.docid for d in docs) == ["guide.md", "sub%20dir/50%25%20off.md"]
    docs, warned = _read(docs_dir, chunk=False, include=["*.txt", "*.html"])
    assert sorted(d.docid for d in docs) == ["notes.txt", "page.html"] and len(warned) == 1  # latin1.txt
    with pytest.raises(ParameterError, match="folder of documents"):
        list(read_corpus(docs_dir / "notes.txt", include=["*.md"]))


def test_a_folder_with_nothing_readable_is_one_error(tmp_path):
    (tmp_path / "bad.pdf").write_bytes(b"not a pdf")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\xfa")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DocumentWarning)
        with pytest.raises(InputError, match="no readable documents"):
            list(read_corpus(tmp_path))
    r = run_retr("index", "--corpus", tmp_path, "--index", tmp_path / "IDX")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert [l for l in lines if l.startswith("retr: error:")] == [lines[-1]] and "no readable documents" in lines[-1]
    assert sum(l.startswith("retr: warning:") for l in lines) == 2 and "Traceback" not in r.stderr
    assert not (tmp_path / "IDX").exists()


def test_a_beir_folder_without_its_corpus_is_not_read_as_documents(tmp_path):
    (tmp_path / "README.md").write_text("# About\n\nthe queries of a collection\n")
    (tmp_path / "queries.jsonl").write_text('{"_id": "1", "text": "q"}\n')
    with pytest.raises(InputError, match="no corpus.jsonl"):
        list(read_corpus(tmp_path))


def test_chunks_are_slices_within_the_window_cut_between_words(docs_dir):
    from transformers import AutoTokenizer

    from retrieval.models import bundled_model_path

    docs, _ = _read(docs_dir)
    text = (docs_dir / "guide.md").read_text(encoding="utf-8")
    guide = [d for d in docs if d.metadata["document"] == "guide.md"]
    assert len(guide) >= 3
    assert [d.docid for d in guide] == [f"guide.md#{i}" for i in range(len(guide))]
    assert [d.metadata["passage"] for d in guide] == list(range(len(guide)))
    tok = AutoTokenizer.from_pretrained(bundled_model_path())  # the dense encoder's own tokenizer
    lengths = [len(x) for x in tok([d.contents for d in guide], truncation=False)["input_ids"]]
    assert max(lengths) <= 256 and min(lengths) > 64, lengths
    for i, d in enumerate(guide):
        s, e = d.metadata["start"], d.metadata["end"]
        assert text[s:e] == d.text and d.title == "Dog Training Guide"
        assert s == 0 or text[s - 1].isspace()  # no word is cut
        assert e == len(text) or text[e].isspace()
        if i:
            prev = guide[i - 1].metadata
            assert prev["start"] < s <= prev["end"]  # neighbours overlap, and move on
    assert guide[0].metadata["start"] == 0 and guide[-1].metadata["end"] == len(text.rstrip())
    assert ANSWER in guide[-1].text
    # the short files are one passage each, their text whole
    notes = [d for d in docs if d.metadata["document"] == "notes.txt"]
    assert [d.docid for d in notes] == ["notes.txt#0"] and notes[0].text == (docs_dir / "notes.txt").read_text().strip()


def test_no_overlap_and_smaller_chunks(docs_dir):
    docs, _ = _read(docs_dir, chunk={"tokens": 64, "overlap": 0}, include=["guide.md"])
    text = (docs_dir / "guide.md").read_text(encoding="utf-8")
    for a, b in zip(docs, docs[1:]):
        assert a.metadata["end"] <= b.metadata["start"]
        assert text[a.metadata["end"]:b.metadata["start"]].strip() == ""  # nothing between them is lost
    from retrieval.chunking import token_count
    assert max(token_count([d.contents for d in docs])) <= 64
    with pytest.raises(ParameterError, match="chunk_overlap"):
        list(read_corpus(docs_dir, chunk={"tokens": 64, "overlap": 40}))


def test_jsonl_passages_unchanged_unless_chunking_is_asked(small_corpus):
    plain = list(read_corpus(small_corpus))
    assert plain == list(read_corpus(small_corpus, chunk=None))
    assert all("#" not in d.docid for d in plain)
    chunked = list(read_corpus(small_corpus, chunk={"tokens": 48, "overlap": 8}))
    assert len(chunked) > len(plain)
    by_id = {d.docid: d for d in plain}
    for p in chunked:
        doc = by_id[p.metadata["document"]]
        assert p.docid == f"{doc.docid}#{p.metadata['passage']}"
        assert doc.text[p.metadata["start"]:p.metadata["end"]] == p.text


def test_index_search_per_document_and_check(docs_index, docs_dir):
    idx = docs_index
    reader = idx.manifest["corpus"]["reader"]
    assert reader["form"] == "documents" and reader["chunking"] == {"tokens": 256, "overlap": 32, "model": None}
    n_guide = sum(1 for d in idx.docstore.iter_docs() if d[3].get("document") == "guide.md")
    assert n_guide >= 3
    hits = idx.search("puppy dog leash owners treats", k=5)
    docs_of = [h.metadata["document"] for h in hits]
    assert docs_of.count("guide.md") >= 2  # passages of one document fill the list
    one = idx.search("puppy dog leash owners treats", k=3, per_document=True)
    assert [h.rank for h in one] == list(range(1, len(one) + 1))
    assert len({h.metadata["document"] for h in one}) == len(one)
    assert one[0].docid == hits[0].docid  # the best passage stands for its document
    top = idx.search("zanzibar obedience trial", k=1)[0]
    assert top.metadata["document"] == "guide.md" and ANSWER in top.text
    ids_only = idx.search("puppy dog leash", k=3, per_document=True, text=False)
    assert all(h.metadata is None and h.text == "" for h in ids_only)
    batch = idx.batch_search({"a": "puppy dog leash owners treats", "b": "cats"}, k=3, per_document=True)
    assert [h.docid for h in batch["a"]] == [h.docid for h in one]
    assert all(h.qid == "a" for h in batch["a"])
    from retrieval.check import check_index

    rep = check_index(idx.path)
    assert rep.ok and rep.documents == len(idx), rep


def test_cli_index_search_per_document_info_and_check(tmp_path, docs_dir):
    out = tmp_path / "IDX"
    r = run_retr("index", "--corpus", docs_dir, "--index", out, "--exclude", "drafts/*", "--chunk-tokens", "128",
                 "--chunk-overlap", "16")
    assert r.returncode == 0, r.stderr
    warned = [l for l in r.stderr.splitlines() if l.startswith("retr: warning:")]
    assert len(warned) == 2 and all(("broken.pdf" in l) != ("latin1.txt" in l) for l in warned), r.stderr
    assert "Traceback" not in r.stderr
    import retrieval

    idx = retrieval.open_index(out)
    docs = {row[3]["document"] for row in idx.docstore.iter_docs()}
    assert "drafts/draft.md" not in docs and "guide.md" in docs
    assert idx.manifest["corpus"]["reader"]["chunking"]["tokens"] == 128
    r = run_retr("search", "--index", out, "puppy dog leash owners cats", "--per-document", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    got = [json.loads(l) for l in r.stdout.splitlines()]
    assert len({h["metadata"]["document"] for h in got}) == len(got) >= 2
    r = run_retr("info", "--index", out)
    assert "chunked into passages of at most 128 word-pieces, 16 overlapping" in r.stdout
    assert "exclude drafts/*" in r.stdout
    r = run_retr("check", "--index", out)
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_retr("index", "--corpus", docs_dir, "--index", tmp_path / "X", "--no-chunk", "--chunk-tokens", "64")
    assert r.returncode == 2 and "alternatives" in r.stderr
    r = run_retr("index", "--corpus", docs_dir, "--index", tmp_path / "X", "--chunk-tokens", "64",
                 "--chunk-overlap", "40")
    assert r.returncode == 2 and "--chunk-overlap" in r.stderr and "Traceback" not in r.stderr


def test_retr_add_reads_a_document_folder_as_the_index_was_built(tmp_path, docs_dir):
    import retrieval

    out = tmp_path / "IDX"
    r = run_retr("index", "--corpus", docs_dir, "--index", out, "--include", "notes.txt", "--chunk-tokens", "64")
    assert r.returncode == 0, r.stderr
    more = tmp_path / "more"
    more.mkdir()
    (more / "long.md").write_text(_guide(), encoding="utf-8")
    r = run_retr("add", "--index", out, "--corpus", more)
    assert r.returncode == 0, r.stderr
    idx = retrieval.open_index(out)
    from retrieval.chunking import token_count
    passages = [d for d in idx.docstore.iter_docs() if d[3].get("document") == "long.md"]
    assert len(passages) > 5
    assert max(token_count([f"{t} {x}" for _i, t, x, _m in passages])) <= 64


def test_dense_counts_passages_over_its_window(small_dense_index, small_corpus):
    """The dense entry's count of truncated passages, against the encoder's own tokenizer."""
    from transformers import AutoTokenizer

    from retrieval.models import bundled_model_path

    tok = AutoTokenizer.from_pretrained(bundled_model_path())
    docs = list(read_corpus(small_corpus))
    lengths = [len(x) for x in tok([d.contents for d in docs], truncation=False)["input_ids"]]
    want = sum(1 for n in lengths if n > 256)
    assert want > 0  # SciFact has abstracts over MiniLM's window
    e = small_dense_index.manifest["subindexes"]["dense"]
    assert e["truncated"] == want
    assert small_dense_index.info()["subindexes"]["dense"]["stats"] == {"passages_over_256_tokens_(truncated)": want}
    r = run_retr("info", "--index", small_dense_index.path)
    assert f"passages over 256 tokens (truncated) {want}" in r.stdout


def test_dense_hybrid_on_chunked_documents(tmp_path, docs_dir):
    """One small dense build: a chunked folder has no passage over the window, and the answer deep
    in a long document is found by the dense and the fused search."""
    import retrieval
    from retrieval.dense.subindex import DenseSpec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DocumentWarning)
        idx = retrieval.build_index(docs_dir, tmp_path / "IDX", quiet=True, subindexes={"dense": DenseSpec()})
    assert idx.manifest["subindexes"]["dense"]["truncated"] == 0
    for retriever in ("dense", "bm25+dense"):
        top = idx.search("which secret word is used in the obedience trial", k=1, retriever=retriever,
                         per_document=True)[0]
        assert top.metadata["document"] == "guide.md" and ANSWER in top.text, (retriever, top)
