#!/usr/bin/python3
"""A slow HTTP origin that counts what it is asked, for hedging tests.

    hedge_origin.py ROOT PORT_FILE STALL_EVERY STALL_MS

Serves ROOT on 127.0.0.1 at a free port (written to PORT_FILE once ready),
with single byte ranges.  Every STALL_EVERY-th range request (counted over
the whole server, in order of arrival) waits STALL_MS before it answers:
a tail that readers will want to hedge.  Other requests answer at once.

GET /__counts answers JSON counted on this side, independent of the
client's own bookkeeping:

    range_requests  range GETs received
    distinct        distinct (path, Range) pairs among them: the reads
                    asked for.  A hedge repeats its read's exact request,
                    so range_requests - distinct is the hedges received.
    repeated        {"path Range": times} for the pairs asked more than once
    stalled         range requests that were made to wait
"""
import http.server
import json
import os
import re
import sys
import threading
import time

ROOT, PORT_FILE = sys.argv[1], sys.argv[2]
STALL_EVERY, STALL_SECONDS = int(sys.argv[3]), int(sys.argv[4]) / 1000.0
lock = threading.Lock()
asked = {}  # "path Range" -> times received
range_requests = 0
stalled = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_bytes(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        global range_requests, stalled
        if self.path == "/__counts":
            with lock:
                counts = {
                    "range_requests": range_requests,
                    "distinct": len(asked),
                    "repeated": {k: n for k, n in asked.items() if n > 1},
                    "stalled": stalled,
                }
            return self.send_bytes(200, json.dumps(counts).encode())
        path = os.path.join(ROOT, self.path.lstrip("/"))
        if ".." in self.path or not os.path.isfile(path):
            return self.send_bytes(404, b"not found\n")
        wanted = self.headers.get("Range")
        m = re.match(r"bytes=(\d+)-(\d+)$", wanted or "")
        if self.command == "GET" and m:
            key = self.path + " " + wanted
            with lock:
                range_requests += 1
                asked[key] = asked.get(key, 0) + 1
                stall = range_requests % STALL_EVERY == 0
                stalled += stall
            if stall:
                time.sleep(STALL_SECONDS)
        with open(path, "rb") as f:
            data = f.read()
        if not m:
            return self.send_bytes(200, data)
        first, last = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        headers = [("Content-Range", "bytes %d-%d/%d" % (first, last, len(data)))]
        self.send_bytes(206, data[first:last + 1], headers)

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the loser of a hedge, cancelled by the reader


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 1024  # the default 5 drops connections when clients open many at once
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # cancelled transfers; anything else shows in the counts


server = Server(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
