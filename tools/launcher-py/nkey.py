"""NATS nkey authentication in standard-library Python: read a user seed, sign the server's nonce.

Place in the flow: `fairshare_submit.py` connects with the launcher identity `fairshare auth
init` writes (`<dir>/launcher.nk`) when the server has an `authorization` block. The server
sends a nonce in its INFO line; the client answers in CONNECT with its public key and an Ed25519
signature of the nonce.

Written from the specifications, not from any library: Ed25519 from RFC 8032 (section 5.1),
the seed and public-key text forms from the NATS nkeys format (a type prefix, the 32 key bytes
and a CRC-16/XMODEM, base32 without padding). Python integers do the field arithmetic: a
signature takes a few milliseconds, once per connection. Nothing here keeps the signing
constant-time; it signs a fresh server nonce, never attacker-chosen data at volume.
"""

import base64
import hashlib

# RFC 8032, 5.1: the field, the curve constant, the group order and the base point.
P = 2**255 - 19
D = (-121665 * pow(121666, P - 2, P)) % P
L = 2**252 + 27742317777372353535851937790883648493
SQRT_M1 = pow(2, (P - 1) // 4, P)

# nkeys type prefixes (the first base32 character of each text form).
PREFIX_SEED = 18 << 3  # "S"
PREFIX_USER = 20 << 3  # "U"


def _recover_x(y, sign):
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        raise ValueError("not a curve point")
    if x & 1 != sign:
        x = P - x
    return x


_BY = 4 * pow(5, P - 2, P) % P
_BX = _recover_x(_BY, 0)
BASE = (_BX, _BY, 1, _BX * _BY % P)


def _add(p, q):
    """Point addition in extended coordinates (complete: doubles too)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * D % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = b - a, dd - c, dd + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, point):
    acc = (0, 1, 1, 0)
    while s:
        if s & 1:
            acc = _add(acc, point)
        point = _add(point, point)
        s >>= 1
    return acc


def _encode(point):
    x, y, z, _ = point
    zi = pow(z, P - 2, P)
    x, y = x * zi % P, y * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _expand(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def public_key(seed):
    """The Ed25519 public key of a 32-byte seed (RFC 8032 secret key)."""
    a, _ = _expand(seed)
    return _encode(_mul(a, BASE))


def sign(seed, message):
    """The Ed25519 signature (64 bytes) of `message` by the 32-byte `seed`."""
    a, prefix = _expand(seed)
    public = _encode(_mul(a, BASE))
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % L
    big_r = _encode(_mul(r, BASE))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % L
    s = (r + k * a) % L
    return big_r + s.to_bytes(32, "little")


def crc16(data):
    """CRC-16/XMODEM (polynomial 0x1021, initial value 0), as nkeys checks its text forms."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def _from_text(text):
    text = text.strip()
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (ValueError, TypeError):
        raise ValueError("not base32") from None
    if len(raw) < 4 or crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        raise ValueError("its checksum does not match")
    return raw[:-2]


def _to_text(raw):
    return base64.b32encode(raw + crc16(raw).to_bytes(2, "little")).decode().rstrip("=")


def user_seed(text):
    """The 32 key bytes of a user seed in nkeys text form ("SU..."); ValueError otherwise."""
    raw = _from_text(text)
    if len(raw) != 34:
        raise ValueError("not a seed: wrong length")
    if raw[0] & 0xF8 != PREFIX_SEED:
        raise ValueError("not a seed")
    kind = ((raw[0] & 0x07) << 5) | ((raw[1] & 0xF8) >> 3)
    if kind != PREFIX_USER:
        raise ValueError("not a user seed")
    return raw[2:]


def seed_text(seed):
    """The nkeys text form of a 32-byte user seed (what `fairshare auth init` writes)."""
    head = bytes([PREFIX_SEED | (PREFIX_USER >> 5), (PREFIX_USER & 0x1F) << 3])
    return _to_text(head + seed)


def user_public(seed):
    """The user's public key in nkeys text form ("U..."), as a server's config names it."""
    return _to_text(bytes([PREFIX_USER]) + public_key(seed))


def connect_fields(seed, nonce):
    """What CONNECT carries for nkey authentication against the INFO line's `nonce`."""
    signature = sign(seed, nonce.encode())
    return {
        "nkey": user_public(seed),
        "sig": base64.urlsafe_b64encode(signature).decode().rstrip("="),
    }
