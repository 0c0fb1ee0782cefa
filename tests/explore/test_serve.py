"""``npformer explore RUN_DIR --serve`` over a real socket on an ephemeral port: the page with its form
fields, a new input gives a new payload, bad or oversized requests a JSON error, loopback only; and
what a hostile page or client sends is refused: a foreign Host, a missing token, a foreign Origin,
a body that is not JSON or nests too deep, a stalled connection."""
import json
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from explore_runs import explore_runs  # noqa: F401 (a fixture)
from serve_client import post, request, serving

from npformer.explore.payload import MAX_CHARS, open_explorer
from npformer.explore.serve import API, CSP, MAX_BODY, MAX_DEPTH, TIMEOUT, ExploreServer, json_depth, request_inputs
from npformer.explore.targets import FIELD as TARGET_FIELD
from npformer.ops import workspace


@pytest.fixture(scope="module")
def server(explore_runs):  # noqa: F811
    with serving(explore_runs["dates"]) as srv:
        yield srv


def error_of(data: bytes) -> str:
    obj = json.loads(data)
    assert set(obj) == {"error"} and "\n" not in obj["error"]
    return obj["error"]


def test_binds_loopback_only_and_serves_the_page_with_its_form(server):
    assert server.server_address[0] == "127.0.0.1"
    assert server.url == f"http://127.0.0.1:{server.server_port}/?token={server.token}"
    assert len(server.token) == 48 and int(server.token, 16) >= 0
    status, hdrs, data = request(server, "GET", f"/?token={server.token}", headers={"Authorization": None})
    assert status == 200 and hdrs["Content-Type"].startswith("text/html")
    page = data.decode("utf-8")
    payload = json.loads(page.split('id="payload">', 1)[1].split("</script>", 1)[0])
    assert payload["serve"] == {"api": API, "max_input_chars": MAX_CHARS, "max_inputs": 4,
                                "fields": [{"name": "text", "label": "source text", "kind": "text", "default": ""},
                                           TARGET_FIELD]}
    assert payload["inputs"][0]["label"] == "29 November 2026"
    assert server.token not in page                                   # the page reads it from its own URL


def test_the_command_prints_the_url_with_its_token(explore_runs, capsys, monkeypatch):  # noqa: F811
    from npformer.cli import main

    urls = []

    def serve_until_ctrl_c(self, *args, **kwargs):
        urls.append(self.url)
        raise KeyboardInterrupt

    monkeypatch.setattr(ExploreServer, "serve_forever", serve_until_ctrl_c)
    assert main(["explore", str(explore_runs["dates"]), "--serve", "--port", "0"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"serving {urls[0]} (Ctrl-C to stop)", "stopped"]
    assert re.fullmatch(r"http://127\.0\.0\.1:[0-9]+/\?token=[0-9a-f]{48}", urls[0])


def test_a_new_input_gets_a_new_payload(server):
    status, p = post(server, {"inputs": [{"text": "4 July 1976"}, "Feb 14 2000"]})
    assert status == 200
    assert [i["label"] for i in p["inputs"]] == ["4 July 1976", "Feb 14 2000"]
    assert p["version"] == 1 and p["serve"]["api"] == API
    assert {g["name"] for g in p["inputs"][0]["groups"]} == {"encoder self", "decoder self", "decoder cross"}


@pytest.mark.parametrize("obj,fragment", [
    ({"inputs": [{"text": "29 Nov\u00e9mber"}]}, "characters outside the vocabulary"),
    ({"inputs": [{"text": "x" * (MAX_CHARS + 1)}]}, f"more than the limit of {MAX_CHARS}"),
    ({"inputs": []}, '"inputs": a non-empty list'),
    ({"inputs": [{"index": 3}]}, "fields target, text"),
    ({"inputs": ["a"] * 5}, "at most 4 inputs"),
    ({"nothing": 1}, '"inputs"'),
    ({"inputs": ["a"], "more": 1}, 'one key, "inputs"'),
    ({"inputs": {"text": "1 May 2001"}}, '"inputs": a non-empty list'),
    ({"inputs": [{"text": 5}]}, "input 1: text must be a string, got an integer of 1 digits"),
    ({"inputs": ["1 May 2001", {"text": None}]}, "input 2: text must be a string, got null"),
    ({"inputs": [{"text": ["1 May 2001"]}]}, "got a list"),
    ({"inputs": [{"text": 1e300}]}, "got a number with a fraction or exponent"),
    ({"inputs": [True]}, "input 1 must be an object"),
    ([{"text": "1 May 2001"}], '"inputs"'),
    ("1 May 2001", '"inputs"'),
])
def test_bad_input_gets_an_error_line(server, obj, fragment):
    status, p = post(server, obj)
    assert status == 400 and set(p) == {"error"} and fragment in p["error"] and "\n" not in p["error"]


@pytest.mark.parametrize("body,fragment", [
    (b"{not json", "the request body is not JSON"),
    (b'{"inputs": ["1 May 2001"]', "the request body is not JSON"),
    (b'{"inputs": ["1 May 2001"]}\xff', "the request body is not JSON"),
    ('{"inputs": ["1 May 2001"]}'.encode("utf-16"), "the request body is not JSON"),
    (b"\xef\xbb\xbf{}", "the request body is not JSON"),                               # a BOM
    (b"[" * (MAX_BODY // 2) + b"]" * (MAX_BODY // 2), f"nests {MAX_BODY // 2} deep, more than the limit"),
    (b'{"inputs": [' + b"{" * 40_000, "nests 40002 deep"),
    (b'{"inputs": [NaN]}', "has NaN, which JSON does not allow"),
    (b'{"inputs": ["1 May 2001"], "x": -Infinity}', "has -Infinity"),
    (b'{"inputs": [' + b"9" * 5000 + b"]}", "the request body is not JSON"),          # over int()'s digits
    (b'{"inputs": [1e999]}', "must be an object"),
    (b'{"inputs": [' + b"7" * 4000 + b"]}", "text must be a string, got an integer of 4000 digits"),
])
def test_malformed_json_gets_400_with_its_reason(server, body, fragment):
    status, p = post(server, body)
    assert status == 400 and set(p) == {"error"} and fragment in p["error"] and "\n" not in p["error"]


def test_json_depth_skips_strings_and_counts_unclosed_brackets():
    assert json_depth(b"") == 0 and json_depth(b'"[[["') == 0
    assert json_depth(b'{"inputs": [{"text": "[{\\"[x"}]}') == 3
    assert json_depth(b"[[]][[[") == 3 and json_depth(b'"\\"[[[" [') == 1 and json_depth(b'"\\\\"[[') == 2
    assert MAX_DEPTH >= 3


def test_int_fields_take_integers_or_their_digits_only(explore_runs):  # noqa: F811
    digits = open_explorer(explore_runs["digits"])
    body = json.dumps({"inputs": [17, " 3", {"index": "-2"}, {"index": 2**63 - 1}]}).encode()
    assert request_inputs(digits, body) == [{"index": 17}, {"index": 3}, {"index": -2}, {"index": 2**63 - 1}]
    for bad, fragment in [(True, "got true"), (1.0, "with a fraction"), ("1.5", "got a string"), ("", "a string"),
                          (2**63, "got an integer of 19 digits"), (10**40, "of 41 digits"), (None, "got null")]:
        with pytest.raises(ValueError, match="input 1: index must be an integer below 2\\*\\*63") as e:
            request_inputs(digits, json.dumps({"inputs": [{"index": bad}]}).encode())
        assert fragment in str(e.value)


def test_oversized_or_malformed_requests_get_json_errors(server):
    status, hdrs, data = request(server, "POST", API, b"x" * (MAX_BODY + 1), {"Content-Type": "application/json"})
    assert status == 413 and hdrs["Content-Type"] == "application/json" and "over the limit" in error_of(data)
    for method, path in (("GET", "/etc/passwd"), ("GET", "/api/explore/../x"), ("POST", "/other"),
                         ("GET", API), ("POST", "/"), ("GET", f"http://evil.example/?token={server.token}"),
                         ("POST", f"http://127.0.0.1:{server.server_port}{API}")):
        status, _, data = request(server, method, path, b"{}" if method == "POST" else None)
        assert status == 404 and error_of(data) == "not found"
    status, p = post(server, {"inputs": [{"text": "1 May 2001"}]})        # and it still serves
    assert status == 200 and p["inputs"][0]["label"] == "1 May 2001"


@pytest.mark.parametrize("headers,status,fragment", [
    ({"Content-Length": None}, 411, "needs a Content-Length"),
    ({"Content-Length": None, "Transfer-Encoding": "chunked"}, 411, "no Transfer-Encoding"),
    ({"Transfer-Encoding": "chunked"}, 411, "no Transfer-Encoding"),
    ({"Content-Length": "ten"}, 400, "not one decimal number"),
    ({"Content-Length": "-1"}, 400, "not one decimal number"),
    ({"Content-Length": "+2"}, 400, "not one decimal number"),
    ({"Content-Length": "1_0"}, 400, "not one decimal number"),
    ({"Content-Length": ["2", "2"]}, 400, "not one decimal number"),
    ({"Content-Length": "9" * 40}, 413, "over 10**18 bytes is over the limit"),
    ({"Content-Length": str(MAX_BODY + 1)}, 413, f"of {MAX_BODY + 1} bytes is over the limit of {MAX_BODY}"),
])
def test_a_missing_or_bad_content_length_is_refused(server, headers, status, fragment):
    got, hdrs, data = request(server, "POST", API, b"{}", {"Content-Type": "application/json", **headers})
    assert got == status and fragment in error_of(data)


def test_a_body_shorter_than_its_content_length_is_400(server):
    port = server.server_port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"POST {API} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: token {server.token}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{}}".encode())
        s.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: s.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.0 400 ") and b"ended after 2 of its 100 bytes" in answer


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1", "localhost", "127.0.0.1:1",
                                  "localhost.evil.example:{port}", "127.0.0.2:{port}", "[::1]:{port}", "",
                                  "127.0.0.1:{port}.evil.example", None, ["127.0.0.1:{port}", "evil.example"]])
def test_a_foreign_host_is_refused_whatever_the_token(server, host):
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 sends Host: evil.example."""
    host = [h.format(port=server.server_port) for h in host] if isinstance(host, list) else \
        None if host is None else host.format(port=server.server_port)
    for method, path, body in (("GET", f"/?token={server.token}", None), ("POST", API, b"{}")):
        status, hdrs, data = request(server, method, path, body, {"Host": host, "Content-Type": "application/json"})
        assert status == 403 and hdrs["Content-Type"] == "application/json"
        assert f"Host header must be 127.0.0.1:{server.server_port} or localhost:{server.server_port}" in error_of(data)


def test_either_loopback_name_is_a_good_host(server):
    port = server.server_port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
        assert request(server, "GET", "/", headers={"Host": host})[0] == 200


def test_every_request_needs_the_token(server):
    t = server.token
    refused = [("GET", "/", {"Authorization": None}), ("GET", "/?token=", {"Authorization": None}),
               ("GET", f"/?token={t[:-1]}", {"Authorization": None}), ("GET", "/", {"Authorization": f"token {t}x"}),
               ("GET", "/", {"Authorization": f"Bearer {t}"}), ("GET", "/", {"Authorization": t}),
               ("GET", f"/?tok={t}", {"Authorization": None}), ("GET", "/nothing", {"Authorization": None}),
               ("POST", API, {"Authorization": None}),
               ("POST", f"{API}?token={t.upper()}", {"Authorization": None}),
               ("POST", API, {"Authorization": "token \u00e9t\u00e9"})]
    for method, path, headers in refused:
        status, _, data = request(server, method, path, b"{" if method == "POST" else None,
                                  {"Content-Type": "application/json", **headers})
        assert status == 403 and "needs its token" in error_of(data), (method, path, headers)
    admitted = [("GET", f"/?token={t}", {"Authorization": None}), ("GET", "/", {"Authorization": f"TOKEN  {t} "}),
                ("GET", f"/index.html?x=1&token={t}", {"Authorization": "token wrong"}),
                ("POST", f"{API}?token={t}", {"Authorization": None}), ("POST", API, {})]
    for method, path, headers in admitted:
        status, _, data = request(server, method, path, b"{" if method == "POST" else None,
                                  {"Content-Type": "application/json", **headers})
        assert status == (400 if method == "POST" else 200), (method, path, headers, data[:100])


def test_the_model_runs_only_for_json_from_no_origin_or_its_own(server):
    port = server.server_port
    good = json.dumps({"inputs": ["1 May 2001"]}).encode()
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{port}.evil.example",
                   f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}",
                   [f"http://127.0.0.1:{port}", "http://evil.example"]):
        status, p = post(server, good, {"Origin": origin})
        assert status == 403 and f"only from this server's own page (http://127.0.0.1:{port})" in p["error"]
    for ctype in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                  "application/jsonx", "text/json"):
        status, p = post(server, good, {"Content-Type": ctype})
        assert status == 415 and "Content-Type: application/json" in p["error"], ctype
    for headers in ({"Origin": f"http://127.0.0.1:{port}"}, {"Origin": f"http://localhost:{port}"},
                    {"Content-Type": "Application/JSON; charset=utf-8"}):
        status, p = post(server, good, headers)
        assert status == 200 and p["inputs"][0]["label"] == "1 May 2001", headers


def test_every_answer_says_nosniff_and_its_csp(server, explore_runs):  # noqa: F811
    answers = [request(server, "GET", "/"), request(server, "POST", API, b'{"inputs": ["2 May 2001"]}',
                                                    {"Content-Type": "application/json"}),
               request(server, "POST", API, b"[", {"Content-Type": "application/json"}),
               request(server, "GET", "/", headers={"Authorization": None}),
               request(server, "GET", "/", headers={"Host": "evil.example"}),
               request(server, "GET", "/x"), request(server, "POST", API, b"{}"),
               request(server, "POST", API, b"{}", {"Content-Length": None, "Content-Type": "application/json"}),
               request(server, "PUT", API, b"{}"), request(server, "HEAD", "/"), request(server, "GET", "/" * 70_000)]
    assert [a[0] for a in answers] == [200, 200, 400, 403, 403, 404, 415, 411, 501, 501, 414]
    for status, hdrs, data in answers:
        assert hdrs["X-Content-Type-Options"] == "nosniff" and hdrs["Content-Security-Policy"] == CSP, status
        assert hdrs["Cache-Control"] == "no-store" and hdrs["Referrer-Policy"] == "no-referrer"
        if status != 200:                                             # http.server's own refusals too: JSON
            assert hdrs["Content-Type"] == "application/json" and (data == b"" or error_of(data)), status
    # the header policy allows no more than the page's own meta policy, and adds frame-ancestors
    page = answers[0][2].decode()
    meta = page.split('http-equiv="Content-Security-Policy" content="', 1)[1].split('"', 1)[0]
    header = dict(d.strip().split(" ", 1) for d in CSP.split(";"))
    assert all(header[d.strip().split(" ", 1)[0]] == d.strip().split(" ", 1)[1] for d in meta.split(";"))
    assert header["frame-ancestors"] == "'none'"


def test_a_stalled_connection_stalls_no_other_and_is_closed_after_the_timeout(server, monkeypatch):
    monkeypatch.setattr(server, "conn_timeout", 1.0)
    stalled, port = [], server.server_port
    try:
        for half in (b"", f"POST {API} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Le".encode(),
                     f"POST {API} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: token {server.token}"
                     f"\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n{{\"inputs\"".encode()):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(half)
            stalled.append(s)
        t0 = time.perf_counter()
        status, p = post(server, {"inputs": ["3 May 2001"]})
        assert status == 200 and p["inputs"][0]["label"] == "3 May 2001"
        assert time.perf_counter() - t0 < 0.9                         # answered before any stalled one timed out
        for s in stalled:                                             # each is closed, without an answer
            assert s.recv(1024) == b""
        assert time.perf_counter() - t0 < 5
    finally:
        for s in stalled:
            s.close()


def test_the_array_pool_is_released_once_no_request_is_in_flight(server, monkeypatch):
    kept = workspace.empty((workspace.MIN_BYTES,), np.uint8)
    del kept
    assert workspace.held_bytes() > 0
    assert post(server, {"inputs": ["4 May 2001"]})[0] == 200
    assert workspace.held_bytes() == 0
    # two requests at once: the first holds the model while the second waits; one clear, after both
    entered, go, cleared = threading.Event(), threading.Event(), []
    real = server.explorer.payload

    def slow_payload(inputs):
        if inputs[0]["text"] == "5 May 2001":
            entered.set()
            go.wait(10)
        return real(inputs)

    monkeypatch.setattr(server.explorer, "payload", slow_payload)
    monkeypatch.setattr(workspace, "clear", lambda: cleared.append(server._in_flight))
    answers = []
    first = threading.Thread(target=lambda: answers.append(post(server, {"inputs": ["5 May 2001"]})[0]))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: answers.append(post(server, {"inputs": ["6 May 2001"]})[0]))
    second.start()
    deadline = time.monotonic() + 10
    while server._in_flight < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert server._in_flight == 2 and cleared == []
    go.set()
    first.join(10)
    second.join(10)
    assert answers == [200, 200] and cleared == [0]


def test_the_format_doc_quotes_the_servers_limits():
    doc = (Path(__file__).parents[2] / "docs" / "EXPLORE_FORMAT.md").read_text(encoding="utf-8")
    serve = " ".join(doc.split("## Serve", 1)[1].split())
    for claim in (f"silent for {TIMEOUT:g} s", f"deeper than {MAX_DEPTH})", f"the cap is {MAX_BODY // 1024} KiB",
                  "(48 hex digits)", "`frame-ancestors 'none'`"):
        assert claim in serve, claim
