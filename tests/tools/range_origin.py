#!/usr/bin/env python3
"""An HTTP origin for tests that records every request: GET (whole, or one
byte range: 206 with Content-Range) and HEAD of the files under ROOT, each
answered after DELAY seconds when its path ends with DELAYED_SUFFIX, on a
thread of its own.  Writes its port to PORT_FILE once it listens, and one
JSON line per answered request to LOG: path, first and last byte, and when
it arrived and when its last byte was sent (time.monotonic()).

    range_origin.py ROOT PORT_FILE LOG DELAY DELAYED_SUFFIX
"""
import http.server
import json
import os
import re
import socketserver
import sys
import threading
import time

root, port_file, log_path, delay, suffix = sys.argv[1:6]
delay = float(delay)
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, with_body):
        arrived = time.monotonic()
        path = os.path.normpath(os.path.join(root, self.path.lstrip("/")))
        if not path.startswith(os.path.abspath(root)) or not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = os.path.getsize(path)
        lo, hi, status = 0, size - 1, 200
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if ranged:
            lo = int(ranged.group(1))
            hi = min(int(ranged.group(2)) if ranged.group(2) else size - 1, size - 1)
            status = 206
        if path.endswith(suffix):
            time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Length", str(hi - lo + 1))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (lo, hi, size))
        self.end_headers()
        if with_body:
            with open(path, "rb") as f:
                f.seek(lo)
                self.wfile.write(f.read(hi - lo + 1))
        with lock, open(log_path, "a") as log:
            log.write(json.dumps({"path": self.path, "lo": lo, "hi": hi, "body": with_body,
                                  "arrived": arrived, "sent": time.monotonic()}) + "\n")

    def do_GET(self):
        self.answer(True)

    def do_HEAD(self):
        self.answer(False)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
