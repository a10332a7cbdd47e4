"""The storage pieces of the live index, on their own: generation-aware document store, faiss
delta rows and deletion mask (oracle: brute-force numpy), hard-link copies, locks."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from indexes import folder
from indexes import generations as gens
from indexes.docstore import DocStore, DocStoreWriter, LiveStore, migrate, schema
from indexes.faiss_index import FaissIndex
from indexes.faiss_live import LiveFaiss, add_delta, compact, delete_rows, open_live
from retrieval.types import Document


def test_each_generation_sees_its_own_rows(tmp_path):
    w = DocStoreWriter(tmp_path / "d.sqlite", generation=0)
    for i in range(4):
        w.add(f"d{i}", f"t{i}", f"text {i}")
    w.close()
    live = LiveStore(tmp_path / "d.sqlite")
    live.change(1, ["d1"], [Document("d4", "four", "t4")])
    live.change(2, ["d2"], [Document("d2", "two, again", "t2")])  # an update: the old row stays for generation 1
    at = {g: DocStore(tmp_path / "d.sqlite", generation=g) for g in range(3)}
    assert at[0].ids() == ["d0", "d1", "d2", "d3"]
    assert at[1].ids() == ["d0", "d2", "d3", "d4"] and at[1].get("d2")[2] == "text 2"
    assert at[2].ids() == ["d0", "d3", "d4", "d2"] and at[2].get("d2")[2] == "two, again"
    assert set(at[2].get_many(["d1", "d2", "d4"])) == {"d2", "d4"} and len(at[2]) == 4
    assert live.visible(["d1", "d2", "zz"], 2) and set(live.visible(["d1", "d2", "zz"], 2)) == {"d2"}
    live.change(3, ["d0"], [Document("d9", "nine")])  # never committed: the writer died
    assert live.uncommitted(2) == 2 and live.rollback_after(2) == 2 and live.uncommitted(2) == 0
    assert DocStore(tmp_path / "d.sqlite", generation=3).ids() == at[2].ids()
    assert live.purge(1) == 1  # d1's row: no generation from 1 on sees it
    assert at[0].ids() == ["d0", "d2", "d3"] and at[1].ids() == ["d0", "d2", "d3", "d4"]
    live.close()


def test_a_schema_1_store_reads_as_it_is_and_migrates(tmp_path):
    import sqlite3

    con = sqlite3.connect(tmp_path / "old.sqlite")
    con.execute("CREATE TABLE docs (docid TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL, meta TEXT)")
    con.executemany("INSERT INTO docs VALUES (?,?,?,?)", [("b", "", "x", None), ("a", "T", "y", '{"k": 1}')])
    con.commit()
    con.close()
    old = DocStore(tmp_path / "old.sqlite", generation=5)
    assert schema(tmp_path / "old.sqlite") == 1 and old.ids() == ["b", "a"] and old.get("a")[3] == {"k": 1}
    assert migrate(tmp_path / "old.sqlite", tmp_path / "new.sqlite", 5) == 2
    new = DocStore(tmp_path / "new.sqlite", generation=5)
    assert schema(tmp_path / "new.sqlite") == 2 and list(new.iter_docs()) == list(old.iter_docs())
    assert DocStore(tmp_path / "new.sqlite", generation=4).ids() == []


def _brute(vectors, ids, q, k):
    s = vectors @ q
    order = np.argsort(-s, kind="stable")[:k]
    return [ids[i] for i in order], s[order]


@pytest.mark.parametrize("factory", ["Flat", "HNSW16"])
def test_faiss_delta_rows_and_mask_search_like_one_index_and_compact_to_a_fresh_one(tmp_path, factory):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(300, 16)).astype("float32")
    ids = [f"b{i}" for i in range(300)]
    FaissIndex.build(base, ids, factory=factory, use_gpu=False).save(tmp_path)
    assert isinstance(open_live(tmp_path), FaissIndex)
    more = rng.normal(size=(40, 16)).astype("float32")
    add_delta(tmp_path, more[:20], [f"n{i}" for i in range(20)], 1)
    assert delete_rows(tmp_path, ["b3", "b7", "n2"], 2) == 3
    add_delta(tmp_path, more[20:], ["b7"] + [f"m{i}" for i in range(19)], 3)  # b7 again: an update
    with pytest.raises(Exception, match="duplicate"):
        add_delta(tmp_path, more[:1], ["n5"], 4)
    live = open_live(tmp_path)
    assert isinstance(live, LiveFaiss) and live.ntotal == 300 + 40 - 3
    keep = [i for i in range(300) if i not in (3, 7)]
    allv = np.concatenate([base[keep], more[[i for i in range(20) if i != 2]], more[20:]])
    allids = [ids[i] for i in keep] + [f"n{i}" for i in range(20) if i != 2] + ["b7"] + [f"m{i}" for i in range(19)]
    assert live.docids == allids
    assert np.allclose(live.index.reconstruct_n(0, live.ntotal), allv, atol=1e-6)
    qs = rng.normal(size=(10, 16)).astype("float32")
    D, names = live.search(qs, 15)
    for q, d, n in zip(qs, D, names):
        want, scores = _brute(allv, allids, q, 15)
        if factory == "Flat":  # exact: same ids, same scores
            assert n == want and np.allclose(d, scores, atol=1e-5)
        assert not {"b3", "n2"} & set(n)
    fi = compact(tmp_path)
    assert not any(p.name.startswith(("delta-", "deleted-")) for p in tmp_path.iterdir())
    fresh = FaissIndex.build(allv, allids, factory=factory, use_gpu=False)
    after = open_live(tmp_path)
    assert isinstance(after, FaissIndex) and after.docids == allids and fi.ntotal == len(allids)
    if factory == "Flat":
        Da, Na = after.search(qs, 15)
        Df, Nf = fresh.search(qs, 15)
        assert Na == Nf and np.allclose(Da, Df, atol=1e-6)


def test_link_tree_shares_files_and_leaves_the_lucene_lock_behind(tmp_path):
    src = tmp_path / "a"
    (src / "sub").mkdir(parents=True)
    (src / "seg.bin").write_bytes(b"x" * 1000)
    (src / "sub" / "w.json").write_text("{}")
    (src / "write.lock").write_text("")
    assert gens.link_tree(src, tmp_path / "a.g1") == 0  # nothing copied
    dst = tmp_path / "a.g1"
    assert os.stat(dst / "seg.bin").st_ino == os.stat(src / "seg.bin").st_ino
    assert (dst / "sub" / "w.json").exists() and not (dst / "write.lock").exists()
    assert folder.gen_path("a.g1", 7) == "a.g7" and folder.gen_path("deepct", 2) == "deepct.g2"


def test_the_writer_lock_is_reentrant_here_and_exclusive_across_processes(tmp_path):
    probe = [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError: print('held')", str(tmp_path / ".lock")]
    with gens.writer_lock(tmp_path):
        with gens.writer_lock(tmp_path):  # the same thread again: no deadlock
            assert gens.writer_busy(tmp_path) == os.getpid()
        assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "held"
    assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "free"
    assert gens.writer_busy(tmp_path) is None


def test_reader_locks_tell_the_collector_which_generations_are_held(tmp_path):
    fd1 = gens.hold_generation(tmp_path, 1)
    fd3 = gens.hold_generation(tmp_path, 3)
    fd2 = gens.hold_generation(tmp_path, 2)
    os.close(fd2)
    assert gens.held_generations(tmp_path, 4) == {1, 3}
    assert sorted(p.name for p in (tmp_path / gens.READERS).iterdir()) == ["1", "3"]  # 2's file collected
    os.close(fd1)
    assert gens.held_generations(tmp_path, 4) == {3} and folder.oldest_held(tmp_path, 4) == 3
    os.close(fd3)
    assert folder.oldest_held(tmp_path, 4) == 4
