#!/usr/bin/python3
"""An HTTP origin that holds every range request of a shard until the test
lets it go, and logs the order they arrived in: what a client asked of the
origin while everything it asked was still in flight.

    gated_origin.py ROOT PORT_FILE

Serves ROOT on 127.0.0.1 at a free port (written to PORT_FILE once ready),
with single byte ranges.  A range GET of a path containing "shard-", and
any GET of a path under a directory named "held", is logged as it arrives
and answered only once released; everything else (the index, HEAD) is
answered at once.

    GET /__log          JSON: [[path, range], ...] in order of arrival
    GET /__release/N    release the N-th logged request (from 0), and every
                        other one asking the same (a hedge repeats its
                        read's exact request)
    GET /__release/all  release every request, and answer later ones at once
    GET /__hold         hold the requests that come from now on again
"""
import http.server
import json
import os
import re
import sys
import threading

ROOT, PORT_FILE = sys.argv[1], sys.argv[2]
changed = threading.Condition()
log = []            # [path, range] by arrival
released = set()    # (path, range) pairs let go
release_all = False


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
        global release_all
        if self.path == "/__log":
            with changed:
                body = json.dumps(log).encode()
            return self.send_bytes(200, body)
        if self.path == "/__hold":
            with changed:
                release_all = False
                released.clear()
            return self.send_bytes(200, b"ok\n")
        m = re.match(r"/__release/(\d+|all)$", self.path)
        if m:
            with changed:
                if m.group(1) == "all":
                    release_all = True
                else:
                    number = int(m.group(1))
                    if number >= len(log):
                        return self.send_bytes(404, b"no such request\n")
                    released.add(tuple(log[number]))
                changed.notify_all()
            return self.send_bytes(200, b"ok\n")
        path = os.path.join(ROOT, self.path.lstrip("/"))
        if ".." in self.path or not os.path.isfile(path):
            return self.send_bytes(404, b"not found\n")
        wanted = self.headers.get("Range")
        m = re.match(r"bytes=(\d+)-(\d+)$", wanted or "")
        if self.command == "GET" and ((m and "shard-" in self.path) or "/held/" in self.path):
            with changed:
                log.append([self.path, wanted])
                changed.notify_all()
                while not release_all and (self.path, wanted) not in released:
                    changed.wait()
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
            pass


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
