"""The public surface of dpmed.accounting, and its purity (numpy, scipy, dp_accounting, stdlib only)."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

import dpmed.accounting as accounting

PACKAGE = Path(accounting.__file__).parent
ALLOWED_THIRD_PARTY = {"numpy", "scipy", "dp_accounting"}


def test_every_exported_name_exists():
    for name in accounting.__all__:
        assert getattr(accounting, name) is not None, name


def test_the_agreed_names_are_exported():
    agreed = {"PoissonGaussianEvent", "LaplaceImageEvent", "event_to_dict", "event_from_dict", "Ledger",
              "ACCOUNTANTS", "NEIGHBOUR_DP_SGD", "dp_sgd_epsilon", "ledger_epsilon", "default_delta",
              "noise_multiplier_for", "NEIGHBOUR_LDP_IMAGE", "laplace_pixel_epsilon", "laplace_image_epsilon",
              "describe_accountant"}
    assert agreed <= set(accounting.__all__)


@pytest.mark.parametrize("function", [accounting.dp_sgd_epsilon, accounting.noise_multiplier_for,
                                      accounting.laplace_pixel_epsilon,
                                      accounting.laplace_scale_for_image])
def test_privacy_arguments_are_keyword_only(function):
    kinds = {p.kind for p in inspect.signature(function).parameters.values()}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize("function", [accounting.ledger_epsilon])
def test_ledger_epsilon_takes_delta_by_keyword(function):
    parameters = inspect.signature(function).parameters
    assert parameters["delta"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["accountant"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("module", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_accounting_imports_only_pure_math(module):
    """Mirror of the import-linter contract, runnable without it: no torch, nothing else of dpmed."""
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            allowed = (top in ALLOWED_THIRD_PARTY or top in sys.stdlib_module_names or top == "__future__"
                       or name == "dpmed.accounting" or name.startswith("dpmed.accounting."))
            assert allowed, f"{module.name} imports {name}"


def test_a_type_checker_sees_every_exported_name_from_its_module():
    """The names are imported on first use (`__getattr__`), which a type checker reads as Any: its TYPE_CHECKING
    imports give it their types, and must name each exported name from the module that run time imports it from."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == accounting._HOME
    assert set(seen) == set(accounting.__all__)
