"""HTTPS serving for the webhook, plus a plain-HTTP health port for probes.

The API server POSTs AdmissionReviews to ``/mutate`` and ``/validate`` on the HTTPS port;
``/healthz`` (the process serves) and ``/readyz`` (the device inventory is synced) answer on
both ports, ``/metrics`` (Prometheus, `dra.webhook.metrics`) too. The certificate and key are
read again when their files change (cert-manager or a Secret update rotates them in place), so a
rotation needs no restart. With a client CA (``--client-ca``) the HTTPS port admits only callers
with a certificate it signed (the API server's); each port answers with a bounded pool of
threads, and every socket operation times out after `REQUEST_TIMEOUT` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from dra.webhook.metrics import WebhookMetrics
from dra.webhook.review import Admission, BadReview

log = logging.getLogger(__name__)
MAX_BODY = 8 << 20  # bytes; an AdmissionReview of a large pod is well under 1 MiB
REQUEST_TIMEOUT = 10  # seconds; the API server gives a webhook call 10 s by default
WORKERS = 16  # threads answering connections, per port
BACKLOG = 64  # accepted connections waiting for a thread; past that a new one is closed at once


class Certificates:
    """A server-side TLS context for `cert`/`key`, rebuilt when either file changes."""

    def __init__(self, cert: Path, key: Path, check_every: float = 2.0, client_ca: Path | None = None) -> None:
        """`client_ca`: PEM CA bundle; then every client must present a certificate it signed
        (the API server's, set in its admission config), else the handshake fails."""
        self.cert, self.key = Path(cert), Path(key)
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self._check_every = check_every
        self._lock = threading.Lock()
        self._stamp: tuple[float, ...] = ()
        self._checked = 0.0
        self._context = self._load()

    def _mtimes(self) -> tuple[float, ...]:
        files = (self.cert, self.key) + ((self.client_ca,) if self.client_ca is not None else ())
        return tuple(os.stat(f).st_mtime for f in files)

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        stamp = self._mtimes()
        ctx.load_cert_chain(str(self.cert), str(self.key))
        if self.client_ca is not None:
            ctx.load_verify_locations(cafile=str(self.client_ca))
            ctx.verify_mode = ssl.CERT_REQUIRED
        self._stamp = stamp
        return ctx

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= self._check_every:
                self._checked = now
                try:
                    if self._mtimes() != self._stamp:
                        self._context = self._load()
                        log.info("serving certificate reloaded", extra={"cert": str(self.cert)})
                except (OSError, ssl.SSLError) as e:  # mid-rotation: keep serving the old pair
                    log.warning("serving certificate not reloaded; keeping the previous one", extra={"error": str(e)})
            return self._context


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT  # per socket operation: the handshake, each read and write
    # Headers and body go out in two writes; with Nagle on, the second waits for the peer's
    # delayed ACK of the first (~40 ms per admission on Linux).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # http.server's own access log: off
        return

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if self.server.busy():  # an idle keep-alive connection would hold a worker: let the caller reconnect
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            ready = self.server.ready()
            self._send(200 if ready else 503, b"ok\n" if ready else b"device inventory not synced yet\n", "text/plain")
        elif path == "/metrics":
            self._send(200, self.server.metrics.render(), self.server.metrics.content_type)
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        endpoint = self.server.endpoints.get(path)
        if endpoint is None:
            self._send(404, b"not found: POST /mutate or /validate\n", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._send(400, b"a body with Content-Length (at most 8 MiB) is required\n", "text/plain")
            return
        started = time.monotonic()
        answer = None
        try:
            review = json.loads(self.rfile.read(length))
            answer = endpoint(review)
        except (ValueError, BadReview) as e:
            self._send(400, f"{e}\n".encode(), "text/plain")
            return
        except Exception:
            log.exception("admission failed", extra={"endpoint": path})
            self._send(500, b"internal error; see the webhook's log\n", "text/plain")
            return
        finally:
            self.server.metrics.observe(path, time.monotonic() - started, answer)
        self._send(200, json.dumps(answer).encode())


class _Server(HTTPServer):
    """One port; connections are answered by a pool of `WORKERS` threads, at most `BACKLOG` wait
    (a caller opening connections without end gets them closed, and costs no thread)."""

    allow_reuse_address = True
    request_queue_size = 128  # the kernel's accept queue (socketserver's 5 drops a burst's SYNs)

    def __init__(self, address: tuple[str, int], endpoints: dict[str, Callable[[Any], Any]],
                 ready: Callable[[], bool], certificates: Certificates | None, metrics: WebhookMetrics) -> None:
        self.endpoints = endpoints
        self.metrics = metrics
        self.ready = ready
        self.certificates = certificates
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="webhook")
        self._slots = threading.BoundedSemaphore(WORKERS + BACKLOG)
        self._count = threading.Lock()
        self._in_flight = 0
        super().__init__(address, _Handler)

    def busy(self) -> bool:
        """Half the workers or more are taken."""
        return self._in_flight >= WORKERS // 2

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.metrics.refused.inc()
            self.shutdown_request(request)
            return
        with self._count:
            self._in_flight += 1
        try:
            self._pool.submit(self._work, request, client_address)
        except RuntimeError:  # shutting down
            self._done()
            self.shutdown_request(request)

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._done()

    def _done(self) -> None:
        with self._count:
            self._in_flight -= 1
        self._slots.release()

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        sock.settimeout(REQUEST_TIMEOUT)
        if self.certificates is None:
            return sock, addr
        self.metrics.connections.inc()
        # The handshake runs in the handler thread (first read), not in the accept loop.
        return self.certificates.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection error", extra={"client": str(client_address)}, exc_info=True)


class WebhookServer:
    """The HTTPS admission server and the health server, each on its own thread."""

    def __init__(self, admission: Admission, cert: Path, key: Path, port: int = 8443, host: str = "0.0.0.0",
                 health_port: int | None = 8081, ready: Callable[[], bool] = lambda: True,
                 reload_every: float = 2.0, client_ca: Path | None = None) -> None:
        endpoints: dict[str, Callable[[Any], Any]] = {"/mutate": admission.mutate, "/validate": admission.validate}
        self.metrics = WebhookMetrics()
        self.https = _Server((host, port), endpoints, ready, Certificates(cert, key, reload_every, client_ca),
                             self.metrics)
        self.health = _Server((host, health_port), {}, ready, None, self.metrics) if health_port is not None else None
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self.https.server_address[1])

    @property
    def health_port(self) -> int | None:
        return int(self.health.server_address[1]) if self.health else None

    def start(self) -> None:
        for srv, name in ((self.https, "webhook-https"), (self.health, "webhook-health")):
            if srv is not None:
                t = threading.Thread(target=srv.serve_forever, name=name, daemon=True)
                t.start()
                self._threads.append(t)

    def stop(self) -> None:
        for srv in (self.https, self.health):
            if srv is not None:
                srv.shutdown()
                srv.server_close()
        for t in self._threads:
            t.join(timeout=5)
