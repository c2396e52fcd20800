"""The evaluation modules say their intervals are at the study's confidence level, not at a fixed 95%: a study that
set ``evaluation.confidence: 0.9`` read "95% interval" in the docs of intervals that were 90% ones."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import dpmed.evaluation


def _docstrings():
    """(where, docstring) of every evaluation module and of the classes and functions it defines."""
    for info in pkgutil.iter_modules(dpmed.evaluation.__path__):
        module = importlib.import_module(f"dpmed.evaluation.{info.name}")
        yield module.__name__, module.__doc__ or ""
        for name, member in vars(module).items():
            if (inspect.isfunction(member) or inspect.isclass(member)) and member.__module__ == module.__name__:
                yield f"{module.__name__}.{name}", member.__doc__ or ""


def test_a_95_percent_level_is_said_to_be_the_default_of_the_configured_confidence():
    fixed = []
    for where, doc in _docstrings():
        for sentence in re.split(r"(?<=\.)\s+(?=[A-Z*])", " ".join(doc.split())):
            if re.search(r"\b95 ?%", sentence) and "confidence" not in sentence:
                fixed.append(f"{where}: {sentence}")
    assert fixed == []
