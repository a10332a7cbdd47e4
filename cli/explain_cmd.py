"""`retr explain`: why a document got its score and rank for a query (``Index.explain``), as a
table per member retriever, the fusion's arithmetic and the fused score, or as JSON."""
from __future__ import annotations

import json
from pathlib import Path

import click

from cli import params


@click.command("explain", cls=params.SectionedCommand)
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--query", required=True, help="Query text.")
@click.option("--docid", required=True, help="The document to explain.")
@click.option("--retriever", default=None,
              help="A sub-index or a fused pipeline, as `retr search --retriever` takes it [default: the index's "
                   "default pipeline, as retr search's].")
@click.option("--fusion", default=None, help="Fusion for a+b retrievers, as `retr search --fusion` takes it.")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help="Candidates per retriever: the list the document's rank is looked up in [default: 100].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: docid, score, rank, retrievers, fusion.")
@params.kind_options("search")
def explain_cmd(index_dir, query, docid, retriever, fusion, depth, as_json, **kind_values):
    """Explain how --docid got its score and rank for --query: each member retriever's score and
    rank and its parts (BM25's terms through Lucene's own explanation, impacts, a vector's inner
    product), then the fusion's arithmetic and the fused score."""
    from retrieval.sharded.index import open_index  # a folder or a sharded index

    idx = open_index(index_dir)
    spec, extra = params.configured_pipeline(idx, retriever, fusion, kind_values)
    with params.flags(dict(params.kind_flags(), retriever="--retriever", fusion="--fusion")):
        out = idx.explain(query, docid, retriever=spec, depth=depth, **extra)
    if as_json:
        click.echo(json.dumps(out, ensure_ascii=False))
        return
    for line in render(out):
        click.echo(line)


# -------------------------------------------------------------------- the text
def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e9):
        return str(int(v))
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.1e}"
    return f"{v:.4f}"


def _cell(key: str, v) -> str:
    if key == "share" and isinstance(v, (int, float)):
        return f"{100 * v:.1f}%"
    return _num(v)


def render(out: dict):
    """The lines `retr explain` prints: a table per member retriever, the fusion, the fused score."""
    depth = out["depth"]
    for name, m in out["retrievers"].items():
        yield from _member_lines(name, m)
    if out["fusion"] is not None:
        yield from _fusion_lines(out["fusion"])
        tail = (f"fused score {_num(out['score'])} at rank {out['rank']} (of {out['fusion'].get('of')} documents "
                f"the fusion ranks)" if out["rank"] is not None else
                f"no fused score: no member's top {depth} holds {out['docid']}")
    else:
        tail = (f"score {_num(out['score'])} at rank {out['rank']}" if out["rank"] is not None else
                f"score {_num(out['score'])}, not in the top {depth} (--depth)")
    for note in out.get("notes", []):
        yield f"note: {note}"
    yield tail


def _member_lines(name: str, m: dict):
    where = f"rank {m['rank']} of {m['list_length']}" if m["rank"] is not None else \
        f"not in its top {m['list_length']}"
    yield f"{name} ({m['kind']}): score {_num(m['score'])}, {where}"
    if m["formula"]:
        yield f"  {m['formula']}"
    cols = [tuple(c) for c in m["columns"]]
    rows = [[p["label"], _num(p["value"])] + [_cell(k, p.get(k)) if k in p else "" for k, _h in cols]
            for p in m["parts"]]
    if rows:
        head = ["term / part", "score"] + [h for _k, h in cols]
        rows.append(["= the parts added up", _num(m["explained"])] + [""] * len(cols))
        widths = [min(max(len(r[i]) for r in rows + [head]), 40 if i == 0 else 99) for i in range(len(head))]
        for r in [head] + rows:
            first = r[0] if len(r[0]) <= widths[0] else r[0][:widths[0] - 1] + "…"
            line = "  ".join([first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
            yield ("  " + line).rstrip()
    for note in m["notes"]:
        yield f"  note: {note}"


def _fusion_lines(f: dict):
    yield f"fusion {f['spec']}:"
    width = max(len(n) for n in f["lists"])
    for name, e in f["lists"].items():
        at = f"rank {e['rank']}, raw {_num(e['raw'])}" if e["rank"] is not None else \
            f"not in its top {e['length']}"
        weight = _num(e["weight"])
        if e.get("confidence_weight") is not None:
            scale, value = e["confidence"]
            weight += f" (static {_num(e['static_weight'])} x confidence weight {_num(e['confidence_weight'])}, " \
                      f"{scale} {_num(value)})"
        if f["method"] == "rrf":
            how = (f"1 / ({f['k']} + {e['rank']}) = {_num(e['rrf'])} x weight {weight} = {_num(e['contribution'])}"
                   if e["rank"] is not None else "adds nothing")
        else:
            norm = ", ".join(f"{k} {_num(v)}" for k, v in e["norm"].items())
            value = (f"{f['norm']} ({norm}) {_num(e['normalised'])}" if e["rank"] is not None else
                     f"the list's lowest normalised score {_num(e['floor'])}")
            how = f"{value} x weight {weight} = {_num(e['contribution'])}"
        yield f"  {name.ljust(width)}  {at}: {how}"
    total = f"  sum {_num(f['sum'])}"
    if f["method"] == "combmnz":
        total += f" x {f['multiplier']} list(s) that returned it = {_num(f['score'])}"
    yield total
    if f.get("confidence") and not f["confidence"]["weighted"]:
        yield "  (a list has no confidence for this query: fused unweighted)"
