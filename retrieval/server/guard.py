"""What the server's transports share: ``/v1``, ``/mcp`` and ``retr mcp`` on stdio.

- :func:`clean_message`: error messages without server paths.
"""
from __future__ import annotations

import re
from pathlib import Path


# A path token: path characters (word characters, . + ~ -) and at least one '/', bounded by
# characters that cannot be part of a path (spaces, quotes, ':', ',', brackets, ...).
_PCH = r"[\w.+~-]"
_PATH_TOKEN = re.compile(rf"(?<![\w.+~/-]){_PCH}*/[\w.+~/-]*")


def clean_message(message: str, served) -> str:
    """``message`` without server paths: a path token that is, or lies under, a served index
    folder (as given or resolved) becomes that index's name (``NAME/manifest.json``); any other
    absolute path its last part. Only whole path tokens change, never parts of words: with
    ``--index mt=meta``, "filter on 'meta'" stays as it is. ``served``: Served objects."""
    forms = []
    for s in served:
        for p in {str(s.path), str(Path(s.path).absolute()), str(Path(s.path).resolve())}:
            p = p.rstrip("/")
            if p and p != ".":
                forms.append((p, s.name))
    forms.sort(key=lambda f: -len(f[0]))

    def one(m: "re.Match") -> str:
        tok = m.group(0)
        for p, name in forms:
            if tok == p or tok.startswith(p + "/"):
                return name + tok[len(p):]
        if tok.startswith("/") and tok.rstrip("/").count("/") > 1:
            return Path(tok).name
        return tok

    return _PATH_TOKEN.sub(one, message)
