"""Every status an operation can answer is in the OpenAPI document. Schemathesis proves it for the
requests it generates (tests/test_openapi_schemathesis.py); this reads the code for the rest: the
service errors (quests.services.errors) each endpoint can raise, found by following its calls
through the project's own functions, must each be a documented response of that operation."""

import ast
import inspect
import textwrap
import typing
from types import FunctionType, ModuleType

from quests.api import api
from quests.services.errors import ServiceError

PROJECT = ("quests.", "checkpoints.")


def _resolve(node: ast.expr, names: dict) -> object:
    """What a name or a dotted module attribute in a function's code stands for, if anything."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names)
        if isinstance(owner, (ModuleType, type)):
            return getattr(owner, node.attr, None)
    return None


def _error_class(target: object) -> type[ServiceError] | None:
    """The service error a `raise` makes: the class itself, or the return type of a function
    that builds one (quests.services.errors.run_ended)."""
    if isinstance(target, FunctionType):
        target = typing.get_type_hints(target).get("return")
    return target if isinstance(target, type) and issubclass(target, ServiceError) else None


def _caught(handlers: list[ast.ExceptHandler], names: dict) -> tuple[type, ...]:
    caught = []
    for handler in handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        caught += [t for t in (_resolve(node, names) for node in types if node is not None) if isinstance(t, type)]
    return tuple(caught)


def raisable(function: FunctionType, seen: set | None = None) -> set[type[ServiceError]]:
    """The service errors a call of `function` can raise through the project's own code (an error
    caught on the way does not count)."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)
    if function in seen or not isinstance(function, FunctionType) or not function.__module__.startswith(PROJECT):
        return set()
    seen.add(function)
    names = {**vars(inspect.getmodule(function)), **function.__globals__}

    def walk(node: ast.AST) -> set[type[ServiceError]]:
        if isinstance(node, ast.Try):
            inside = set().union(*(walk(child) for child in node.body))
            caught = _caught(node.handlers, names)
            rest = [*node.handlers, *node.orelse, *node.finalbody]
            return {error for error in inside if not issubclass(error, caught)} | set().union(*(walk(child) for child in rest))
        found = set()
        if isinstance(node, ast.Raise) and node.exc is not None:
            made = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if error := _error_class(_resolve(made, names)):
                found.add(error)
        if isinstance(node, ast.Call):
            if isinstance(target := _resolve(node.func, names), FunctionType):
                found |= raisable(target, seen)
        return found | set().union(*(walk(child) for child in ast.iter_child_nodes(node)))

    return walk(ast.parse(textwrap.dedent(inspect.getsource(function))))


def operations():
    for _, router in api._routers:
        for path_view in router.path_operations.values():
            yield from path_view.operations


def operation_id(operation) -> str:
    """The id the document gives it: its own when it names one, else the one ninja derives."""
    return operation.operation_id or api.get_openapi_operation_id(operation)


# What the reading finds that no request can reach, each with the reason (it does not follow
# arguments: a helper's branch the endpoint never takes still counts).
UNREACHABLE = {
    # lock_thread(create=False) finds a thread or not; only creating one for a mission looks it up.
    ("quests_api_graph_delete_thread", 404): "lock_thread without create",
    # Creating the copy's thread names no mission_id, so no mission is looked up either.
    ("quests_api_graph_copy_thread", 404): "lock_thread without mission_id",
}


def test_every_error_an_endpoint_can_raise_is_a_documented_response():
    document = api.get_openapi_schema()
    documented = {
        operation["operationId"]: {int(status) for status in operation["responses"]} for item in document["paths"].values() for operation in item.values()
    }
    missing = {}
    for operation in operations():
        statuses = {error.status for error in raisable(operation.view_func)}
        own_id = operation_id(operation)
        undocumented = {status for status in statuses - documented[own_id] if (own_id, status) not in UNREACHABLE}
        if undocumented:
            missing[own_id] = sorted(undocumented)
    assert not missing


def test_the_reading_finds_what_endpoints_raise():
    """A check of the check: it follows calls into the services and through their helpers."""
    found = {operation_id(operation): raisable(operation.view_func) for operation in operations()}
    statuses = {error.status for errors in found.values() for error in errors}
    assert {404, 409, 410, 422} <= statuses
    assert 410 in {error.status for error in found["quests_api_graph_put_checkpoint"]}


def test_the_langgraph_filter_is_documented_as_the_json_object_it_accepts():
    """Declared a string, any text would be schema-valid, and the server refuses text that is not
    a JSON object: the document describes the parameter by its content instead."""
    parameters = api.get_openapi_schema()["paths"]["/api/v1/langgraph/checkpoints"]["get"]["parameters"]
    (described,) = [parameter for parameter in parameters if parameter["name"] == "filter"]
    assert "schema" not in described and described["required"] is False
    assert described["content"]["application/json"]["schema"]["type"] == "object"
