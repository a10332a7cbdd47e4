"""Issue #29: the progress bars as a user sees them (tqdm's frames on stderr, captured from tiny
real runs): in-process dense encoding knows its total, so it shows an ETA; scoring passages with the
learned quality estimator moves from its first batch, not once per 4,096-passage block."""
from __future__ import annotations

import re

import pytest

#: a tqdm frame: "desc:  45%|####5     | 180/400 [00:03<00:04, 52.1text/s]"
FRAME = re.compile(r"(?P<desc>[^\r\n:|]+): +(?P<pct>\d+)%\|[^|]*\| *(?P<n>\d+)/(?P<total>\d+) "
                   r"\[(?P<elapsed>[\d:]+)<(?P<eta>[\d:?]+)")


def frames(err: str, desc: str):
    return [m for m in FRAME.finditer(err) if m.group("desc").strip() == desc]


def test_dense_build_in_process_shows_total_and_eta(tmp_path, small_corpus, capfd):
    import retrieval
    from retrieval.dense.subindex import DenseSpec
    from retrieval.writer import add_subindex

    idx = retrieval.build_index(small_corpus, tmp_path / "IDX", quiet=True)
    capfd.readouterr()
    add_subindex(idx, DenseSpec(batch_size=16), quiet=False)
    err = capfd.readouterr().err
    got = frames(err, "encoding")
    assert got, f"no encoding bar with a total on stderr: {err[-2000:]!r}"
    assert {m.group("total") for m in got} == {"400"}
    assert any(re.fullmatch(r"\d\d:\d\d", m.group("eta")) and 0 < int(m.group("n")) < 400 for m in got), \
        [m.group(0) for m in got]


def test_learned_quality_moves_from_its_first_batch(tmp_path, small_corpus, capfd):
    from retrieval.collections import read_corpus
    from retrieval.quality import get_estimator
    from retrieval.quality.prune import score_blocks

    est = get_estimator("learned")
    assert est.block_size > 400   # one block holds the whole corpus: a per-block bar would jump 0 -> 400
    pairs = [(d.docid, d.contents) for d in read_corpus(small_corpus / "corpus.jsonl")]
    capfd.readouterr()
    docids, scores, _v, how = score_blocks(est, pairs, batch_size=16, total=len(pairs))
    err = capfd.readouterr().err
    assert len(scores) == 400 and how["executor"] == "in-process"
    got = frames(err, "quality (learned)")
    assert got, f"no quality bar on stderr: {err[-2000:]!r}"
    assert any(0 < int(m.group("n")) < 400 for m in got), [m.group(0) for m in got]
    assert all(int(m.group("n")) % 16 == 0 for m in got if int(m.group("n")) < 400)   # moved batch by batch
