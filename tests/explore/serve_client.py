"""The ``--serve`` tests' server and client: an ExploreServer of the tiny dates run on an ephemeral
loopback port, served from a thread, and one HTTP request with every header under the test's control."""
from __future__ import annotations

import http.client
import json
import threading
from contextlib import contextmanager

from npformer.explore.payload import open_explorer
from npformer.explore.serve import API, ExploreServer


@contextmanager
def serving(run_dir, inputs=({"text": "29 November 2026"},)):
    srv = ExploreServer(open_explorer(run_dir), list(inputs), port=0)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)   # (shutdown polls)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def request(srv, method, path, body: bytes | None = None, headers=None, timeout: float = 30):
    """(status, headers, body) of one request. It sends Host 127.0.0.1:PORT, the token in an
    Authorization header and, with a body, its Content-Length; ``headers`` adds to them or replaces
    them (a value None leaves that header out, a list sends it once per item)."""
    sent = {"Host": f"127.0.0.1:{srv.server_port}", "Authorization": f"token {srv.token}"}
    if body is not None:
        sent["Content-Length"] = str(len(body))
    sent.update(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in sent.items():
            for v in value if isinstance(value, list) else [] if value is None else [value]:
                conn.putheader(name, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def post(srv, body, headers=None):
    """(status, the answer's JSON) of a POST to the API: ``body`` bytes as they are, anything else as JSON."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, hdrs, answer = request(srv, "POST", API, data, {"Content-Type": "application/json", **(headers or {})})
    assert hdrs["Content-Type"] == "application/json", (status, answer[:200])
    return status, json.loads(answer)
