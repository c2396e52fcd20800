"""The decoder contract sits below every decoder: the DICOM decoder and the registry share one UnreadableImage, and
the arrows between the decoding modules run one way (no module-level circle hidden by imports inside functions)."""

from __future__ import annotations

import ast
import inspect

import dpmed.data.codestreams as codestreams
import dpmed.data.decoder as decoder
import dpmed.data.decoding as decoding
import dpmed.data.dicom as dicom


def _dpmed_imports(module) -> tuple[set[str], set[str]]:
    """(modules of dpmed imported at module level, those imported inside functions) by ``module``."""
    tree = ast.parse(inspect.getsource(module))
    top, nested = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dpmed"):
            (top if node in tree.body else nested).add(node.module)
        elif isinstance(node, ast.Import):
            names = {a.name for a in node.names if a.name.startswith("dpmed")}
            (top if node in tree.body else nested).update(names)
    return top, nested


def test_one_unreadable_image_for_every_decoder():
    assert decoding.UnreadableImage is decoder.UnreadableImage is dicom.UnreadableImage
    assert decoding.Decoder is decoder.Decoder


def test_the_arrows_run_from_the_registry_to_the_decoders_to_the_contract():
    assert _dpmed_imports(decoder) == (set(), set())
    dicom_top, dicom_nested = _dpmed_imports(dicom)
    assert dicom_top == {"dpmed.data.codestreams", "dpmed.data.decoder", "dpmed.errors"} and not dicom_nested
    assert _dpmed_imports(codestreams) == ({"dpmed.data.decoder"}, set())    # sizing needs only the contract
    decoding_top, decoding_nested = _dpmed_imports(decoding)
    assert {"dpmed.data.decoder", "dpmed.data.dicom"} <= decoding_top and not decoding_nested
