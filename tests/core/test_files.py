"""JSONL reading with line-numbered errors; atomic writes clean up after killed writers; a schema is parsed once per
version of its file."""

import os
import time

import pytest

from lalm_judge.core.files import (
    atomic_directory,
    jsonl_records,
    read_file_indexes,
    read_schema,
    write_file_index,
    write_json,
)


def test_jsonl_records_skip_blank_lines_and_name_the_bad_one(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n[2]\n')
    assert list(jsonl_records(path)) == [(1, {"a": 1}), (3, [2])]
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(KeyError, match=r"rows.jsonl:2: invalid JSON"):
        list(jsonl_records(path, KeyError))


def test_a_write_removes_what_a_killed_writer_of_the_same_file_left(tmp_path):
    """A process killed mid-write leaves `.<name>.<random>.tmp`; the next write of that file removes it, but not
    the temporaries of other files nor one written after this process started (a live writer's)."""
    stale = tmp_path / ".t0.parquet.k1ll3d.tmp"
    stale.write_bytes(b"half a table")
    stale_dir = tmp_path / ".export.abc123.tmp"
    stale_dir.mkdir()
    other = tmp_path / ".t1.parquet.k1ll3d.tmp"
    other.write_bytes(b"another file's")
    for path in (stale, stale_dir, other):
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    fresh = tmp_path / ".t0.parquet.l1ve.tmp"
    fresh.write_bytes(b"being written")
    write_json(tmp_path / "t0.parquet", {"x": 1})
    with atomic_directory(tmp_path / "export", marker="MARK") as folder:
        (folder / "MARK").write_text("")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".t0.parquet.l1ve.tmp",
        ".t1.parquet.k1ll3d.tmp",
        "export",
        "t0.parquet",
    ]


def test_file_indexes_list_their_files_in_order_and_are_equal_for_equal_lists(tmp_path):
    first, second = tmp_path / "a.index.json", tmp_path / "b.index.json"
    write_file_index(first, ["x/shard0.parquet", "y/shard0.parquet"])
    write_file_index(second, [tmp_path / "z/shard1.parquet"])
    assert read_file_indexes([first, second]) == [
        "x/shard0.parquet",
        "y/shard0.parquet",
        str(tmp_path / "z/shard1.parquet"),
    ]
    again = tmp_path / "again.index.json"
    write_file_index(again, ["x/shard0.parquet", "y/shard0.parquet"])
    assert again.read_bytes() == first.read_bytes()


def test_a_schema_is_parsed_once_per_version_of_its_file(tmp_path):
    schema = tmp_path / "schema.yaml"
    schema.write_text("type: object\nproperties: {a: {default: 1}}\n")
    first = read_schema(schema)
    assert first == {"type": "object", "properties": {"a": {"default": 1}}}
    assert read_schema(schema) is first  # the same document, not parsed again
    schema.write_text("type: object\nproperties: {a: {default: 22}}\n")  # another size: another version
    assert read_schema(schema)["properties"]["a"]["default"] == 22
