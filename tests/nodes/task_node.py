#!/usr/bin/env python3
"""A click-counter node written to the task's text only, in another
language's idiom: the conformance suite (tests/conformance.rs) runs the
balancer against it, in several variants, to prove that nothing of our own
reference node is required.

The task's API and nothing else:
  POST /press {"session_id": ".."} -> "You clicked N times"
  POST /clean {"archive": true|false} -> "OK": archive every session it
       holds (with its own count) into session_archive, then forget them all.
No /health (unless --health), no instance id, no clean tokens, no
session_ids: every clean forgets everything.

Python's standard library only; the archive is written through `psql`, so
the node needs no database driver.
"""

import argparse
import http.client
import http.server
import json
import random
import socket
import ssl
import subprocess
import sys
import threading
import time


def archive(database_url, counts):
    """Writes (session_id, clicks) rows as the task's nodes do. Raises on failure."""
    if not counts:
        return
    quote = lambda text: "'" + text.replace("'", "''") + "'"
    rows = ",".join(f"({quote(sid)}, {n}, now())" for sid, n in counts.items())
    sql = (
        "INSERT INTO session_archive (session_id, clicks, archived_at) VALUES "
        + rows
        + " ON CONFLICT (session_id) DO UPDATE SET clicks = EXCLUDED.clicks, archived_at = now()"
    )
    subprocess.run(
        ["psql", database_url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=10,
    )


class Counter:
    def __init__(self, args):
        self.args = args
        self.sessions = {}
        self.lock = threading.Lock()

    def press(self, session_id):
        with self.lock:
            count = self.sessions.get(session_id, 0) + 1
            self.sessions[session_id] = count
        return count

    def clean(self, keep_archive):
        # Locked throughout: no press lands between the archive and the forget.
        with self.lock:
            if keep_archive:
                archive(self.args.database_url, self.sessions)
            self.sessions.clear()


def make_handler(args, counter):
    class Handler(http.server.BaseHTTPRequestHandler):
        # HTTP/1.0 (the default): one request a connection, closed after it.
        protocol_version = "HTTP/1.1" if args.keep_alive_requests else "HTTP/1.0"
        # An idle keep-alive connection is closed after this (a proxy's habit).
        timeout = args.idle_close_secs if args.keep_alive_requests else None
        served = 0

        def log_message(self, *_):
            pass

        def answer(self, status, body, content_type="text/plain"):
            data = body.encode()
            self.served += 1
            closing = bool(args.keep_alive_requests) and self.served >= args.keep_alive_requests
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if closing:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw or b"{}")

        def do_GET(self):
            if args.health and self.path == "/health":
                self.answer(200, '{"status":"ok"}', "application/json")
            else:
                self.answer(404, "Not Found")

        def do_POST(self):
            try:
                body = self.body()
            except ValueError:
                return self.answer(400, "bad JSON")
            if self.path == "/press":
                session_id = body.get("session_id")
                if not isinstance(session_id, str) or not session_id:
                    return self.answer(400, "session_id required")
                if args.max_delay_ms:
                    time.sleep(random.uniform(args.min_delay_ms, args.max_delay_ms) / 1000)
                count = counter.press(session_id)
                words = "the button " if args.wording == "button" else ""
                self.answer(200, f"You clicked {words}{count} times")
            elif self.path == "/clean":
                if args.hold_cleans and body.get("archive"):
                    # A test's fault: the clean is taken and never done;
                    # the file tells the test it arrived (then it kills us).
                    open(args.hold_cleans, "w").close()
                    while True:
                        time.sleep(3600)
                try:
                    counter.clean(bool(body.get("archive")))
                except Exception as error:  # the archive failed: nothing forgotten
                    return self.answer(500, f"archive failed: {error}")
                self.answer(200, "OK")
            else:
                self.answer(404, "Not Found")

    return Handler


def make_proxy_handler(args):
    """A reverse proxy in front of a node, closing its clients' keep-alive
    connections after a few requests or an idle second."""
    backend = args.proxy_to.split("://", 1)[1]
    host, port = backend.rsplit(":", 1)

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = args.idle_close_secs
        served = 0

        def log_message(self, *_):
            pass

        def forward(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            upstream = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                upstream.request(method, self.path, body=data,
                                 headers={"Content-Type": "application/json"})
                reply = upstream.getresponse()
                payload = reply.read()
                status = reply.status
            except OSError:
                status, payload = 502, b"bad gateway"
            finally:
                upstream.close()
            self.served += 1
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            if self.served >= args.keep_alive_requests:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):
            self.forward("GET")

        def do_POST(self):
            self.forward("POST")

    return Proxy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--wording", choices=["plain", "button"], default="plain")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="serve one request at a time (http.server.HTTPServer)")
    parser.add_argument("--backlog", type=int, default=5, help="listen backlog")
    parser.add_argument("--keep-alive-requests", type=int, default=0,
                        help="speak HTTP/1.1 and close a connection after this many requests")
    parser.add_argument("--idle-close-secs", type=float, default=1.0)
    parser.add_argument("--min-delay-ms", type=float, default=0)
    parser.add_argument("--max-delay-ms", type=float, default=0)
    parser.add_argument("--health", action="store_true", help="also answer GET /health")
    parser.add_argument("--hold-cleans", metavar="FILE",
                        help="hold every /clean that archives for ever, creating FILE when one arrives")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--proxy-to", help="be a proxy in front of this node instead")
    args = parser.parse_args()

    if args.proxy_to:
        args.keep_alive_requests = args.keep_alive_requests or 3
        handler = make_proxy_handler(args)
    else:
        handler = make_handler(args, Counter(args))
    base = http.server.HTTPServer if args.one_at_a_time else http.server.ThreadingHTTPServer
    server_class = type("Server", (base,), {"request_queue_size": args.backlog,
                                            "daemon_threads": True})
    server = server_class(("127.0.0.1", args.port), handler)
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*args.tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening on {args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
