"""``npformer explore RUN_DIR --serve``: the explorer page on 127.0.0.1, rerunning the model per input.

    GET  /               the page with the first inputs' payload and payload["serve"] (the form's fields)
    POST /api/explore    {"inputs": [{"text": ...}, ...]} -> a new payload, or {"error": "one line"}

The server binds the loopback address only and answers one request at a time (``http.server``).
Bodies over ``MAX_BODY`` bytes are refused (413) before they are read; texts are capped by the
explorer (``payload.MAX_CHARS``). Bad input gets 400 and a one-line error the page shows; any other
failure of the model gets 500 with its first line. The contract is docs/EXPLORE_FORMAT.md, "Serve".
"""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, HTTPServer

from .payload import MAX_CHARS, Explorer

HOST = "127.0.0.1"
API = "/api/explore"
MAX_BODY = 64 * 1024                    # bytes of one POST body


def serve_info(ex: Explorer) -> dict:
    """What the page's form needs: payload["serve"]."""
    return {"api": API, "max_input_chars": MAX_CHARS, "max_inputs": ex.max_inputs, "fields": ex.fields}


def request_inputs(ex: Explorer, body: bytes) -> list[dict]:
    """A POST body -> input dicts (ValueError with a one-line reason when it is not what the contract says)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("the request body is not JSON") from None
    inputs = data.get("inputs") if isinstance(data, dict) else None
    if not isinstance(inputs, list) or not inputs:
        raise ValueError('the request needs "inputs": a non-empty list')
    if len(inputs) > ex.max_inputs:
        raise ValueError(f"at most {ex.max_inputs} inputs at once, got {len(inputs)}")
    names = {f["name"] for f in ex.fields}
    out = []
    for i, item in enumerate(inputs):
        if isinstance(item, (str, int)) and not isinstance(item, bool):
            item = {ex.fields[0]["name"]: item}
        if not isinstance(item, dict) or not set(item) <= names:
            raise ValueError(f"input {i + 1} must be an object with the fields {', '.join(sorted(names))}")
        for k, v in item.items():
            if isinstance(v, str) and len(v) > MAX_CHARS:
                raise ValueError(f"input {i + 1}: {k} has {len(v)} characters, more than the limit of {MAX_CHARS}")
        out.append(item)
    return out


class ExploreServer(HTTPServer):
    """One explorer and the page of its first inputs."""

    allow_reuse_address = False         # a port in use is an error, never shared

    def __init__(self, ex: Explorer, inputs: list[dict], port: int) -> None:
        from .render import render_html

        self.explorer = ex
        payload = ex.payload(inputs)                                  # bad first inputs fail before binding
        payload["serve"] = serve_info(ex)
        self.page = render_html(payload).encode("utf-8")
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"

    def answer(self, body: bytes) -> tuple[int, dict]:
        """(HTTP status, JSON object) for one POST body."""
        try:
            inputs = request_inputs(self.explorer, body)
            payload = self.explorer.payload(inputs)
        except (ValueError, TypeError, KeyError) as e:
            return 400, {"error": _first_line(e)}
        except Exception as e:  # the model failed: say so on the page, keep serving
            return 500, {"error": f"the model failed: {_first_line(e)}"}
        payload["serve"] = serve_info(self.explorer)
        return 200, payload


def _first_line(e: Exception) -> str:
    msg = str(e).strip()
    return msg.splitlines()[0] if msg else type(e).__name__


class _Handler(BaseHTTPRequestHandler):
    server: ExploreServer

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8"),
                   "application/json")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path in ("/", "/index.html"):
            self._send(200, self.server.page, "text/html; charset=utf-8")
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path != API:
            self._json(404, {"error": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._json(411, {"error": "the request needs a Content-Length"})
            return
        if length > MAX_BODY or length < 0:
            self.close_connection = True                              # the body is never read
            self._json(413, {"error": f"the request body of {length} bytes is over the limit of {MAX_BODY}"})
            return
        status, obj = self.server.answer(self.rfile.read(length))
        self._json(status, obj)

    def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's name)
        pass                                                          # quiet: the command prints its own lines
