import re
from dataclasses import dataclass
from typing import cast

from django.http import HttpRequest
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer, SessionAuth

from quests.engine.writes import Credentials
from quests.services.audit import Actor
from quests.services.tokens import hash_token, token_request

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
        if (request.method, getattr(request.resolver_match, "url_name", None)) in SERVICE_AUTHENTICATED:
            # Its service authenticates the token in its own first statement (and counts the
            # request then): here only its hash is handed on.
            return BearerToken(raw=token, credentials=Credentials(token_hash=hash_token(token)))
        return self.authenticate_now(request, token)

    def authenticate_now(self, request: HttpRequest, token: str):
        # Counted once the token is known to be valid, so that made-up tokens fill no cache keys.
        # A person's session is not limited: a person clicks, and a session cannot be minted
        # without a password that the login throttle guards; an agent loops.
        agent_token = token_request(token, receipt=bool(_RECEIPT_PATH.match(request.path)))
        if agent_token is None:
            return None
        cast(ActorRequest, request).actor = Actor(user=agent_token.user, token=agent_token)
        return agent_token


# The agent's hottest calls, whose services authenticate an agent token in their own first
# statement (quests.engine.writes.Credentials): by method and URL name. A path is named after its
# first view: the LangGraph checkpoints' path after the saver's put, whose GET is the listing that
# answers the saver's get_tuple.
SERVICE_AUTHENTICATED = frozenset(
    {
        ("POST", "create_checkpoint"),
        ("POST", "create_record"),
        ("POST", "heartbeat"),
        ("POST", "plan_operation"),
        ("POST", "attempt_operation"),
        ("POST", "complete_operation"),
        ("POST", "fail_operation"),
        ("POST", "observe_operation"),
        ("POST", "request_approval"),
        ("POST", "request_approvals"),
        ("POST", "claim_milestone"),
        ("POST", "propose_memory"),
        ("POST", "stop_run"),
        ("POST", "put_checkpoint"),
        ("POST", "put_writes"),
        ("GET", "put_checkpoint"),
    }
)


@dataclass
class BearerToken:
    """An agent token handed on unchecked to a service that authenticates it (`credentials`)."""

    raw: str
    credentials: Credentials
    handed_on: bool = False


def authenticated_by_service(request: HttpRequest) -> Actor | Credentials:
    """Who the view's service acts for: a person's session, or the agent token it authenticates."""
    auth = getattr(request, "auth", None)
    if isinstance(auth, BearerToken):
        auth.handed_on = True
        return auth.credentials
    return actor(request)


def refused_before_the_service(request: HttpRequest) -> bool:
    """For a request refused before its view handed its token on (a body that is not JSON, or
    not valid): authenticate the token now, as any other endpoint did before reading the body.
    True when it is not valid (the answer is then 401, whatever the body); a valid one is
    counted against its rate (RateLimited past it)."""
    auth = getattr(request, "auth", None)
    if not isinstance(auth, BearerToken) or auth.handed_on:
        return False
    auth.handed_on = True
    return AgentTokenAuth().authenticate_now(request, auth.raw) is None


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
