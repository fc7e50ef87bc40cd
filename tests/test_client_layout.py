"""questlog_client's layout: no import cycle (function-level imports and those under
`if TYPE_CHECKING:` count: a type-only cycle is still two modules that cannot be read apart), every
import at the top of its module, short modules, and a
package that imports without Django (agents install it alone)."""

import ast
import subprocess
import sys
from pathlib import Path

import grimp

PACKAGE = "questlog_client"
ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450


def import_graph(package: str = PACKAGE) -> grimp.ImportGraph:
    return grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)


def find_cycle(graph: grimp.ImportGraph) -> list[str] | None:
    """One import cycle as [a, b, …, a], or None. Depth-first, remembering the path walked."""
    done: set[str] = set()
    for start in sorted(graph.modules):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph.find_modules_directly_imported_by(start)))]
        path.append(start)
        on_path.add(start)
        while stack:
            module, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                on_path.discard(module)
                done.add(module)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in done:
                stack.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                path.append(nxt)
                on_path.add(nxt)
    return None


def module_files() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py"))


def late_imports(source: str) -> list[int]:
    """Lines of imports that are not at module level (or under a module-level `if TYPE_CHECKING:`)."""
    tree = ast.parse(source)
    allowed: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            allowed.add(id(node))
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            allowed.update(id(child) for child in ast.walk(node) if isinstance(child, ast.Import | ast.ImportFrom))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in allowed]


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    assert find_cycle(graph) is None
    graph.add_import(importer="p.c", imported="p.a")
    assert find_cycle(graph) in (["p.a", "p.b", "p.c", "p.a"], ["p.b", "p.c", "p.a", "p.b"], ["p.c", "p.a", "p.b", "p.c"])


def test_the_client_package_has_no_import_cycle():
    graph = import_graph()
    assert {"questlog_client.client", "questlog_client.testing", "questlog_client.replay.harness"} <= graph.modules
    assert find_cycle(graph) is None, " → ".join(find_cycle(graph) or [])


def test_the_replay_engine_does_not_import_its_front_module():
    graph = import_graph()
    engine = graph.find_descendants("questlog_client.replay") | {"questlog_client.replay"}
    for module in engine:
        assert not graph.chain_exists(importer=module, imported="questlog_client.testing"), module


def test_the_client_core_knows_nothing_of_replaycheck():
    graph = import_graph()
    for module in ("questlog_client.core", "questlog_client.client", "questlog_client.missions", "questlog_client.runs", "questlog_client.operations"):
        assert not graph.chain_exists(importer=module, imported="questlog_client.replay.steps"), module
        assert not graph.chain_exists(importer=module, imported="questlog_client.testing"), module


def test_every_import_is_at_the_top_of_its_module():
    late = {str(path.relative_to(ROOT)): lines for path in module_files() if (lines := late_imports(path.read_text(encoding="utf-8")))}
    assert late == {}


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in module_files() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_client_and_its_test_machinery_import_without_django():
    code = (
        "import sys, questlog_client, questlog_client.testing, questlog_client.scenarios;"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'));"
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
