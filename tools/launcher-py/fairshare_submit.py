#!/usr/bin/env python3
"""Submit a job to fairshare from Python, with nothing but the standard library.

Place in the flow: a launcher in another language, at the very start. It sends a protobuf
`SubmitRequest` (schemas/fairshare/v1/fairshare.proto) to the NATS subject
`fairshare.api.submit` and prints the `SubmitReply`: the accepted job id, or the rejection's code
and message. The same idempotency key sent again gets the same job id back.

It speaks the two wire formats itself, so it needs nothing but python3:
- NATS: the text protocol (CONNECT, SUB, PUB with a reply subject, MSG and HMSG, PING/PONG),
  for a server without TLS. With per-service nkeys (`fairshare auth init`), give the launcher's
  seed (`--nkey .run/auth/launcher.nk`, or FAIRSHARE_NATS_NKEY): it signs the server's nonce
  (Ed25519, `nkey.py`).
- Protobuf: varints and length-delimited fields, by the field numbers of the .proto. The
  rejection codes' names are read from the .proto itself, so they cannot drift.

    python3 tools/launcher-py/fairshare_submit.py --cluster demo --allocation infra/evals \\
        --gpus 1 --min-runtime 600 --key my-run-1 --resumable --payload 'python train.py'

Exit status: 0 accepted, 1 rejected (or no submission service listening: the server had
nobody to hand the request to, so nothing was submitted), 2 bad arguments, 3 the outcome is
not known (no server or service answered, the reply did not decode, or the service could not
confirm the write, `UNAVAILABLE`): retry with the key printed and the same arguments, which
never makes a second job (another request with that key is refused as `KEY_REUSED`); 4 the
server wants TLS, or authentication and no `--nkey` was given, or it refused the identity, or
the URL is not one: nothing was submitted.
`--url` (or FAIRSHARE_NATS_URL) may list a cluster's servers, comma-separated.
"""

import argparse
import json
import os
import re
import secrets
import socket
import sys
from urllib.parse import urlparse

import nkey

SUBMIT_SUBJECT = "fairshare.api.submit"
# `RejectionCode.REJECTION_CODE_UNAVAILABLE`: the outcome is not known, retry with the same key.
UNAVAILABLE = 14
PROTO = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "fairshare", "v1",
    "fairshare.proto",
)

# Protobuf wire types.
VARINT, LEN = 0, 2

INT64 = (-(1 << 63), (1 << 63) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)


def varint(n):
    """A varint of an int64 or uint64; negative values take ten bytes (two's complement), as
    protobuf writes negative int32 and int64 fields."""
    if not INT64[0] <= n < 1 << 64:
        raise ValueError(f"{n} does not fit 64 bits")
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, value):
    """One field: its key, then the varint or the length-prefixed bytes."""
    key = varint(number << 3 | wire_type)
    if wire_type == VARINT:
        return key + varint(value)
    return key + varint(len(value)) + value


def job_spec(cluster, allocation, user, gpus, nodes, min_runtime_s, resumable, priority,
             time_limit_s, payload, name):
    """A `JobSpec`; fields left at their default are not written (proto3)."""
    parts = [
        (1, LEN, cluster.encode()), (2, LEN, allocation.encode()), (3, LEN, user.encode()),
        (4, VARINT, gpus), (5, VARINT, nodes), (6, VARINT, min_runtime_s),
        (7, VARINT, int(resumable)), (8, VARINT, priority), (9, VARINT, time_limit_s),
        (10, LEN, payload), (11, LEN, name.encode()),
    ]
    return b"".join(field(n, t, v) for n, t, v in parts if v)


def submit_request(key, spec):
    """A `SubmitRequest`: the idempotency key and the spec."""
    return field(1, LEN, key.encode()) + field(2, LEN, spec)


def read_varint(data, i):
    shift, n = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[i]
        i += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, i


def fields(data):
    """The fields of one message as (number, value): an int for varints, bytes otherwise.
    Fixed-width fields (none in the replies read here) are skipped."""
    i, out = 0, []
    while i < len(data):
        key, i = read_varint(data, i)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            value, i = read_varint(data, i)
        elif wire_type == LEN:
            size, i = read_varint(data, i)
            if i + size > len(data):
                raise ValueError("truncated field")
            value, i = data[i:i + size], i + size
        elif wire_type in (1, 5):
            i += 8 if wire_type == 1 else 4
            continue
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        out.append((number, value))
    return out


def rejection_codes(proto_path=PROTO):
    """`RejectionCode` numbers to names, from the .proto (none if it cannot be read: a copy of
    this script outside the repository prints the numbers)."""
    try:
        with open(proto_path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return {}
    found = re.search(r"enum RejectionCode \{(.*?)\}", text, re.S)
    if not found:
        return {}
    body = found.group(1)
    return {int(n): name for name, n in re.findall(r"(REJECTION_CODE_\w+)\s*=\s*(\d+);", body)}


def submit_reply(data):
    """A `SubmitReply` as a dict: {"accepted": {...}} or {"rejected": {...}}; ValueError for
    bytes that are not one (a field of an unexpected wire type included)."""
    try:
        return decode_submit_reply(data)
    except (TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"not a SubmitReply: {e}") from None


def decode_submit_reply(data):
    for number, value in fields(data):
        if number == 1:
            accepted = {"job_id": "", "stream_sequence": 0, "duplicate": False}
            for n, v in fields(value):
                if n == 1:
                    accepted["job_id"] = v.decode()
                elif n == 2:
                    accepted["stream_sequence"] = v
                elif n == 3:
                    accepted["duplicate"] = bool(v)
            return {"accepted": accepted}
        if number == 2:
            rejected = {"code": 0, "message": ""}
            for n, v in fields(value):
                if n == 1:
                    rejected["code"] = v
                elif n == 2:
                    rejected["message"] = v.decode()
            return {"rejected": rejected}
    raise ValueError("a SubmitReply with neither accepted nor rejected")


class NoAnswer(Exception):
    """No usable reply: the request may or may not have been handled."""


class Unsupported(Exception):
    """Nothing was submitted, and trying again will not help: the server wants what this script
    does not do (TLS, or authentication without a seed), or refused the connection."""


class NoResponders(Exception):
    """The server had no subscriber for the subject: the request reached no service."""


class TooLarge(Exception):
    """The request is over the server's message size limit: nothing was sent, and sending it
    again will not help."""


def request(urls, subject, payload, timeout_s, seed=None):
    """One NATS request/reply; returns the reply's payload. `urls` may name several servers of
    a cluster, comma-separated (as FAIRSHARE_NATS_URL does): each is tried in turn until one
    answers. Trying the next after a timeout is safe for a submission: its key makes a repeat
    the same job. `seed`: a user nkey's 32 bytes, for a server that wants authentication."""
    members = [u.strip() for u in urls.split(",") if u.strip()]
    if not members:
        raise Unsupported(f"no NATS server URL given: {urls!r}")
    failures = []
    nobody = 0
    for url in members:
        try:
            return request_one(url, subject, payload, timeout_s, seed)
        except NoResponders as e:
            nobody += 1
            failures.append(f"{url}: {e}")
        except (NoAnswer, OSError) as e:
            failures.append(f"{url}: {e}")
        except (Unsupported, TooLarge) as e:
            # Final for this server, but an earlier one may have taken the request and not
            # answered: then it may have been submitted, and only a retry with the key is safe.
            if len(failures) > nobody:
                failures.append(f"{url}: {e}")
                raise NoAnswer("; ".join(failures)) from None
            raise
    # Known not to have landed only if no server could have handed it to anyone.
    if nobody == len(members):
        raise NoResponders("; ".join(failures))
    raise NoAnswer("; ".join(failures))


def request_one(url, subject, payload, timeout_s, seed=None):
    """One NATS request/reply over a fresh connection to one server."""
    try:
        parsed = urlparse(url if "://" in url else "nats://" + url)
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 4222
    except ValueError as e:
        raise Unsupported(f"not a NATS server URL: {url!r} ({e})") from None
    inbox = "_INBOX." + secrets.token_hex(12)
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        stream = sock.makefile("rb")
        info = stream.readline()
        if not info.startswith(b"INFO "):
            raise NoAnswer(f"not a NATS server at {host}:{port}: {info[:80]!r}")
        try:
            server = json.loads(info[5:])
        except ValueError:
            server = {}
        if server.get("tls_required"):
            raise Unsupported(
                f"the server at {host}:{port} requires TLS, which this script does not do: use "
                "a NATS client library")
        connect = {"verbose": False, "pedantic": False, "name": "fairshare-submit.py",
                   "lang": "python", "version": "1"}
        if server.get("auth_required"):
            if seed is None:
                raise Unsupported(
                    f"the server at {host}:{port} requires authentication: give the launcher's "
                    "nkey seed with --nkey (`fairshare auth init` writes .run/auth/launcher.nk)")
            if not isinstance(server.get("nonce"), str):
                raise Unsupported(
                    f"the server at {host}:{port} sent no nonce to sign: it does not take nkeys "
                    "(credentials files are for a NATS client library)")
            connect.update(nkey.connect_fields(seed, server["nonce"]))
        if server.get("headers"):
            # Then the server answers a request nobody subscribes to with a 503 status at
            # once, instead of leaving it to the timeout.
            connect.update(headers=True, no_responders=True)
        # CONNECT, then PING: the PONG says the server took the connection (the identity, if
        # any) before anything is published. A refusal comes before it, and means nothing was
        # submitted; the server closes the connection then, so a later write would fail as a
        # broken pipe that reads like a lost answer.
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        try:
            while True:
                line = stream.readline()
                if line.startswith(b"PONG"):
                    break
                if line.startswith(b"PING"):
                    sock.sendall(b"PONG\r\n")
                elif not line or line.startswith(b"-ERR"):
                    text = line.decode(errors="replace").strip() or "the connection was closed"
                    raise Unsupported(
                        f"the server at {host}:{port} refused the connection ({text}): nothing "
                        "was submitted")
        except (socket.timeout, OSError) as e:
            raise NoAnswer(f"no answer to CONNECT: {e}") from None
        limit = server.get("max_payload")
        if isinstance(limit, int) and len(payload) > limit:
            raise TooLarge(
                f"the request is {len(payload)} bytes, over the server's limit of {limit} "
                "(max_payload): shorten --payload or --name")
        sock.sendall(f"SUB {inbox} 1\r\nUNSUB 1 1\r\n".encode())
        sock.sendall(f"PUB {subject} {inbox} {len(payload)}\r\n".encode() + payload + b"\r\n")
        try:
            while True:
                line = stream.readline()
                if not line:
                    raise NoAnswer("the server closed the connection")
                if line.startswith(b"PING"):
                    sock.sendall(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    text = line.decode(errors="replace").strip()
                    # Refused before it was delivered to anyone: final. Any other error (the
                    # reply's subscription refused, say) leaves the request possibly handled.
                    if "permissions violation for publish" in text.lower():
                        raise Unsupported(
                            f"the server at {host}:{port} does not let this identity publish "
                            f"submissions ({text}): nothing was submitted; use the launcher's "
                            "identity (--nkey)")
                    if "maximum payload" in text.lower():
                        raise TooLarge(f"the server refused the request as too large ({text})")
                    raise NoAnswer(text)
                elif line.startswith(b"MSG "):
                    size = int(line.split()[-1])
                    data = stream.read(size + 2)
                    if len(data) < size:
                        raise NoAnswer("the reply was cut short")
                    return data[:size]
                elif line.startswith(b"HMSG "):
                    # HMSG <subject> <sid> [reply] <header bytes> <total bytes>
                    parts = line.split()
                    head, size = int(parts[-2]), int(parts[-1])
                    data = stream.read(size + 2)
                    if len(data) < size or head > size:
                        raise NoAnswer("the reply was cut short")
                    status = data[:head].split(b"\r\n", 1)[0].split()
                    if status[1:2] == [b"503"]:
                        raise NoResponders("no service subscribes to " + subject)
                    return data[head:size]
        except socket.timeout:
            raise NoAnswer(f"no reply within {timeout_s} s") from None


def ranged(bounds):
    """An argparse type: an integer within `bounds`."""
    def parse(text):
        n = int(text)
        if not bounds[0] <= n <= bounds[1]:
            raise argparse.ArgumentTypeError(f"{n} is out of range")
        return n
    return parse


def positive_seconds(text):
    """An argparse type: a number of seconds above 0."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not s > 0 or s == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a number of seconds above 0")
    return s


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("FAIRSHARE_NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--cluster", default=os.environ.get("FAIRSHARE_CLUSTER"), required=
                   "FAIRSHARE_CLUSTER" not in os.environ)
    p.add_argument("--allocation", required=True, help="leaf path, e.g. research/nlp")
    p.add_argument("--user", default=os.environ.get("USER", ""))
    p.add_argument("--gpus", type=ranged(INT64), default=1)
    p.add_argument("--nodes", type=ranged(INT64), default=0, help="0: one node if it fits")
    p.add_argument("--min-runtime", type=ranged(INT64), required=True,
                   help="seconds; 0 = unallocated (free, preemptible at any time)")
    p.add_argument("--resumable", action="store_true")
    p.add_argument("--priority", type=ranged(INT32), default=0)
    p.add_argument("--time-limit", type=ranged(INT64), default=0, help="seconds; 0 = none")
    p.add_argument("--payload", default="", help="opaque to fairshare (command line, image, ...)")
    p.add_argument("--name", default="")
    p.add_argument("--key", default=None, help="idempotency key (default: a fresh random one)")
    p.add_argument("--timeout", type=positive_seconds, default=5.0,
                   help="seconds to wait for each server's answer (above 0)")
    p.add_argument("--nkey", default=os.environ.get("FAIRSHARE_NATS_NKEY"),
                   help="the launcher's nkey seed file, for a server with `fairshare auth init`'s "
                        "authorization block (e.g. .run/auth/launcher.nk)")
    args = p.parse_args(argv)
    seed = None
    if args.nkey:
        try:
            with open(args.nkey, encoding="ascii") as fh:
                seed = nkey.user_seed(fh.read())
        except (OSError, ValueError) as e:
            p.error(f"--nkey {args.nkey}: {e}")
    key = args.key or "py-" + secrets.token_hex(8)
    spec = job_spec(args.cluster, args.allocation, args.user, args.gpus, args.nodes,
                    args.min_runtime, args.resumable, args.priority, args.time_limit,
                    args.payload.encode(), args.name)
    try:
        reply = submit_reply(request(args.url, SUBMIT_SUBJECT, submit_request(key, spec),
                                     args.timeout, seed))
    except Unsupported as e:
        print(str(e), file=sys.stderr)
        return 4
    except TooLarge as e:
        print(f"{e}; nothing was submitted", file=sys.stderr)
        return 1
    except NoResponders as e:
        print(f"no submission service is listening ({e}), so nothing was submitted: start it, "
              "or publish to the durable intake", file=sys.stderr)
        return 1
    except (NoAnswer, OSError, ValueError) as e:
        # A reply that does not decode is no answer either: the job may have been accepted.
        print(f"no answer ({e}); retry with --key {key} and the same arguments", file=sys.stderr)
        return 3
    if "accepted" in reply:
        a = reply["accepted"]
        again = " (already accepted earlier)" if a["duplicate"] else ""
        print(f"accepted job {a['job_id']} at sequence {a['stream_sequence']}{again}")
        return 0
    r = reply["rejected"]
    name = rejection_codes().get(r["code"], str(r["code"]))
    if r["code"] == UNAVAILABLE:
        # The log did not take or confirm the write: it may have landed. Not final.
        print(f"not confirmed ({name}): {r['message']}; retry with --key {key} and the same arguments", file=sys.stderr)
        return 3
    print(f"rejected ({name}): {r['message']}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
