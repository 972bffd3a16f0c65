"""The adapter table (replay/server/apis/__init__.py `ADAPTERS`) is the one list of APIs: every
registered adapter has a conformance subclass, and `--api`'s help and checks name exactly its
entries."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.unit.server.apis as apis_tests
from replay.server.apis import ADAPTERS, API_CHOICES, API_NAMES, api_help, check_api_name, get_api
from replay.utils.errors import UsageError
from tests.unit.server.apis.conformance import AdapterConformance


def conformance_subclasses() -> dict[str, list[str]]:
    """api_name -> the conformance classes of tests/unit/server/apis/test_*.py that test it."""
    found: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(apis_tests.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"{apis_tests.__name__}.{info.name}")
            for value in vars(module).values():
                if isinstance(value, type) and issubclass(value, AdapterConformance) \
                        and value is not AdapterConformance and value.__module__ == module.__name__:
                    found.setdefault(value.api_name, []).append(value.__qualname__)
    return found


@pytest.mark.parametrize("name", API_NAMES)
def test_every_registered_adapter_has_a_conformance_subclass(name):
    assert name in conformance_subclasses(), (
        f"adapter {name!r} has no AdapterConformance subclass in tests/unit/server/apis/ "
        "(with captured real answers in tests/data/apis/)")


def test_every_conformance_subclass_tests_a_registered_adapter():
    assert set(conformance_subclasses()) <= set(API_NAMES)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
def test_each_entry_builds_the_adapter_of_its_name_in_both_roles(adapter):
    assert get_api(adapter.name).name == adapter.name
    assert get_api(adapter.name, reference=True).name == adapter.name


def test_names_are_unique_and_auto_is_not_one_of_them():
    assert len(set(API_NAMES)) == len(API_NAMES) and "auto" not in API_NAMES


def test_the_help_and_the_refusal_name_every_choice():
    with pytest.raises(UsageError) as refused:
        check_api_name("grpc")
    for name in API_CHOICES:
        assert name in api_help() and name in str(refused.value)


def test_every_entry_can_be_detected():
    assert all(adapter.probes for adapter in ADAPTERS)
