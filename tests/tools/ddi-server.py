#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A stand-in for an Eclipse hawkBit server's Direct Device Integration (DDI) API, for tests.

hawkBit itself is a Java server this machine cannot run; this fixture serves the documented JSON
shapes (https://eclipse.dev/hawkbit/apis/ddi_api/) for one tenant and one controller over HTTPS,
and is strict about what the client sends: a request without the right "Authorization:
TargetToken ...", with a malformed JSON body, an unknown field, an execution or finished value
DDI does not define, or a feedback for another action is answered 400 (or 401) and logged as
rejected, so a test can fail on it.

  ddi-server.py --dir DIR --port N --cert C --key K --token T [--tenant DEFAULT] [--controller ID]

DIR/state.json (re-read on every request) says what the server wants:
  {"sleep": "00:00:01",                      config.polling.sleep
   "config": true,                           ask for configData (until the device sends it)
   "action": {"id": "7", "artifacts": ["json-1.tpb"], "update": "forced",
              "bad_hash": false, "slow": false},   a deploymentBase; artifacts from DIR/files/
   "cancel": "7"}                            a cancelAction for that action id
An action is offered until the device closes it. Artifacts are served from /artifacts/NAME with
Range support ("slow": 8 KiB/s). Every request is appended to DIR/log.jsonl:
  {"method", "path", "status", "body"}.
"""
import argparse
import hashlib
import json
import os
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EXECUTIONS = {"closed", "proceeding", "canceled", "scheduled", "rejected", "resumed", "downloaded", "download"}
FINISHED = {"success", "failure", "none"}
lock = threading.Lock()


def load_state(d):
    with open(os.path.join(d, "state.json")) as f:
        return json.load(f)


def save_state(d, st):
    with open(os.path.join(d, "state.json.new"), "w") as f:
        json.dump(st, f)
    os.replace(os.path.join(d, "state.json.new"), os.path.join(d, "state.json"))


def check_feedback(body, action_id):
    """None when @body is a valid DDI action feedback for @action_id, else why not."""
    if not isinstance(body, dict) or set(body) - {"id", "time", "status"} or "status" not in body:
        return "feedback: expected an object with 'status' (and optional 'id', 'time')"
    if "id" in body and body["id"] != action_id:
        return "feedback: id %r is not the action %r" % (body["id"], action_id)
    st = body["status"]
    if not isinstance(st, dict) or set(st) - {"execution", "result", "details", "code"}:
        return "feedback: bad 'status'"
    if st.get("execution") not in EXECUTIONS:
        return "feedback: execution %r is not a DDI value" % st.get("execution")
    res = st.get("result")
    if not isinstance(res, dict) or set(res) - {"finished", "progress"} or res.get("finished") not in FINISHED:
        return "feedback: bad 'result'"
    det = st.get("details", [])
    if not isinstance(det, list) or not all(isinstance(x, str) for x in det):
        return "feedback: 'details' must be a list of strings"
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self, status, body=None, why=None):
        entry = {"method": self.command, "path": self.path, "status": status, "body": body}
        if why:
            entry["why"] = why
        with lock, open(os.path.join(self.server.dir, "log.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def reply(self, status, obj=None, raw=None, headers=()):
        data = raw if raw is not None else (json.dumps(obj).encode() if obj is not None else b"")
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        if obj is not None:
            self.send_header("Content-Type", "application/hal+json")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def refuse(self, status, why, body=None):
        self.record(status, body, why)
        self.reply(status, {"errorCode": "fixture.rejected", "message": why})

    def authorized(self):
        if self.headers.get("Authorization") != "TargetToken " + self.server.token:
            self.refuse(401, "missing or wrong Authorization: TargetToken")
            return False
        return True

    def base(self):
        return "https://127.0.0.1:%d/%s/controller/v1/%s" % (self.server.port, self.server.tenant,
                                                              self.server.controller)

    def do_GET(self):
        if not self.authorized():
            return
        st = load_state(self.server.dir)
        base = "/%s/controller/v1/%s" % (self.server.tenant, self.server.controller)
        path = self.path.split("?")[0]
        action = st.get("action")
        if path == base:
            links = {}
            if st.get("cancel"):
                links["cancelAction"] = {"href": self.base() + "/cancelAction/" + st["cancel"]}
            elif action:
                links["deploymentBase"] = {"href": self.base() + "/deploymentBase/" + action["id"] + "?c=1"}
            if st.get("config"):
                links["configData"] = {"href": self.base() + "/configData"}
            self.record(200)
            self.reply(200, {"config": {"polling": {"sleep": st.get("sleep", "00:00:01")}}, "_links": links})
        elif action and path == base + "/deploymentBase/" + action["id"]:
            # An artifact is a file name (the first chunk, no metadata) or {"file", "model"}: a chunk
            # per model, its metadata naming it as a software module's target-visible metadata does.
            chunks, by_model = [], {}
            for entry in action["artifacts"]:
                model = entry.get("model") if isinstance(entry, dict) else None
                if model not in by_model:
                    chunk = {"part": "tpb", "name": "taskpatch-" + (model or "default"), "version": action["id"],
                             "artifacts": []}
                    if model:
                        chunk["metadata"] = [{"key": "taskpatch.model", "value": model}]
                    by_model[model] = chunk
                    chunks.append(chunk)
            for entry in action["artifacts"]:
                name = entry["file"] if isinstance(entry, dict) else entry
                model = entry.get("model") if isinstance(entry, dict) else None
                data = open(os.path.join(self.server.dir, "files", name), "rb").read()
                digest = hashlib.sha256(data + (b"x" if action.get("bad_hash") else b"")).hexdigest()
                url = "https://127.0.0.1:%d/artifacts/%s" % (self.server.port, name)
                by_model[model]["artifacts"].append({
                    "filename": name, "size": len(data),
                    "hashes": {"sha1": hashlib.sha1(data).hexdigest(), "md5": hashlib.md5(data).hexdigest(),
                               "sha256": digest},
                    "_links": {"download": {"href": url}, "md5sum": {"href": url + ".MD5SUM"}}})
            self.record(200)
            self.reply(200, {"id": action["id"], "deployment": {"download": "forced",
                                                                  "update": action.get("update", "forced"),
                                                                  "chunks": chunks},
                             "actionHistory": {"status": "RUNNING", "messages": []}})
        elif st.get("cancel") and path == base + "/cancelAction/" + st["cancel"]:
            self.record(200)
            self.reply(200, {"id": st["cancel"], "cancelAction": {"stopId": st["cancel"]}})
        elif path.startswith("/artifacts/"):
            self.serve_artifact(path[len("/artifacts/"):], action or {})
        else:
            self.refuse(404, "no such resource")

    def serve_artifact(self, name, action):
        fp = os.path.join(self.server.dir, "files", os.path.basename(name))
        if not os.path.exists(fp):
            self.refuse(404, "no such artifact")
            return
        data = open(fp, "rb").read()
        start, status, headers = 0, 200, []
        rng = self.headers.get("Range")
        if rng:
            if not rng.startswith("bytes=") or not rng[6:].rstrip("-").isdigit() or not rng.endswith("-"):
                self.refuse(400, "Range: expected bytes=N-")
                return
            start = int(rng[6:-1])
            if start >= len(data):
                self.refuse(416, "Range past the end")
                return
            status = 206
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data))))
        self.record(status, {"range": rng})
        body = data[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        step = 8192 if action.get("slow") else len(body) or 1
        for i in range(0, len(body), step):
            try:
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
            if action.get("slow"):
                time.sleep(1)

    def read_json(self):
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            self.refuse(400, "Content-Type must be application/json")
            return None, False
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            return json.loads(raw), True
        except ValueError:
            self.refuse(400, "the body is not JSON", raw.decode(errors="replace"))
            return None, False

    def do_POST(self):
        if not self.authorized():
            return
        body, ok = self.read_json()
        if not ok:
            return
        base = "/%s/controller/v1/%s" % (self.server.tenant, self.server.controller)
        parts = self.path[len(base):].split("/") if self.path.startswith(base) else []
        # ['', 'deploymentBase'|'cancelAction', ID, 'feedback']
        if len(parts) != 4 or parts[1] not in ("deploymentBase", "cancelAction") or parts[3] != "feedback":
            self.refuse(404, "no such resource", body)
            return
        why = check_feedback(body, parts[2])
        if why:
            self.refuse(400, why, body)
            return
        with lock:
            st = load_state(self.server.dir)
            closing = body["status"]["execution"] in ("closed", "canceled")
            if parts[1] == "deploymentBase" and st.get("action") and st["action"]["id"] == parts[2] and closing:
                st["action"] = None     # closed: no longer offered
            if parts[1] == "cancelAction" and closing and st.get("cancel") == parts[2]:
                st["cancel"] = None
                if st.get("action") and st["action"]["id"] == parts[2]:
                    st["action"] = None
            save_state(self.server.dir, st)
        self.record(200, body)
        self.reply(200, raw=b"")

    def do_PUT(self):
        if not self.authorized():
            return
        body, ok = self.read_json()
        if not ok:
            return
        if self.path != "/%s/controller/v1/%s/configData" % (self.server.tenant, self.server.controller):
            self.refuse(404, "no such resource", body)
            return
        if (not isinstance(body, dict) or set(body) - {"mode", "data", "id", "time", "status"}
                or body.get("mode", "merge") not in ("merge", "replace", "remove")
                or not isinstance(body.get("data"), dict)
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in body["data"].items())):
            self.refuse(400, "configData: expected {mode, data: {string: string}}", body)
            return
        with lock:
            st = load_state(self.server.dir)
            st["config"] = False
            save_state(self.server.dir, st)
        self.record(200, body)
        self.reply(200, raw=b"")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--tenant", default="DEFAULT")
    p.add_argument("--controller", default="device-1")
    a = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.dir, srv.port, srv.token, srv.tenant, srv.controller = a.dir, a.port, a.token, a.tenant, a.controller
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("ready", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
