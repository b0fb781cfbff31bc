"""Reading a checklist YAML file is bounded: an alias bomb, deep nesting or a huge file fails fast, naming the line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.authoring.validate import validate_checklist
from policyguard.checklist import yamlsource
from policyguard.checklist.schema import load_checklist
from policyguard.checklist.yamlsource import (
    MAX_YAML_ALIASES,
    MAX_YAML_CHARS,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    load_yaml_file,
    load_yaml_text,
)
from policyguard.errors import ChecklistError
from policyguard.resources import shipped_checklist

FIXTURES = Path(__file__).parent / "fixtures"
HAS_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


def billion_laughs() -> str:
    """The classic 9 x 9 alias bomb: a few hundred bytes that expand to 9**9 (387 million) strings."""
    lines = ['lol0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 9):
        lines.append(f"lol{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def _refusal(text: str) -> ChecklistError:
    with pytest.raises(ChecklistError) as caught:
        load_yaml_text(text, file="c.yaml")
    return caught.value


def test_a_billion_laughs_alias_bomb_is_refused_in_well_under_a_second(tmp_path: Path) -> None:
    """It used to run 310 s and take 18.8 GB in `checklist validate`."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs(), encoding="utf-8")
    assert len(bomb.read_bytes()) < 600
    started = time.perf_counter()
    problems = validate_checklist(bomb)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5
    assert len(problems) == 1
    problem = problems[0]
    assert problem.file == str(bomb) and problem.line == 6 and problem.severity == "error"
    assert problem.message.startswith("too many aliases: *l4 takes the document past 100,000 values")
    with pytest.raises(ChecklistError, match="too many aliases") as caught:
        load_checklist(bomb)
    assert (caught.value.file, caught.value.line) == (str(bomb), 6)


def test_an_alias_inside_the_collection_it_names_is_refused() -> None:
    error = _refusal("a: &loop\n  - x\n  - *loop\n")
    assert error.line == 3 and "recursive alias *loop" in error.message


def test_more_aliases_than_the_limit_are_refused_even_when_each_is_small() -> None:
    text = "base: &b 1\nitems:\n" + "".join("  - *b\n" for _ in range(MAX_YAML_ALIASES + 1))
    error = _refusal(text)
    assert error.message == f"too many aliases: more than {MAX_YAML_ALIASES:,} (limit)"
    assert error.line == 3 + MAX_YAML_ALIASES


def test_nesting_deeper_than_the_limit_is_refused_at_its_line() -> None:
    error = _refusal("a: 1\nb: " + "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH + "\n")
    assert error.line == 2 and f"nested too deeply: more than {MAX_YAML_DEPTH} levels" in error.message
    load_yaml_text("[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1), file="c.yaml")  # at the limit: fine


def test_ten_thousand_levels_of_nesting_fail_with_a_message_not_a_recursion_error() -> None:
    assert "nested too deeply" in _refusal("[" * 10_000 + "]" * 10_000).message


def test_an_alias_that_would_nest_past_the_limit_is_refused() -> None:
    half = MAX_YAML_DEPTH // 2 + 2
    text = "deep: &d " + "[" * half + "]" * half + "\nuse: " + "[" * half + "*d" + "]" * half + "\n"
    assert "nested too deeply" in _refusal(text).message


def test_too_many_values_without_aliases_are_refused() -> None:
    error = _refusal("[" + "1," * (MAX_YAML_NODES + 1) + "1]")
    assert error.message == f"too many values: more than {MAX_YAML_NODES:,} (limit)"


def test_a_text_over_the_size_limit_is_refused_before_parsing() -> None:
    error = _refusal("#" * (MAX_YAML_CHARS + 1))
    assert error.message.startswith("file too large") and error.file == "c.yaml"


def test_a_file_over_the_size_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# " + b"x" * (4 * MAX_YAML_CHARS + 10))
    with pytest.raises(ChecklistError, match="file too large") as caught:
        load_yaml_file(big)
    assert caught.value.file == str(big)


def test_a_file_that_is_not_utf8_is_a_checklist_error(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ChecklistError, match="not UTF-8"):
        load_yaml_file(latin)


def test_anchors_and_merge_keys_within_the_limits_still_load_with_their_lines() -> None:
    text = "base: &own\n  id: a\n  kind: data\nitems:\n  - <<: *own\n    id: b\n"
    doc = load_yaml_text(text, file="c.yaml")
    assert doc.data["items"] == [{"id": "b", "kind": "data"}]
    assert doc.line_of(("items", 0, "id")) == 6


def test_only_true_and_false_are_booleans_yes_no_on_off_stay_strings() -> None:
    doc = load_yaml_text("a: yes\nb: no\nc: on\nd: off\ne: true\nf: False\ng: TRUE\nh: y\n", file="c.yaml")
    assert doc.data == {"a": "yes", "b": "no", "c": "on", "d": "off", "e": True, "f": False, "g": True, "h": "y"}


def test_an_exponent_without_a_dot_is_a_number_as_in_yaml_1_2() -> None:
    doc = load_yaml_text("a: 1e6\nb: -2E-3\nc: 1e999\nd: '1e6'\ne: 1.5e+3\nf: e6\n", file="c.yaml")
    assert doc.data == {"a": 1e6, "b": -2e-3, "c": float("inf"), "d": "1e6", "e": 1500.0, "f": "e6"}


@pytest.mark.skipif(not HAS_LIBYAML, reason="libyaml is not installed")
@pytest.mark.parametrize("path", ["airline", "retail", *sorted(p.name for p in FIXTURES.glob("*.yaml"))])
def test_libyaml_and_pure_python_give_the_same_values_lines_and_errors(path: str) -> None:
    file = shipped_checklist(path) if path in ("airline", "retail") else FIXTURES / path
    text = Path(file).read_text(encoding="utf-8")
    results = []
    for loader in (yamlsource._CSafeLoader, yamlsource._PySafeLoader):
        try:
            doc = load_yaml_text(text, file="c.yaml", loader=loader)
            results.append((doc.data, doc.lines))
        except ChecklistError as exc:
            results.append((None, {(): exc.line or 0}))
    assert results[0] == results[1]


@pytest.mark.skipif(not HAS_LIBYAML, reason="libyaml is not installed")
@pytest.mark.parametrize(
    "text",
    ["a: [1, 2\nb: 3\n", "a: 1\n b: 2\n", "a:\n  - x\n  y: 2\n", 'a: "open\nb: 1\n', "a: *nope\n", "\tb: 1\n"],
)
def test_a_syntax_error_reads_the_same_with_or_without_libyaml(text: str) -> None:
    """The default (libyaml) path words its errors as pure Python does, at the same line."""
    errors = []
    for loader in (None, yamlsource._PySafeLoader):
        with pytest.raises(ChecklistError) as caught:
            load_yaml_text(text, file="c.yaml", loader=loader)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    with pytest.raises(ChecklistError) as c_only:
        load_yaml_text(text, file="c.yaml", loader=yamlsource._CSafeLoader)
    assert f"c.yaml:{c_only.value.line}:" in errors[0]


_scalars = st.one_of(st.integers(-(10**6), 10**6), st.booleans(), st.text(max_size=8), st.none())
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=25,
)


@pytest.mark.skipif(not HAS_LIBYAML, reason="libyaml is not installed")
@settings(max_examples=150, deadline=None)
@given(_values, st.booleans())
def test_libyaml_and_pure_python_agree_on_any_document(value: object, flow: bool) -> None:
    text = yaml.safe_dump({"root": value}, default_flow_style=flow, allow_unicode=True)
    c_doc = load_yaml_text(text, file="c.yaml", loader=yamlsource._CSafeLoader)
    py_doc = load_yaml_text(text, file="c.yaml", loader=yamlsource._PySafeLoader)
    assert (c_doc.data, c_doc.lines) == (py_doc.data, py_doc.lines)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 12), st.integers(2, 12))
def test_any_alias_fan_out_is_either_loaded_or_refused_quickly(width: int, levels: int) -> None:
    lines = [f"x0: &a0 [{', '.join(['v'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    started = time.process_time()  # CPU time: a busy machine's scheduling is not the loader's work
    try:
        load_yaml_text("\n".join(lines), file="c.yaml")
    except ChecklistError as exc:
        assert exc.message.startswith("too many aliases") and exc.line is not None
    assert time.process_time() - started < 0.5  # the worst case takes ~0.06 s; unbounded, 12**12 nodes
