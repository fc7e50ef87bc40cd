"""Which webhook URLs Questlog may call: http(s) to a public address. Loopback, private,
link-local (cloud metadata at 169.254.169.254 among them), shared, reserved and multicast
addresses are refused, at registration and again at delivery, after resolving the host name,
unless QUESTLOG_WEBHOOK_ALLOW_PRIVATE is on. Delivery then connects to the address that was
checked, so a name that resolves differently a moment later cannot point it elsewhere."""

import ipaddress
import socket
import urllib.parse

from django.conf import settings

# Names that cloud providers answer on with instance metadata, refused whatever they resolve to.
METADATA_HOSTS = {"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    def __init__(self, message: str, code: str = "address_refused") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def is_public(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def resolve(url: str) -> tuple[urllib.parse.SplitResult, Address]:
    """The URL's parts and the one address to connect to; Refused when it may not be called."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused("The URL is not valid.", code="invalid") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("A webhook URL starts with https:// (or http://) and names a host.", code="invalid")
    if parts.username or parts.password:
        raise Refused("A webhook URL may not carry a user name or password.", code="invalid")
    host = parts.hostname.rstrip(".").lower()
    if host in METADATA_HOSTS:
        raise Refused(f"{host} is a cloud metadata address; webhooks may not call it.")
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise Refused(f"The host name {host} does not resolve.", code="unresolvable") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
    if not settings.QUESTLOG_WEBHOOK_ALLOW_PRIVATE:
        # Every address the name has, not just the first: a client may try any of them.
        for address in addresses:
            if not is_public(address):
                raise Refused(f"{host} resolves to {address}, a loopback, private, link-local or reserved address; webhooks may not call it.")
    return parts, addresses[0]
