"""Functions that take their options as one value (a small frozen dataclass) still take the old keywords,
through a ``**options`` that is checked: a keyword they do not know is a TypeError naming it, before any
work (issue #44: no signature over 8 parameters). The public keyword APIs declare those keywords as one
TypedDict (``**options: Unpack[...]``) and check them the same way."""
import numpy as np
import pytest

from indexes import lucene
from indexes.faiss_index import FaissIndex
from retrieval import pairs, tune, writer
from retrieval.deepct.train import train_deepct
from retrieval.dense import masking, sts
from retrieval.dense.dimsel.search import DimSel
from retrieval.dense.encoder import DenseEncoder
from retrieval.dense.mlm import Pretrainer
from retrieval.quality.learned import train_head
from retrieval.server.run import serve
from retrieval.sharded.write import build_sharded
from retrieval.trainrun import RunOptions


@pytest.mark.parametrize("call, name", [
    (lambda p: writer.add_documents(p, [], bogus=1), "add_documents"),
    (lambda p: writer.update_documents(p, [], bogus=1), "update_documents"),
    (lambda p: lucene.build_lucene([], p / "l", bogus=1), "build_lucene"),
    (lambda p: lucene.run_indexer(p, p / "l", bogus=1), "run_indexer"),
    (lambda p: tune.tune(None, [], {}, bogus=1), "tune"),
    (lambda p: tune.cross_validate(None, [], {}, 2, bogus=1), "cross_validate"),
    (lambda p: pairs.training_examples(None, [], {}, bogus=1), "training_examples"),
    (lambda p: serve([], bogus=1), "serve"),
    (lambda p: build_sharded([], p / "s", 2, bogus=1), "build_sharded"),
    (lambda p: train_deepct(p, p / "o", bogus=1), "train_deepct"),
    (lambda p: FaissIndex.build(np.zeros((1, 2), dtype="float32"), ["a"], bogus=1), "build"),
    (lambda p: masking.rom_mask(None, "a b", [1.0, 1.0], bogus=1), "rom_mask"),
    (lambda p: Pretrainer(None, [], strategy="random", rate=0.3, max_length=8, batch_size=1, bogus=1), "Pretrainer"),
    (lambda p: DimSel(None, bogus=1), "DimSel.__init__"),
    (lambda p: writer.build_index([], p / "s", bogus=1), "build_index"),
    (lambda p: writer.index_corpus(p, p / "s", bogus=1), "index_corpus"),
    (lambda p: DenseEncoder(p / "l", bogus=1), "DenseEncoder.__init__"),
    (lambda p: sts.evaluate(None, ["mean"], sts_dir=p / "l", bogus=1), "evaluate"),
    (lambda p: train_head([], bogus=1), "train_head"),
])
def test_an_unknown_keyword_is_a_type_error_naming_it(tmp_path, call, name):
    with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'bogus'$"):
        call(tmp_path)
    assert not (tmp_path / "s").exists() and not (tmp_path / "l").exists()  # nothing was made


def test_deepct_refuses_the_run_options_it_has_no_use_for(tmp_path):
    for kw in ("index", "resume"):
        with pytest.raises(TypeError, match=repr(kw)):
            train_deepct(tmp_path, tmp_path / "o", **{kw: True})


def test_an_options_value_and_keywords_over_it():
    how, rest = RunOptions.split(RunOptions(quiet=True, resume=True), {"resume": False, "epochs": 2})
    assert how == RunOptions(quiet=True, resume=False) and rest == {"epochs": 2}
    assert lucene._indexing("f", lucene.Indexing(threads=4), {"impact": True}) == lucene.Indexing(threads=4, impact=True)
    assert tune._tuning("f", tune.Tuning(depth=10), {"metric": "MAP"}) == ("bm25+dense", "MAP", 10, 2, False)
