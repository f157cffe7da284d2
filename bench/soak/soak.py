#!/usr/bin/env python3
"""Soak: `specpipe serve` (demo pair, CPU, the faulty plugin in the kv_write slot, the
HTTP gateway on) under mixed load for a set time, then SIGTERM. scripts/soak.sh runs it.

Clients (threads, each with its own sockets) pick one behaviour per request: ZeroMQ
greedy streaming / whole, sampled with a seed, cancel mid-stream, disconnect mid-stream,
malformed frames, oversized frames, stats/health; HTTP streaming, HTTP disconnect
mid-stream, malformed HTTP. Checks (any failure exits 1 and names it):
  - every request a connected client sent is answered exactly once (one final/error per
    generate, deltas only before it, nothing after; one reply per other request);
  - greedy and seeded outputs equal the solo runs made before the load (a prefix, for
    fewer tokens or a cancel), and the deltas add up to the final;
  - the faulty plugin's failure happened under load and was absorbed (host.disabled);
  - after the load: nothing in flight, the KV pools (target and draft) empty;
  - RSS flat after warm-up, open file descriptors back to the idle count;
  - SIGTERM with requests in flight: each gets its final, the process exits 0.
With --curve the ZeroMQ endpoint is CURVE-authenticated (keys made by `specpipe keygen`):
clients share --curve-keys allowed keys, `server.max_inflight_per_client` is
--per-client-limit, and two more behaviours run: an intruder (no CURVE, or an unknown
key) must be refused at the handshake and never answered; a burst of limit + 2 requests
on one key gets `client_limit` for what is over its share, answered once like the rest.
After the load, `stats.security` must count at least those refusals and exactly the
`client_limit` replies the clients received.
Prints one JSON report (and writes it to --report)."""
import argparse
import faulthandler
import http.client
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import zmq
from zmq.utils.monitor import recv_monitor_message

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "clients"))
from specpipe_client import load_key  # noqa: E402  (the key-file reader users run)

PROMPTS = [
    "def add(a, b):", "import os\nimport sys\n\ndef main():", "class Stack:\n    def __init__(self):",
    "The quick brown fox", "for i in range(10):", "# Parse a CSV line\ndef parse(line):",
    "SELECT name FROM users WHERE", "Once upon a time, in a small village,",
]
MAX_TOKENS = 24      # solo runs; load requests ask for 4..MAX_TOKENS
SEEDS = [1, 2]       # sampled requests (temperature 0.8, top_k 16) compared with solo runs
SEND_TIMEOUT_MS = 60000  # a send that cannot leave in this time is a failure, not a hang
MONITOR_IDS = itertools.count()
DROP_EVENTS = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
               | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
DROP_NAMES = {zmq.EVENT_DISCONNECTED: "disconnected", zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
              zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake protocol error",
              zmq.EVENT_HANDSHAKE_FAILED_AUTH: "handshake refused"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Failures:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def add(self, what):
        with self.lock:
            if len(self.items) < 50:
                self.items.append(what)
            print("soak: FAIL:", what, file=sys.stderr, flush=True)


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}

    def inc(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n


def proc_stats(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def find_host(metrics):
    """The plugin host's counters ({disabled, fallbacks, ...}) inside a slot's metrics."""
    if isinstance(metrics, dict):
        if "disabled" in metrics and "fallbacks" in metrics:
            return metrics
        for v in metrics.values():
            found = find_host(v)
            if found:
                return found
    return {}


class Conn:
    """One DEALER connection; a request is sent and its replies read until terminal.
    curve: (server public key, client secret key), Z85 bytes, or None for a plain socket."""

    def __init__(self, ctx, endpoint, curve=None, monitor=False):
        self.ctx, self.endpoint, self.curve = ctx, endpoint, curve
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # A DEALER whose connection ZeroMQ gave up on (after a handshake error it does not
        # reconnect) has no pipe: a send would block for ever. Bounded, it raises zmq.Again,
        # which the client loop reports as a failure.
        self.sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
        if curve:
            self.sock.curve_serverkey = curve[0]
            self.sock.curve_secretkey = curve[1]
            self.sock.curve_publickey = zmq.curve_public(curve[1])
        # A monitor (before connect: it must see the handshake) for the intruder checks;
        # other connections watch only for losing their connection (`drops`), which a
        # DEALER survives by reconnecting without a word while replies sent to the old
        # connection are gone: a reply that never comes is then explained.
        # Each under a name of its own (pyzmq's default names one by the socket's fd, which
        # a new socket may reuse before the old name is released).
        addr = f"inproc://soak.monitor.{next(MONITOR_IDS)}"
        self.monitor = self.sock.get_monitor_socket(addr=addr) if monitor else None
        self.watch = None if monitor else self.sock.get_monitor_socket(DROP_EVENTS, addr=addr)
        self.drops = []
        self.sock.connect(endpoint)

    def again(self):
        """A new connection as this one's client (the same key)."""
        return Conn(self.ctx, self.endpoint, self.curve)

    def close(self):
        for name in ("monitor", "watch"):
            if getattr(self, name) is not None:
                self.sock.disable_monitor()
                getattr(self, name).close(0)
                setattr(self, name, None)
        self.sock.close(0)

    def note_drops(self):
        while self.watch is not None and self.watch.poll(0):
            event = recv_monitor_message(self.watch)
            self.drops.append((round(time.time(), 1), DROP_NAMES.get(event["event"], event["event"])))

    def why(self):
        """What ZeroMQ said about this connection: for a failure's message."""
        self.note_drops()
        return f" (connection events: {self.drops[-5:]})" if self.drops else " (the connection never dropped)"

    def recv(self, timeout_ms):
        self.note_drops()  # read as they come: a monitor's queue is bounded
        if not self.sock.poll(timeout_ms):
            return None
        return json.loads(self.sock.recv())


class Soak:
    def __init__(self, args):
        self.args = args
        self.fail = Failures()
        self.counts = Counts()
        self.ctx = zmq.Context()
        self.seq = 0
        self.seq_lock = threading.Lock()
        self.solo = {}      # (prompt index, seed or None) -> (tokens, text, finish)
        self.stop_at = 0.0
        self.curve_keys = []  # per allowed client: (server public, client secret)

    def next_id(self, tag):
        with self.seq_lock:
            self.seq += 1
            return f"{tag}-{self.seq}"

    def conn(self, index=0):
        """A new connection of client `index` (with CURVE: its key, clients share them)."""
        keys = self.curve_keys[index % len(self.curve_keys)] if self.curve_keys else None
        return Conn(self.ctx, self.endpoint, keys)

    def make_curve_keys(self):
        """`specpipe keygen` for the server and --curve-keys clients: the YAML's section."""
        a = self.args
        keydir = os.path.join(self.work, "keys")
        os.mkdir(keydir)
        names = ["server"] + [f"client{k}" for k in range(a.curve_keys)]
        for name in names:
            subprocess.run([a.specpipe, "keygen", os.path.join(keydir, name)], check=True,
                           stdout=subprocess.DEVNULL)
        server_pub = load_key(os.path.join(keydir, "server.pub"))
        self.curve_keys = [(server_pub, load_key(os.path.join(keydir, f"{n}.key"), secret=True))
                           for n in names[1:]]
        allowed = ", ".join(f"keys/{n}.pub" for n in names[1:])
        return f"""  curve:
    secret_key: keys/server.key
    allowed_clients: [{allowed}]
"""

    # ---- the server ----------------------------------------------------------------
    def start_server(self):
        a = self.args
        self.work = tempfile.mkdtemp(prefix="specpipe-soak-")
        self.zmq_port, self.http_port = free_port(), free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.zmq_port}"
        curve = self.make_curve_keys() if a.curve else ""
        config = f"""version: 1
models: {{target: demo-target, draft: demo-draft}}
plugins:
  faulty:
    path: {a.faulty_plugin}
    config: {{fail: commit, at_round: {a.fault_round}}}
slots:
  drafter: {{type: model, gamma: 4}}
  kv_write: {{type: faulty}}
scheduler: {{max_batch: 32, max_queue: 1024, prefill_chunk: 256, actor_threads: 1}}
server:
  endpoint: "{self.endpoint}"
  http: "127.0.0.1:{self.http_port}"
  max_message_bytes: 65536
  max_inflight: 256
  max_inflight_per_client: {a.per_client_limit}
{curve}  shutdown_grace_ms: 2000
  http_timeout_ms: 5000
defaults: {{max_tokens: {MAX_TOKENS}, temperature: 0.0, stop_at_eos: true}}
logging: {{level: info}}
"""
        self.config_path = os.path.join(self.work, "soak.yaml")
        open(self.config_path, "w").write(config)
        self.log = open(os.path.join(self.work, "serve.log"), "w")
        env = dict(os.environ, SPECPIPE_THREADS=str(a.threads))
        self.server = subprocess.Popen([a.specpipe, "serve", "--config", self.config_path],
                                       stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.control = self.conn()
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.server.poll() is not None:
                raise SystemExit(f"soak: the server exited ({self.server.returncode}); log: {self.log.name}")
            r = self.ask({"type": "health"}, 500)
            if r and r.get("status") == "ok":
                return
        raise SystemExit("soak: the server did not answer health within 120 s")

    def ask(self, msg, timeout_ms=30000):
        """One control request (stats/health) on the control connection."""
        msg = dict(msg, v=1, id=self.next_id("ctl"))
        self.control.sock.send(json.dumps(msg).encode())
        while True:
            r = self.control.recv(timeout_ms)
            if r is None or r.get("id") == msg["id"]:
                return r

    # ---- solo references --------------------------------------------------------------
    def generate_solo(self):
        conn = self.conn()
        for i, prompt in enumerate(PROMPTS):
            for seed in [None] + (SEEDS if i < 2 else []):
                req = {"type": "generate", "prompt": prompt, "max_tokens": MAX_TOKENS}
                if seed is not None:
                    req.update(temperature=0.8, top_k=16, seed=seed)
                rid = self.next_id("solo")
                conn.sock.send(json.dumps(dict(req, v=1, id=rid)).encode())
                r = conn.recv(300000)
                if not r or r.get("type") != "final":
                    raise SystemExit(f"soak: solo run {i}/{seed} failed: {r}")
                self.solo[(i, seed)] = (r["tokens"], r["text"], r["finish_reason"])
        conn.close()

    def check_output(self, where, key, max_tokens, tokens, text, finish, cancelled_ok):
        ref_tokens, ref_text, ref_finish = self.solo[key]
        n = len(tokens)
        if tokens != ref_tokens[:n]:
            self.fail.add(f"{where}: tokens differ from the solo run of {key}: {tokens} vs {ref_tokens[:n]}")
            return False
        if finish == "cancelled" and cancelled_ok:
            return True
        want = min(max_tokens, len(ref_tokens))
        if n != want or (n == len(ref_tokens) and n < max_tokens and finish != ref_finish):
            self.fail.add(f"{where}: {n} tokens ({finish}), the solo run of {key} gives {want} ({ref_finish})")
            return False
        if text is not None and n == len(ref_tokens) and text != ref_text:
            self.fail.add(f"{where}: text differs from the solo run of {key}")
            return False
        return True

    # ---- ZeroMQ behaviours ------------------------------------------------------------
    def zmq_generate(self, conn, rng, mode):
        i = rng.randrange(len(PROMPTS))
        seed = rng.choice(SEEDS) if mode == "sampled" and i < 2 else None
        max_tokens = rng.randint(4, MAX_TOKENS)
        stream = mode in ("stream", "cancel", "disconnect") or (mode == "sampled" and rng.random() < 0.5)
        rid = self.next_id("g")
        req = {"v": 1, "id": rid, "type": "generate", "prompt": PROMPTS[i], "max_tokens": max_tokens,
               "stream": stream}
        if seed is not None:
            req.update(temperature=0.8, top_k=16, seed=seed)
        conn.sock.send(json.dumps(req).encode())
        self.counts.inc("zmq_generate_sent")
        cancel_id, cancel_reply, final = None, None, None
        delta_tokens, delta_text = [], ""
        while True:
            r = conn.recv(600000)
            if r is None:
                self.fail.add(f"{rid}: no reply within 600 s{conn.why()}")
                return conn
            if cancel_id and r.get("id") == cancel_id:
                if cancel_reply is not None:
                    self.fail.add(f"{cancel_id}: answered twice")
                cancel_reply = r
                if final is not None:
                    break
                continue
            if r.get("id") != rid:
                self.fail.add(f"{rid}: a reply for another id {r.get('id')} on this connection")
                continue
            if final is not None:
                self.fail.add(f"{rid}: a message after its final: {r.get('type')}")
                continue
            t = r.get("type")
            if t == "delta":
                if not stream:
                    self.fail.add(f"{rid}: a delta for a request that did not stream")
                delta_tokens += r["tokens"]
                delta_text += r["text"]
                if mode == "disconnect":
                    conn.close()  # mid-stream: the server must cancel it and free its KV
                    self.counts.inc("zmq_disconnected_mid_stream")
                    return conn.again()
                if mode == "cancel" and cancel_id is None:
                    cancel_id = self.next_id("c")
                    conn.sock.send(json.dumps({"v": 1, "id": cancel_id, "type": "cancel", "target": rid}).encode())
                continue
            final = r
            if cancel_id is None or cancel_reply is not None:
                break
        # Exactly once: nothing more for this id may follow (checked on the next requests
        # of this connection, which read only their own ids); count what ended how.
        if final.get("type") == "error":
            self.counts.inc(f"zmq_error_{final.get('code')}")
            if final.get("code") not in ("overloaded", "client_limit"):
                self.fail.add(f"{rid}: error {final}")
            return conn
        if final.get("type") != "final":
            self.fail.add(f"{rid}: unexpected terminal message {final}")
            return conn
        self.counts.inc(f"zmq_final_{final['finish_reason']}")
        if stream and (delta_tokens != final["tokens"] or delta_text != final["text"]):
            self.fail.add(f"{rid}: the deltas do not add up to the final")
        if cancel_id is not None:
            ok = cancel_reply.get("type") == "cancelled" or (cancel_reply.get("code") == "not_found")
            if not ok:
                self.fail.add(f"{cancel_id}: unexpected reply {cancel_reply}")
            self.counts.inc(f"zmq_cancel_{cancel_reply.get('type')}")
        if self.check_output(rid, (i, seed), max_tokens, final["tokens"], final["text"],
                             final["finish_reason"], cancel_id is not None):
            self.counts.inc("outputs_checked")
        return conn

    def zmq_malformed(self, conn, rng):
        kind = rng.choice(["bytes", "json", "field", "oversized", "multipart"])
        expect = {"bytes": "malformed_json", "json": "malformed_json", "field": "bad_request",
                  "oversized": "too_large", "multipart": None}[kind]
        if kind == "bytes":
            conn.sock.send(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200))) + b"\xff")
        elif kind == "json":
            conn.sock.send(b'{"v": 1, "id": "x", "type": "generate", "prompt": ')
        elif kind == "field":
            rid = self.next_id("bad")
            conn.sock.send(json.dumps({"v": 1, "id": rid, "type": "generate", "prompt": "x",
                                       "temperature": -1}).encode())
        elif kind == "oversized":
            conn.sock.send(b'{"v":1,"id":"big","type":"generate","prompt":"' + b"a" * 70000 + b'"}')
        else:  # two frames in one message: read as one request? the server must answer once or ignore
            conn.sock.send_multipart([b'{"v":1,"id":"mp","type":"health"}', b"trailing"])
        self.counts.inc(f"malformed_{kind}_sent")
        r = conn.recv(120000)
        if r is None:
            if expect is not None:
                self.fail.add(f"malformed {kind}: no reply{conn.why()}")
            return conn
        if expect and (r.get("type") != "error" or r.get("code") != expect):
            self.fail.add(f"malformed {kind}: expected error {expect}, got {r}")
        self.counts.inc(f"malformed_{kind}_answered")
        if conn.recv(200) is not None:
            self.fail.add(f"malformed {kind}: answered twice")
        return conn

    # ---- CURVE behaviours (--curve) -----------------------------------------------------
    def zmq_intruder(self, rng):
        """A client without CURVE, or with a key the server does not allow: its handshake
        must fail (seen by the client's socket monitor) and its request never be answered."""
        kind = rng.choice(["plain", "unknown_key"])
        curve = None if kind == "plain" else (self.curve_keys[0][0], zmq.curve_keypair()[1])
        conn = Conn(self.ctx, self.endpoint, curve, monitor=True)
        try:
            # Not a blocking send: libzmq does not reconnect after a refused handshake, and
            # drops the DEALER's pipe; a refusal that came before the send (this thread
            # slow between connect and send) left a plain send waiting for ever. That was
            # the 1-hour CURVE soak's hung client. Here it means: refused before sending.
            try:
                conn.sock.send(json.dumps({"v": 1, "id": self.next_id("intruder"), "type": "health"}).encode(),
                               zmq.DONTWAIT)
                self.counts.inc(f"intruder_{kind}_sent")
            except zmq.Again:
                self.counts.inc(f"intruder_{kind}_refused_before_send")
            deadline = time.time() + 60
            while time.time() < deadline:
                if conn.sock.poll(0):
                    self.fail.add(f"intruder ({kind}): answered: {conn.sock.recv()[:200]}")
                    return
                if not conn.monitor.poll(100):
                    continue
                event = recv_monitor_message(conn.monitor)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self.fail.add(f"intruder ({kind}): the handshake succeeded")
                    return
                if event in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                             zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_DISCONNECTED):
                    if conn.sock.poll(200):
                        self.fail.add(f"intruder ({kind}): answered after its refusal")
                    else:
                        self.counts.inc(f"intruder_{kind}_refused")
                    return
            self.fail.add(f"intruder ({kind}): neither refused nor answered within 60 s")
        finally:
            conn.close()

    def zmq_burst(self, conn, rng):
        """limit + 2 generate requests at once on one key: what is over the key's share
        (others of the key may hold some) gets `client_limit`; every request one terminal."""
        n = self.args.per_client_limit + 2
        sent = {}
        for _ in range(n):
            i, rid = rng.randrange(len(PROMPTS)), self.next_id("b")
            max_tokens = rng.randint(4, MAX_TOKENS)
            conn.sock.send(json.dumps({"v": 1, "id": rid, "type": "generate", "prompt": PROMPTS[i],
                                       "max_tokens": max_tokens}).encode())
            sent[rid] = (i, max_tokens)
        self.counts.inc("burst_generate_sent", n)
        while sent:
            r = conn.recv(600000)
            if r is None:
                self.fail.add(f"burst: {len(sent)} requests not answered within 600 s{conn.why()}")
                return
            rid = r.get("id")
            if rid not in sent:
                self.fail.add(f"burst: a reply for an id not in flight: {rid} ({r.get('type')})")
                continue
            i, max_tokens = sent.pop(rid)
            if r.get("type") == "error" and r.get("code") in ("client_limit", "overloaded"):
                self.counts.inc(f"zmq_error_{r['code']}")
            elif r.get("type") != "final":
                self.fail.add(f"burst {rid}: unexpected reply {r}")
            elif self.check_output(rid, (i, None), max_tokens, r["tokens"], r["text"], r["finish_reason"], False):
                self.counts.inc("outputs_checked")
        if conn.recv(200) is not None:
            self.fail.add("burst: a reply after every request had its terminal one")

    # ---- HTTP behaviours -------------------------------------------------------------
    def http_stream(self, rng, disconnect):
        i = rng.randrange(len(PROMPTS))
        max_tokens = rng.randint(4, MAX_TOKENS)
        body = json.dumps({"model": "demo-target", "prompt": PROMPTS[i], "max_tokens": max_tokens,
                           "temperature": 0, "stream": True})
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=600)
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            resp = c.getresponse()
            self.counts.inc("http_stream_sent")
            if resp.status == 429:
                self.counts.inc("http_429")
                resp.read()
                return
            if resp.status != 200:
                self.fail.add(f"http stream: status {resp.status}: {resp.read()[:200]}")
                return
            text, done, finish = "", False, None
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                ch = chunk["choices"][0] if chunk.get("choices") else None
                if ch:
                    text += ch.get("text", "")
                    finish = ch.get("finish_reason") or finish
                if disconnect and text:
                    c.sock.shutdown(socket.SHUT_RDWR)
                    c.close()
                    self.counts.inc("http_disconnected_mid_stream")
                    return
            if not done:
                self.fail.add("http stream: no [DONE]")
                return
            ref_tokens, ref_text, _ = self.solo[(i, None)]
            if len(ref_tokens) <= max_tokens and text != ref_text:
                self.fail.add(f"http stream: text differs from the solo run of {i}")
            elif not ref_text.startswith(text):
                self.fail.add(f"http stream: text not a prefix of the solo run of {i}")
            else:
                self.counts.inc("http_outputs_checked")
        finally:
            c.close()

    def http_malformed(self, rng):
        kind = rng.choice(["garbage", "bad_json", "huge_body", "huge_head"])
        s = socket.create_connection(("127.0.0.1", self.http_port), timeout=60)
        try:
            if kind == "garbage":
                s.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            elif kind == "bad_json":
                body = b'{"prompt": '
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            elif kind == "huge_body":
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + b"a" * 70000)
            else:
                s.sendall(b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n")
            self.counts.inc(f"http_malformed_{kind}_sent")
            reply = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, socket.timeout):
                    break
                if not chunk:
                    break
                reply += chunk
            status = reply.split(b" ", 2)[1] if reply.startswith(b"HTTP/1.1 ") else b"none"
            want = {"garbage": b"400", "bad_json": b"400", "huge_body": b"413", "huge_head": b"431"}[kind]
            if status != want:
                self.fail.add(f"http malformed {kind}: status {status}, expected {want}")
            else:
                self.counts.inc(f"http_malformed_{kind}_answered")
        finally:
            s.close()

    # ---- the load ---------------------------------------------------------------------
    def client(self, index):
        rng = random.Random(index * 7919 + 1)
        conn = self.conn(index)
        modes = ["stream"] * 4 + ["whole"] * 3 + ["sampled"] * 2 + ["cancel"] * 2 + ["disconnect"] + \
                ["malformed"] + ["http", "http", "http_disconnect", "http_malformed", "control"] + \
                (["intruder", "burst"] if self.curve_keys else [])
        while time.time() < self.stop_at:
            mode = rng.choice(modes)
            try:
                if mode == "malformed":
                    conn = self.zmq_malformed(conn, rng)
                elif mode == "http":
                    self.http_stream(rng, False)
                elif mode == "http_disconnect":
                    self.http_stream(rng, True)
                elif mode == "http_malformed":
                    self.http_malformed(rng)
                elif mode == "intruder":
                    self.zmq_intruder(rng)
                elif mode == "burst":
                    self.zmq_burst(conn, rng)
                elif mode == "control":
                    rid = self.next_id("q")
                    conn.sock.send(json.dumps({"v": 1, "id": rid, "type": rng.choice(["stats", "health"])}).encode())
                    r = conn.recv(60000)
                    if not r or r.get("id") != rid:
                        self.fail.add(f"{rid}: stats/health not answered: {r}{conn.why()}")
                    self.counts.inc("control")
                else:
                    conn = self.zmq_generate(conn, rng, mode)
            except Exception as e:  # a client's own failure is a soak failure, named
                self.fail.add(f"client {index} ({mode}): {type(e).__name__}: {e}{conn.why()}")
                conn.close()
                conn = conn.again()
        conn.close()

    def check_security(self, security):
        """The server's refusal counters against what the clients saw."""
        c = self.counts.c
        if not security.get("curve"):
            self.fail.add(f"stats.security: CURVE is not on: {security}")
        if security.get("refused_keys", 0) < c.get("intruder_unknown_key_refused", 0):
            self.fail.add(f"stats.security.refused_keys {security.get('refused_keys')} < "
                          f"{c.get('intruder_unknown_key_refused', 0)} unknown keys refused")
        if security.get("failed_handshakes", 0) < c.get("intruder_plain_refused", 0):
            self.fail.add(f"stats.security.failed_handshakes {security.get('failed_handshakes')} < "
                          f"{c.get('intruder_plain_refused', 0)} plain clients refused")
        if security.get("client_limit_refusals") != c.get("zmq_error_client_limit", 0):
            self.fail.add(f"stats.security.client_limit_refusals {security.get('client_limit_refusals')} != "
                          f"{c.get('zmq_error_client_limit', 0)} client_limit replies received")

    def run(self):
        a = self.args
        t0 = time.time()
        self.start_server()
        pid = self.server.pid
        self.generate_solo()
        idle_rss, idle_fds = proc_stats(pid)
        samples = []
        self.stop_at = time.time() + a.seconds
        threads = [threading.Thread(target=self.client, args=(k,), name=f"client-{k}", daemon=True) for k in range(a.clients)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(min(a.sample_s, max(0.5, self.stop_at - time.time())))
            if time.time() < self.stop_at + 1:
                samples.append((round(time.time() - self.stop_at + a.seconds, 1),) + proc_stats(pid))
        hang_deadline = time.time() + 900
        for t in threads:
            t.join(max(0.0, hang_deadline - time.time()))
        hung = [t for t in threads if t.is_alive()]
        if hung:  # a client outlived every bounded wait: name where it is (its stack)
            frames = sys._current_frames()
            for t in hung:
                stack = "".join(traceback.format_stack(frames.get(t.ident))) if t.ident in frames else "?"
                self.fail.add(f"{t.name} still running 900 s after the load ended:\n{stack}")
        # Quiet: every request (disconnected ones included) must leave the engine.
        drained = None
        for _ in range(600):
            st = self.ask({"type": "stats"})
            kv, dkv = st["kv"], st["draft_kv"]
            if st["inflight"] == 0 and kv["free_blocks"] == kv["total_blocks"] and kv["sequences"] == 0 and \
                    dkv["free_blocks"] == dkv["total_blocks"] and dkv["sequences"] == 0:
                drained = st
                break
            time.sleep(0.2)
        if drained is None:
            self.fail.add(f"after the load: not drained: inflight {st['inflight']}, kv {st['kv']}, draft {st['draft_kv']}")
            drained = st
        host = find_host(drained.get("strategies", {}).get("kv_write", {}))
        if a.fault_round > 0 and not host.get("disabled"):
            self.fail.add(f"the faulty plugin never failed (kv_write host: {host})")
        security = drained.get("security", {})
        if a.curve:
            self.check_security(security)
        time.sleep(1.0)
        end_rss, end_fds = proc_stats(pid)
        if end_fds > idle_fds:
            self.fail.add(f"file descriptors grew: {idle_fds} idle before the load, {end_fds} after")
        # RSS: after warm-up (the first quarter of the samples) it must stay flat: the last
        # quarter's mean within 5% + 16 MiB of the second quarter's.
        rss = [s[1] for s in samples]
        q = max(1, len(rss) // 4)
        early = sum(rss[q:2 * q]) / max(1, len(rss[q:2 * q])) if len(rss) >= 4 else rss[0] if rss else 0
        late = sum(rss[-q:]) / q if rss else 0
        if rss and late > early * 1.05 + 16 * 2**20:
            self.fail.add(f"RSS grew after warm-up: {early / 2**20:.1f} MiB -> {late / 2**20:.1f} MiB")
        # SIGTERM with requests in flight: each gets its final, then exit 0.
        conns = []
        for k in range(4):
            c = self.conn(k)
            c.sock.send(json.dumps({"v": 1, "id": f"term-{k}", "type": "generate", "prompt": PROMPTS[k],
                                    "max_tokens": 4000, "ignore_eos": True, "stream": True}).encode())
            conns.append(c)
        for c in conns:  # each has started streaming
            if c.recv(300000) is None:
                self.fail.add("SIGTERM phase: a request did not start")
        self.server.send_signal(signal.SIGTERM)
        term_finals = 0
        for k, c in enumerate(conns):
            while True:
                r = c.recv(60000)
                if r is None:
                    self.fail.add(f"term-{k}: no final after SIGTERM")
                    break
                if r.get("type") == "final":
                    term_finals += 1
                    break
                if r.get("type") == "error":
                    self.fail.add(f"term-{k}: error after SIGTERM: {r}")
                    break
            c.close()
        try:
            rc = self.server.wait(60)
        except subprocess.TimeoutExpired:
            self.server.kill()
            rc = "killed after 60 s"
        if rc != 0:
            self.fail.add(f"the server exited {rc} after SIGTERM")
        self.control.close()
        if not hung:  # term() waits for every socket: a hung client's would block it
            self.ctx.term()
        report = {
            "seconds": a.seconds, "clients": a.clients, "wall_s": round(time.time() - t0, 1),
            "counts": dict(sorted(self.counts.c.items())),
            "stats": {k: drained["stats"].get(k) for k in ("requests", "generated", "rounds", "acceptance_rate")},
            "kv_after_load": drained["kv"], "draft_kv_after_load": drained["draft_kv"],
            "faulty_plugin_host": host, "security": security,
            "rss_mib": {"idle": round(idle_rss / 2**20, 1), "after_warmup": round(early / 2**20, 1),
                        "last_quarter": round(late / 2**20, 1), "max": round(max(rss, default=0) / 2**20, 1),
                        "end": round(end_rss / 2**20, 1)},
            "fds": {"idle": idle_fds, "max_under_load": max((s[2] for s in samples), default=0), "end": end_fds},
            "sigterm": {"in_flight": len(conns), "finals": term_finals, "exit": rc},
            "failures": self.fail.items, "server_log": self.log.name,
        }
        print(json.dumps(report, indent=1))
        if a.report:
            with open(a.report, "w") as f:
                json.dump(report, f, indent=1)
        return 1 if self.fail.items else 0


def main():
    # `kill -USR1 <soak.py pid>` prints every thread's Python stack (a hang explains itself).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--specpipe", required=True)
    p.add_argument("--faulty-plugin", required=True, help="path of libspecpipe_faulty_plugin.so")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--fault-round", type=int, default=300, help="kv_write round at which the plugin fails (0: never)")
    p.add_argument("--threads", type=int, default=1, help="SPECPIPE_THREADS of the server")
    p.add_argument("--sample-s", type=float, default=5, help="seconds between RSS / fd samples")
    p.add_argument("--report", help="also write the JSON report here")
    p.add_argument("--curve", action="store_true", help="CURVE on the ZeroMQ endpoint (keys by specpipe keygen)")
    p.add_argument("--curve-keys", type=int, default=5, help="allowed client keys, shared by the clients")
    p.add_argument("--per-client-limit", type=int, default=64, help="server.max_inflight_per_client")
    sys.exit(Soak(p.parse_args()).run())


if __name__ == "__main__":
    main()
