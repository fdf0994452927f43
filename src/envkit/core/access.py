"""Who may use a server: API keys, Origin and Host checks, and the client address behind a proxy.

One `AccessPolicy` guards every surface of an app. It knows nothing of the transport: it reads
a request's path and headers (anything with a case-insensitive `.get`, such as Starlette's
`Headers`) and answers None (allowed) or an `AccessRefusal` (an HTTP status, a reason and a JSON
body). `EnvkitApp` applies it at its ASGI entry to every HTTP request and WebSocket handshake,
before anything is accepted.

- **API keys**: required on every path but `/health`, sent as `X-API-Key: KEY`,
  `Authorization: Bearer KEY`, or (what a browser sends by itself, on page loads and WebSocket
  handshakes alike) the cookie `envkit_api_key=KEY`. Compared in constant time against every
  key; never logged, never echoed.
- **Origin**: a request whose `Origin` names another site is refused unless that origin is allowed;
  same-origin pages (Origin host == Host) and clients that send no Origin (every non-browser
  client) are unaffected. Allowed cross-origin HTTP requests get CORS headers, and preflights are
  answered.
- **Host**: DNS-rebinding protection. By default a server bound to a loopback address answers only
  to loopback names (127.0.0.1, localhost, ::1, any port); bound elsewhere, to any name.
- **Client address**: the peer, or behind a trusted proxy (`forwarded_allow_ips`) the address the
  proxy reports in `X-Forwarded-For`; per-client session limits count by it.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError
from ..protocol import API_KEY_HEADER

__all__ = ["AccessPolicy", "AccessRefusal", "API_KEY_COOKIE", "OPEN_PATHS", "LOOPBACK_NAMES",
           "is_loopback_host"]

#: The cookie a browser sends by itself with same-origin page loads, fetches and WebSocket handshakes.
API_KEY_COOKIE = "envkit_api_key"
#: Paths served without a key: liveness probes (Docker HEALTHCHECK, load balancers), and the web page's own
#: files, which hold no environment data and must load for a person to type the key in.
OPEN_PATHS = frozenset({"/health", "/", "/web", "/web/"})
OPEN_PREFIXES = ("/web/static/",)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
#: How a client may send the key, as told in every 401.
ACCEPTED_KEY_FORMS = ("X-API-Key: <key>", "Authorization: Bearer <key>",
                      f"Cookie: {API_KEY_COOKIE}=<key> (browsers, same origin)")
#: Networks `forwarded_allow_ips=["private"]` trusts: where proxies in front of a server live.
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(net) for net in (
    "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
    "::1/128", "fc00::/7", "fe80::/10"))
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


class HeaderLookup(Protocol):
    def get(self, key: str, default: Any = None) -> Any: ...


@dataclass(frozen=True)
class AccessRefusal:
    """Why a request is refused: HTTP status, a short machine-readable reason, and what to do."""

    status: int
    reason: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self) -> bytes:
        """The JSON body: `{"detail": message, "reason": reason, ...}`."""
        return json.dumps({"detail": self.message, "reason": self.reason, **self.extra}).encode()

    def response_headers(self) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), *self.headers]


def is_loopback_host(host: str) -> bool:
    """Whether a bind address or host name means this machine only (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None]:
    """`host[:port]` (IPv6 in brackets) → (lower-case host without brackets, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""
    try:
        return host, int(port) if port else None
    except ValueError:
        return host, -1   # a port that is not a number matches no entry


_UNBOUND = object()
#: Distinct `Host` headers whose verdict a policy remembers.
MAX_REMEMBERED_HOSTS = 256


def _host_matches(host_header: str, rules: tuple[tuple[str, int | None], ...]) -> bool:
    """Whether a `Host` header names one of `rules` (name or `*.domain`/`.domain`, and port if the rule has one)."""
    host, port = split_host(host_header)
    for name, entry_port in rules:
        if entry_port is not None and entry_port != port:
            continue
        if name == host or (name.startswith("*.") and host.endswith(name[1:])) or (
                name.startswith(".") and (host.endswith(name) or host == name[1:])):
            return True
    return False


def _parse_hosts(hosts: tuple[str, ...] | None) -> tuple[tuple[str, int | None], ...] | None:
    return None if hosts is None else tuple(split_host(entry) for entry in hosts)


def normalise_origin(origin: str) -> str:
    """`scheme://host[:port]` in lower case, without the scheme's default port; 'null' stays 'null'."""
    origin = origin.strip().lower().rstrip("/")
    if origin == "null" or origin == "*":
        return origin
    parts = urlsplit(origin)
    if not parts.scheme or not parts.hostname:
        raise ValueError(f"{origin!r} is not an origin such as https://example.com or http://localhost:3000")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{origin!r} has an invalid port") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is None or port == _DEFAULT_PORTS.get(parts.scheme):
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def _networks(specs: Iterable[str]) -> tuple[bool, tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]]:
    """`forwarded_allow_ips` entries → (trust every peer, trusted networks)."""
    any_peer, networks = False, []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        if spec == "*":
            any_peer = True
        elif spec == "private":
            networks.extend(PRIVATE_NETWORKS)
        else:
            try:
                networks.append(ipaddress.ip_network(spec, strict=False))
            except ValueError:
                raise ConfigurationError(f"forwarded_allow_ips: {spec!r} is not an IP address, a network such as "
                                         "10.0.0.0/8, 'private' or '*'") from None
    return any_peer, tuple(networks)


class AccessPolicy:
    """The access rules of one app; see the module docstring.

    Args:
        api_keys: keys that open every path but `/health`; empty: no key needed.
        allowed_origins: origins (`https://app.example.com`, `*`) whose browser pages may connect besides the
            server's own.
        allowed_hosts: `Host` names the server answers to (`example.com`, `*.example.com`, `host:port`, `*`); None:
            loopback names when bound to a loopback address, any name otherwise (see `bind`).
        forwarded_allow_ips: peers (IPs, networks, `private`, `*`) whose `X-Forwarded-For` names the client.
    """

    def __init__(self, api_keys: Iterable[str] = (), allowed_origins: Iterable[str] = (),
                 allowed_hosts: Iterable[str] | None = None, forwarded_allow_ips: Iterable[str] = ()) -> None:
        keys = [key for key in api_keys]
        for key in keys:
            if not isinstance(key, str) or not key.strip() or key != key.strip():
                raise ConfigurationError("an API key must be a non-empty string without surrounding whitespace")
        self._keys = tuple(key.encode() for key in keys)
        try:
            self.allowed_origins = frozenset(normalise_origin(origin) for origin in allowed_origins)
        except ValueError as error:
            raise ConfigurationError(f"allowed_origins: {error}") from None
        self.explicit_hosts = None if allowed_hosts is None else tuple(host.strip().lower() for host in allowed_hosts
                                                                       if host.strip())
        self._forwarded_specs = tuple(forwarded_allow_ips)
        self._trust_any_peer, self._trusted = _networks(self._forwarded_specs)
        #: The address the server listens on, once a transport has said (`bind`); None: not known.
        self.bind_host: str | None = None
        #: The parsed `Host` rule once it no longer depends on the connection (explicit names, or after `bind`).
        self._bound_rules: object = (_parse_hosts(self.hosts()) if self.explicit_hosts is not None else _UNBOUND)
        #: `Host` headers already judged under the bound rule (nearly every request repeats one of a few).
        self._host_verdicts: dict[str, bool] = {}

    @property
    def requires_key(self) -> bool:
        return bool(self._keys)

    def bind(self, host: str) -> None:
        """Tell the policy where the server listens: the default `Host` rule follows from it."""
        self.bind_host = host
        self._bound_rules = _parse_hosts(self.hosts())
        self._host_verdicts.clear()

    def hosts(self, local_host: str | None = None) -> tuple[str, ...] | None:
        """The `Host` names allowed (None: any). `local_host`: the address a connection arrived on, used when no
        transport has called `bind` (plain `uvicorn module:app`)."""
        if self.explicit_hosts is not None:
            return None if "*" in self.explicit_hosts else self.explicit_hosts
        where = self.bind_host if self.bind_host is not None else local_host
        return LOOPBACK_NAMES if where is not None and is_loopback_host(where) else None

    def _host_rules(self, local_host: str | None) -> tuple[tuple[str, int | None], ...] | None:
        if self._bound_rules is not _UNBOUND:
            return self._bound_rules   # type: ignore[return-value]
        return _parse_hosts(self.hosts(local_host))

    # -- the check ----------------------------------------------------------------------------

    def check(self, path: str, headers: HeaderLookup, local_host: str | None = None) -> AccessRefusal | None:
        """None when the request may go on, else why not. Host first, then Origin, then the key."""
        return self._check(path, headers, local_host, headers.get("origin"))

    def admits_as_is(self, path: str, headers: HeaderLookup, local_host: str | None = None) -> bool:
        """Whether a request goes on with nothing for this layer to answer or add: not refused, and not from a web
        page (no `Origin`, so no CORS headers and no preflight). A transport may then hand it straight to its
        surface (`envkit.transport.fast.at_once`); any other request passes through `EnvkitApp`'s guard."""
        return headers.get("origin") is None and self._check(path, headers, local_host, None) is None

    def _check(self, path: str, headers: HeaderLookup, local_host: str | None,
               origin: str | None) -> AccessRefusal | None:
        host_header = headers.get("host") or ""
        refusal = self._check_host(host_header, local_host)
        if refusal is None:
            refusal = self._check_origin(origin, host_header)
        if refusal is None and self._keys and path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES):
            refusal = self._check_key(headers)
        return refusal

    def _check_host(self, host_header: str, local_host: str | None) -> AccessRefusal | None:
        rules = self._host_rules(local_host)
        if rules is None:
            return None
        if rules is self._bound_rules:
            allowed = self._host_verdicts.get(host_header)
            if allowed is None:
                allowed = _host_matches(host_header, rules)
                if len(self._host_verdicts) < MAX_REMEMBERED_HOSTS:
                    self._host_verdicts[host_header] = allowed
        else:
            allowed = _host_matches(host_header, rules)
        if allowed:
            return None
        told = f"Host {host_header!r}" if host_header else "no Host header"
        allowed = ", ".join(self.hosts(local_host) or ())
        return AccessRefusal(403, "host_not_allowed",
                             f"{told}: this server answers only to {allowed}; if you reach it by another "
                             "name, start it with --allowed-hosts NAME (create_app(allowed_hosts=[...]))")

    def _check_origin(self, origin: str | None, host_header: str) -> AccessRefusal | None:
        if origin is None or self.origin_allowed(origin, host_header):
            return None
        return AccessRefusal(403, "origin_not_allowed",
                             f"requests from web pages at {origin} are not allowed (cross-origin); start the server "
                             f"with --allow-origin {origin} (create_app(allowed_origins=[...])) to allow them")

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        """Same-origin (the Origin's host and port are the Host header's), or an allowed origin."""
        if self._listed(origin):
            return True
        try:
            normal = normalise_origin(origin)
        except ValueError:
            return False
        if normal == "null":
            return False
        scheme, _, netloc = normal.partition("://")
        host, port = split_host(netloc)
        header_host, header_port = split_host(host_header)
        default = _DEFAULT_PORTS.get(scheme)
        return host == header_host and (port or default) == (header_port or default)

    def _check_key(self, headers: HeaderLookup) -> AccessRefusal | None:
        given = self.key_from(headers)
        if given is None:
            return self._key_refusal("missing_api_key", "this server needs an API key and the request carried none")
        # Every key is compared, each in constant time, so the time taken says nothing about any of them.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(key, given)
        if matched:
            return None
        return self._key_refusal("wrong_api_key", "the API key sent is not one this server accepts")

    @staticmethod
    def key_from(headers: HeaderLookup) -> bytes | None:
        """The key a request carries: `X-API-Key`, `Authorization: Bearer`, or the `envkit_api_key` cookie."""
        value = headers.get(API_KEY_HEADER)
        if value:
            return value.strip().encode("utf-8", "surrogateescape")
        authorization = headers.get("authorization") or ""
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip().encode("utf-8", "surrogateescape")
        for cookie in (headers.get("cookie") or "").split(";"):
            name, _, value = cookie.strip().partition("=")
            if name == API_KEY_COOKIE and value:   # set by the web page, percent-encoded
                return unquote(value.strip()).encode("utf-8", "surrogateescape")
        return None

    @staticmethod
    def _key_refusal(reason: str, what: str) -> AccessRefusal:
        return AccessRefusal(401, reason, f"{what}; send it as X-API-Key: <key> or Authorization: Bearer <key> "
                             "(envkit clients: api_key=... or ENVKIT_API_KEY)",
                             (("www-authenticate", 'Bearer realm="envkit"'),), {"accepted": list(ACCEPTED_KEY_FORMS)})

    # -- CORS for allowed cross-origin pages ----------------------------------------------------

    def cors_headers(self, headers: HeaderLookup) -> list[tuple[str, str]]:
        """Headers that let an allowed cross-origin page read a response (none for other requests)."""
        origin = headers.get("origin")
        if origin is None or not self._listed(origin):
            return []
        return [("access-control-allow-origin", origin), ("vary", "Origin")]

    def _listed(self, origin: str) -> bool:
        """Whether `origin` is one of `allowed_origins` (or they include `*`)."""
        try:
            normal = normalise_origin(origin)
        except ValueError:
            return False
        return "*" in self.allowed_origins or normal in self.allowed_origins

    def preflight(self, method: str, headers: HeaderLookup) -> list[tuple[str, str]] | None:
        """The headers of a 204 answering a CORS preflight from an allowed origin; None if it is not one."""
        if method != "OPTIONS" or headers.get("access-control-request-method") is None:
            return None
        origin = headers.get("origin")
        if origin is None or not self._listed(origin):
            return None
        requested = headers.get("access-control-request-headers") or ""
        allow = ", ".join(sorted({"content-type", "x-api-key", "authorization",
                                  *(name.strip().lower() for name in requested.split(",") if name.strip())}))
        return [("access-control-allow-origin", origin), ("vary", "Origin"),
                ("access-control-allow-methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS"),
                ("access-control-allow-headers", allow), ("access-control-max-age", "600")]

    # -- the client address -------------------------------------------------------------------

    def _in_trusted_networks(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.strip().strip("[]"))
        except ValueError:
            return False
        return any(ip in network for network in self._trusted)

    def client_address(self, peer: str | None, headers: HeaderLookup) -> str:
        """The client a request comes from: the peer, or behind a trusted proxy the address it forwards.

        `X-Forwarded-For` is read from the right (each proxy appends the address it received from),
        skipping addresses in the trusted networks; the first other address is the client. A client
        cannot hide behind entries it wrote itself: those lie left of the address the proxy added.
        (`*` trusts any peer as a proxy, and takes the address it appended.)
        """
        peer = peer or "unknown"
        if not (self._trust_any_peer or self._in_trusted_networks(peer)):
            return peer
        forwarded = [entry.strip() for entry in (headers.get("x-forwarded-for") or "").split(",") if entry.strip()]
        for entry in reversed(forwarded):
            if not self._in_trusted_networks(entry):
                return entry
        return forwarded[0] if forwarded else peer

    # -- what /metadata says ------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The protections in force, for `/metadata` (never a key)."""
        hosts = self.hosts()
        if self.explicit_hosts is None and self.bind_host is None:
            host_rule: Any = "loopback names for connections on a loopback address, else any"
        else:
            host_rule = list(hosts) if hosts is not None else "any"
        return {
            "api_key_required": self.requires_key,
            "api_key_accepted_as": list(ACCEPTED_KEY_FORMS) if self.requires_key else [],
            "open_paths": sorted(OPEN_PATHS) + [prefix + "*" for prefix in OPEN_PREFIXES],
            "allowed_origins": ["same origin", *sorted(self.allowed_origins)],
            "allowed_hosts": host_rule,
            "forwarded_allow_ips": list(self._forwarded_specs),
        }
