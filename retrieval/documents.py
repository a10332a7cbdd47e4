"""A folder of documents as a corpus: .txt, .md, .html/.htm and .pdf files, read by well-kept
parsers (UTF-8 text as it is; HTML through Beautiful Soup with Python's own ``html.parser``,
the text of the page without scripts and styles; PDF through pypdf's text extraction, page by page).

- **Which files:** every file under the folder with one of those suffixes (case-insensitive),
  walked in sorted order, less hidden files and folders (a name starting with ``.``) and symbolic
  links that lead outside the folder. ``include`` globs narrow that; ``exclude`` globs remove from it.
  A glob is matched (:func:`fnmatch.fnmatch`, case-sensitive) against the path relative to the
  folder in POSIX form, where ``*`` also crosses ``/``: ``*.md`` is every Markdown file, ``drafts/*``
  everything under ``drafts``.
- **Ids:** a file's document id is that relative path, with whitespace and ``%`` written as ``%XX``
  (UTF-8 bytes, as in URLs), since a TREC run cannot hold an id with a space: ``my notes/a.md`` is
  ``my%20notes/a.md``. The same file keeps the same id from build to build (what a sync needs).
- **Metadata:** ``path`` (relative, as it is), ``title``, ``modified`` (the file's modification time,
  ISO 8601 UTC), ``size`` (bytes) and ``sha256`` (of the file's bytes: a changed file is a changed
  hash). The title is a Markdown file's first heading, an HTML page's ``<title>``, a PDF's metadata
  title, else the file name.
- **Problems:** a file that cannot be read (a broken PDF, a text file that is not UTF-8, a file with
  no text, a PDF that is encrypted) is one :class:`DocumentWarning` naming its path, and the rest
  is read. The caller (``retrieval.collections.read_corpus``) fails when no file could be read.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from indexes.errors import InputError

SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")
_MD_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_SETEXT = re.compile(r"^(\S.*)\n {0,3}(=+|-+)[ \t]*$", re.M)


class DocumentWarning(UserWarning):
    """A file of a document folder that could not be read (its path and why); it was left out."""


def is_document_file(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES


def document_id(rel: str) -> str:
    """The document id of a file at ``rel`` (POSIX, relative): whitespace and ``%`` as ``%XX``."""
    return "".join("".join(f"%{b:02X}" for b in c.encode("utf-8")) if c.isspace() or c == "%" else c
                   for c in rel)


def _check_globs(globs: Optional[Sequence[str]], what: str) -> List[str]:
    if globs is None:
        return []
    if isinstance(globs, str):
        globs = [globs]
    out = []
    for g in globs:
        if not isinstance(g, str) or not g.strip():
            raise InputError(f"{what} globs must be non-empty strings, got {g!r}")
        g = g.strip()
        out.append(g[2:] if g.startswith("./") else g)
    return out


def files(root: Path, include: Optional[Sequence[str]] = None,
          exclude: Optional[Sequence[str]] = None) -> List[Tuple[Path, str]]:
    """(path, relative POSIX path) of the folder's document files, sorted, as the module says."""
    inc, exc = _check_globs(include, "include"), _check_globs(exclude, "exclude")
    root = Path(root)
    real_root = root.resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or not is_document_file(Path(name)):
                continue
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if inc and not any(fnmatch.fnmatchcase(rel, g) for g in inc):
                continue
            if any(fnmatch.fnmatchcase(rel, g) for g in exc):
                continue
            if p.is_symlink():
                try:
                    p.resolve().relative_to(real_root)
                except (ValueError, OSError):
                    continue  # a link out of the folder: not part of it
            out.append((p, rel))
    return out


def _warn(path: Path, why: str) -> None:
    warnings.warn(f"{path}: {why}; left out", DocumentWarning, stacklevel=3)


def _markdown_title(text: str) -> Optional[str]:
    """The first ATX (``# Title``) or setext (``Title`` over ``===``) heading, outside code fences."""
    fenced, lines = False, []
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    plain = "\n".join(lines)
    found = [m for m in (_MD_HEADING.search(plain), _SETEXT.search(plain)) if m]
    if not found:
        return None
    first = min(found, key=lambda m: m.start())
    title = first.group(1).strip()
    return title or None


def _read_text(data: bytes) -> Tuple[Optional[str], str]:
    text = data.decode("utf-8")  # UnicodeDecodeError: the caller warns
    return None, text[1:] if text.startswith("\ufeff") else text


def _read_html(data: bytes) -> Tuple[Optional[str], str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    body = soup.get_text("\n")
    text = "\n".join(line.strip() for line in body.splitlines())
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return title or None, text


def _read_pdf(path: Path) -> Tuple[Optional[str], str]:
    import logging

    from pypdf import PdfReader

    # pypdf logs what it repairs ("EOF marker not found") on its logger; a file it cannot read
    # becomes our one warning line instead, not a log line besides
    log = logging.getLogger("pypdf")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return _pdf_text(PdfReader(path))
    finally:
        log.setLevel(level)


def _pdf_text(reader) -> Tuple[Optional[str], str]:
    if reader.is_encrypted:
        raise ValueError("the PDF is encrypted")
    title = None
    try:
        meta = reader.metadata
        title = meta.title if meta is not None else None
    except Exception:  # a broken Info dictionary: the text may still be there
        title = None
    pages = [(page.extract_text() or "").strip() for page in reader.pages]
    return (str(title).strip() or None) if title else None, "\n\n".join(p for p in pages if p)


def read_file(path: Path, rel: str) -> Optional[Tuple[str, str, Dict[str, object]]]:
    """(title, text, metadata) of one document file, or None after a :class:`DocumentWarning`."""
    suffix = path.suffix.lower()
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError as e:
        _warn(path, f"cannot read ({e.strerror or e})")
        return None
    try:
        if suffix == ".pdf":
            title, text = _read_pdf(path)
        elif suffix in (".html", ".htm"):
            title, text = _read_html(data)
        else:
            title, text = _read_text(data)
            if suffix in (".md", ".markdown"):
                title = _markdown_title(text)
    except UnicodeDecodeError as e:
        _warn(path, f"not UTF-8 text (invalid byte at offset {e.start})")
        return None
    except RecursionError:
        _warn(path, "cannot parse (nested too deeply)")
        return None
    except Exception as e:  # pypdf raises many kinds on a damaged file; any of them: left out
        what = "PDF" if suffix == ".pdf" else "file"
        _warn(path, f"cannot read the {what} ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})")
        return None
    text = text.replace("\x00", "")
    if not text.strip():
        _warn(path, "has no text" + (" (a scanned PDF has only images)" if suffix == ".pdf" else ""))
        return None
    title = " ".join((title or "").split()) or path.name
    meta = {"path": rel, "title": title,
            "modified": datetime.fromtimestamp(st.st_mtime, timezone.utc).isoformat(timespec="seconds"),
            "size": int(st.st_size), "sha256": hashlib.sha256(data).hexdigest()}
    return title, text, meta


def records(root: Path, include=None, exclude=None,
            single: Optional[Path] = None) -> Iterator[Tuple[int, str, str, str, Dict[str, object]]]:
    """(file number, docid, title, text, metadata) of each readable file (the form of
    ``collections``' records); ``single``: that one file alone (its id is its name)."""
    listed = [(single, single.name)] if single is not None else files(root, include, exclude)
    for n, (path, rel) in enumerate(listed, 1):
        got = read_file(path, rel)
        if got is not None:
            title, text, meta = got
            yield n, document_id(rel), title, text, meta
