import json

import pytest

from indexes import folder
from indexes import manifest as mf
from indexes.docstore import DocStore, DocStoreWriter
from indexes.errors import IndexFormatError, InputError


def test_atomic_folder_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "idx"
    with pytest.raises(RuntimeError):
        with folder.atomic_folder(target) as tmp:
            (tmp / "half-written").write_text("x")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_folder_replaces_only_a_retr_index_and_only_with_overwrite(tmp_path):
    target = tmp_path / "idx"
    with folder.atomic_folder(target) as tmp:
        mf.write_manifest(tmp, mf.new_manifest({}))
        (tmp / "a").write_text("1")
    with pytest.raises(InputError, match="already exists"):
        with folder.atomic_folder(target):
            pass
    with folder.atomic_folder(target, overwrite=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    # the replaced folder is not an index any more: even --overwrite refuses to touch it, or a file
    with pytest.raises(InputError, match="not a retr index"):
        with folder.atomic_folder(target, overwrite=True):
            pass
    assert (target / "b").read_text() == "2"
    (tmp_path / "f").write_text("mine")
    with pytest.raises(InputError, match="is a file"):
        with folder.atomic_folder(tmp_path / "f", overwrite=True):
            pass
    assert (tmp_path / "f").read_text() == "mine"
    (tmp_path / "empty").mkdir()  # an empty folder may receive a build
    with folder.atomic_folder(tmp_path / "empty") as tmp:
        (tmp / "c").write_text("3")
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "f", "idx"]


def test_manifest_round_trip_and_checks(tmp_path):
    m = mf.new_manifest({"x": 1})
    mf.write_manifest(tmp_path, m)
    back = mf.read_manifest(tmp_path)
    assert back["config"] == {"x": 1} and back["format_version"] == mf.FORMAT_VERSION
    assert "pyserini" in back["versions"]
    (tmp_path / "manifest.json").write_text(json.dumps(dict(m, format_version=99)))
    with pytest.raises(IndexFormatError, match="newer"):
        mf.read_manifest(tmp_path)
    with pytest.raises(IndexFormatError, match="not a retr index"):
        mf.read_manifest(tmp_path / "..")


def test_docstore_round_trip(tmp_path):
    w = DocStoreWriter(tmp_path / "d.sqlite", batch=2)
    for i in range(5):
        w.add(f"d{i}", f"t{i}", f"text {i}", {"i": i} if i % 2 else None)
    assert w.close() == 5
    s = DocStore(tmp_path / "d.sqlite")
    assert len(s) == 5
    assert s.get("d3") == ("d3", "t3", "text 3", {"i": 3})
    assert s.get("missing") is None
    assert set(s.get_many(["d1", "d4", "zz"])) == {"d1", "d4"}
    assert [r[0] for r in s.iter_docs()] == [f"d{i}" for i in range(5)]
