"""The installed pygls still has every internal ``tether.lsp.pygls_adapter`` relies on, and no
other module of tether's LSP face names a pygls internal.

CI runs this under one pygls release; ``make pygls-matrix`` runs it (and tests/lsp) under each
release the pin in pyproject.toml allows.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

import tether.lsp
from tether.lsp import pygls_adapter
from tether.lsp.pygls_adapter import (
    RELIED_ON,
    RELIED_ON_ATTRIBUTES,
    IncompatiblePygls,
    PyglsAdapter,
    check_pygls,
)

LSP_FACE = Path(tether.lsp.__file__).parent


@pytest.mark.parametrize("name", sorted(RELIED_ON))
def test_each_private_method_relied_on_has_the_expected_parameters(name: str) -> None:
    member = getattr(LanguageServerProtocol, name)
    assert tuple(inspect.signature(member).parameters) == RELIED_ON[name]


def test_each_private_attribute_relied_on_is_set_by_pygls() -> None:
    protocol = LanguageServer("probe", "0").protocol
    for name in RELIED_ON_ATTRIBUTES:
        assert name in vars(protocol), name
    assert isinstance(protocol._request_futures, dict)
    assert isinstance(protocol._result_types, dict)


def test_every_private_method_the_adapter_overrides_is_listed() -> None:
    overridden = {
        name
        for name in vars(PyglsAdapter)
        if name.startswith("_")
        and not name.startswith("__")
        and hasattr(LanguageServerProtocol, name)
    }
    assert overridden <= set(RELIED_ON)


def test_the_import_time_check_names_what_a_release_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changed = dict(RELIED_ON, _send_data=("self", "payload"), _gone_in_a_release=("self",))
    monkeypatch.setattr(pygls_adapter, "RELIED_ON", changed)
    with pytest.raises(IncompatiblePygls) as raised:
        check_pygls()
    message = str(raised.value)
    assert "_gone_in_a_release is gone" in message
    assert "_send_data('self', 'data') (expected ('self', 'payload'))" in message
    assert importlib.metadata.version("pygls") in message


def test_the_installed_release_is_one_the_pin_allows() -> None:
    pin = next(
        Requirement(line)
        for line in importlib.metadata.requires("tether") or []
        if Requirement(line).name == "pygls"
    )
    assert Version(importlib.metadata.version("pygls")) in pin.specifier


def _pygls_private_names() -> set[str]:
    """Every single-underscore member of pygls's server, protocol and helpers, as built."""
    server = LanguageServer("probe", "0")
    owners = (
        LanguageServerProtocol,
        LanguageServer,
        server,
        server.protocol,
        server.protocol.fm,
        server.protocol.progress,
    )
    return {
        name
        for owner in owners
        for name in set(dir(owner)) | set(getattr(owner, "__dict__", {}))
        if name.startswith("_") and not name.startswith("__")
    }


def _names_used(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Attributes read or written, and methods defined in classes (overrides)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield item.lineno, item.name


def test_no_module_but_the_adapter_names_a_pygls_internal() -> None:
    private = _pygls_private_names()
    assert "_request_futures" in private  # the scan sees pygls's internals at all
    found = [
        f"{path.name}:{line} {name}"
        for path in sorted(LSP_FACE.glob("*.py"))
        if path.name != "pygls_adapter.py"
        for line, name in _names_used(ast.parse(path.read_text()))
        if name in private
    ]
    assert found == []
