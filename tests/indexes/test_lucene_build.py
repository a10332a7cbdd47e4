"""build_lucene checks that Lucene holds exactly the documents it was given (issue #15).

Anserini exits 0 even when it dropped a whole input file: a string over Jackson's 20,000,000-char
limit, or a docid over Lucene's 32,766-byte term limit, fails the rest of that file. These tests feed
build_lucene directly (no corpus reader in front of it) and pin both limits to what the real Anserini
does, one character either side."""
from __future__ import annotations

import pytest

from indexes.errors import RetrError
from indexes.lucene import MAX_CONTENTS_CHARS, MAX_DOCID_BYTES, LuceneIndex, build_lucene, doc_count

SMALL = [(f"d{i}", f"small doc {i} aspirin") for i in range(20)]


def _ids(path, query="aspirin"):
    return {d for d, _ in LuceneIndex(path).search(query, k=100)}


def test_contents_at_the_limit_are_indexed_and_one_more_char_fails_the_build(tmp_path):
    at = [("big", " " * (MAX_CONTENTS_CHARS - len("aspirin")) + "aspirin")] + SMALL
    info = build_lucene(iter(at), tmp_path / "at", threads=2)
    assert info == {**info, "doc_count": 21, "indexed": 21, "empty": 0}
    assert _ids(tmp_path / "at") == {"big"} | {d for d, _ in SMALL}

    over = [("big", " " * (MAX_CONTENTS_CHARS + 1 - len("aspirin")) + "aspirin")] + SMALL
    with pytest.raises(RetrError) as e:
        build_lucene(iter(over), tmp_path / "over", threads=2)
    msg = str(e.value)
    assert "Lucene holds 10 of the 21 documents" in msg and "exceeds the maximum allowed (20000000" in msg
    assert "\n" not in msg


def test_docid_at_the_term_limit_is_indexed_and_one_byte_more_fails(tmp_path):
    ok = [("x" * MAX_DOCID_BYTES, "aspirin")] + SMALL[:5]
    assert build_lucene(iter(ok), tmp_path / "ok", threads=2)["indexed"] == 6
    assert doc_count(tmp_path / "ok") == 6
    bad = [("é" * (MAX_DOCID_BYTES // 2) + "x", "aspirin")] + SMALL[:5]  # 32,767 bytes in UTF-8
    with pytest.raises(RetrError, match=r"Lucene holds 3 of the 6 documents .*immense term"):
        build_lucene(iter(bad), tmp_path / "bad", threads=2)


def test_documents_anserini_skips_as_empty_are_expected_not_failures(tmp_path):
    # Java's trim() drops chars up to U+0020 (so NUL and control chars count as blank), not U+3000.
    docs = [("a", "hello world"), ("b", ""), ("c", " \x00\x1f "), ("d", "the of a"), ("e", "\u3000")]
    info = build_lucene(iter(docs), tmp_path / "text", threads=1)
    assert (info["doc_count"], info["empty"], info["indexed"]) == (5, 2, 3)
    assert doc_count(tmp_path / "text") == 3
    vectors = [("a", {"x": 3}), ("b", {}), ("c", {"": 5, " ": 2}), ("d", {"y": 0}), ("e", {"y": 0, "z": 1})]
    info = build_lucene(iter(vectors), tmp_path / "impact", threads=1, impact=True)
    assert (info["empty"], info["indexed"]) == (3, 2)
    assert LuceneIndex(tmp_path / "impact", impact=True).num_docs == 2


def test_append_that_loses_documents_fails_and_leaves_the_index_as_it_was(tmp_path):
    path = tmp_path / "idx"
    build_lucene(iter(SMALL[:10]), path, threads=1)
    bad = [("x" * (MAX_DOCID_BYTES + 1), "aspirin")] + SMALL[10:]
    with pytest.raises(RetrError, match="Lucene holds"):
        build_lucene(iter(bad), path, threads=1, append=True)
    assert doc_count(path) == 10 and _ids(path) == {d for d, _ in SMALL[:10]}
    info = build_lucene(iter(SMALL[10:]), path, threads=2, append=True)
    assert info["indexed"] == 10 and doc_count(path) == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
