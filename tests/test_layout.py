"""The package layout's rules, read from the code itself (imports inside functions
count): the reader imports no writer, quality or DeepCT code; no two modules of
``retrieval/`` import each other in a loop; ``eval/`` stands alone."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set:
    """Every module named by an import anywhere in the file (``from a.b import c`` names
    ``a.b`` and ``a.b.c``; relative imports are resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module(path).split(".")
    pkg = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(tree):
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
    for p in (ROOT / "eval").glob("*.py"):
        bad = [i for i in _imports(p) if i.split(".")[0] in ("retrieval", "indexes", "cli")]
        assert not bad, (p.name, bad)


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
