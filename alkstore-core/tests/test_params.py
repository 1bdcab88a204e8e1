"""Portable ``:name`` parameters rewritten into each DB-API paramstyle."""

from __future__ import annotations

import pytest

from alkstore._params import portable_params

VALUES = {"a": 1, "b": 2}


@pytest.mark.parametrize(
    ("style", "sql", "params"),
    [
        ("named", "SELECT :a, :b, :a", {"a": 1, "b": 2}),
        ("pyformat", "SELECT %(a)s, %(b)s, %(a)s", {"a": 1, "b": 2}),
        ("qmark", "SELECT ?, ?, ?", [1, 2, 1]),
        ("format", "SELECT %s, %s, %s", [1, 2, 1]),
        ("numeric", "SELECT :1, :2, :1", [1, 2]),
    ],
)
def test_each_style_gets_its_placeholders(style: str, sql: str, params: object) -> None:
    assert portable_params("SELECT :a, :b, :a", VALUES, style) == (sql, params)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "untouched",
    [
        "':a'",
        "'it''s :a'",
        "E'\\' :a'",
        "$$ :a $$",
        "$body$ :a $$ :a $body$",
        '":a"',
        "-- :a\n",
        "/* :a /* :b */ :a */",
        "x::int",
        "arr[1:b]",
        "arr[lo:hi]",
        "a$b:c",
    ],
)
def test_what_is_not_a_parameter_stays_as_written(untouched: str) -> None:
    sql, params = portable_params(f"SELECT {untouched}, :a", VALUES, "qmark")
    assert (sql, params) == (f"SELECT {untouched}, ?", [1])


def test_a_cast_right_after_a_parameter_stays_a_cast() -> None:
    assert portable_params("SELECT :a::text", VALUES, "pyformat") == (
        "SELECT %(a)s::text",
        {"a": 1},
    )


def test_percent_signs_are_doubled_only_for_the_percent_styles() -> None:
    sql = "SELECT '50%', :a"
    assert portable_params(sql, VALUES, "pyformat")[0] == "SELECT '50%%', %(a)s"
    assert portable_params(sql, VALUES, "format")[0] == "SELECT '50%%', %s"
    assert portable_params(sql, VALUES, "qmark")[0] == "SELECT '50%', ?"


def test_an_escaped_colon_is_a_colon() -> None:
    assert portable_params("SELECT '\\:' || \\:a, :b", VALUES, "qmark") == (
        "SELECT '\\:' || :a, ?",
        [2],
    )


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT %(a)s", {"a": 1}),  # the driver's own named style
        ("SELECT ?", (1,)),  # a sequence: native
        ("SELECT ':a'", {"a": 1}),  # no parameter at all
    ],
)
def test_native_sql_passes_through(sql: str, params: object) -> None:
    assert portable_params(sql, params, "pyformat") == (sql, params)  # type: ignore[arg-type]


def test_a_missing_value_names_what_is_missing_and_what_is_held() -> None:
    with pytest.raises(ValueError, match=r":c.*holds a, b"):
        portable_params("SELECT :a, :c", VALUES, "named")


def test_an_unterminated_literal_leaves_the_rest_to_the_database() -> None:
    assert portable_params("SELECT :a, 'open :b", VALUES, "qmark") == (
        "SELECT ?, 'open :b",
        [1],
    )


@pytest.mark.parametrize("params", [[1], (1,), ()])
def test_named_sql_with_a_sequence_is_refused(params: object) -> None:
    with pytest.raises(TypeError, match=r":a, :b: give params as a mapping"):
        portable_params("SELECT :a, :b, :a", params, "qmark")  # type: ignore[arg-type]
