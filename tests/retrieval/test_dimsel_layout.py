"""The dimension-selection package keeps search apart from training (issue #25): searching with a
selection (``retrieval.dense.dimsel.search``) never loads the training code, and the package's
``__init__`` imports nothing."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "retrieval" / "dense" / "dimsel"
PACKAGE = "retrieval.dense.dimsel"
TRAINING = PACKAGE + ".training"
SEARCH_SIDE = ("search.py", "masks.py", "selector.py")


def _imports(path: Path):
    """(module, names) of every import in ``path``, those inside functions and classes too;
    relative imports resolved against the package."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a module of the package: level 1 is the package itself
                parts = PACKAGE.split(".")[:PACKAGE.count(".") + 2 - node.level]
                base = ".".join(parts + ([base] if base else []))
            yield base, tuple(a.name for a in node.names)


def _imports_training(module: str, names) -> bool:
    return (module == TRAINING or module.startswith(TRAINING + ".")
            or (module == PACKAGE and "training" in names))


@pytest.mark.parametrize("name", SEARCH_SIDE)
def test_the_search_side_never_imports_the_training_module(name):
    found = [(m, n) for m, n in _imports(PKG / name) if _imports_training(m, n)]
    assert not found, (name, found)


def test_the_scan_sees_each_form_of_importing_training(tmp_path):
    # the test above must recognise every spelling, or it passes for nothing
    p = tmp_path / "m.py"
    p.write_text("def f():\n    import retrieval.dense.dimsel.training\n"
                 "class C:\n    from retrieval.dense.dimsel.training import fit\n"
                 "from retrieval.dense.dimsel import training\nfrom . import training as t\nfrom .training import fit\n")
    assert sum(_imports_training(m, n) for m, n in _imports(p)) == 5


def test_masks_import_no_torch_and_the_package_init_imports_nothing():
    assert not [m for m, _ in _imports(PKG / "masks.py") if m.split(".")[0] == "torch"]
    assert not list(_imports(PKG / "__init__.py"))


def test_importing_the_search_module_loads_no_training_code():
    code = ("import retrieval.dense.dimsel.search, sys; "
            f"assert {TRAINING!r} not in sys.modules, 'training loaded'; "
            "assert 'torch' not in sys.modules, 'torch loaded'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_no_function_of_the_package_is_longer_than_80_lines():
    for p in sorted(PKG.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 80, (p.name, node.name)
