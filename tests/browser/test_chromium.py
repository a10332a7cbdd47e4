"""The browser the other tests in this folder drive starts, runs JavaScript, and its request log sees
what a page fetches."""
from tests.browser.conftest import Requests


def test_chromium_runs_javascript_and_sees_requests(page, tmp_path):
    (tmp_path / "a.html").write_text(
        "<html><body><p id=x>static</p><img src='b.svg'>"
        "<script>document.getElementById('x').textContent = 'script ran'</script></body></html>")
    (tmp_path / "b.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg' width='4' height='3'></svg>")
    seen = Requests(page)
    page.goto((tmp_path / "a.html").as_uri())
    assert page.inner_text("#x") == "script ran"
    assert page.eval_on_selector("img", "i => [i.complete, i.naturalWidth]") == [True, 4]
    assert any(u.endswith("b.svg") for u in seen.urls) and seen.outside() == []
    page.set_content("<img src='http://192.0.2.1/x.png'>")  # an outside address is reported as such
    assert seen.outside() == ["http://192.0.2.1/x.png"]
