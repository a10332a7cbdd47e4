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


N = 96  # passages: six batches of 16, enough for a bar to move and estimate; more only costs encoding time


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, small_corpus):
    """The first N passages of the small SciFact folder."""
    out = tmp_path_factory.mktemp("progress") / "corpus.jsonl"
    lines = (small_corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:N]
    out.write_text("".join(lines), encoding="utf-8")
    return out


def test_dense_build_in_process_shows_total_and_eta(tmp_path, corpus, capfd):
    import retrieval
    from retrieval.dense.subindex import DenseSpec
    from retrieval.writer import add_subindex

    idx = retrieval.build_index(corpus, tmp_path / "IDX", quiet=True)
    capfd.readouterr()
    add_subindex(idx, DenseSpec(batch_size=16), quiet=False)
    err = capfd.readouterr().err
    got = frames(err, "encoding")
    assert got, f"no encoding bar with a total on stderr: {err[-2000:]!r}"
    assert {m.group("total") for m in got} == {str(N)}
    assert any(re.fullmatch(r"\d\d:\d\d", m.group("eta")) and 0 < int(m.group("n")) < N for m in got), \
        [m.group(0) for m in got]


def test_learned_quality_moves_from_its_first_batch(tmp_path, corpus, capfd):
    from retrieval.collections import read_corpus
    from retrieval.quality import get_estimator
    from retrieval.quality.prune import score_blocks

    est = get_estimator("learned")
    assert est.block_size > N   # one block holds the whole corpus: a per-block bar would jump 0 -> N
    pairs = [(d.docid, d.contents) for d in read_corpus(corpus)]
    capfd.readouterr()
    docids, scores, _v, how = score_blocks(est, pairs, batch_size=16, total=len(pairs))
    err = capfd.readouterr().err
    assert len(scores) == N and how["executor"] == "in-process"
    got = frames(err, "quality (learned)")
    assert got, f"no quality bar on stderr: {err[-2000:]!r}"
    assert any(0 < int(m.group("n")) < N for m in got), [m.group(0) for m in got]
    assert all(int(m.group("n")) % 16 == 0 for m in got if int(m.group("n")) < N)   # moved batch by batch


def test_encoding_bar_clears_its_line_before_the_next_output(capfd):
    """The encoding bar is gone when encode returns: its last frame is wiped with a carriage return,
    so the command's final line starts at the beginning of a clean line, not after a finished bar."""
    from retrieval.dense.encoder import DenseEncoder

    texts = [f"passage number {i} about the progress of a bar" for i in range(40)]
    capfd.readouterr()
    DenseEncoder(device="cpu").encode(texts, batch_size=8, quiet=False)
    err = capfd.readouterr().err
    assert frames(err, "encoding"), f"no encoding bar on stderr: {err[-2000:]!r}"
    tail = err[err.rfind("encoding"):]
    assert "\n" not in tail and err.endswith("\r") and not err.rsplit("\r", 2)[-2].strip(), repr(err[-300:])
