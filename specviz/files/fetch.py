"""Reading one http(s) URL with stated limits: the one URL fetcher (import-metrics, the explorer's
Server metrics tab).

    body = fetch("http://127.0.0.1:8000/metrics", UrlPolicy(deadline_s=10), "metrics", error=MyError)

- a TOTAL deadline (`deadline_s`): connecting, the headers and the body together, not per read;
  a watchdog shuts the socket at the deadline, so a server that trickles a byte every few
  seconds ends in an error like one that never answers;
- a size cap (`max_bytes`): a Content-Length above it is refused before the body is read, and
  the body is never read past it;
- redirects are followed by hand, at most `max_redirects`, and every hop is checked against the
  policy as the first URL is (http and https only);
- `hosts` (None: any host, the command line's): each hop's host must be listed, as `host` or
  `host:port`. The name is resolved once and the connection made to that address (no second
  lookup between the check and the connection). With a list, an address that is not global
  (loopback, private, link-local such as 169.254.169.254, reserved) is read only when the
  matching entry names it itself (`127.0.0.1:8000`, `10.0.0.5`) or is `localhost` (loopback
  addresses): a listed *name* that resolves to an inner address is refused;
- errors are one line in our own words: the HTTP status as a number and its standard phrase,
  never the other server's text (its reason phrase, its body, where it redirects to).
"""
from __future__ import annotations

import http
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from ..errors import SpecvizError

REDIRECTS = (301, 302, 303, 307, 308)


class FetchError(SpecvizError):
    """A URL that cannot be read within the policy."""


@dataclass(frozen=True)
class UrlPolicy:
    """What a fetch may do (see the module doc)."""
    hosts: tuple[str, ...] | None = None         # "host" or "host:port" entries; None: any host
    deadline_s: float = 10.0                     # for the whole fetch, redirects included
    max_bytes: int = 32 * 2**20
    max_redirects: int = 3


@dataclass(frozen=True)
class _Entry:
    host: str
    port: int | None


def _entries(hosts: tuple[str, ...]) -> list[_Entry]:
    out = []
    for item in hosts:
        item = item.strip().lower()
        parsed = urllib.parse.urlsplit("//" + item)
        try:
            port = parsed.port
        except ValueError:
            port = None
        out.append(_Entry((parsed.hostname or item).strip("[]"), port))
    return out


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _inner(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for an address that is not on the public internet (loopback, private, link-local...)."""
    mapped = getattr(address, "ipv4_mapped", None)
    return not (mapped or address).is_global


class _Fetch:
    """One fetch: the deadline, the policy, the error class and the words every message starts with."""

    def __init__(self, policy: UrlPolicy, what: str, error: type[SpecvizError]) -> None:
        self.policy = policy
        self.what = what
        self.error = error
        self.deadline = time.monotonic() + policy.deadline_s

    def fail(self, message: str) -> SpecvizError:
        return self.error(f"{self.what}: {message}")

    def left(self, url: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.too_slow(url)
        return left

    def too_slow(self, url: str) -> SpecvizError:
        return self.fail(f"{url} did not answer in full within {self.policy.deadline_s:g} s (a limit on the whole "
                         "fetch, not on each read); is the server up, and is this its /metrics address?")

    def allowed_addresses(self, url: str, host: str, port: int) -> list[str]:
        """The addresses of `host` this fetch may connect to (resolved once, within the deadline)."""
        entry = None
        if self.policy.hosts is not None:
            entry = next((e for e in _entries(self.policy.hosts)
                          if e.host == host.lower() and e.port in (None, port)), None)
            if entry is None:
                listed = ", ".join(self.policy.hosts) or "no host"
                raise self.fail(f"this server reads URLs only from {listed}; {url} is not one of them")
        addresses = self.resolve(url, host, port)
        if entry is None:
            return addresses
        named = _literal(entry.host)
        ok = [a for a in addresses if not _inner(ipaddress.ip_address(a))
              or (named is not None and ipaddress.ip_address(a) == named)
              or (entry.host == "localhost" and ipaddress.ip_address(a).is_loopback)]
        if not ok:
            raise self.fail(f"{host} resolves to an address inside the server's own network (loopback, private "
                            "or link-local), which is read only when the allowed hosts name it as an address "
                            "(e.g. 127.0.0.1:8000) or as localhost")
        return ok

    def resolve(self, url: str, host: str, port: int) -> list[str]:
        literal = _literal(host)
        if literal is not None:
            return [str(literal)]
        found: list[Any] = []
        failed: list[BaseException] = []

        def lookup() -> None:
            try:
                found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
            except (OSError, UnicodeError) as err:
                failed.append(err)

        worker = threading.Thread(target=lookup, daemon=True)     # getaddrinfo has no timeout of its own
        worker.start()
        worker.join(self.left(url))
        if worker.is_alive():
            raise self.too_slow(url)
        if failed or not found:
            raise self.fail(f"cannot resolve the host of {url}; is the address right?")
        return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in found))

    def get(self, url: str) -> bytes:
        for _ in range(self.policy.max_redirects + 1):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise self.fail(f"{url!r} is not an http(s) URL")
            try:
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError:
                raise self.fail(f"{url!r} has no valid port") from None
            status, location, body = self.one(url, parts, port)
            if status in REDIRECTS:
                if not location:
                    raise self.fail(f"{url} answered HTTP {status} (a redirect) without saying where to")
                url = urllib.parse.urljoin(url, location)
                continue
            return body
        raise self.fail(f"{url} redirects more than {self.policy.max_redirects} times")

    def one(self, url: str, parts: urllib.parse.SplitResult, port: int) -> tuple[int, str | None, bytes]:
        """One request: (status, the Location of a redirect, the body of a 2xx answer)."""
        host = parts.hostname or ""
        addresses = self.allowed_addresses(url, host, port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        error: BaseException | None = None
        for address in addresses:
            conn = _connection(parts.scheme, host, port, address, self.left(url))
            watchdog = threading.Timer(self.left(url), _shut, (conn,))
            watchdog.daemon = True
            watchdog.start()
            try:
                conn.request("GET", path, headers={"Accept": "text/plain, application/json", "Connection": "close"})
                response = conn.getresponse()
                return self.answer(url, response)
            except SpecvizError:
                raise
            except (OSError, http.client.HTTPException, ValueError) as err:
                if time.monotonic() >= self.deadline:
                    raise self.too_slow(url) from None
                error = err
            finally:
                watchdog.cancel()
                conn.close()
        why = getattr(error, "strerror", None) or type(error).__name__
        raise self.fail(f"could not read {url} ({why}); is the server up, and is this its /metrics address?")

    def answer(self, url: str, response: http.client.HTTPResponse) -> tuple[int, str | None, bytes]:
        status = response.status
        if status in REDIRECTS:
            return status, response.getheader("Location"), b""
        if not 200 <= status < 300:
            try:
                phrase = http.HTTPStatus(status).phrase
            except ValueError:
                phrase = "an unknown status"
            raise self.fail(f"{url} answered HTTP {status} ({phrase})")
        limit = self.policy.max_bytes
        length = response.getheader("Content-Length")
        if length and length.strip().isascii() and length.strip().isdigit() and int(length.strip()[:20]) > limit:
            raise self.fail(f"{url} would send {int(length.strip()[:20]) / 2**20:.0f} MiB; the limit is "
                            f"{limit / 2**20:g} MiB (a /metrics page is kilobytes)")
        chunks, size = [], 0
        while size <= limit:
            chunk = response.read1(min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if time.monotonic() >= self.deadline:
            raise self.too_slow(url)
        if size > limit:
            raise self.fail(f"{url} sent more than {limit / 2**20:g} MiB, the limit (a /metrics page is kilobytes)")
        return status, None, b"".join(chunks)


def _connection(scheme: str, host: str, port: int, address: str, timeout: float) -> _Pinned | _PinnedTLS:
    """A connection to `address` that speaks to `host` (its Host header, its TLS name)."""
    if scheme == "https":
        return _PinnedTLS(host, port, address, timeout)
    return _Pinned(host, port, address, timeout)


class _Pinned(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.held: socket.socket | None = None     # kept for the watchdog: getresponse() drops self.sock

    def connect(self) -> None:
        self.sock = self.held = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address
        self.held: socket.socket | None = None

    def connect(self) -> None:
        self.held = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.held = self._context.wrap_socket(self.held, server_hostname=self.host)  # type: ignore[attr-defined]


def _shut(conn: _Pinned | _PinnedTLS) -> None:
    """The watchdog: end the connection at the deadline, whatever read is waiting on it (the
    plain socket's shutdown, under TLS too: the reader then sees the connection end)."""
    sock = conn.held
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass


def fetch(url: str, policy: UrlPolicy | None = None, what: str = "url",
          error: type[SpecvizError] = FetchError) -> bytes:
    """The body of an http(s) URL within `policy` (see the module doc); `error` (FetchError by
    default) `what: ...` in one line otherwise."""
    policy = policy or UrlPolicy()
    job = _Fetch(policy, what, error)
    if not (0 < policy.deadline_s < float("inf")):
        raise job.fail(f"the time limit must be a positive number of seconds, got {policy.deadline_s!r}")
    return job.get(url.strip())
