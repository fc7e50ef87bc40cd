"""A fake external service (a booking/payment/email provider) for crash-resume tests.

It lives outside every simulated agent run, like the real outside world: a crashed run loses its
memory, the service does not. It counts every call that would have a side effect, per idempotency
key, so a test can prove that no side effect was ever performed twice. It is deliberately *not*
idempotent itself: a second call with the same key creates a second external object, as a careless
real service would, so a repeated side effect cannot hide.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ExternalObject:
    external_id: str
    key: str
    kind: str
    request: dict[str, Any]
    status: str = "confirmed"

    def receipt(self) -> dict[str, Any]:
        return {"external_id": self.external_id, "kind": self.kind, "request": self.request}


@dataclass
class FakeService:
    calls: Counter = field(default_factory=Counter)
    lookups: Counter = field(default_factory=Counter)
    objects: list[ExternalObject] = field(default_factory=list)

    def perform(self, *, key: str, kind: str, request: dict[str, Any]) -> ExternalObject:
        """Do the side effect (book, pay, send). Every call counts, and every call has an effect."""
        self.calls[key] += 1
        obj = ExternalObject(external_id=f"ext-{len(self.objects) + 1}", key=key, kind=kind, request=dict(request))
        self.objects.append(obj)
        return obj

    def lookup(self, key: str) -> ExternalObject | None:
        """What a reconciling agent asks: did the effect with this idempotency key happen? A
        lookup has no side effect, so it is counted apart from `calls`."""
        self.lookups[key] += 1
        found = [obj for obj in self.objects if obj.key == key]
        return found[0] if found else None

    def effects(self) -> dict[str, list[dict[str, Any]]]:
        """The outside world as a comparable value: each key's objects, ids aside."""
        world: dict[str, list[dict[str, Any]]] = {}
        for obj in self.objects:
            world.setdefault(obj.key, []).append({"kind": obj.kind, "request": obj.request, "status": obj.status})
        return world
