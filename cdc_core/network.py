"""What counts as this machine: loopback hosts, the only ones spoken to in clear text.

Both plain-http object stores (``storage.settings``) and a Spark Connect server's token
(``connect_token``) are allowed over loopback alone, so both ask this one rule.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine only (``localhost`` or a loopback address)."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
