"""The committed Lucene helper jar (indexes/java/retr-lucene.jar) is the one its committed source
compiles to: recorded source digest everywhere, byte-for-byte recompilation where javac exists."""
from __future__ import annotations

import zipfile

import pytest

from indexes import helperjar


def test_committed_jar_is_built_from_the_committed_source():
    assert helperjar.jar_digest() == helperjar.source_digest(), "indexes/java/retr-lucene.jar is stale: make java"


def test_jar_recompiles_to_the_same_bytes(tmp_path):
    if helperjar.javac() is None:
        pytest.skip("no javac on this machine (the committed jar is used as it is)")
    if helperjar.javac_version() != helperjar.jar_javac_version():
        pytest.skip(f"{helperjar.javac_version()} is not the jar's {helperjar.jar_javac_version()}: "
                    "another javac may emit other bytes")
    built = helperjar.build(tmp_path / "rebuilt.jar")
    with zipfile.ZipFile(built) as new, zipfile.ZipFile(helperjar.JAR) as old:
        assert new.namelist() == old.namelist()
        for name in new.namelist():
            assert new.read(name) == old.read(name), name
