"""`retr serve --sharded` (#30): the Ray Serve router against one plain `retr serve`, a simulated
multi-node cluster with a node killed mid-run, and a projection to MS MARCO v2.

1. Router vs plain: SciFact (5,183 passages), BM25 k=10 with text, the 300 test queries cycled; one
   `retr serve --index` and one `retr serve --sharded --ray-address local` (2 shards, 1 replica each,
   on a Ray cluster the router starts on this machine), both up for the whole part; closed loops of
   C = 1, 8, 32 client threads (bench_serve.load), rounds alternating which server goes first. Same
   machine, same run: only the ratios are compared. Also: identical rankings on 50 queries, and the
   resident memory of the plain server, of the router and of each replica.
2. Multi-node: `ray.cluster_utils.Cluster` on this machine: a head (the Serve controller) and two worker
   nodes, each advertising one shard's resource ({"shard-000": 1} / {"shard-001": 1}), so each shard's
   replica runs on "its" node. A closed loop of 4 clients plus one allow_partial client search while the
   node of shard-001 is removed (its raylet and replica die), and, some seconds later, a node advertising
   shard-001 joins again (the node "restarts"): when the 503s start and end, what every answer was.
3. Projection to MS MARCO v2 (138,364,198 passages): from costs measured here (BM25 latency at several
   corpus sizes, faiss Flat's cost per vector, the index and store bytes per passage, a replica's
   resident memory, the router's overhead) to N nodes. A projection, with its assumptions written out.

    python benchmarks/bench_sharded_serve.py [--requests 600] [--skip-router] [--skip-nodes] [--skip-projection]

(section 1 alone: --skip-nodes --skip-projection; the other sections keep their stored results, the
projection re-projected with the new router overhead)
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import DATA, RESULTS, ROOT, WORK, machine, md_table, synthetic_corpus, write_results
from bench_serve import Proc, free_port, load, rss_kb, summary

PY = sys.executable
MSMARCO_V2 = 138_364_198
DENSE_V2 = 100_000_000   # the vectors the projection asks for: 100M x 384 fp32
DIM = 384
W = WORK / "sharded_serve"


def retr(*args):
    subprocess.run([PY, "-m", "cli.main", *map(str, args)], cwd=ROOT, check=True, capture_output=True)


def indexes():
    """SciFact as one folder and as a sharded index of 2 (built once by `retr index`)."""
    corpus = DATA / "scifact" / "corpus.jsonl"
    plain, sharded = W / "plain", W / "sharded"
    if not (plain / "manifest.json").exists():
        retr("index", "--corpus", corpus, "--index", plain, "--overwrite")
    if not (sharded / "shards.json").exists():
        retr("index", "--corpus", corpus, "--index", sharded, "--shards", 2, "--overwrite")
    return plain, sharded


def queries():
    qrels = {line.split("\t")[0] for line in (DATA / "scifact" / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    return [json.loads(l)["text"] for l in open(DATA / "scifact" / "queries.jsonl") if json.loads(l)["_id"] in qrels]


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None)


def ranking(port, q, k=10):
    status, body = post(port, "/v1/sf/search", {"query": q, "k": k, "retriever": "bm25", "text": False})
    return [(h["docid"], h["score"]) for h in body["hits"]] if status == 200 else status


def serve(args, log, env=None):
    port = free_port()
    p = Proc([PY, "-m", "cli.main", "serve", "--port", str(port), "--no-mcp", *map(str, args)],
             ("127.0.0.1", port, "/readyz", None), log, env=env)
    return p, port


def replica_rss():
    """Resident kB of each Serve replica process on this machine (Ray names them ray::ServeReplica:...)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode("utf-8", "replace")
        except OSError:
            continue
        if cmd.startswith("ray::ServeReplica:retr-"):
            out[cmd.split("\0")[0].split(":")[-1]] = rss_kb(int(pid))
    return out


# ------------------------------------------------------------------------------ part 1
def part_router(a, qs):
    plain, sharded = indexes()
    bodies = [json.dumps({"query": q, "k": 10, "retriever": "bm25"}).encode() for q in qs]
    p1, port1 = serve(["--index", f"sf={plain}"], W / "plain.log")
    p2, port2 = serve(["--sharded", f"sf={sharded}", "--ray-address", "local", "--replica-cpus", "0.5"],
                      W / "router.log")
    try:
        same = sum(ranking(port1, q) == ranking(port2, q) for q in qs[:50])
        for port in (port1, port2):  # warm both on every query once
            load(port, "/v1/sf/search", bodies, len(bodies), 4)
        runs = []
        for conc in (1, 8, 32):
            for rnd in range(a.rounds):
                order = [("plain", port1), ("router", port2)]
                for name, port in (order if rnd % 2 == 0 else order[::-1]):
                    n = a.requests if conc > 1 else a.requests // 2
                    s = summary(*load(port, "/v1/sf/search", bodies, n, conc), n)
                    s.update(server=name, concurrency=conc, round=rnd + 1, load_average=round(os.getloadavg()[0], 1))
                    runs.append(s)
                    print(json.dumps(s), flush=True)
        mem = {"plain_server_kB": rss_kb(p1.proc.pid), "router_kB": rss_kb(p2.proc.pid), "replicas_kB": replica_rss()}
    finally:
        p1.stop()
        p2.stop()
    return {"identical_rankings": same, "compared": 50, "runs": runs, "memory": mem}


# ------------------------------------------------------------------------------ part 2
def _timeline(port, qs, want, stop, out, partial=False, conc=4):
    lock = threading.Lock()

    def worker(j):
        i = j
        while not stop.is_set():
            q = qs[i % len(qs)]
            i += conc
            t = time.time()
            try:
                status, body = post(port, "/v1/sf/search", {"query": q, "k": 10, "retriever": "bm25", "text": False,
                                                             "allow_partial": partial})
            except OSError:
                status, body = -1, None
            ok = None
            if status == 200:
                got = [(h["docid"], h["score"]) for h in body["hits"]]
                ok = "partial" if body.get("partial") else got == want[q]
            msg = body["error"]["message"] if status not in (200, -1) and body else ""
            with lock:
                out.append((t, time.time() - t, status, ok, msg[:120]))

    threads = [threading.Thread(target=worker, args=(j,)) for j in range(conc)]
    for t in threads:
        t.start()
    return threads


def part_nodes(a, qs):
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # as bench_scale: nodes and drivers in token mode
    import ray
    from ray.cluster_utils import Cluster

    _plain, sharded = indexes()
    cl = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {f: cl.add_node(num_cpus=1, resources={f: 1}) for f in ("shard-000", "shard-001")}
    cl.wait_for_nodes()
    res = {}
    router = None
    try:
        router, port = serve(["--sharded", f"sf={sharded}", "--ray-address", cl.address, "--replica-cpus", "0.5"],
                             W / "router-nodes.log")
        ray.init(address=cl.address, log_to_driver=False, logging_level="WARNING")
        from ray._private import state  # the GCS's actor table (the state API needs the dashboard)

        node_of = {n.node_id: f for f, n in nodes.items()}
        node_of[cl.head_node.node_id] = "head"
        res["placement"] = {x["Name"]: node_of.get(x["Address"]["NodeID"], x["Address"]["NodeID"][:8])
                            for x in state.actors().values()
                            if x.get("State") == "ALIVE" and x.get("Name", "").startswith("SERVE_REPLICA::")}
        sub = qs[:40]
        want = {q: ranking(port, q) for q in sub}
        stop, out, pout = threading.Event(), [], []
        threads = _timeline(port, sub, want, stop, out) + _timeline(port, sub, want, stop, pout, partial=True, conc=1)
        time.sleep(a.before)
        t_kill = time.time()
        cl.remove_node(nodes["shard-001"])
        time.sleep(a.down)
        t_back = time.time()
        cl.add_node(num_cpus=1, resources={"shard-001": 1})
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.5)
            recent = [r for r in out if r[0] > time.time() - 3]
            if recent and all(r[2] == 200 for r in recent) and any(r[0] > t_back for r in out if r[2] == 200):
                break
        time.sleep(a.after)
        stop.set()
        for t in threads:
            t.join()
        res.update(_nodes_report(out, pout, t_kill, t_back))
    finally:
        if router is not None:
            router.stop()
        try:
            ray.shutdown()
        finally:
            cl.shutdown()
    return res


def _nodes_report(out, pout, t_kill, t_back):
    rel = lambda t: round(t - t_kill, 2)  # noqa: E731
    s503 = [r for r in out if r[2] == 503]
    ok_after_back = [r for r in out if r[2] == 200 and r[0] > t_back]
    wrong = [r for r in out if r[2] == 200 and r[3] is not True]
    before = [r for r in out if r[0] < t_kill]
    return {"node_removed_at_s": 0.0, "node_back_at_s": rel(t_back),
            "requests": len(out), "answered_200_before": sum(r[2] == 200 for r in before),
            "first_503_s": rel(min(r[0] for r in s503)) if s503 else None,
            "last_503_s": rel(max(r[0] for r in s503)) if s503 else None, "count_503": len(s503),
            "other_statuses": sorted({r[2] for r in out} - {200, 503}),
            "first_200_after_back_s": rel(min(r[0] for r in ok_after_back)) if ok_after_back else None,
            "wrong_or_partial_200": len(wrong),
            "slowest_s": round(max((r[1] for r in out), default=0), 2),
            "messages_503": sorted({r[4] for r in s503})[:2],
            "partial_client": {"requests": len(pout), "full": sum(r[3] is True for r in pout),
                               "partial": sum(r[3] == "partial" for r in pout),
                               "first_partial_s": rel(min((r[0] for r in pout if r[3] == "partial"), default=t_kill)),
                               "errors": sum(r[2] != 200 for r in pout), "wrong": sum(r[3] is False for r in pout)}}


# ------------------------------------------------------------------------------ part 3
SCALING = r"""
import json, sys, time, random
import numpy as np
sys.path.insert(0, sys.argv[1])
import retrieval
qs = json.loads(sys.argv[2]); out = {"bm25": []}
for path in sys.argv[3:]:
    idx = retrieval.open_index(path)
    for q in qs[:20]: idx.search(q, k=10, retriever="bm25", text=False)
    t = time.perf_counter()
    for q in qs: idx.search(q, k=10, retriever="bm25", text=False)
    out["bm25"].append({"docs": len(idx), "ms": (time.perf_counter() - t) / len(qs) * 1000})
import faiss
faiss.omp_set_num_threads(1)
xb = np.random.default_rng(0).standard_normal((200_000, 384), dtype=np.float32)
ix = faiss.IndexFlatIP(384); ix.add(xb)
xq = xb[:50] + 0.01
ix.search(xq[:5], 10)
t = time.perf_counter()
for i in range(50): ix.search(xq[i:i + 1], 10)
out["flat_ns_per_vector"] = (time.perf_counter() - t) / 50 / 200_000 * 1e9
print(json.dumps(out))
"""


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def part_projection(a, qs, router_part):
    sizes = [int(x) for x in a.sizes.split(",")]
    folders = []
    for n in sizes:
        f = W / f"syn-{n}"
        if not (f / "manifest.json").exists():
            retr("index", "--corpus", synthetic_corpus(n, W / f"syn-{n}.jsonl"), "--index", f, "--overwrite")
        folders.append(f)
    p = subprocess.run([PY, "-c", SCALING, str(ROOT), json.dumps(qs[:200]), *map(str, folders)], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    m = json.loads(p.stdout.strip().splitlines()[-1])
    big = folders[-1]
    m["bm25_bytes_per_passage"] = _du(big / "bm25") / sizes[-1]
    m["store_bytes_per_passage"] = sum(f.stat().st_size for f in big.glob("docs*.sqlite*")) / sizes[-1]
    m["passage_chars"] = sum(len(json.loads(l)["text"]) for l in open(W / f"syn-{sizes[-1]}.jsonl")) / sizes[-1]
    reps = (router_part or {}).get("memory", {}).get("replicas_kB", {})
    m["replica_rss_MB"] = round(max(reps.values()) / 1024, 1) if reps else None
    return m


def project(m, router_part, nodes=(4, 8, 16, 32)):
    """Per node memory and per query latency on N nodes (one shard each), from the measured costs."""
    import numpy as np

    xs = np.array([r["docs"] for r in m["bm25"]], float)
    ys = np.array([r["ms"] for r in m["bm25"]], float)
    slope, icept = np.polyfit(xs, ys, 1)
    over = None
    if router_part:
        p50 = {(r["server"], r["concurrency"]): [] for r in router_part["runs"]}
        for r in router_part["runs"]:
            p50[(r["server"], r["concurrency"])].append(r["p50_ms"])
        over = float(np.mean(p50[("router", 1)]) - np.mean(p50[("plain", 1)]))
    # MS MARCO v2 passages average ~ 70 words (~ 400 characters); the synthetic passages here are longer,
    # so index and store bytes are scaled by the ratio of characters
    scale = 400 / m["passage_chars"]
    rows = []
    for n in nodes:
        docs = MSMARCO_V2 / n
        vec_gb = DENSE_V2 / n * DIM * 4 / 1e9
        bm25_gb = m["bm25_bytes_per_passage"] * scale * docs / 1e9
        store_gb = m["store_bytes_per_passage"] * scale * docs / 1e9
        rows.append({"nodes": n, "passages_per_shard_M": round(docs / 1e6, 1), "dense_flat_GB": round(vec_gb, 1),
                     "bm25_index_GB": round(bm25_gb, 1), "doc_store_GB": round(store_gb, 1),
                     "ram_per_node_GB": round(vec_gb + (m["replica_rss_MB"] or 0) / 1024, 1),
                     "bm25_ms": round(icept + slope * docs, 1),
                     "dense_flat_ms": round(m["flat_ns_per_vector"] * DENSE_V2 / n / 1e6, 1),
                     "router_ms": round(over, 1) if over is not None else None})
    return {"bm25_fit_ms": [round(float(icept), 4), float(slope)], "text_scale": round(scale, 3), "rows": rows}


# ------------------------------------------------------------------------------ report
def report(res) -> str:
    out = ["# `retr serve --sharded`: Ray Serve router, node failure, projection (#30)", "",
           f"Machine: {res['machine']['cpus']} CPUs, {res['machine']['platform']}; {res['machine']['date']}. "
           "Everything below ran in one run of `benchmarks/bench_sharded_serve.py`; the sharded index's own "
           "benchmark (in-process, `bench_sharded.py`) writes `sharded.md`, so this one writes `sharded_serve.md`.", ""]
    if res.get("kept"):
        out[-2] = out[-2].replace("Everything below ran in one run", "Each section ran in one run")
        out += [f"Not run again this time: section {', '.join(res['kept']['sections'])} (from the run of "
                f"{res['kept']['from']}).", ""]
    r = res.get("router")
    if r:
        out += ["## 1. Router against one plain `retr serve`", "",
                "SciFact (5,183 passages), BM25, k=10 with text, the 300 test queries cycled. `retr serve --index` "
                "(one folder, one process) against `retr serve --sharded --ray-address local` (2 shards, 1 replica "
                "each, 0.5 CPU reserved each, on a Ray cluster started on this machine by the router), both up "
                f"throughout, rounds alternating which goes first. Identical rankings (docids and scores, k=10): "
                f"{r['identical_rankings']}/{r['compared']} queries.", ""]
        rows, by = [], {}
        for x in r["runs"]:
            by.setdefault((x["concurrency"], x["server"]), []).append(x)
        for c in (1, 8, 32):
            pl, ro = by.get((c, "plain"), []), by.get((c, "router"), [])
            if not pl or not ro:
                continue
            mean = lambda xs, k: sum(x[k] for x in xs) / len(xs)  # noqa: E731
            rows.append([c, round(mean(pl, "rps"), 1), round(mean(ro, "rps"), 1), round(mean(ro, "rps") / mean(pl, "rps"), 2),
                         round(mean(pl, "p50_ms"), 2), round(mean(ro, "p50_ms"), 2),
                         round(mean(pl, "p99_ms"), 1), round(mean(ro, "p99_ms"), 1),
                         sum(x["errors"] + x["rejected_429"] for x in ro)])
        out += [md_table(["clients", "plain req/s", "router req/s", "router/plain", "plain p50 ms", "router p50 ms",
                          "plain p99 ms", "router p99 ms", "router errors"], rows), ""]
        mem = r["memory"]
        out += [f"Resident memory after the runs: plain server {mem['plain_server_kB'] / 1024:.0f} MB (Python, the "
                f"JVM and the whole index in one process); router {mem['router_kB'] / 1024:.0f} MB (Python, Ray's "
                f"core worker, no JVM); replicas " + ", ".join(f"{k} {v / 1024:.0f} MB" for k, v in
                                                                sorted(mem['replicas_kB'].items())) + ".", ""]
    n = res.get("nodes")
    if n:
        pc = n["partial_client"]
        out += ["## 2. Simulated multi-node cluster, a node killed mid-run", "",
                "`ray.cluster_utils.Cluster` on this machine: head (1 CPU, the Serve controller) and two worker "
                "nodes of 1 CPU advertising `shard-000` and `shard-001`; replicas placed: "
                + ", ".join(f"{k.split('#')[1]} on {v}" for k, v in sorted(n["placement"].items())) +
                ". Four clients search (k=10, no text) in a closed loop, one more with `allow_partial`; at t=0 the "
                f"node of shard-001 is removed (its raylet and replica die), at t={n['node_back_at_s']} s a node "
                "advertising shard-001 joins (the node restarted).", "",
                md_table(["what", "value"], [
                    ["requests (4 clients)", n["requests"]], ["first 503 after the kill", f"{n['first_503_s']} s"],
                    ["last 503", f"{n['last_503_s']} s"], ["503 answers", n["count_503"]],
                    ["first 200 after the node is back", f"{n['first_200_after_back_s']} s"],
                    ["other statuses", n["other_statuses"] or "none"],
                    ["200 answers not equal to the full result", n["wrong_or_partial_200"]],
                    ["slowest answer", f"{n['slowest_s']} s"],
                    ["allow_partial client: full / partial / errors / wrong",
                     f"{pc['full']} / {pc['partial']} / {pc['errors']} / {pc['wrong']}"]]), "",
                f"The 503s name the shard: \"{(n['messages_503'] or [''])[0]}\".", ""]
    p = res.get("projection")
    if p:
        m = p["measured"]
        out += ["## 3. Projection to MS MARCO v2 on N nodes (a projection, not a measurement)", "",
                "Measured here: BM25 k=10 latency of one folder (in-process, one thread) at "
                + ", ".join(f"{x['docs']:,} passages {x['ms']:.2f} ms" for x in m["bm25"]) +
                f"; faiss IndexFlatIP (384 dims, one thread) {m['flat_ns_per_vector']:.2f} ns per vector per query; "
                f"the BM25 index {m['bm25_bytes_per_passage']:.0f} and the document store "
                f"{m['store_bytes_per_passage']:.0f} bytes per passage (synthetic passages of "
                f"{m['passage_chars']:.0f} characters); a replica's resident memory {m['replica_rss_MB']} MB.", "",
                "Assumptions: one shard per node, 138,364,198 passages hashed evenly; dense Flat over 100M x 384 "
                "fp32 vectors (the issue's figure; every passage encoded would be 212 GB); BM25 latency linear in "
                "passages per shard (fit " f"{p['bm25_fit_ms'][0]:.3f} ms + {p['bm25_fit_ms'][1] * 1e6:.3f} ms per "
                "million; real postings grow more slowly than the corpus, so this overstates); index and store bytes "
                f"scaled to 400-character passages (x{p['text_scale']}); faiss Flat on one core at the measured cost "
                "(more cores or IVF/HNSW change this by orders of magnitude); the router's overhead as measured at one "
                "client (two rounds on loopback) plus the network between nodes, not included. A query waits for the "
                "slowest shard; RAM per node is the vectors plus one replica (the BM25 index and store are read "
                "through the page cache).", "",
                md_table(["nodes", "passages/shard (M)", "dense Flat GB", "BM25 index GB", "doc store GB",
                          "RAM per node GB", "BM25 ms", "dense Flat ms", "router overhead ms"],
                         [[x["nodes"], x["passages_per_shard_M"], x["dense_flat_GB"], x["bm25_index_GB"],
                           x["doc_store_GB"], x["ram_per_node_GB"], x["bm25_ms"], x["dense_flat_ms"], x["router_ms"]]
                          for x in p["rows"]]), ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", type=float, default=5.0, help="seconds of load before the node is removed")
    ap.add_argument("--down", type=float, default=8.0, help="seconds before the node comes back")
    ap.add_argument("--after", type=float, default=4.0)
    ap.add_argument("--sizes", default="5000,20000,60000")
    ap.add_argument("--skip-router", action="store_true")
    ap.add_argument("--skip-nodes", action="store_true")
    ap.add_argument("--skip-projection", action="store_true")
    a = ap.parse_args()
    W.mkdir(parents=True, exist_ok=True)
    prev = json.loads((RESULTS / "sharded_serve.json").read_text()) if (RESULTS / "sharded_serve.json").exists() else {}
    qs = queries()
    res = {"machine": machine()}
    res["router"] = prev.get("router") if a.skip_router else part_router(a, qs)
    res["nodes"] = prev.get("nodes") if a.skip_nodes else part_nodes(a, qs)
    kept = [x for x, skip in (("1", a.skip_router), ("2", a.skip_nodes), ("3's measurements", a.skip_projection))
            if skip]
    if kept:
        res["kept"] = {"sections": kept, "from": prev.get("kept", {}).get("from") or prev.get("machine", {}).get("date")}
    if a.skip_projection:  # the stored measurements, projected again with this run's router overhead
        old = prev.get("projection")
        res["projection"] = dict(project(old["measured"], res["router"]), measured=old["measured"]) if old else None
    else:
        m = part_projection(a, qs, res["router"])
        res["projection"] = dict(project(m, res["router"]), measured=m)
    write_results("sharded_serve", res, report(res))


if __name__ == "__main__":
    main()
