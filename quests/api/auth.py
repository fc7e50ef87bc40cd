import re
from typing import cast

from django.http import HttpRequest
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer, SessionAuth

from quests.services import throttle
from quests.services.audit import Actor
from quests.services.tokens import token_authenticate

# An operation's receipts: counted against the token's rate but never refused (see throttle).
_RECEIPT_PATH = re.compile(r"^/api/v1/operations/[^/]+/(complete|fail|observe)/?$")


class AgentTokenAuth(HttpBearer):
    """`Authorization: Bearer <token>`: acts for the token's user, on one mission if it is limited."""

    def __call__(self, request: HttpRequest):
        # Credentials that are sent must be valid: falling back to a session cookie would let a
        # revoked or mistyped token (or another scheme) act as whoever is signed in in the same
        # browser. An empty header is sent credentials too (and refused). Without the header, the
        # session is tried next.
        if self.header not in request.headers:
            return None
        result = super().__call__(request)
        if result is None:
            raise AuthenticationError()
        return result

    def authenticate(self, request: HttpRequest, token: str):
        agent_token = token_authenticate(token)
        if agent_token is None:
            return None
        # Counted once the token is known to be valid, so that made-up tokens fill no cache keys.
        # A person's session is not limited: a person clicks, and a session cannot be minted
        # without a password that the login throttle guards; an agent loops.
        throttle.api_request_count(agent_token.token_hash, receipt=bool(_RECEIPT_PATH.match(request.path)))
        cast(ActorRequest, request).actor = Actor(user=agent_token.user, token=agent_token)
        return agent_token


class PersonSessionAuth(SessionAuth):
    """A person's Django session; ninja checks the CSRF token on unsafe methods."""

    def authenticate(self, request: HttpRequest, key):
        user = super().authenticate(request, key)
        if user is not None:
            cast(ActorRequest, request).actor = Actor(user=user)
        return user


class ActorRequest(HttpRequest):
    """A request the API's authentication named the actor of (the attribute it sets)."""

    actor: Actor


def actor(request: HttpRequest) -> Actor:
    return cast(ActorRequest, request).actor
