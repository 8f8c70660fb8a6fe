#!/usr/bin/env python3
"""A hostile HTTP origin for tests/cli/http_hostile.sh, and a bystander
that records what reaches it.

    hostile_http.py ROOT PORTFILE RECORD

Two servers on loopback ports of their own, "ORIGIN BYSTANDER" written to
PORTFILE once both listen.  The bystander answers anything with 200 and a
small body, and appends every request it gets ("METHOD PATH" and its
headers) to RECORD: a test checks that nothing reached it.  The origin
answers by the first component of the path:

  /away/...    302 to http://localhost:BYSTANDER/stolen/... (another host
               name and port: a redirect off the origin)
  /ftp/...     302 to ftp://127.0.0.1:BYSTANDER/... (another scheme)
  /loop/N      302 to /loop/N+1 on the origin itself, forever
  /moved/...   302 to /... on the origin itself (a redirect larder follows)
  /flip/...    the file under ROOT while ROOT/flip does not exist; once it
               does, like /away/
  /endless/... 200 without Content-Length, and zeros until the client goes
  /huge/...    200 with a Content-Length of 5 GiB, then nothing
  /bucket...   an S3 ListObjectsV2 endpoint that never ends
               (?list-type=2): ROOT/s3mode says how ("same-token": the same
               token on every page, no key; "no-keys": a new token and no
               key; "repeat": a new token and the same two keys); a GET of
               an object answers 302 to the bystander
  anything else: the file under ROOT, with byte ranges (206)

The origin counts its requests in ROOT/requests.
"""
import http.server
import os
import re
import sys
import threading

root, port_file, record = sys.argv[1], sys.argv[2], sys.argv[3]
lock = threading.Lock()
requests = 0


class Bystander(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        with lock, open(record, "a") as f:
            f.write(f"{self.command} {self.path}\n{self.headers}\n")
        body = b"the bystander's bytes\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    do_HEAD = do_GET


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def redirect(self, location):
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def listing(self, query):
        mode = open(os.path.join(root, "s3mode")).read().strip()
        token = re.search(r"continuation-token=([^&]*)", query)
        page = int(token.group(1)[4:]) + 1 if token and mode != "same-token" else 1
        keys = ""
        if mode == "repeat":
            keys = "".join(f"<Contents><Key>p/k{i}</Key><Size>1</Size></Contents>" for i in (1, 2))
        next_token = "tok" if mode == "same-token" else f"page{page}"
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
            f"<IsTruncated>true</IsTruncated><NextContinuationToken>{next_token}"
            f"</NextContinuationToken>{keys}</ListBucketResult>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        global requests
        with lock:
            requests += 1
            with open(os.path.join(root, "requests"), "w") as f:
                f.write(f"{requests}\n")
        path, _, query = self.path.partition("?")
        first = path.split("/")[1] if path.count("/") >= 1 else ""
        bystander = f"127.0.0.1:{bystander_port}"
        if first == "flip" and os.path.exists(os.path.join(root, "flip")):
            first = "away"
        elif first == "flip":
            path = path[len("/flip"):]
        if first == "away":
            return self.redirect(f"http://localhost:{bystander_port}/stolen{self.path}")
        if first == "ftp":
            return self.redirect(f"ftp://{bystander}{path}")
        if first == "loop":
            n = int(path.split("/")[2] or 0)
            return self.redirect(f"/loop/{n + 1}")
        if first == "moved":
            return self.redirect(path[len("/moved"):])
        if first == "bucket":
            if "list-type=2" in query:
                return self.listing(query)
            return self.redirect(f"http://localhost:{bystander_port}/stolen{path}")
        if first == "endless":
            self.protocol_version = "HTTP/1.0"  # the body ends when the connection does
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    self.wfile.write(chunk)
            except OSError:
                return
        if first == "huge":
            self.send_response(200)
            self.send_header("Content-Length", str(5 << 30))
            self.end_headers()
            self.wfile.flush()
            threading.Event().wait(30)  # never sends the body
            return
        try:
            data = open(os.path.join(root, path.lstrip("/")), "rb").read()
        except OSError:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        r = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if r:
            first_byte, last = int(r.group(1)), min(int(r.group(2)), len(data) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first_byte}-{last}/{len(data)}")
            data = data[first_byte : last + 1]
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(data)

    do_HEAD = do_GET


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


bystander_server = Server(("127.0.0.1", 0), Bystander)
bystander_port = bystander_server.server_address[1]
origin_server = Server(("127.0.0.1", 0), Origin)
threading.Thread(target=bystander_server.serve_forever, daemon=True).start()
with open(port_file + ".tmp", "w") as f:
    f.write(f"{origin_server.server_address[1]} {bystander_port}\n")
os.rename(port_file + ".tmp", port_file)
origin_server.serve_forever()
