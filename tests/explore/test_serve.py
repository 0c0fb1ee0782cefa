"""``npformer explore RUN_DIR --serve`` over a real socket on an ephemeral port: the page with its form
fields, a new input gives a new payload, bad or oversized requests a JSON error, loopback only."""
import http.client
import json
import threading

import pytest
from explore_runs import explore_runs  # noqa: F401 (a fixture)

from npformer.explore.payload import MAX_CHARS, open_explorer
from npformer.explore.serve import API, MAX_BODY, ExploreServer


@pytest.fixture(scope="module")
def server(explore_runs):  # noqa: F811
    srv = ExploreServer(open_explorer(explore_runs["dates"]), [{"text": "29 November 2026"}], port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def request(srv, method, path, body: bytes | None = None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), resp.read()
    finally:
        conn.close()


def post(srv, obj):
    body = json.dumps(obj).encode()
    status, ctype, data = request(srv, "POST", API, body, {"Content-Type": "application/json"})
    assert ctype == "application/json"
    return status, json.loads(data)


def test_binds_loopback_only_and_serves_the_page_with_its_form(server):
    assert server.server_address[0] == "127.0.0.1"
    status, ctype, data = request(server, "GET", "/")
    assert status == 200 and ctype.startswith("text/html")
    page = data.decode("utf-8")
    payload = json.loads(page.split('id="payload">', 1)[1].split("</script>", 1)[0])
    assert payload["serve"] == {"api": API, "max_input_chars": MAX_CHARS, "max_inputs": 4,
                                "fields": [{"name": "text", "label": "source text", "kind": "text", "default": ""}]}
    assert payload["inputs"][0]["label"] == "29 November 2026"


def test_a_new_input_gets_a_new_payload(server):
    status, p = post(server, {"inputs": [{"text": "4 July 1976"}, "Feb 14 2000"]})
    assert status == 200
    assert [i["label"] for i in p["inputs"]] == ["4 July 1976", "Feb 14 2000"]
    assert p["version"] == 1 and p["serve"]["api"] == API
    assert {g["name"] for g in p["inputs"][0]["groups"]} == {"encoder self", "decoder self", "decoder cross"}


@pytest.mark.parametrize("obj,status,fragment", [
    ({"inputs": [{"text": "29 Nov\u00e9mber"}]}, 400, "characters outside the vocabulary"),
    ({"inputs": [{"text": "x" * (MAX_CHARS + 1)}]}, 400, f"more than the limit of {MAX_CHARS}"),
    ({"inputs": []}, 400, '"inputs": a non-empty list'),
    ({"inputs": [{"index": 3}]}, 400, "fields text"),
    ({"inputs": ["a"] * 5}, 400, "at most 4 inputs"),
    ({"nothing": 1}, 400, '"inputs"'),
])
def test_bad_input_gets_an_error_line(server, obj, status, fragment):
    got, p = post(server, obj)
    assert got == status and set(p) == {"error"} and fragment in p["error"] and "\n" not in p["error"]


def test_oversized_or_malformed_requests_get_json_errors(server):
    status, ctype, data = request(server, "POST", API, b"x" * (MAX_BODY + 1), {"Content-Type": "application/json"})
    assert status == 413 and ctype == "application/json" and "over the limit" in json.loads(data)["error"]
    status, _, data = request(server, "POST", API, b"{not json", {"Content-Type": "application/json"})
    assert status == 400 and json.loads(data) == {"error": "the request body is not JSON"}
    for method, path in (("GET", "/etc/passwd"), ("GET", "/api/explore/../x"), ("POST", "/other")):
        status, _, data = request(server, method, path, b"{}" if method == "POST" else None)
        assert status == 404 and json.loads(data) == {"error": "not found"}
    status, p = post(server, {"inputs": [{"text": "1 May 2001"}]})        # and it still serves
    assert status == 200 and p["inputs"][0]["label"] == "1 May 2001"
