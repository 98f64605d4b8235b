"""JSONL reading with line-numbered errors."""

import pytest

from lalm_judge.core.files import jsonl_records


def test_jsonl_records_skip_blank_lines_and_name_the_bad_one(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n[2]\n')
    assert list(jsonl_records(path)) == [(1, {"a": 1}), (3, [2])]
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(KeyError, match=r"rows.jsonl:2: invalid JSON"):
        list(jsonl_records(path, KeyError))
