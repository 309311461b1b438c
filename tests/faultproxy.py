"""A fault-injecting HTTP proxy on 127.0.0.1 for tests of the remote backend.

    with FaultProxy(upstream_port, ["500", "drop", "delay:0.2", "ok", "cut"]) as proxy:
        url = proxy.url            # http://127.0.0.1:<port>, forwards to 127.0.0.1:upstream_port
        ...
        proxy.seen                 # the fault applied to each request, in order

    FaultProxy(upstream_port, plan=lambda i: "503" if i % 20 == 0 else "ok", rtt=0.03)
        # request i (from 0) takes plan(i) once the schedule is used up; every request first
        # waits rtt seconds: a network round trip (benchmarks/cloud_link.py)

Each incoming request takes the next entry of `schedule` (then "ok" once it is used up):
  ok         forward to the upstream server and relay its answer
  delay:S    sleep S seconds (capped at MAX_DELAY_S), then forward (a request held on its
             way: the server sees it late, after a retry the client sent meanwhile)
  late:S     forward, then sleep S seconds before answering (a slow answer: the server has
             done the work when the client gives up)
  NNN        (three digits, e.g. 500, 503, 400) answer with that status without forwarding
  drop       close the connection without answering
  cut        forward, then send the status line, headers and half the body, and close
Faults are bounded in count (the schedule is finite) and in time (each delay is capped), the
proxy listens on loopback only, and it forwards only to loopback.
"""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_DELAY_S = 10.0
LOOPBACK = "127.0.0.1"


class FaultProxy:
    """A threading HTTP proxy that applies one scheduled fault per request."""

    def __init__(
        self,
        upstream_port: int,
        schedule: list[str] | None = None,
        *,
        plan=None,
        rtt: float = 0.0,
        port: int = 0,
    ):
        self.upstream_port = upstream_port
        self.schedule = list(schedule or [])
        self.plan = plan  # request index -> fault, once the schedule is used up (None: "ok")
        self.rtt = min(max(rtt, 0.0), MAX_DELAY_S)
        self.seen: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((LOOPBACK, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def next_fault(self) -> str:
        with self._lock:
            if self.schedule:
                fault = self.schedule.pop(0)
            else:
                fault = self.plan(len(self.seen)) if self.plan else "ok"
            self.seen.append(fault)
            return fault

    def forward(self, method: str, path: str, body: bytes, headers: dict):
        conn = http.client.HTTPConnection(LOOPBACK, self.upstream_port, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheader("Content-Type", "application/json"), resp.read()
        finally:
            conn.close()

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(proxy: FaultProxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real server

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fault = proxy.next_fault()
            if proxy.rtt:
                time.sleep(proxy.rtt)
            if fault == "drop":
                self.close_connection = True
                return
            if fault.isdigit() and len(fault) == 3:
                self._reply(int(fault), "application/json", b'{"error": "injected fault"}')
                return
            if fault.startswith("delay:"):
                time.sleep(min(float(fault.split(":", 1)[1]), MAX_DELAY_S))
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            status, ctype, data = proxy.forward(self.command, self.path, body, headers)
            if fault.startswith("late:"):
                time.sleep(min(float(fault.split(":", 1)[1]), MAX_DELAY_S))
            if fault == "cut":
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.close_connection = True
                return
            self._reply(status, ctype, data)

        def _reply(self, status: int, ctype: str, data: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timed out) while we slept: nothing to answer
                self.close_connection = True

    return Handler
