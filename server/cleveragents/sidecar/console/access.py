"""Who is asking the console, and what a request must carry to be served at all.

A page authenticates as a gRPC client does: an ``Authorization: Bearer <token>`` header the page
sends with every request (the token is typed once and kept in the tab's ``sessionStorage``), or,
with mutual TLS, the browser's client certificate, whose subject a ``[clients.NAME]`` lists. The
token wins when both come. No cookie is ever set or read.

Cross-site forgery: a request another site makes the browser send carries no token (the site
cannot read it), but it would carry a client certificate (and, with auth off, nothing is needed
at all). So every request that changes something is a ``POST`` with ``Content-Type:
application/json`` and the ``X-Console-Request`` header: a cross-site page can send neither
without a CORS preflight, which the console never grants; an ``Origin`` or ``Sec-Fetch-Site``
that names another site is refused outright. With auth off (loopback only), the ``Host`` must
be the console's own, so that a site rebinding its DNS name to 127.0.0.1 reads nothing.

Every response carries a strict Content-Security-Policy (scripts and styles from the console's
own files only, no inline script, no ``eval``, no frames), ``X-Content-Type-Options: nosniff``
and ``frame-ancestors 'none'``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cleveragents.sidecar.identity import DEFAULT_IDENTITY, Identity
from cleveragents.tool import ToolRuntimeError

__all__ = [
    "CSRF_HEADER",
    "SECURITY_HEADERS",
    "Callers",
    "Guard",
    "Refusal",
    "Rejecter",
    "RequestHead",
    "subject_of",
]

#: The header a state-changing request must carry (any value): only a same-origin script can
#: set it without a preflight.
CSRF_HEADER = "X-Console-Request"

#: What every response says about itself.
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

#: How the certificate fields Python's ``ssl`` names are written in a subject (RFC 4514).
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
}


class Callers(Protocol):
    """The credentials the sidecar accepts (``transport.credentials.Credentials`` is one)."""

    @property
    def required(self) -> bool:
        """Whether any credential is configured (else every caller is ``default``)."""
        ...

    def by_token(self, header: bytes) -> Identity | None:
        """The identity whose ``Bearer <token>`` is ``header``, or ``None``."""
        ...

    def by_subject(self, subjects: Iterable[bytes]) -> Identity | None:
        """The identity a verified peer certificate's subject stands for, or ``None``."""
        ...


class Rejecter(Protocol):
    """Counts and logs refused credentials (``transport.rejections.Rejections`` is one)."""

    def reject(self, peer: str, method: str, reason: str) -> None: ...


class Refusal(ToolRuntimeError):
    """A request the console does not serve: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What the guard reads of a request (``aiohttp``'s, reduced to plain values)."""

    method: str
    path: str
    scheme: str
    host: str
    headers: Mapping[str, str]
    peer: str
    #: The verified client certificate (``ssl``'s ``getpeercert()``), if one was presented.
    certificate: Mapping[str, Any] | None = None


class Guard:
    """Decides who a request comes from, and refuses what must not be served.

    ``hosts`` are the ``Host`` values served when auth is off (the console's own address and
    the loopback names with its port).
    """

    def __init__(self, callers: Callers, rejections: Rejecter, hosts: frozenset[str]) -> None:
        self.callers = callers
        self.rejections = rejections
        self.hosts = hosts

    @classmethod
    def for_address(cls, callers: Callers, rejections: Rejecter, host: str, port: int) -> Guard:
        """The guard of a console bound to ``host``:``port``."""
        names = {host, "localhost", "127.0.0.1", "[::1]"}
        if _is_v6(host):
            names.add(f"[{host}]")
        return cls(callers, rejections, frozenset(f"{name}:{port}" for name in names))

    def check_origin(self, request: RequestHead) -> None:
        """Refuse a request from another site (by its ``Host``, ``Origin`` and fetch
        metadata); a state-changing one must also carry what only the page's script sends."""
        headers = request.headers
        if not self.callers.required and request.host not in self.hosts:
            raise Refusal(421, f"this console answers at {sorted(self.hosts)[0]} only")
        origin = headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise Refusal(403, "cross-origin requests are refused")
        site = headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refusal(403, "cross-site requests are refused")
        if request.method == "POST":
            kind = headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json" or CSRF_HEADER not in headers:
                raise Refusal(
                    403,
                    f"a console action is a JSON POST with the {CSRF_HEADER} header "
                    "(what the console's own page sends)",
                )
        elif request.method not in ("GET", "HEAD"):
            raise Refusal(405, "the console takes GET, HEAD and POST only")

    def caller(self, request: RequestHead) -> Identity:
        """The identity the request's credentials stand for; ``Refusal`` (401) if none."""
        callers = self.callers
        if not callers.required:
            return DEFAULT_IDENTITY
        presented = request.headers.get("Authorization")
        if presented is not None:
            identity = callers.by_token(presented.encode("utf-8", "replace"))
            if identity is not None:
                return identity
            return self._refuse(request, "unknown token")
        if request.certificate is not None:
            subject = subject_of(request.certificate)
            identity = callers.by_subject([subject.encode()])
            if identity is not None:
                return identity
            return self._refuse(request, "certificate subject not listed")
        return self._refuse(request, "no token")

    def _refuse(self, request: RequestHead, reason: str) -> Identity:
        self.rejections.reject(request.peer, f"console {request.method} {request.path}", reason)
        raise Refusal(401, "missing or invalid credentials: enter a token the sidecar knows")


def subject_of(certificate: Mapping[str, Any]) -> str:
    """A certificate's subject as ``CN=alice,O=Acme`` (Python's ``ssl`` gives it as nested
    pairs of long names)."""
    parts = []
    for rdn in certificate.get("subject", ()):
        for name, value in rdn:
            parts.append(f"{_SHORT_NAMES.get(name, name)}={value}")
    return ",".join(parts)


def _is_v6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False
