"""The package layout's rules, read from the code itself (imports inside functions
count): the reader imports no writer, quality or DeepCT code; no two modules of
``retrieval/`` import each other in a loop; ``eval/`` stands alone (the evaluator
only) and the corpus reaches the writer without it; the benchmark harness is ``benchmarks/``, apart from it, imported by
nothing and not installed."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, text: str | None = None, root: Path = ROOT) -> set:
    """Every module named by an import anywhere in the file (``from a.b import c`` names
    ``a.b`` and ``a.b.c``; relative imports are resolved; ``importlib.import_module("a")`` and
    ``__import__("a")`` with a written name count too). ``text``: the file's code, if not read from it."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    here = _module(path, root).split(".")
    pkg = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
            out.add(node.args[0].value)
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _graph(package: str) -> dict:
    files = {_module(p): p for p in (ROOT / package).rglob("*.py")}
    return {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}


def test_the_reader_imports_no_writer_quality_or_deepct_code():
    imported = _imports(ROOT / "retrieval" / "index.py")
    banned = [i for i in imported if i.split(".")[:2] in (["retrieval", "writer"], ["retrieval", "quality"],
                                                           ["retrieval", "deepct"])]
    assert not banned, banned


def test_no_two_modules_of_retrieval_import_each_other_in_a_loop():
    g = _graph("retrieval")
    # a package's __init__ that only hands names on is not a module of its own in a loop
    seen, stack, on_stack, cycles = set(), [], set(), []

    def visit(m):
        seen.add(m)
        stack.append(m)
        on_stack.add(m)
        for n in sorted(g[m]):
            if n in on_stack:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in seen:
                visit(n)
        stack.pop()
        on_stack.discard(m)

    for m in sorted(g):
        if m not in seen:
            visit(m)
    # a module importing its own package's __init__ (which re-exports it) is not a real loop
    real = [c for c in cycles if not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(c, c[1:]))]
    assert not real, real


def test_eval_imports_nothing_from_the_rest():
    for p in (ROOT / "eval").rglob("*.py"):
        bad = [i for i in _imports(p) if i.split(".")[0] in ("retrieval", "indexes", "cli", "benchmarks")]
        assert not bad, (p.relative_to(ROOT).as_posix(), bad)


#: where the corpus of `retr index` and `retr index --shards` travels to the writer: collections.py reads it
#: (a file, or a collection by name through the dataset readers of retrieval/datasets/), sharded/ splits it
_CORPUS_PATH = ("retrieval/collections.py", "retrieval/writer.py", "retrieval/sharded/")
_DATASETS = "retrieval.datasets"


def _evaluator_reached(root: Path, starts) -> list:
    """The chains by which a module of ``starts`` imports ``eval``: directly, or through the dataset readers
    (modules of retrieval.datasets) it imports, and those they import in turn."""
    files = {_module(p, root): p for p in (root / "retrieval").rglob("*.py")}
    chains = []
    for start in starts:
        stack, seen = [[start]], set()
        while stack:
            chain = stack.pop()
            if chain[-1] in seen:
                continue
            seen.add(chain[-1])
            for i in sorted(_imports(files[chain[-1]], root=root)):
                if i.split(".")[0] == "eval":
                    chains.append(chain + [i])
                elif i in files and (i == _DATASETS or i.startswith(_DATASETS + ".")):
                    stack.append(chain + [i])
    return chains


def test_the_corpus_reaches_the_writer_without_the_evaluator():
    """Corpus and query reading (files, irds:NAME, dmerit:PATH) is the library's: collections.py, the writer
    and sharded/ import no eval/, neither themselves nor through the dataset readers they call (the qrels
    reader retrieval/datasets/qrels.py, which hands files to eval/io.py, is not on that path)."""
    starts = [_module(p) for p in sorted((ROOT / "retrieval").rglob("*.py"))
              if p.relative_to(ROOT).as_posix().startswith(_CORPUS_PATH)]
    assert "retrieval.collections" in starts and "retrieval.sharded.write" in starts
    assert not _evaluator_reached(ROOT, starts)


def test_the_evaluator_rule_finds_an_import_directly_and_through_the_dataset_readers(tmp_path):
    files = {"retrieval/__init__.py": "", "retrieval/collections.py": "from retrieval import datasets\n",
             "retrieval/datasets/__init__.py": "from . import irds\n",
             "retrieval/datasets/irds.py": "def f():\n    from eval.errors import EvalError\n",
             "retrieval/writer.py": "import eval\nimport retrieval.types\n", "retrieval/types.py": "import eval\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    found = _evaluator_reached(tmp_path, ["retrieval.collections", "retrieval.writer"])
    assert ["retrieval.collections", "retrieval.datasets", "retrieval.datasets.irds", "eval.errors"] in found
    assert ["retrieval.writer", "eval"] in found
    assert not [c for c in found if "retrieval.types" in c]  # only the dataset readers are followed


#: folders of the checkout that hold no code of the project (ignored by git: environments, work files)
_NOT_CODE = {".venv", "venv", "work", "runs", "build", "node_modules"}


def _code_files_outside(folder: str):
    for top in sorted(ROOT.iterdir()):
        if top.name.startswith(".") or top.name in _NOT_CODE or top.name == folder:
            continue
        if top.is_dir():
            yield from (p for p in top.rglob("*.py") if not any(part.startswith(".") for part in p.parts))
        elif top.suffix == ".py":
            yield top


def test_eval_is_the_evaluator_alone_and_the_benchmarks_live_apart():
    """The harness and its results are the top-level ``benchmarks/``, not a part of the evaluator."""
    assert not (ROOT / "eval" / "benchmarks").exists() and not (ROOT / "eval" / "results").exists()
    assert (ROOT / "benchmarks" / "common.py").is_file() and (ROOT / "benchmarks" / "results").is_dir()
    assert not (ROOT / "benchmarks" / "__init__.py").exists()


def test_nothing_outside_benchmarks_imports_them():
    """``benchmarks/`` may import retrieval, eval and tests (the soak's processes); nothing imports it,
    neither as ``benchmarks`` nor by a script's own name (``common``, ``defaults_runs``, ...)."""
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    for p in _code_files_outside("benchmarks"):
        bad = [i for i in _imports(p) if i.split(".")[0] == "benchmarks" or i.startswith("eval.benchmarks")
               or i.split(".")[0] in scripts]
        assert not bad, (p.relative_to(ROOT).as_posix(), bad)


def test_the_benchmarks_are_not_installed_and_eval_is():
    """The package discovery of pyproject.toml, run as setuptools runs it."""
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_namespace_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find.get("namespaces", True)
    found = set(find_namespace_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ())))
    assert {"eval", "retrieval", "indexes", "cli"} <= found
    assert not [p for p in found if p.split(".")[0] in ("benchmarks", "tests")
                or p.startswith(("eval.benchmarks", "eval.results"))], found


def test_each_method_lives_in_its_package():
    r = ROOT / "retrieval"
    for pkg in ("deepct", "dense", "quality"):
        assert (r / pkg / "__init__.py").is_file()
    for stray in ("deepct_index.py", "deepct_targets.py", "train_deepct.py", "dimsel.py", "sts.py",
                  "subindexes.py", "retrievers.py", "append.py", "encoders"):
        assert not (r / stray).exists(), stray


def test_every_registered_kind_loads_and_follows_the_protocol():
    from retrieval.kinds import KINDS, SubIndexKind, get_kind

    for name in KINDS:
        k = get_kind(name)
        assert isinstance(k, SubIndexKind) and k.name == name
        for method in ("build", "retriever", "count"):
            assert getattr(type(k), method) is not getattr(SubIndexKind, method), (name, method)


def test_a_kind_is_a_package_with_its_sub_index_and_its_command_line_options():
    """One line of kinds.KINDS registers a kind: its package's subindex.KIND and options.OPTIONS, whose
    options and commands are data (retrieval.options), for the command line to render."""
    from retrieval.kinds import KINDS, KindOptions, get_kind, options_of
    from retrieval.options import Command, Option

    for name, pkg in KINDS.items():
        assert (ROOT / pkg.replace(".", "/") / "__init__.py").is_file(), pkg
        assert not (ROOT / pkg.replace(".", "/") / "cli.py").exists(), pkg  # the part of cli/, now options.py
        assert get_kind(name).name == name
        o = options_of(name)
        assert isinstance(o, KindOptions) and o.title, name
        assert all(isinstance(x, Option) and set(x.applies_to) <= {"index", "search"} and x.applies_to
                   for x in o.options), name
        assert all(isinstance(c, Command) and all(isinstance(x, Option) for x in c.options) for c in o.commands)


#: the modules that may name a kind: its package, and the registry
def _kind_names() -> set:
    from retrieval.kinds import KINDS

    names = set(KINDS)
    for name in KINDS:  # and the names of the entries a kind lists (deepct's deepct-query alias)
        from retrieval.kinds import get_kind

        names |= set(get_kind(name).entries(name, {"config": {}, "path": name}))
    return names


def _outside_kinds():
    from retrieval.kinds import KINDS

    packages = tuple(pkg.replace(".", "/") + "/" for pkg in KINDS.values())
    for p in _product_files():
        rel = p.relative_to(ROOT).as_posix()
        if not rel.startswith(packages) and rel != "retrieval/kinds.py":
            yield rel, p


def _compared_constants(tree) -> set:
    """String constants on either side of a comparison (==, !=, in, not in, ...), in collections too."""
    def consts(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*(consts(e) for e in node.elts)) if node.elts else set()
        if isinstance(node, ast.Dict):
            return set().union(*(consts(k) for k in node.keys if k is not None)) if node.keys else set()
        return set()

    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                out |= consts(side)
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            out |= consts(node.pattern.value)
    return out


def _command_line_imports(path: Path, text: str | None = None) -> list:
    """What a module imports of click or of the click app (``cli/``), inside functions too."""
    return sorted(i for i in _imports(path, text) if i.split(".")[0] in ("click", "cli"))


def test_the_library_imports_neither_click_nor_the_cli():
    """The library stands below the click app: a kind declares its options and commands as data
    (``retrieval.options``) and ``cli/params.py`` renders them, so nothing of retrieval/ or indexes/
    imports click or cli/."""
    for pkg in ("retrieval", "indexes"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            bad = _command_line_imports(p)
            assert not bad, (p.relative_to(ROOT).as_posix(), bad)


def test_the_command_line_import_scan_finds_each_form():
    # the rule above must see each way a module can reach click or cli/, or it passes for nothing
    where = ROOT / "retrieval" / "somekind" / "options.py"
    code = ("import click\nfrom cli import params\nimport clickhouse, cli_tools\nfrom indexes import cli_names\n"
            "def f():\n    from cli.params import K1\n    import click.testing\n"
            "    importlib.import_module('cli.main')\n    __import__('click')\n")
    assert _command_line_imports(where, code) == ["cli", "cli.main", "cli.params", "cli.params.K1", "click",
                                                  "click.testing"]
    assert not _command_line_imports(where, "import clickhouse\nfrom indexes import cli_names\n")


def test_no_module_outside_a_kind_s_package_compares_anything_to_a_kind_name():
    names = _kind_names()
    for rel, p in _outside_kinds():
        bad = _compared_constants(ast.parse(p.read_text(encoding="utf-8"))) & names
        assert not bad, (rel, sorted(bad))


def test_the_writer_reader_fusion_server_and_cli_spell_no_kind_name():
    """Not even as a value: they reach a kind through the registry (the primary one as kinds.PRIMARY)."""
    names = _kind_names()
    for rel, p in _outside_kinds():
        if rel in ("retrieval/writer.py", "retrieval/index.py", "retrieval/fusion.py", "retrieval/check.py") \
                or rel.startswith(("retrieval/server/", "cli/")):
            bad = set(_strings(p)) & names
            assert not bad, (rel, sorted(bad))


def test_the_compared_constants_scan_finds_a_comparison():
    # the scan above must see each form it looks for, or it passes for nothing
    found = _compared_constants(ast.parse("a == 'x'\nb in ('y', 'q')\n'z' != c\nmatch d:\n    case 'w': pass\n"))
    assert found == {"x", "y", "q", "z", "w"}


def test_every_retriever_derives_from_the_retriever_base():
    """The reader and fusion call the Retriever protocol's methods without probing for them, so each
    kind's retriever (and dimension selection's wrapper) takes RetrieverBase's defaults for what it lacks."""
    import importlib
    import inspect

    from retrieval.kinds import KINDS, Retriever, RetrieverBase

    found = []
    for where in [*(pkg + ".subindex" for pkg in KINDS.values()), "retrieval.dense.dimsel.search:DimSel"]:
        mod = importlib.import_module(where.split(":")[0])
        for _name, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and hasattr(cls, "batch_search"):
                found.append(cls.__name__)
                assert issubclass(cls, RetrieverBase) and isinstance(cls.__new__(cls), Retriever), cls
                for method in ("search", "batch_search"):
                    assert getattr(cls, method) is not getattr(RetrieverBase, method), (cls, method)
    assert sorted(found) == ["BM25Retriever", "DeepCTRetriever", "DenseRetriever", "DimSel", "SpladeRetriever"]


#: the folder's owner (indexes/folder.py), with the JSON of its manifest (indexes/manifest.py) and the
#: lock files of the generations it is built on (indexes/generations.py: ``.lock``, ``.readers``)
_OWNER = {"indexes/folder.py", "indexes/manifest.py", "indexes/generations.py"}
_NAMES = ("manifest.json", "docs.sqlite", "docs.g")


def _product_files():
    for pkg in ("retrieval", "indexes", "cli"):
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _strings(path: Path):
    """The string constants of a module's code (its docstrings and comments left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value


def test_only_the_folder_owner_spells_the_folder_s_file_names():
    """manifest.json, docs.sqlite and the generations' store names are indexes/folder.py's to know; the rest
    ask it (folder.docstore_path, folder.manifest_path, ...). Messages that name a file for a person are
    written from those functions too."""
    for p in _product_files():
        rel = p.relative_to(ROOT).as_posix()
        if rel in _OWNER:
            continue
        bad = [s for s in _strings(p) if any(n in s for n in _NAMES)]
        assert not bad, (rel, bad)


def test_only_the_folder_owner_writes_a_manifest():
    """Every manifest change is a commit of indexes/folder.py (a build's, a change's, a manifest-only one)."""
    for p in _product_files():
        rel = p.relative_to(ROOT).as_posix()
        if rel in _OWNER:
            continue
        bad = sorted(i for i in _imports(p) if i.endswith(".write_manifest"))
        text = p.read_text(encoding="utf-8")
        assert not bad and "write_manifest(" not in text, rel


def test_no_module_of_indexes_imports_another_in_a_loop_and_manifest_is_plain_json():
    g = _graph("indexes")
    assert not {i for i in g["indexes.manifest"] if i.startswith("indexes.") and i not in
                ("indexes.errors", "indexes.atomic")}, g["indexes.manifest"]
    for a, deps in g.items():
        for b in deps:
            assert a not in g.get(b, set()), (a, b)


def test_no_function_of_the_library_is_over_80_lines():
    """Long functions are split into named steps (retrieval/, indexes/ and cli/)."""
    long = []
    for p in _product_files():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append((p.relative_to(ROOT).as_posix(), node.name, node.end_lineno - node.lineno + 1))
    assert not long, long
