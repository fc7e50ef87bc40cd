"""The OpenAPI document generates typed clients with the generators people use, every operation
included: openapi-python-client (a `.[dev]` dependency) and openapi-typescript (package.json,
installed by `make install` with npm ci). Neither may warn: a warning is a schema or an operation
the generator could not read and left out."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from quests.api import api

ROOT = Path(__file__).resolve().parent.parent
OPENAPI_TYPESCRIPT = ROOT / "node_modules" / ".bin" / "openapi-typescript"
OPENAPI_PYTHON_CLIENT = Path(sys.executable).with_name("openapi-python-client")
METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


@pytest.fixture(scope="module")
def document(tmp_path_factory) -> tuple[Path, set[str]]:
    """The document as /api/v1/openapi.json serves it, and the id of each of its operations."""
    schema = api.get_openapi_schema()
    path = tmp_path_factory.mktemp("openapi") / "openapi.json"
    path.write_text(json.dumps(schema))
    ids = {op["operationId"] for item in schema["paths"].values() for method, op in item.items() if method in METHODS}
    assert len(ids) >= 40  # every route, not an empty document
    return path, ids


def generate(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-10000:] + result.stderr[-5000:]
    return result


def test_openapi_python_client_generates_every_operation_without_a_warning(document, tmp_path):
    path, operation_ids = document
    # No post-generation hooks: the generator's default formats with ruff, which is not ours to need.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"post_hooks": []}))
    result = generate(
        [
            str(OPENAPI_PYTHON_CLIENT),
            "generate",
            "--path",
            str(path),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            "client",
            "--fail-on-warning",
        ],
        tmp_path,
    )
    assert "Warning" not in result.stdout + result.stderr, result.stdout
    # One module per operation, named after its id, under api/<tag>/.
    generated = {module.stem for module in (tmp_path / "client" / "api").rglob("*.py") if module.stem != "__init__"}
    assert generated == {operation_id.lower() for operation_id in operation_ids}


def test_openapi_typescript_generates_every_operation(document, tmp_path):
    path, operation_ids = document
    assert OPENAPI_TYPESCRIPT.exists(), "openapi-typescript is missing: `make install` installs it with npm ci"
    assert shutil.which("node"), "node is missing"
    generate([str(OPENAPI_TYPESCRIPT), str(path), "--output", "api.ts"], tmp_path)
    typescript = (tmp_path / "api.ts").read_text()
    # Its `operations` interface has one member per operation id, each with its responses typed.
    operations = typescript[typescript.index("export interface operations {") :]
    generated = set(re.findall(r"^    (\w+): \{$", operations, flags=re.MULTILINE))
    assert generated == operation_ids
