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


def test_small_inputs_index_with_c1_alone_and_large_ones_with_every_tier(tmp_path, monkeypatch):
    """The indexer's JVM compiles with C1 alone below lucene.C1_ONLY_BELOW bytes of input (its start-up
    and C2's compiler threads would dominate such a run), with the JVM's default tiers above; the two
    give the same index."""
    import indexes.lucene as lucene

    commands, real = [], lucene._run_logged
    monkeypatch.setattr(lucene, "_run_logged", lambda cmd, meanwhile: commands.append(cmd) or real(cmd, meanwhile))
    build_lucene(iter(SMALL), tmp_path / "small", threads=1)
    monkeypatch.setattr(lucene, "C1_ONLY_BELOW", 100)  # these 20 documents are over 100 bytes
    build_lucene(iter(SMALL), tmp_path / "large", threads=1)
    assert ["-XX:TieredStopAtLevel=1" in c for c in commands] == [True, False]
    assert _ids(tmp_path / "small") == _ids(tmp_path / "large") == {d for d, _ in SMALL}
    assert LuceneIndex(tmp_path / "small").search("doc 7", k=3) == LuceneIndex(tmp_path / "large").search("doc 7", k=3)


def test_the_indexer_maps_one_class_archive_that_its_first_run_made(tmp_path, monkeypatch):
    """The first indexer run under a RETR_HOME lists the classes it loads and dumps them into the class
    archive (indexes.jvm); later runs map it (a JVM told -Xshare:on refuses an archive it cannot map).
    A damaged archive is the JVM's warning, not a failure, and RETR_JVM_CDS=0 runs without one; every
    run gives the same index."""
    import subprocess

    import indexes.lucene as lucene
    from indexes import jvm

    monkeypatch.setenv("RETR_HOME", str(tmp_path / "home"))
    commands, real = [], lucene._run_logged
    monkeypatch.setattr(lucene, "_run_logged", lambda cmd, meanwhile: commands.append(cmd) or real(cmd, meanwhile))
    build_lucene(iter(SMALL), tmp_path / "a", threads=1)
    archive = jvm.class_archive()
    assert archive.parent == tmp_path / "home" / "jvm" and [p.name for p in archive.parent.iterdir()] == [archive.name]
    r = subprocess.run([jvm.java_executable(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp",
                        jvm.anserini_jar(), "-version"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    build_lucene(iter(SMALL), tmp_path / "b", threads=1)
    archive.write_bytes(b"not an archive")
    build_lucene(iter(SMALL), tmp_path / "c", threads=1)
    monkeypatch.setenv("RETR_JVM_CDS", "0")
    build_lucene(iter(SMALL), tmp_path / "d", threads=1)
    used = [[o.split("=")[0] for o in c if o.startswith(("-XX:SharedArchiveFile", "-XX:DumpLoadedClassList"))]
            for c in commands]
    assert used == [["-XX:DumpLoadedClassList"], ["-XX:SharedArchiveFile"], ["-XX:SharedArchiveFile"], []]
    assert all(_ids(tmp_path / x) == {d for d, _ in SMALL} for x in "abcd")
