#!/usr/bin/python3
"""A small HTTP server that misbehaves on purpose, for origin fault tests.

    faulty_http.py ROOT PORT_FILE

Serves ROOT on 127.0.0.1 at a free port (written to PORT_FILE).  The first
path component picks the behaviour for the rest of the path:

    /ok/...           byte ranges as they should be (206, Content-Range)
    /no-range/...     ignores Range: 200 and the whole file
    /wrong-range/...  206 with a Content-Range that names other bytes
    /short/...        206 whose body stops halfway (connection closed)
    /flaky/...        503 for the first 2 requests of each path, then ok
    /down/...         always 503
    /forbidden/...    403
    /delay-MS/...     ok, after waiting MS milliseconds (an origin far away)
    /hang/...         never answers range requests (until the client gives up)
    /stall-N/...      ok, but every N-th range request (counted over the
                      whole server) waits 3 s first: a tail to hedge against
    /__counts         JSON: requests seen per full path

Full GETs (no Range) are answered normally in every mode but the status ones.
"""
import http.server
import json
import os
import re
import sys
import threading
import time

ROOT, PORT_FILE = sys.argv[1], sys.argv[2]
counts = {}
ranges = 0
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_bytes(self, status, body, headers=(), length=None):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        with lock:
            counts[self.path] = counts.get(self.path, 0) + 1
            seen = counts[self.path]
        if self.path == "/__counts":
            return self.send_bytes(200, json.dumps(counts).encode())
        parts = self.path.lstrip("/").split("/", 1)
        if len(parts) != 2:
            return self.send_bytes(404, b"no mode\n")
        mode, rest = parts
        if mode.startswith("delay-"):
            time.sleep(int(mode[6:]) / 1000.0)
            mode = "ok"
        if mode == "hang" and self.headers.get("Range"):
            time.sleep(30)
            return
        if mode.startswith("stall-"):
            if self.headers.get("Range"):
                global ranges
                with lock:
                    ranges += 1
                    stall = ranges % int(mode[6:]) == 0
                if stall:
                    time.sleep(3)
            mode = "ok"
        if mode == "down" or (mode == "flaky" and seen <= 2):
            return self.send_bytes(503, b"try later\n")
        if mode == "forbidden":
            return self.send_bytes(403, b"no\n")
        path = os.path.join(ROOT, rest)
        if not os.path.isfile(path):
            return self.send_bytes(404, b"not found\n")
        data = open(path, "rb").read()
        m = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range", ""))
        if not m or mode == "no-range":
            return self.send_bytes(200, data)
        first, last = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        body = data[first:last + 1]
        shown = (first + 1, last + 1) if mode == "wrong-range" else (first, last)
        headers = [("Content-Range", "bytes %d-%d/%d" % (shown[0], shown[1], len(data)))]
        if mode == "short":
            self.send_bytes(206, body[: len(body) // 2], headers, length=len(body))
            self.close_connection = True
            return
        self.send_bytes(206, body, headers)


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 1024  # the default 5 drops connections when clients open many at once
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
