"""The package layout's rules, read from the code itself (imports inside functions
count): the reader imports no writer, quality or DeepCT code; no two modules of
``retrieval/`` import each other in a loop, and its modules and packages stack in at most
nine layers; no method's package (a kind's, quality's) imports the writer, sharded/ or
another method's; retrieval/ and indexes/ import no click or cli/; sharded/ and server/
call no private method of another object but those named; no function is over 60 lines
or 8 parameters but those named; ``eval/`` stands alone (the evaluator
only) and the corpus reaches the writer without it; the benchmark harness is ``benchmarks/``, apart from it, imported by
nothing and not installed. Each rule has a test that runs its scan on a small tree and
shows that it can fail."""
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
    out = set()
    for base, names in _import_statements(path, text, root):
        out.add(base)
        out.update(f"{base}.{n}" for n in names or ())
    return out


def _import_statements(path: Path, text: str | None = None, root: Path = ROOT):
    """``(module, None)`` for each ``import a.b`` and written ``import_module("a")``/``__import__("a")``,
    ``(base, names)`` for each ``from base import names`` (a relative base resolved), anywhere in the file:
    the one walk both :func:`_imports` and :func:`_resolved_imports` read."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    here = _module(path, root).split(".")
    pkg = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
            yield node.args[0].value, None
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
            yield base, [a.name for a in node.names]


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


# ------------------------------------------------------------------ the layers of retrieval/
#: at most this many layers in the import graph of retrieval/ (issue #44: it stacked 13 deep, with loops)
MAX_LAYERS = 9


def _resolved_imports(path: Path, files, root: Path = ROOT, text: str | None = None) -> set:
    """The modules of ``files`` (module name -> path) that a file imports anywhere in it, in functions too:
    ``from a import b`` names the module ``a.b`` when there is one, else ``a`` (``b`` is a name of ``a``'s);
    ``import a.b`` and ``importlib.import_module("a.b")`` the longest of ``a.b``, ``a`` that is a module.
    A package's ``__init__`` that Python runs on the way to one of its modules is not named. A kind reached
    by name through the registry (``kinds.get_kind``, ``kinds.kind_part``) is not an import."""
    def known(name):
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    out = set()
    for base, names in _import_statements(path, text, root):
        if names is None:
            out.add(known(base))
        else:
            out.update(f"{base}.{n}" if f"{base}.{n}" in files else known(base) for n in names)
    out.discard(None)
    return out


def _node(module: str) -> str:
    """A module's node in the graph of retrieval/: a module of its own, or the package it is in
    (``retrieval.dense.dimsel.search`` -> ``retrieval.dense``); ``retrieval`` is the package's ``__init__``."""
    return ".".join(module.split(".")[:2])


def _package_graph(root: Path = ROOT):
    """``(edges, where)``: node -> the nodes it imports, and (node, node) -> the module imports behind it."""
    files = {_module(p, root): p for p in (root / "retrieval").rglob("*.py")}
    edges = {_node(m): set() for m in files}
    where: dict = {}
    for m, p in files.items():
        for i in _resolved_imports(p, files, root):
            a, b = _node(m), _node(i)
            if a != b:
                edges[a].add(b)
                where.setdefault((a, b), set()).add(f"{m} -> {i}")
    return edges, where


def _layers(edges):
    """``(loops, layer)``: the strongly connected components of more than one node (import loops), and
    each node's layer: 0 for one that imports none of the others, else one above the highest it imports
    (a loop is one step, its nodes on one layer)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def connect(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    level: dict = {}
    for i, comp in enumerate(comps):  # Tarjan's order: a component after every one it imports
        below = {comp_of[w] for v in comp for w in edges[v]} - {i}
        level[i] = 1 + max((level[j] for j in below), default=-1)
    return [c for c in comps if len(c) > 1], {v: level[comp_of[v]] for v in edges}


def _layer_list(layer) -> list:
    return [sorted(v for v in layer if layer[v] == n) for n in range(max(layer.values()) + 1)]


def test_the_import_graph_of_retrieval_is_acyclic_with_at_most_9_layers():
    """Modules and packages of retrieval/ (a package is one node, its modules' imports its own) import
    each other without a loop, so every import runs from a higher layer down to a lower one, and the
    stack is at most :data:`MAX_LAYERS` deep. The layers now, bottom up: types, options, progress, models,
    datasets, documents, trainrun, optim; executors, filters, chunking, runs; kinds, collections, the Ray
    driver; bm25, fusion, frames, quality, request; index, searcher, client, tune; writer, check, deepct;
    sharded, sync, pairs; the package's ``__init__``, dense, splade, ops; server, integrations."""
    edges, where = _package_graph()
    loops, layer = _layers(edges)
    assert not loops, [(loop, sorted(x for a in loop for b in loop if (a, b) in where for x in where[a, b]))
                       for loop in loops]
    upward = [where[a, b] for a in edges for b in edges[a] if layer[b] >= layer[a]]
    assert not upward, upward
    assert max(layer.values()) + 1 <= MAX_LAYERS, _layer_list(layer)


def _write_tree(root: Path, files) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def test_the_layer_rule_finds_a_loop_through_a_lazy_import_and_counts_a_deep_stack(tmp_path):
    # a loop a -> b -> c (a package) -> a, closed by an import inside a function of a package's module
    _write_tree(tmp_path, {"retrieval/__init__.py": "", "retrieval/a.py": "import retrieval.b\n",
                           "retrieval/b.py": "from retrieval.c import thing\n",
                           "retrieval/c/__init__.py": "thing = 1\n",
                           "retrieval/c/d.py": "def f():\n    from retrieval import a\n",
                           "retrieval/e.py": "from retrieval import c\n"})
    edges, where = _package_graph(tmp_path)
    loops, layer = _layers(edges)
    assert loops == [["retrieval.a", "retrieval.b", "retrieval.c"]]
    assert where["retrieval.c", "retrieval.a"] == {"retrieval.c.d -> retrieval.a"}
    assert layer["retrieval.e"] == layer["retrieval.a"] + 1 and "retrieval" not in edges["retrieval.b"]
    # a chain of MAX_LAYERS + 1 modules, each importing the next: one layer too many
    chain = {"retrieval/__init__.py": ""}
    chain.update({f"retrieval/m{i}.py": f"from retrieval import m{i + 1}\n" for i in range(MAX_LAYERS)})
    chain[f"retrieval/m{MAX_LAYERS}.py"] = "import os\n"
    _write_tree(tmp_path / "chain", chain)
    loops, layer = _layers(_package_graph(tmp_path / "chain")[0])
    assert not loops and max(layer.values()) + 1 == MAX_LAYERS + 1
    assert layer["retrieval.m0"] == MAX_LAYERS and layer["retrieval.m9"] == 0


# ------------------------------------------------------------------ the methods' packages
#: what no method's package imports: the writer and the sharded index are above the kinds, which reach
#: the kinds through the registry (retrieval.kinds); another method's model is reached by name too
#: (``kinds.kind_part``)
_ABOVE_THE_KINDS = ("retrieval.writer", "retrieval.sharded")


def _method_packages() -> list:
    """Each kind's package (``kinds.KINDS``) and quality's, the methods' packages."""
    from retrieval.kinds import KINDS

    return sorted(set(KINDS.values()) | {"retrieval.quality"})


def _method_imports(root: Path, packages) -> list:
    """``(module, import)`` of a method's package importing the writer, sharded/ or another method's package."""
    files = {_module(p, root): p for p in (root / "retrieval").rglob("*.py")}
    bad = []
    for m, p in sorted(files.items()):
        own = _node(m)
        if own not in packages:
            continue
        for i in sorted(_resolved_imports(p, files, root)):
            if _node(i) != own and (_node(i) in _ABOVE_THE_KINDS or _node(i) in packages):
                bad.append((m, i))
    return bad


def test_no_method_package_imports_the_writer_sharded_or_another_method():
    """A kind's package (and quality's) stands below the writer and the sharded index, which reach it
    through the registry, and apart from the other methods: where it needs one, a public function of a
    lower layer serves (``pairs.mining_index`` builds the folder negatives are mined from,
    ``kinds.kind_part`` hands over another kind's model by name, ``indexes.shard_commit`` commits a
    sharded index's tuning)."""
    assert {"retrieval.bm25", "retrieval.dense", "retrieval.deepct", "retrieval.quality"} <= set(_method_packages())
    assert not _method_imports(ROOT, _method_packages())


def test_the_method_package_rule_finds_each_import(tmp_path):
    _write_tree(tmp_path, {"retrieval/__init__.py": "", "retrieval/writer.py": "", "retrieval/pairs.py": "",
                           "retrieval/sharded/__init__.py": "", "retrieval/sharded/write.py": "",
                           "retrieval/dense/__init__.py": "", "retrieval/dense/encoder.py": "",
                           "retrieval/deepct/__init__.py": "from retrieval.deepct import model\n",
                           "retrieval/deepct/model.py": "import retrieval.pairs\n",
                           "retrieval/deepct/train.py": "def f():\n    from retrieval.writer import build_index\n",
                           "retrieval/deepct/tuning.py": "from ..sharded import write\n"
                                                         "from retrieval.dense.encoder import DenseEncoder\n"})
    found = _method_imports(tmp_path, ["retrieval.deepct", "retrieval.dense"])
    assert found == [("retrieval.deepct.train", "retrieval.writer"),
                     ("retrieval.deepct.tuning", "retrieval.dense.encoder"),
                     ("retrieval.deepct.tuning", "retrieval.sharded.write")]


# ------------------------------------------------------------------ private methods of other objects
#: the calls of another object's private method that retrieval/sharded/ and retrieval/server/ still make,
#: each named (file, the called expression): the list only shrinks (issue #44: a shard is searched through a
#: folder's public operations)
_PRIVATE_CALLS_LEFT = {
    # FastMCP 2.x/3.x has no public form: its run_stdio_async opens the stdio streams itself, so the
    # malformed-line answerer (run.py's _AnswerMalformed) can only wrap them inside its lifespan manager
    ("retrieval/server/run.py", "mcp._lifespan_manager"),
}


def _private_calls(path: Path, text: str | None = None) -> list:
    """The called expressions ``x._name(...)`` of a module where ``x`` is not ``self`` or ``cls``
    (``__dunder__`` methods are not private)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, owner = node.func.attr, node.func.value
            if name.startswith("_") and not name.startswith("__") \
                    and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                out.append(ast.unparse(node.func))
    return sorted(out)


def test_sharded_and_server_call_no_private_method_of_another_object():
    found = {(p.relative_to(ROOT).as_posix(), call) for pkg in ("sharded", "server")
             for p in sorted((ROOT / "retrieval" / pkg).rglob("*.py")) for call in _private_calls(p)}
    assert not found - _PRIVATE_CALLS_LEFT, sorted(found - _PRIVATE_CALLS_LEFT)
    assert not _PRIVATE_CALLS_LEFT - found, ("gone: take them off _PRIVATE_CALLS_LEFT",
                                             sorted(_PRIVATE_CALLS_LEFT - found))


def test_the_private_call_scan_finds_each_form(tmp_path):
    code = ("import os\nclass A:\n    def f(self, ix, other):\n        self._mine()\n        cls._also()\n"
            "        ix._theirs(1)\n        self._ix._fetch()\n        other.public()\n        os._exit(0)\n"
            "        super().__init__()\n        x = ix._attr\n")
    assert _private_calls(tmp_path / "m.py", code) == ["ix._theirs", "os._exit", "self._ix._fetch"]


# ------------------------------------------------------------------ function sizes
MAX_LINES, MAX_PARAMS = 60, 8


def _sizes(path: Path, text: str | None = None):
    """``(long, wide)``: the functions of a module over :data:`MAX_LINES` lines and those taking over
    :data:`MAX_PARAMS` parameters (``self``/``cls`` not counted, ``*args``/``**kw`` counted), by qualified
    name (``Class.method``, ``outer.inner``); a dataclass's methods are not counted for their parameters."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    long, wide = [], []

    def visit(node, prefix: str, in_dataclass: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                dc = any("dataclass" in ast.unparse(d) for d in child.decorator_list)
                visit(child, f"{prefix}{child.name}.", dc)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                if child.end_lineno - child.lineno + 1 > MAX_LINES:
                    long.append(name)
                a = child.args
                params = [x for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                if len(params) + bool(a.vararg) + bool(a.kwarg) > MAX_PARAMS and not in_dataclass:
                    wide.append(name)
                visit(child, name + ".", False)
            else:
                visit(child, prefix, in_dataclass)

    visit(tree, "", False)
    return long, wide


#: the functions still over MAX_LINES lines ("file:qualified name"); the list only shrinks
_LONG_LEFT: set = set()

#: the library's functions still taking over MAX_PARAMS parameters ("file:qualified name"); the list only
#: shrinks. Inside the library the search options travel as one SearchRequest; the public search methods take
#: query, k, retriever and the rest as ``**options: Unpack[SearchOptions]`` (retrieval/request.py), and the
#: other public keyword APIs (build_index, index_corpus, DenseEncoder, sts.evaluate, train_head) their less
#: common keywords as ``**options`` of one declared TypedDict, checked by retrieval.options.check_keywords, so
#: that help(), editors and type checkers still know every keyword. Elsewhere options travel as small frozen
#: dataclasses (writer._First/_Stages, lucene.Indexing, trainrun.RunOptions, pairs.Mining, tune.Tuning,
#: server.run.Serving). What is left has its reason below
_WIDE_LEFT = {
    # an MCP tool: FastMCP derives the tool's input schema from the function's parameters, one property per
    # parameter; folding them into one value would change the schema every MCP client calls the tool with
    "retrieval/server/mcp_tools.py:_add_search_tool.search",
}


def _oversized():
    """``(long, wide)`` of the product: functions of retrieval/, indexes/ and cli/ over MAX_LINES lines;
    functions of the library (retrieval/, indexes/) over MAX_PARAMS parameters (cli/'s click commands take
    one parameter per option)."""
    long, wide = set(), set()
    for p in _product_files():
        rel = p.relative_to(ROOT).as_posix()
        l, w = _sizes(p)
        long |= {f"{rel}:{n}" for n in l}
        if not rel.startswith("cli/"):
            wide |= {f"{rel}:{n}" for n in w}
    return long, wide


def test_no_function_is_over_60_lines_or_8_parameters_but_those_named():
    """Long functions are split into named steps, long signatures take a value (a config dataclass, a
    request); what remains is named in :data:`_LONG_LEFT` / :data:`_WIDE_LEFT`, which only shrink."""
    long, wide = _oversized()
    assert not long - _LONG_LEFT, sorted(long - _LONG_LEFT)
    assert not wide - _WIDE_LEFT, sorted(wide - _WIDE_LEFT)
    assert not _LONG_LEFT - long, ("within the limit now: take them off _LONG_LEFT", sorted(_LONG_LEFT - long))
    assert not _WIDE_LEFT - wide, ("within the limit now: take them off _WIDE_LEFT", sorted(_WIDE_LEFT - wide))


def test_the_size_rule_finds_a_long_function_and_a_wide_signature(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))  # with its def line: MAX_LINES + 1 lines
    code = (f"def long():\n{body}\n"
            f"def short():\n{body[:-len(body.splitlines(True)[-1])]}\n"
            "class A:\n    def wide(self, a, b, c, d, e, f, g, *h, i):\n        def inner(a, b, c, d, e, f, g, h):\n"
            "            pass\n    @classmethod\n    def fine(cls, a, b, c, d, e, f, g, h):\n        pass\n"
            "@dataclass\nclass D:\n    def many(self, a, b, c, d, e, f, g, h, i):\n        pass\n"
            "def kw(a, b, c, d, e, f, g, h, **more):\n    pass\n")
    long, wide = _sizes(tmp_path / "m.py", code)
    assert long == ["long"] and wide == ["A.wide", "kw"]
