"""The layering promises, checked on the import graph (grimp) rather than by reading code.

A function-level import counts like any other: it only hides a cycle from the interpreter, not
from a reader. Imports under `if TYPE_CHECKING:` count too: a type-only cycle is still two modules
that cannot be read or moved apart."""

from pathlib import Path

import grimp
import pytest

APP_PACKAGES = ("quests", "checkpoints", "notifications", "config")


def _graph(*packages: str) -> grimp.ImportGraph:
    return grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)


def _cycles(graph: grimp.ImportGraph, packages: tuple[str, ...]) -> list[list[str]]:
    """Every group of modules that import each other, directly or not (Tarjan's strongly
    connected components), limited to the modules of `packages`."""
    modules = sorted(m for m in graph.modules if m.split(".")[0] in packages)
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return groups


def _describe(graph: grimp.ImportGraph, group: list[str]) -> str:
    lines = [" <-> ".join(group)]
    members = set(group)
    for module in group:
        for imported in sorted(graph.find_modules_directly_imported_by(module) & members):
            details = graph.get_import_details(importer=module, imported=imported)
            where = ", ".join(f"line {d['line_number']}" for d in details)
            lines.append(f"    {module} imports {imported} ({where})")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def app_graph() -> grimp.ImportGraph:
    return _graph(*APP_PACKAGES)


def test_the_apps_have_no_import_cycle(app_graph):
    cycles = _cycles(app_graph, APP_PACKAGES)
    assert not cycles, "Import cycles:\n" + "\n".join(_describe(app_graph, group) for group in cycles)


def test_checkpoints_never_imports_quests(app_graph):
    chain = app_graph.find_shortest_chain(importer="checkpoints", imported="quests", as_packages=True)
    assert chain is None, f"checkpoints imports quests: {' -> '.join(chain or ())}"


def test_locking_imports_no_other_service(app_graph):
    # idempotency's Lookup rides in the locking statement; it imports no service but errors. audit
    # names who acts (Actor); it imports no service at all.
    allowed = {"quests.services.access", "quests.services.audit", "quests.services.errors", "quests.services.idempotency"}
    services = {m for m in app_graph.modules if m.startswith("quests.services.")}
    imported = app_graph.find_modules_directly_imported_by("quests.services.locking") & services
    assert imported <= allowed, f"quests.services.locking imports {sorted(imported - allowed)}"


def test_no_service_imports_the_task_modules(app_graph):
    services = {m for m in app_graph.modules if m.startswith(("quests.services", "quests.langgraph.services"))}
    for task_module in ("quests.tasks", "quests.retention_tasks", "quests.retention.tasks"):
        if task_module in app_graph.modules:
            offenders = sorted(m for m in services if task_module in app_graph.find_modules_directly_imported_by(m))
            assert not offenders, f"{offenders} import {task_module}: publish by task name instead"


# Fails until the questlog_client split (issue 9, part E) removes the replay <-> testing cycle.
def test_the_client_has_no_import_cycle():
    graph = _graph("questlog_client")
    cycles = _cycles(graph, ("questlog_client",))
    assert not cycles, "Import cycles:\n" + "\n".join(_describe(graph, group) for group in cycles)


MAX_MODULE_LINES = 450  # a hard limit (issue 9): a module that needs more wants splitting by concern


def test_no_module_is_over_the_line_limit():
    root = Path(__file__).resolve().parent.parent
    too_long = {
        str(path.relative_to(root)): lines
        for package in ("quests", "checkpoints", "notifications", "questlog_client", "config")
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.parts and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}
