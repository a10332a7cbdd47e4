"""What a search asks for: the default pipeline of a folder, and (below) one search request.

:func:`default_pipeline` is the one place that decides what a search that names no retriever
runs: the folder's tuned pipeline (``retr tune``) when it has one, else the untuned fusion of
every sub-index it holds (BM25 first), else its only sub-index. Every entry point (the CLI,
``Index.search``, a sharded folder, HTTP, MCP, the client and the integrations) leaves the
retriever unset and gets this answer through ``Index.pipeline(None)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from retrieval.kinds import PRIMARY

DEFAULT_K = 10     # hits for one query when the caller names no k
RUN_K = 1000       # hits per query of a run (retr search --queries, a PyTerrier retriever)

TUNED, UNTUNED, ONLY = "tuned", "untuned fusion", "only sub-index"


@dataclass(frozen=True)
class DefaultPipeline:
    """The pipeline a folder answers with when a search names none: ``spec`` (a retriever spec,
    its fusion left to the folder: the tuned one or the untuned default) and ``source``, why it is
    the default (``"tuned"``, ``"untuned fusion"`` or ``"only sub-index"``)."""

    spec: str
    source: str

    def __str__(self) -> str:
        return f"{self.spec} ({self.source})"

    def to_dict(self) -> dict:
        return {"spec": self.spec, "source": self.source}


def default_pipeline(subindexes: Mapping[str, Mapping], pipelines: Mapping[str, Mapping]) -> DefaultPipeline:
    """The default pipeline of a folder whose manifest holds ``subindexes`` ({name: entry}) and
    ``pipelines`` ({base: tuning report}, ``retr tune``'s).

    A tuned pipeline wins: the one over every sub-index if tuned, else the tuned one with the most
    members (the first tuned among equals). Otherwise every searchable sub-index (an alias such as
    ``deepct-query`` shares its target's postings and is left out) fused, BM25 first and the rest in
    the manifest's order, with the folder's untuned fusion; one sub-index alone is searched alone."""
    names = [n for n, e in subindexes.items() if not (e or {}).get("alias_of")]
    names = sorted(names, key=lambda n: n != PRIMARY)  # stable: BM25 first, the others as built
    if not names:
        return DefaultPipeline(PRIMARY, ONLY)
    have = set(names)
    tuned = [b for b in pipelines if len(b.split("+")) > 1 and set(b.split("+")) <= have]
    everything = "+".join(names)
    if tuned:
        mine = [b for b in tuned if set(b.split("+")) == have]
        best = mine[0] if mine else max(tuned, key=lambda b: len(b.split("+")))
        return DefaultPipeline(best, TUNED)
    if len(names) == 1:
        return DefaultPipeline(names[0], ONLY)
    return DefaultPipeline(everything, UNTUNED)
