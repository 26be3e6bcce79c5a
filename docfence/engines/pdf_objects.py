"""Fast type tests on pikepdf objects, for walks over every object of a document: one attribute read and
identity tests, where pikepdf's isinstance runs a Python-level metaclass check per class (and hashing its
type enum runs Python code too). pikepdf hands numbers and booleans out as Python values; every other PDF
object is a pikepdf.Object."""

from __future__ import annotations

from typing import TypeGuard

import pikepdf

DICTIONARY, ARRAY, STREAM = pikepdf.ObjectType.dictionary, pikepdf.ObjectType.array, pikepdf.ObjectType.stream


def is_dictionary(value: object) -> TypeGuard[pikepdf.Dictionary]:
    """A dictionary (not a stream: a stream's dictionary is not one)."""
    return type(value) is pikepdf.Object and value._type_code is DICTIONARY


def is_container(value: object, *, streams: bool = True) -> bool:
    """A dictionary, an array or (with `streams`) a stream."""
    if type(value) is not pikepdf.Object:
        return False
    code = value._type_code
    return code is DICTIONARY or code is ARRAY or (streams and code is STREAM)
