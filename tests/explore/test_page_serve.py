"""``npformer explore RUN --serve`` in the browser: the page served on 127.0.0.1 at the URL with the
server's token shows a form; typing an input and submitting it draws the new input's attention (the
page sends the token back); a bad or oversized input shows the server's one-line error on the page,
and the page stays usable. Without the token the server shows no page."""
import pytest
from explore_runs import explore_runs  # noqa: F401 (a fixture)
from serve_client import serving

from npformer.explore.payload import MAX_CHARS


@pytest.fixture(scope="module")
def served(explore_runs):  # noqa: F811
    with serving(explore_runs["dates"], [{"text": "3 May 1999"}]) as server:                # on a free port
        yield server


def test_a_typed_input_gives_a_new_view_and_errors_show_on_the_page(served, opened):
    o = opened(served.url)                                            # http://127.0.0.1:PORT/?token=HEX
    page = o.page
    api_headers = []
    page.on("request", lambda r: api_headers.append(r.headers) if r.url.endswith("/api/explore") else None)
    assert page.is_visible("#serve-form")
    assert page.input_value("#serve-fields input[name='text']") == "3 May 1999"
    tokens = page.eval_on_selector_all("#query-select option", "os => os.map(o => o.textContent)")
    before = o.canvas_hash("#head-canvas")
    page.fill("#serve-fields input[name='text']", "17 August 2001")
    page.click("#serve-submit")
    page.wait_for_selector("#summary:has-text('17 August 2001')")     # (wait_for_function would need eval)
    assert page.is_hidden("#error")
    assert page.eval_on_selector_all("#query-select option", "os => os.map(o => o.textContent)") != tokens
    assert o.canvas_hash("#head-canvas") != before
    # too long: the server's error, on the page; the view stays
    page.fill("#serve-fields input[name='text']", "1" * (MAX_CHARS + 1))
    page.click("#serve-submit")
    page.wait_for_selector("#error:not([hidden])")
    assert str(MAX_CHARS) in page.text_content("#error")
    assert "17 August 2001" in page.text_content("#summary")
    # then a good one again clears the error
    page.fill("#serve-fields input[name='text']", "1 June 2000")
    page.click("#serve-submit")
    page.wait_for_selector("#summary:has-text('1 June 2000')")
    assert page.is_hidden("#error")
    bad_requests = [u for u in o.requests if not u.startswith((served.origin + "/", "data:"))]
    assert bad_requests == []
    # each of the three answers came because the page sent the server's token from its own URL
    assert [h.get("authorization") for h in api_headers] == [f"token {served.token}"] * 3
    # the browser's own log line for the one 400 answer is the only console error; the page threw nothing
    assert o.errors == ["console.error: Failed to load resource: the server responded with a status of 400 "
                        "(Bad Request)"]


def test_without_its_token_the_server_shows_no_page(served, browser):
    page = browser.new_page()
    try:
        for url in (served.origin + "/", served.url.replace(served.token, "0" * len(served.token))):
            response = page.goto(url)
            assert response.status == 403 and "needs its token" in page.text_content("body")
            assert response.headers["x-content-type-options"] == "nosniff"
    finally:
        page.close()
