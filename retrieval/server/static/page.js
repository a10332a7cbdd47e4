// retr's search page: plain DOM, no dependencies, no build step. Every text from the server goes
// into the page as a text node (textContent), never as HTML, so a passage cannot inject markup.
// The bearer token lives in this tab's sessionStorage and travels only in the Authorization header.
"use strict";
(function () {
  const KEY = "retr.token";
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  let indexes = [];      // GET /v1/indexes
  let last = null;       // the search whose hits are shown: {index, query, retriever, k, filter}
  let lastHit = null;    // the hit whose explanation is open (focus returns to it)
  let seq = 0;

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function token() { return sessionStorage.getItem(KEY) || ""; }

  async function api(method, path, body) {
    let resp;
    try {
      resp = await fetch(path, {
        method, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
        headers: Object.assign({ "Authorization": "Bearer " + token() },
                               body === undefined ? {} : { "Content-Type": "application/json" }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      throw new ApiError(0, "cannot reach the server (" + e.message + ")");
    }
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      const msg = data && data.error && data.error.message ? data.error.message : (text || resp.statusText);
      throw new ApiError(resp.status, msg);
    }
    if (data === null) throw new ApiError(resp.status, "the server's answer is not JSON");
    return data;
  }

  function status(text, error) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("error", !!error);
  }

  function errorText(e) {
    return e instanceof ApiError && e.status ? "Error " + e.status + ": " + e.message : "Error: " + e.message;
  }

  // ------------------------------------------------------------------ token and indexes
  function askToken(message) {
    $("token-form").hidden = false;
    $("search-form").hidden = true;
    $("forget").hidden = true;
    if (message) status(message, true);
    $("token").focus();
  }

  async function start() {
    if (!token()) return askToken();
    try {
      indexes = (await api("GET", "/v1/indexes")).indexes;
    } catch (e) {
      if (e.status === 401) sessionStorage.removeItem(KEY);
      return askToken(errorText(e));
    }
    $("token-form").hidden = true;
    $("search-form").hidden = false;
    $("forget").hidden = false;
    const sel = $("index");
    sel.replaceChildren(...indexes.map((ix) => { const o = el("option", null, ix.name); o.value = ix.name; return o; }));
    $("index-label").hidden = indexes.length < 2;
    $("who").textContent = indexes.length === 1
      ? indexes[0].name + " · " + indexes[0].documents.toLocaleString() + " documents"
      : indexes.length + " indexes";
    fillRetrievers();
    status("");
    $("query").focus();
  }

  function fillRetrievers() {
    const ix = indexes.find((x) => x.name === $("index").value) || indexes[0];
    if (!ix) return;
    const names = Object.keys(ix.retrievers);
    const specs = [...names];
    for (let i = 0; i < names.length; i++)
      for (let j = i + 1; j < names.length; j++) specs.push(names[i] + "+" + names[j]);
    for (const p of Object.keys(ix.pipelines || {})) if (!specs.includes(p)) specs.push(p);
    const sel = $("retriever");
    const was = sel.value;
    sel.replaceChildren(...specs.map((s) => { const o = el("option", null, s); o.value = s; return o; }));
    if (specs.includes(was)) sel.value = was;
  }

  // ------------------------------------------------------------------ filter
  function addCondition() {
    const row = $("condition-tpl").content.firstElementChild.cloneNode(true);
    row.querySelector(".remove").addEventListener("click", () => { row.remove(); $("add-condition").focus(); });
    $("conditions").append(row);
    row.querySelector(".field").focus();
  }

  function parseValue(v) {
    const t = v.trim();
    if (/^-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(t)) return Number(t);
    if (t === "true") return true;
    if (t === "false") return false;
    return t;
  }

  function readFilter() {
    const f = {};
    for (const row of $("conditions").children) {
      const field = row.querySelector(".field").value.trim();
      if (!field) continue;
      const op = row.querySelector(".op").value;
      const raw = row.querySelector(".value").value;
      if (op === "eq") f[field] = parseValue(raw);
      else if (op === "in") f[field] = { in: raw.split(",").filter((x) => x.trim()).map(parseValue) };
      else {
        const cur = f[field] && typeof f[field] === "object" && !Array.isArray(f[field]) ? f[field] : {};
        cur[op] = parseValue(raw);
        f[field] = cur;
      }
    }
    return Object.keys(f).length ? f : null;
  }

  // ------------------------------------------------------------------ search
  async function search(ev) {
    ev.preventDefault();
    const t0 = performance.now();
    const mine = ++seq;
    const body = {
      query: $("query").value, k: Number($("k").value) || 10, retriever: $("retriever").value,
      text: true, highlight: true, ranks: true,
    };
    const fusion = $("fusion").value.trim();
    if (fusion) body.fusion = fusion;
    let filter;
    try { filter = readFilter(); } catch (e) { return status(errorText(e), true); }
    if (filter) body.filter = filter;
    const index = $("index").value;
    // "Searching…" only once a search has taken a noticeable time: changing the page before the fetch makes
    // Chromium lay out and paint while the answer is on its way, which cost ~5 ms a search here
    // (benchmarks/bench_page.py). A second submit needs no disabled button: `seq` drops stale answers.
    const slow = setTimeout(() => { if (mine === seq) status("Searching…"); }, 150);
    let data;
    try {
      data = await api("POST", "/v1/" + encodeURIComponent(index) + "/search", body);
    } catch (e) {
      if (mine !== seq) return;
      $("hits").replaceChildren();
      document.body.dataset.renderMs = "";
      if (e.status === 401) { sessionStorage.removeItem(KEY); return askToken(errorText(e)); }
      return status(errorText(e), true);
    } finally {
      clearTimeout(slow);
    }
    if (mine !== seq) return;
    const t1 = performance.now();
    last = { index, query: body.query, retriever: data.retriever, k: body.k, filter: body.filter || null };
    renderHits(data);
    const t2 = performance.now();
    status(data.hits.length + " hit" + (data.hits.length === 1 ? "" : "s") + " · " + data.retriever +
           " · " + (t2 - t0).toFixed(1) + " ms");
    const h = $("hits");
    h.dataset.seq = String(mine);
    document.body.dataset.fetchMs = (t1 - t0).toFixed(3);
    document.body.dataset.renderMs = (t2 - t0).toFixed(3);
  }

  function marked(text, spans) {
    // text with <mark>s over spans ([start, end) in code points); every piece a text node
    const frag = document.createDocumentFragment();
    const cps = /[\uD800-\uDFFF]/.test(text) ? Array.from(text) : null;
    const n = cps ? cps.length : text.length;
    const slice = (a, b) => (cps ? cps.slice(a, b).join("") : text.slice(a, b));
    let at = 0;
    for (const [a, b] of spans || []) {
      if (a < at || b > n || a >= b) continue;
      if (a > at) frag.append(slice(at, a));
      frag.append(el("mark", null, slice(a, b)));
      at = b;
    }
    if (at < n) frag.append(slice(at, n));
    return frag;
  }

  function num(x, cls) {
    // a number shown rounded; its exact value in data-value (JSON's spelling)
    const s = el("span", "num" + (cls ? " " + cls : ""));
    if (x === null || x === undefined) { s.textContent = "–"; s.dataset.value = "null"; return s; }
    s.dataset.value = JSON.stringify(x);
    s.textContent = typeof x === "number" && !Number.isInteger(x) ? String(Number(x.toPrecision(6))) : String(x);
    return s;
  }

  function renderHits(data) {
    const items = data.hits.map((h) => {
      const li = el("li", "hit");
      li.tabIndex = 0;
      li.dataset.docid = h.docid;
      li.dataset.rank = String(h.rank);
      li.setAttribute("aria-label", "Hit " + h.rank + ": " + (h.title || h.docid) + " (Enter: explanation)");
      const top = el("div", "top");
      top.append(el("span", "rank", "#" + h.rank));
      const title = el("span", "title");
      title.append(marked(h.title || "", h.highlights && h.highlights.title));
      top.append(title, el("span", "docid", h.docid));
      const sc = el("div", "scores");
      const fused = el("span", "score");
      fused.append("score ", num(h.score));
      sc.append(fused);
      for (const [name, s] of Object.entries(h.scores || {})) {
        const r = h.ranks ? h.ranks[name] : undefined;
        const part = el("span", "member");
        part.dataset.retriever = name;
        part.append(name + " ", num(s, "member-score"));
        if (r !== undefined) part.append(" rank ", num(r, "member-rank"));
        sc.append(part);
      }
      const text = el("p", "text");
      text.append(marked(h.text || "", h.highlights && h.highlights.text));
      li.append(top, sc, text);
      if (h.metadata && Object.keys(h.metadata).length) li.append(el("div", "meta", JSON.stringify(h.metadata)));
      return li;
    });
    $("hits").replaceChildren(...items);
  }

  // ------------------------------------------------------------------ explanation
  async function explain(li) {
    if (!last) return;
    lastHit = li;
    const dlg = $("explain");
    const body = $("explain-body");
    $("explain-title").textContent = "Why " + li.dataset.docid + " is #" + li.dataset.rank;
    body.replaceChildren(el("p", "muted", "Explaining…"));
    if (!dlg.open) dlg.showModal();
    const req = { query: last.query, docid: li.dataset.docid, retriever: last.retriever,
                  depth: Math.max(last.k, 100) };
    if (last.filter) req.filter = last.filter;
    try {
      const ex = await api("POST", "/v1/" + encodeURIComponent(last.index) + "/explain", req);
      if (lastHit === li) renderExplanation(ex);
    } catch (e) {
      const p = el("p", "error", errorText(e));
      p.setAttribute("role", "alert");
      body.replaceChildren(p);
    }
  }

  function table(head, rows) {
    const t = el("table");
    const tr = el("tr");
    for (const h of head) tr.append(el("th", null, h));
    t.append(tr);
    for (const r of rows) {
      const row = el("tr");
      for (const c of r) {
        const td = el("td", c instanceof Node && c.classList && c.classList.contains("num") ? "num" : null);
        td.append(c instanceof Node ? c : String(c === null || c === undefined ? "–" : c));
        row.append(td);
      }
      t.append(row);
    }
    return t;
  }

  function notes(list) {
    const ul = el("ul", "notes");
    for (const n of list || []) ul.append(el("li", null, n));
    return ul;
  }

  function renderExplanation(ex) {
    const body = $("explain-body");
    const out = [];
    const sum = el("div", "summary");
    sum.append(table(["retriever", "score", "rank", "depth"],
                     [[ex.retriever, num(ex.score, "ex-score"), num(ex.rank, "ex-rank"), num(ex.depth)]]));
    out.push(sum, notes(ex.notes));
    if (ex.fusion) {
      const f = ex.fusion;
      const sec = el("section", "fusion");
      sec.append(el("h3", null, "Fusion: " + f.spec));
      const rrf = f.method === "rrf";
      const rows = Object.entries(f.lists).map(([n, l]) => [n, num(l.rank), num(l.raw),
        rrf ? num(l.rrf) : num(l.normalised), num(l.weight), num(l.contribution, "contribution")]);
      sec.append(table(["list", "rank", "raw score", rrf ? "1/(k+rank)" : "normalised", "weight", "adds"], rows));
      const tail = [["sum", num(f.sum)]];
      if (f.multiplier !== undefined) tail.push(["× lists present", num(f.multiplier)]);
      tail.push(["fused score", num(f.score, "fusion-score")], ["rank", num(f.rank, "fusion-rank")]);
      if (f.of !== undefined) tail.push(["of", num(f.of)]);
      sec.append(table(["", ""], tail));
      out.push(sec);
    }
    for (const [name, m] of Object.entries(ex.retrievers)) {
      const sec = el("section", "member");
      sec.dataset.retriever = name;
      const h = el("h3");
      h.append(name + " (" + m.kind + "): score ", num(m.score, "m-score"), ", rank ", num(m.rank, "m-rank"));
      sec.append(h, el("div", "formula", m.formula));
      const cols = m.columns || [];
      const rows = (m.parts || []).map((p) => [p.label, ...cols.map(([k]) => num(p[k] === undefined ? null : p[k])),
                                               num(p.value, "part-value")]);
      if (rows.length) sec.append(table(["part", ...cols.map(([, head]) => head), "value"], rows));
      sec.append(notes(m.notes));
      out.push(sec);
    }
    body.replaceChildren(...out);
    body.dataset.docid = ex.docid;
  }

  // ------------------------------------------------------------------ wiring
  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const t = $("token").value.trim();
      $("token").value = "";
      if (!t) return askToken("Enter the token");
      sessionStorage.setItem(KEY, t);
      start();
    });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      $("hits").replaceChildren();
      askToken("Token forgotten");
    });
    $("search-form").addEventListener("submit", search);
    $("index").addEventListener("change", fillRetrievers);
    $("add-condition").addEventListener("click", addCondition);
    const hits = $("hits");
    hits.addEventListener("click", (ev) => {
      const li = ev.target.closest(".hit");
      if (li) explain(li);
    });
    hits.addEventListener("keydown", (ev) => {
      const li = ev.target.closest(".hit");
      if (!li) return;
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); explain(li); }
      else if (ev.key === "ArrowDown" && li.nextElementSibling) { ev.preventDefault(); li.nextElementSibling.focus(); }
      else if (ev.key === "ArrowUp" && li.previousElementSibling) { ev.preventDefault(); li.previousElementSibling.focus(); }
    });
    const dlg = $("explain");
    $("explain-close").addEventListener("click", () => dlg.close());
    dlg.addEventListener("close", () => { if (lastHit && lastHit.isConnected) lastHit.focus(); });
    start();
  });
})();
