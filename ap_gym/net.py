"""Network rules every ap-gym server and client follows (a leaf: imports nothing of ap-gym).

* A server bound beyond loopback answers only with a key (:func:`is_loopback`).
* A server on loopback answers only requests addressed to a loopback name
  (:data:`LOOPBACK_HOSTS`): a page on another site whose name was rebound to 127.0.0.1 (DNS
  rebinding) sends its own name in ``Host`` and is refused.
* A credential goes only over HTTPS or to loopback (:func:`may_send_credentials`): an API
  key is never sent in clear text across a network unless the user says so.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_HOSTS", "is_loopback", "may_send_credentials"]

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
