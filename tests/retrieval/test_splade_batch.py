"""SPLADE batching (--splade-batch): padded rows masked, batch N agrees with one text at a time within
float tolerance, the default (1) is the unbatched path, and the build's batch policy is recorded and
used again for added documents."""
import json

import numpy as np
import pytest

import retrieval
from retrieval.types import Document

#: Stated agreement of batched and one-at-a-time SPLADE float weights (largest absolute difference).
WEIGHT_TOL = 1e-4


@pytest.fixture(scope="module")
def texts(small_corpus):
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:24]
    docs = [json.loads(l) for l in lines]
    # lengths that differ a lot, so most rows of a batch are padded
    return [(d["title"] + " " + d["text"])[: 40 + 37 * i] for i, d in enumerate(docs)] + ["x"]


def _dense(ws, vocab):
    out = np.zeros((len(ws), len(vocab)), dtype=np.float64)
    pos = {t: i for i, t in enumerate(vocab)}
    for r, w in enumerate(ws):
        for t, v in w.items():
            out[r, pos[t]] = v
    return out


def test_batch_n_equals_batch_1_within_tolerance(texts):
    from retrieval.splade.model import SpladeEncoder

    one = SpladeEncoder(threads=1)
    eight = SpladeEncoder(threads=1, batch=8)
    a, b = one.weights(texts), eight.weights(texts)
    A, B = _dense(a, one.vocab), _dense(b, one.vocab)
    assert np.abs(A - B).max() <= WEIGHT_TOL
    # the same terms survive (a weight near 0 could flip only below the tolerance)
    for wa, wb in zip(a, b):
        assert all(abs(wa.get(t, 0) - wb.get(t, 0)) <= WEIGHT_TOL for t in set(wa) ^ set(wb))
    # impacts: at most one quantisation step apart
    ia, ib = one.impacts(texts), eight.impacts(texts)
    assert max(abs(x.get(t, 0) - y.get(t, 0)) for x, y in zip(ia, ib) for t in set(x) | set(y)) <= 1
    assert one.config()["batch"] == 1 and eight.config()["batch"] == 8


def test_batch_1_is_the_unbatched_path(texts):
    """Batch 1 (the default) gives what a text encoded alone gives, to the bit, in any company."""
    from retrieval.splade.model import SpladeEncoder

    enc = SpladeEncoder(threads=1)
    together = enc.weights(texts[:6])
    alone = [enc.weights([t])[0] for t in texts[:6]]
    assert together == alone


def test_build_records_batch_and_added_documents_reuse_it(tmp_path, texts):
    from retrieval.splade.model import SpladeEncoder
    from retrieval.writer import add_documents
    from tests.conftest import retr_in_process

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                              for i, t in enumerate(texts[:10])))
    p = retr_in_process("index", "--corpus", corpus, "--index", tmp_path / "I", "--splade", "--splade-batch", "4",
                        "--quiet")
    assert p.returncode == 0, p.stderr
    idx = retrieval.open_index(tmp_path / "I")
    entry = idx.manifest["subindexes"]["splade"]
    assert entry["encoder"]["batch"] == 4 and entry["spec"]["batch"] == 4 and entry["encoder"]["precision"] == "fp32"
    from retrieval.splade.subindex import _encoder

    enc = _encoder(entry, "test")
    assert enc.batch == 4 and enc.precision == "fp32"
    idx = add_documents(idx, [Document("n1", texts[12]), Document("n2", texts[3])], quiet=True)
    entry = idx.manifest["subindexes"]["splade"]
    assert entry["encoder"]["batch"] == 4
    # the added passages' stored impacts are batch 4's for that change (read back from Lucene)
    want = SpladeEncoder(threads=1, batch=4).impacts([texts[12], texts[3]])
    r = idx.snapshot().retriever("splade")
    got = r._lucene().explain(want[0], "n1", None)
    assert got is not None and abs(got["score"] - sum(v * v for v in want[0].values())) < 1e-3


def test_bad_batch_is_one_line(tmp_path):
    from tests.conftest import run_retr

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "d", "title": "", "text": "a b"}) + "\n")
    p = run_retr("index", "--corpus", corpus, "--index", tmp_path / "I", "--splade", "--splade-batch", "0")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--splade-batch" in p.stderr
