"""The search page at / of `retr serve`, in a real Chromium against a real server: its hits, scores and
ranks are Index.search's, its highlights mark the query's terms as the BM25 analyser matches them
(stemmed forms included), its explanation is Index.explain's; it fetches nothing from outside, keeps
the token out of every URL, shows server errors as messages, works from the keyboard, and shows a
passage's HTML as text."""
from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.browser.conftest import Requests
from tests.server.conftest import Server

QUERY = "effects of treating cells"
FILTER = {"shard": "odd", "year": {"gte": 1995}}
K = 7
PIPELINE = "bm25+dense"
TOKEN = "page-test-token-5f1c"
EVIL_TEXT = "<script>window.__pwned = 1</script> aspirin <b>bold</b> & <img src=x onerror=\"window.__pwned=2\">"


@pytest.fixture(scope="module")
def evil_index(tmp_path_factory):
    """Three passages, one of them HTML with a script, in a BM25 index of their own."""
    import retrieval

    src = tmp_path_factory.mktemp("evil")
    docs = [{"_id": "evil", "title": "<i>aspirin</i> <script>window.__pwned = 3</script>", "text": EVIL_TEXT},
            {"_id": "plain", "title": "Plain", "text": "aspirin lowers the risk of a second heart attack"},
            {"_id": "other", "title": "Other", "text": "nothing to see here"}]
    (src / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return retrieval.build_index(src, src / "IDX", quiet=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory, meta_dense_index, evil_index):
    s = Server("--index", f"hy={meta_dense_index.path}", "--index", f"evil={evil_index.path}", token=TOKEN,
               tmp=tmp_path_factory.mktemp("page-srv"))
    yield s
    s.stop()


def watch(page, site):
    """The page's requests (outside origins, URLs) and the Authorization header of each API call."""
    seen = Requests(page, site.url)
    auth = []
    page.on("request", lambda r: auth.append((r.url, r.headers.get("authorization"))) if "/v1/" in r.url else None)
    return seen, auth


def sign_in(page, site, token=None):
    page.goto(site.url + "/")
    page.wait_for_selector("#token-form:not([hidden])")
    page.fill("#token", token or site.token)
    page.press("#token", "Enter")


def submit(page, query, index="hy", retriever=PIPELINE, k=K, conditions=()):
    page.wait_for_selector("#search-form:not([hidden])")
    page.select_option("#index", index)
    page.select_option("#retriever", retriever)
    for field, op, value in conditions:
        page.click("#add-condition")
        row = page.locator("#conditions .condition").last
        row.locator(".field").fill(field)
        row.locator(".op").select_option(op)
        row.locator(".value").fill(value)
    page.fill("#k", str(k))
    page.fill("#query", query)
    before = page.get_attribute("#hits", "data-seq") or ""
    page.press("#query", "Enter")
    page.wait_for_function("b => (document.getElementById('hits').dataset.seq || '') !== b "
                           "|| document.getElementById('status').classList.contains('error')", arg=before)


def shown_hits(page):
    return page.eval_on_selector_all("#hits .hit", """hs => hs.map(h => ({
        docid: h.dataset.docid, rank: Number(h.dataset.rank),
        score: JSON.parse(h.querySelector('.score .num').dataset.value),
        members: Object.fromEntries([...h.querySelectorAll('.member')].map(m => [m.dataset.retriever, [
            JSON.parse(m.querySelector('.member-score').dataset.value),
            JSON.parse(m.querySelector('.member-rank').dataset.value)]])),
        marks: [...h.querySelectorAll('mark')].map(m => m.textContent),
        text: h.querySelector('.text').textContent,
        textMarks: [...h.querySelectorAll('.text mark')].map(m => m.textContent)}))""")


def test_the_page_shows_index_search_and_index_explain(page, site, meta_dense_index):
    import retrieval

    seen, auth = watch(page, site)
    sign_in(page, site)
    submit(page, QUERY, conditions=[("shard", "eq", "odd"), ("year", "gte", "1995")])
    assert not page.locator("#status.error").count(), page.inner_text("#status")

    idx = retrieval.open_index(meta_dense_index.path)
    want = idx.search(QUERY, k=K, retriever=PIPELINE, filter=FILTER, ranks=True)
    got = shown_hits(page)
    assert [h["docid"] for h in got] == [h.docid for h in want] and len(want) == K
    assert [h["rank"] for h in got] == list(range(1, K + 1))
    for g, w in zip(got, want):
        assert g["score"] == pytest.approx(w.score, rel=1e-6, abs=1e-9)
        assert set(g["members"]) == set(w.scores) == {"bm25", "dense"}
        for name, (score, rank) in g["members"].items():
            assert (score is None) == (w.scores[name] is None) and rank == w.ranks[name]
            if score is not None:
                assert score == pytest.approx(w.scores[name], rel=1e-6, abs=1e-9)
        assert g["text"] == w.text  # the whole passage, as text

    # highlights: every mark is a query term under the BM25 analyser, and some are stemmed forms
    words = set(QUERY.lower().split())
    marks = [m.lower() for h in got for m in h["marks"]]
    assert marks and all(re.fullmatch(r"(effect|treat|cell)\w*", m) for m in marks), marks
    assert set(marks) - words, f"no stemmed match among {set(marks)}"
    spans = idx.highlight(QUERY, [w.text for w in want])
    assert [h["textMarks"] for h in got] == [[w.text[a:b] for a, b in s] for w, s in zip(want, spans)]

    # the explanation of the third hit, opened with a click, is Index.explain's
    page.click("#hits .hit:nth-child(3)")
    page.wait_for_selector("#explain[open] #explain-body[data-docid]")
    doc = want[2].docid
    assert page.get_attribute("#explain-body", "data-docid") == doc
    ex = idx.explain(QUERY, doc, retriever=page.inner_text("#status").split(" · ")[1], depth=max(K, 100),
                     filter=FILTER)
    value = lambda sel: json.loads(page.get_attribute(sel, "data-value"))  # noqa: E731
    assert value("#explain-body .ex-rank") == ex["rank"] == 3
    assert value("#explain-body .ex-score") == pytest.approx(ex["score"], rel=1e-6) == pytest.approx(want[2].score)
    assert value("#explain-body .fusion-score") == pytest.approx(ex["fusion"]["score"], rel=1e-6)
    for name, m in ex["retrievers"].items():
        sec = f"#explain-body .member[data-retriever='{name}']"
        assert value(f"{sec} .m-rank") == m["rank"]
        assert value(f"{sec} .m-score") == pytest.approx(m["score"], rel=1e-6)
        parts = page.eval_on_selector_all(f"{sec} .part-value", "ps => ps.map(p => JSON.parse(p.dataset.value))")
        assert parts == pytest.approx([p["value"] for p in m["parts"]], rel=1e-6)
    contributions = page.eval_on_selector_all("#explain-body .fusion .contribution",
                                              "cs => cs.map(c => JSON.parse(c.dataset.value))")
    assert contributions == pytest.approx([ex["fusion"]["lists"][n]["contribution"] for n in ex["fusion"]["lists"]])
    page.keyboard.press("Escape")
    page.wait_for_selector("#explain:not([open])", state="attached")

    assert seen.outside() == []
    assert not [u for u in seen.urls if site.token in u]
    assert auth and all(a == f"Bearer {site.token}" for _u, a in auth), auth
    assert page.evaluate("sessionStorage.getItem('retr.token')") == site.token


def test_server_errors_are_messages(page, site):
    sign_in(page, site)
    submit(page, QUERY, conditions=[("year", "gte", "recent")])  # ranges take numbers only: 400
    assert page.locator("#status.error").count() == 1
    msg = page.inner_text("#status")
    assert msg.startswith("Error 400:") and "number" in msg, msg
    assert page.locator("#hits .hit").count() == 0

    page.evaluate("sessionStorage.clear()")
    sign_in(page, site, token="not-the-token")  # wrong token: 401 said, and the token asked again
    page.wait_for_selector("#status.error")
    assert page.inner_text("#status").startswith("Error 401:")
    assert page.is_visible("#token-form") and not page.is_visible("#search-form")
    assert page.evaluate("sessionStorage.getItem('retr.token')") is None


def test_keyboard_only(page, site):
    seen, _auth = watch(page, site)
    page.goto(site.url + "/")
    page.wait_for_selector("#token-form:not([hidden])")
    page.keyboard.type(site.token)  # the token box has the focus
    page.keyboard.press("Enter")
    page.wait_for_selector("#search-form:not([hidden])")
    assert page.evaluate("document.activeElement.id") == "query"
    page.keyboard.type("statins")
    page.keyboard.press("Enter")
    page.wait_for_selector("#hits .hit")
    for _ in range(40):  # Tab through the form to the first hit
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('hit')"):
            break
    first = page.evaluate("document.activeElement.dataset.docid")
    assert first == page.get_attribute("#hits .hit:first-child", "data-docid")
    page.keyboard.press("ArrowDown")
    second = page.evaluate("document.activeElement.dataset.docid")
    assert second == page.get_attribute("#hits .hit:nth-child(2)", "data-docid")
    page.keyboard.press("Enter")
    page.wait_for_selector("#explain[open] #explain-body[data-docid]")
    assert page.get_attribute("#explain-body", "data-docid") == second
    page.keyboard.press("Escape")
    page.wait_for_selector("#explain:not([open])", state="attached")
    assert page.evaluate("document.activeElement.dataset.docid") == second  # focus back on the hit
    assert seen.outside() == [] and not [u for u in seen.urls if site.token in u]


def test_html_in_passages_is_text(page, site):
    page.on("dialog", lambda d: pytest.fail(f"a dialog opened: {d.message}"))
    sign_in(page, site)
    submit(page, "aspirin", index="evil", retriever="bm25", k=3)
    hit = page.locator("#hits .hit[data-docid='evil']")
    assert hit.locator(".text").text_content() == EVIL_TEXT
    assert "<script>" in hit.locator(".title").text_content()
    assert page.locator("#hits script, #hits img, #hits b, #hits i").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert [m.lower() for m in hit.locator("mark").all_text_contents()] == ["aspirin", "aspirin"]


def test_page_is_static_and_locked_down(site):
    for path, kind in [("/", "text/html"), ("/static/page.js", "text/javascript"), ("/static/page.css", "text/css")]:
        r = httpx.get(site.url + path)  # no token
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "http" not in csp
    html = httpx.get(site.url + "/").text
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing from another origin
    assert httpx.get(site.url + "/v1/indexes").status_code == 401  # the API still needs the token


def test_search_response_shape_is_unchanged_unless_asked(site, meta_dense_index):
    import retrieval

    body = {"query": QUERY, "k": 3, "retriever": PIPELINE, "filter": FILTER}
    plain = site.post("/v1/hy/search", json=body).json()
    assert set(plain["hits"][0]) == {"docid", "rank", "score", "scores", "title", "text", "metadata"}
    rich = site.post("/v1/hy/search", json={**body, "highlight": True, "ranks": True, "text_chars": 80}).json()
    assert [h["docid"] for h in rich["hits"]] == [h["docid"] for h in plain["hits"]]
    want = retrieval.open_index(meta_dense_index.path).search(QUERY, k=3, retriever=PIPELINE, filter=FILTER,
                                                              ranks=True)
    for h, w in zip(rich["hits"], want):
        assert h["ranks"] == w.ranks
        assert all(b <= 80 and h["text"][a:b].lower().startswith(("effect", "treat", "cell"))
                   for a, b in h["highlights"]["text"])
    single = site.post("/v1/hy/search", json={"query": "statins", "k": 2, "ranks": True, "retriever": "bm25"}).json()
    assert [h["ranks"] for h in single["hits"]] == [{"bm25": 1}, {"bm25": 2}]  # one retriever: its ranks alone
    default = site.post("/v1/hy/search", json={"query": "statins", "k": 2, "ranks": True}).json()
    assert default["pipeline_source"] == "untuned fusion" and all(set(h["ranks"]) == {"bm25", "dense"}
                                                                   for h in default["hits"])
    doc = site.get("/openapi.json").json()["components"]["schemas"]
    assert {"highlight", "ranks"} <= set(doc["SearchRequest"]["properties"])
    assert {"highlights", "ranks"} <= set(doc["HitOut"]["properties"])


def test_index_highlight_matches_stemmed_forms(meta_dense_index):
    import retrieval

    idx = retrieval.open_index(meta_dense_index.path)
    text = "The Effect of effects, affected cells 😀 and an effective cell."
    spans = idx.highlight("effects on the cell", [text, ""], retriever="dense")  # dense: the BM25 analyser
    assert [text[a:b] for a, b in spans[0]] == ["Effect", "effects", "cells", "effective", "cell"]  # Porter: effective -> effect
    assert spans[1] == []
