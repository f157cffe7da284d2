#!/usr/bin/env python3
"""A minimal Python client for `specpipe serve` (protocol: docs/PROTOCOL.md).

Needs pyzmq (Debian: python3-zmq). Usage:

    python3 examples/clients/specpipe_client.py --endpoint tcp://127.0.0.1:5555 \
        --prompt "def fib(n):" --max-tokens 64 --stream

A server with CURVE (docs/PROTOCOL.md, "Security") answers only clients whose key it
allows: add --curve-server-key server.pub --curve-secret-key me.key (files written by
`specpipe keygen`, or the Z85 keys themselves).

As a library:

    with SpecpipeClient("tcp://127.0.0.1:5555") as client:
        for event in client.generate("def fib(n):", max_tokens=32, stream=True):
            if event["type"] == "delta":
                print(event["text"], end="", flush=True)
"""
import argparse
import itertools
import json
import os
import stat
import sys

import zmq


class SpecpipeError(RuntimeError):
    """An error reply: .code is the protocol's error code."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


Z85_ALPHABET = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def load_key(value, secret=False):
    """A Z85 CURVE key (40 characters), given as itself or as a file `specpipe keygen`
    wrote: one key line, '#' comments. A secret key file must be private (mode 0600)."""
    if len(value) == 40 and set(value) <= Z85_ALPHABET:
        return value.encode()
    if secret and os.stat(value).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"secret key file {value} is readable by others; chmod 600 it")
    with open(value, encoding="ascii") as f:
        lines = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    if len(lines) != 1 or len(lines[0]) != 40 or not set(lines[0]) <= Z85_ALPHABET:
        raise ValueError(f"{value} does not hold one Z85 key")
    return lines[0].encode()


class SpecpipeClient:
    """One DEALER connection; requests are sent one at a time and read to their end.
    server_key / secret_key: CURVE (both or neither): the server's public key and this
    client's secret key, each a Z85 key or a key file."""

    def __init__(self, endpoint, timeout_ms=120000, server_key=None, secret_key=None):
        self._context = zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
        # A send waits for a connection; one ZeroMQ gave up on (a refused CURVE handshake is
        # not retried) would make it wait for ever: bounded like a reply.
        self._socket.setsockopt(zmq.SNDTIMEO, timeout_ms)
        if server_key or secret_key:
            if not (server_key and secret_key):
                raise ValueError("CURVE needs both the server's public key and this client's secret key")
            secret = load_key(secret_key, secret=True)
            self._socket.curve_serverkey = load_key(server_key)
            self._socket.curve_secretkey = secret
            self._socket.curve_publickey = zmq.curve_public(secret)
        self._socket.connect(endpoint)
        self._ids = itertools.count(1)

    def close(self):
        self._socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, message):
        message.setdefault("v", 1)
        message["id"] = f"py-{next(self._ids)}"
        try:
            self._socket.send_string(json.dumps(message))
        except zmq.Again:
            raise TimeoutError(f"could not send {message['id']}: no connection to the server") from None
        return message["id"]

    def _replies(self, request_id):
        while True:
            try:
                reply = json.loads(self._socket.recv_string())
            except zmq.Again:
                raise TimeoutError(f"no reply to {request_id}") from None
            if reply.get("id") not in (request_id, None):
                continue
            if reply["type"] == "error":
                raise SpecpipeError(reply["code"], reply["message"])
            yield reply
            if reply["type"] != "delta":
                return

    def generate(self, prompt=None, prompt_ids=None, stream=False, **params):
        """Yields the replies of one generate request: deltas (if stream), then the final.
        params: max_tokens, temperature, top_k, top_p, seed, stop, ignore_eos, gamma."""
        message = {"type": "generate", "stream": stream, **params}
        if prompt_ids is not None:
            message["prompt_ids"] = list(prompt_ids)
        else:
            message["prompt"] = prompt
        yield from self._replies(self._request(message))

    def complete(self, prompt=None, **params):
        """The final reply of a non-streaming request."""
        return list(self.generate(prompt, stream=False, **params))[-1]

    def stats(self):
        return next(self._replies(self._request({"type": "stats"})))

    def health(self):
        return next(self._replies(self._request({"type": "health"})))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    parser.add_argument("--prompt", default="def fibonacci(n):\n")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--health", action="store_true", help="only ask for the server's health")
    parser.add_argument("--timeout-ms", type=int, default=120000)
    parser.add_argument("--curve-server-key", help="CURVE: the server's public key (.pub file or Z85)")
    parser.add_argument("--curve-secret-key", help="CURVE: this client's secret key (.key file or Z85)")
    args = parser.parse_args()
    with SpecpipeClient(args.endpoint, args.timeout_ms, args.curve_server_key, args.curve_secret_key) as client:
        if args.health:
            print(json.dumps(client.health()))
            return 0
        final = None
        for event in client.generate(args.prompt, stream=args.stream, max_tokens=args.max_tokens,
                                     temperature=args.temperature, seed=args.seed):
            if event["type"] == "delta":
                print(event["text"], end="", flush=True)
            else:
                final = event
        if not args.stream:
            print(final["text"], end="")
        stats = final["stats"]
        print(f"\n---\nfinish: {final['finish_reason']} | tokens: {len(final['tokens'])} | "
              f"tokens per target step: {stats['tokens_per_target_step']:.2f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (SpecpipeError, TimeoutError, ValueError, OSError) as error:
        print(f"specpipe error: {error}", file=sys.stderr)
        sys.exit(1)
