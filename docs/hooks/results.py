"""MkDocs hooks. The API page documents every name of ``retrieval.__all__``: one that its hand-made
groups lack is added at its end, so a new public name is never missing from the reference.

Every benchmarks/results/*.md becomes a page under results/bench/, with a header naming the
machine it ran on (the benchmark files are the record; the site shows them as they are, without copies).
Their pictures come along so the pages' relative image links resolve."""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

# Where each result was measured. Every benchmark ran on the development machine unless named here.
CPU = "2 shared x86_64 CPU cores, Linux, Python 3.11.7, no GPU"
MACHINES = {"gpu-minilm": "one NVIDIA H200 (torch 2.11.0+cu130, CUDA 13.0)",
            "gpu-splade-tiny": "one NVIDIA H200 (torch 2.11.0+cu130, CUDA 13.0)"}


def machine(stem: str) -> str:
    return MACHINES.get(stem, CPU)


def pages():
    """(stem, markdown) of each benchmark result, in name order."""
    for md in sorted(RESULTS.glob("*.md")):
        yield md.stem, md.read_text(encoding="utf-8")


def on_files(files, config, **kwargs):
    for stem, text in pages():
        head = (f"!!! info \"Machine\"\n    Measured on {machine(stem)}. Written by the script it names; "
                f"the file is `benchmarks/results/{stem}.md`.\n\n")
        first, _, rest = text.partition("\n")
        body = f"{first}\n\n{head}{rest}" if first.startswith("# ") else head + text
        files.append(File.generated(config, f"results/bench/{stem}.md", content=body))
    for png in sorted((RESULTS / "screenshots").glob("*.png")):   # the pictures the task pages show
        files.append(File.generated(config, f"assets/{png.name}", abs_src_path=str(png)))
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/bench/{png.name}", abs_src_path=str(png)))
    return files


def api_identifiers():
    """``{name: dotted path of the object}`` for each name of ``retrieval.__all__``."""
    import retrieval

    out = {}
    for name in retrieval.__all__:
        obj = getattr(retrieval, name)
        out[name] = f"{obj.__module__}.{obj.__qualname__}"
    return out


def results_list() -> str:
    """One link per benchmark result, titled by its first heading: a new result is never left unlisted."""
    lines = []
    for stem, text in pages():
        first = text.partition("\n")[0]
        title = first[2:].strip() if first.startswith("# ") else stem
        lines.append(f"- [{stem}](bench/{stem}.md): {title}")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri == "results/index.md":
        return markdown.replace("<!-- results-list -->\n", results_list())
    if page.file.src_uri != "reference/api.md":
        return markdown
    missing = [ident for ident in api_identifiers().values() if f"::: {ident}\n" not in markdown + "\n"]
    if missing:
        markdown += "\n## Other names\n\n" + "".join(f"::: {ident}\n\n" for ident in missing)
    return markdown


ROLE = __import__("re").compile(r":(?:py:)?(?:meth|attr|class|func|mod|data|exc|obj|const):(?=<code>)")


def on_page_content(html, page, config, files, **kwargs):
    """Docstrings name objects with Sphinx roles (:meth:`refresh`); the reference shows the name alone."""
    if page.file.src_uri.startswith("reference/"):
        return ROLE.sub("", html)
    return html
