"""Network rules every ap-gym server and client follows (a leaf: imports nothing of ap-gym).

* A server bound beyond loopback answers only with a key (:func:`is_loopback`).
* A server on loopback answers only requests addressed to a loopback name
  (:data:`LOOPBACK_HOSTS`): a page on another site whose name was rebound to 127.0.0.1 (DNS
  rebinding) sends its own name in ``Host`` and is refused.
* A credential goes only over HTTPS or to loopback (:func:`may_send_credentials`): an API
  key is never sent in clear text across a network unless the user says so.
* A URL never carries one (:func:`refuse_userinfo`): ``user:password@`` in a URL would be
  sent as Basic auth to any host, written to ``config.json``, shown by the viewer and
  printed in errors. Keys travel in ``$AP_GYM_API_KEY`` (a bearer token), never in a URL.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_HOSTS", "is_loopback", "may_send_credentials", "redact", "refuse_userinfo"]

#: The names a loopback-bound server accepts in ``Host`` (ports aside).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface (127.0.0.0/8, ::1, localhost)."""
    host = (host or "").strip()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def may_send_credentials(url: str) -> bool:
    """Whether a key may be sent to ``url``: HTTPS, or plain HTTP to this machine."""
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname or ""))


def redact(url: str) -> str:
    """``url`` without the ``user:password@`` part, if it has one (what errors may show)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()


def refuse_userinfo(url: str) -> str:
    """``url``, or a :class:`ValueError` (naming the URL without its credentials) when it
    carries ``user:password@``."""
    if "@" in urlsplit(url).netloc:
        raise ValueError(f"{redact(url)} was given with credentials in it (user:password@): a URL is written to "
                         "config.json, shown by the viewer and printed in errors, and would send them to any host. "
                         "Give the key in $AP_GYM_API_KEY instead (a bearer token, sent only over https or to "
                         "this machine)")
    return url
