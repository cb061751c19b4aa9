"""The table of request fields as Python sees it (``gauge_sampling.request_fields()``, the rows the
Rust parser reads): every name and alias sent with a wrong type is a ``ValueError`` naming it,
``parse_params`` writes the table's names, and the vLLM processor's field list is rows of it."""

from __future__ import annotations

import pytest
from conftest import need_import

gs = need_import("gauge_sampling")

#: One value of each JSON type, and the table's types that take it ("number" takes integers).
SAMPLES = [
    (True, {"bool"}),
    (7, {"integer", "number"}),
    (0.5, {"number"}),
    ("x", {"string"}),
    ([], {"array"}),
    ({}, {"object"}),
]


def rows():
    return gs.request_fields()["sampling"]


def names(row):
    return [row["name"]] + [a["name"] for a in row["aliases"]]


def test_every_name_with_a_wrong_type_is_a_value_error_naming_it():
    sent = 0
    for row in rows():
        for name in names(row):
            for value, types in SAMPLES:
                if types & set(row["json"]):
                    continue
                with pytest.raises(ValueError) as err:
                    gs.parse_params({name: value})
                msg = str(err.value)
                assert f"`{name}`" in msg and row["takes"] in msg, (name, value, msg)
                sent += 1
    assert sent > 100


def test_parse_params_writes_the_tables_names():
    canonical = {r["name"] for r in rows()}
    parsed = gs.parse_params({"preset": "json", "dry_sequence_breakers": ["x"]})
    assert set(parsed) <= canonical, set(parsed) - canonical


def test_the_vllm_processors_fields_are_rows_of_the_table():
    need_import("vllm")
    from gauge_sampling import vllm as gs_vllm

    canonical = {r["name"] for r in rows()}
    assert set(gs_vllm.FIELDS) <= canonical, set(gs_vllm.FIELDS) - canonical
