"""docs/api.md is the published contract: every route of the URL conf appears in it, every API
operation with its method, and every route it names exists. Matched on paths (not view names), so
views can move between modules freely."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLResolver, get_resolver

API_DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"
API_PREFIX = "/api/v1/"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# Django's own auth views and the admin are documented as groups, not route by route.
GROUPS = {"/accounts/": "/accounts/login/", "/admin/": "/admin/"}

_PARAM = re.compile(r"<[^<>]+>|\{[^{}]+\}")
_FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`\n]+)`")
_ROUTE_SPAN = re.compile(rf"^(?:({'|'.join(METHODS)}) )?(/[^\s?]*)")


def normalise(path: str) -> str:
    """`/missions/<int:pk>/` and `/missions/{mission_id}/` are the same route."""
    return _PARAM.sub("{}", path)


def url_conf_paths() -> set[str]:
    def walk(patterns, prefix: str):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            else:
                yield "/" + route

    return {normalise(path) for path in walk(get_resolver().url_patterns, "")}


def is_grouped(path: str) -> bool:
    served_files = [url for url in (settings.STATIC_URL, getattr(settings, "MEDIA_URL", "")) if url]
    prefixes = [*GROUPS, *("/" + url.strip("/") + "/" for url in served_files)]
    return any(path.startswith(prefix) for prefix in prefixes)


def documented_routes() -> set[tuple[str | None, str]]:
    """(method or None, normalised path) of every route the doc names in inline code, outside code
    blocks (whose examples use real ids). An elided path (`/api/v1/runs/{run_id}/…`) names none."""
    text = _FENCED.sub("", API_DOC.read_text())
    routes = set()
    for span in _SPAN.findall(text):
        match = _ROUTE_SPAN.match(span.strip())
        if match and "…" not in span:
            routes.add((match.group(1), normalise(match.group(2))))
    return routes


@pytest.fixture(scope="module")
def api_operations() -> dict[str, set[str]]:
    """Normalised path -> HTTP methods, from the live OpenAPI document (served without a query)."""
    response = Client().get(API_PREFIX + "openapi.json")
    assert response.status_code == 200
    return {normalise(path): {m.upper() for m in ops} for path, ops in response.json()["paths"].items()}


def test_every_route_of_the_url_conf_is_documented():
    documented = {path for _, path in documented_routes()}
    missing = sorted(path for path in url_conf_paths() if not is_grouped(path) and path not in documented)
    assert not missing, f"routes missing from docs/api.md: {missing}"


def test_grouped_routes_are_documented_as_groups():
    documented = {path for _, path in documented_routes()}
    assert set(GROUPS.values()) <= documented


def test_every_api_operation_is_documented_with_its_method(api_operations):
    documented = documented_routes()
    missing = sorted(f"{method} {path}" for path, methods in api_operations.items() for method in methods if (method, path) not in documented)
    assert not missing, f"API operations missing from docs/api.md: {missing}"


def test_every_route_the_doc_names_exists():
    existing = url_conf_paths()
    # A prefix that ends at a path segment (`/api/v1`, `/accounts/`) names a group of routes.
    prefixes = {route[: i + 1] for route in existing for i, char in enumerate(route) if char == "/"}
    unknown = sorted({path for _, path in documented_routes() if path not in existing and path.rstrip("/") + "/" not in prefixes})
    assert not unknown, f"docs/api.md names routes the URL conf does not have: {unknown}"


def test_every_api_method_the_doc_names_exists(api_operations):
    wrong = sorted(
        f"{method} {path}"
        for method, path in documented_routes()
        if method and path.startswith(API_PREFIX) and path in api_operations and method not in api_operations[path]
    )
    assert not wrong, f"docs/api.md names methods the API does not have: {wrong}"


def test_the_checks_see_the_api(api_operations):
    # Guards the guards: a parsing slip must not make every check above pass vacuously.
    documented = documented_routes()
    assert ("POST", normalise("/api/v1/runs/{run_id}/checkpoints")) in documented
    assert normalise("/missions/<int:pk>/pause/") in url_conf_paths()
    assert len(api_operations) > 20


def test_the_readme_points_at_documents_in_the_repository():
    readme = (API_DOC.parent.parent / "README.md").read_text()
    assert "(docs/api.md)" in readme and "(docs/architecture.md)" in readme
    # The contract once lived in a design folder outside the repository; a clone must not need it.
    assert "`API.md`" not in readme
    assert "```mermaid" in readme
