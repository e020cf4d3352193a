"""Run files on real disk: a byte flipped inside a data page of a large run file (one read row
group by row group, so the manifest's CRC-32 of the whole file is not what checks it) is a
:class:`fsstate.errors.DataFileCorruptError` naming the file, for a point read and a scan,
never wrong data; the same file read without Parquet's page checksums returns wrong rows
(so the page checksums, written and verified by :class:`fsstate.storage.fileio.FileIO`, are
what catches it). ``python -m bench.page_checksums`` measures what they cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fsstate import PartitionStore, StoreConfig, read_table
from fsstate.errors import DataFileCorruptError
from fsstate.storage.runfile import WHOLE_FILE_BYTES_MAX

ROWS = 160_000  # 32 random characters a value: a run file above WHOLE_FILE_BYTES_MAX
KEY_SCHEMA = pa.schema([("k", pa.string())])
VALUE_SCHEMA = pa.schema([("n", pa.int64()), ("s", pa.string())])


def _large_run(root: Path, codec: str) -> tuple[Path, pa.Table]:
    """One committed run file too large to be read whole, and the rows it holds."""
    rng = np.random.default_rng(3)
    keys = pa.table([pa.array([f"user-{i:012d}" for i in range(ROWS)])], schema=KEY_SCHEMA)
    chars = rng.integers(ord("A"), ord("z") + 1, size=(ROWS, 32), dtype=np.uint8)
    strings = [bytes(row).decode() for row in chars]
    values = pa.table(
        [pa.array(rng.integers(0, 1 << 40, size=ROWS)), pa.array(strings)], schema=VALUE_SCHEMA
    )
    store = PartitionStore.open(str(root), "op", 0, config=StoreConfig(compression=codec))
    store.value_table("v", VALUE_SCHEMA, KEY_SCHEMA).put_many(keys, values)
    store.commit(0)
    store.close()
    [path] = list(root.rglob("data/*.parquet"))
    assert path.stat().st_size > WHOLE_FILE_BYTES_MAX
    return path, pa.Table.from_arrays([*keys.columns, *values.columns], ["k", "n", "s"])


def _flip_to_wrong_rows(path: Path, group: int) -> None:
    """Flip one bit inside a data page of row group ``group``'s int64 column, the first from
    the middle of its chunk on that decodes without page checksums to other rows than were
    written (uncompressed: the first; with a codec, a flip fails to decode about half of the
    time, and one of those is not the point here)."""
    md = pq.ParquetFile(path).metadata
    chunk = md.row_group(group).column(md.schema.names.index("n"))
    data = path.read_bytes()
    pristine = pq.ParquetFile(path).read_row_group(group)
    for off in range(chunk.total_compressed_size // 2, chunk.total_compressed_size):
        flipped = bytearray(data)
        flipped[chunk.data_page_offset + off] ^= 0x04
        unchecked = pq.ParquetFile(
            pa.BufferReader(bytes(flipped)), page_checksum_verification=False
        )
        try:
            wrong = not unchecked.read_row_group(group, use_threads=False).equals(pristine)
        except pa.ArrowException:
            continue
        if wrong:
            path.write_bytes(bytes(flipped))
            return
    raise AssertionError("no flip decodes to wrong rows")


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_flipped_byte_in_a_data_page_is_a_typed_error_naming_the_file(
    tmp_path: Path, codec: str
) -> None:
    root = tmp_path / "state"
    path, rows = _large_run(root, codec)
    group = 2
    first = pq.ParquetFile(path).metadata.row_group(group).num_rows * group
    # read without Parquet's page checksums, the flip decodes to wrong rows: nothing else
    # checks a file read row group by row group
    _flip_to_wrong_rows(path, group)

    store = PartitionStore.open(str(root), "op", 0, 0)  # a fresh process's view: nothing cached
    table = store.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    key = (rows.column("k")[first].as_py(),)
    with pytest.raises(DataFileCorruptError) as info:
        table.get(key)
    assert path.name in str(info.value) and info.value.path.endswith(path.name)
    assert f"row group {group} cannot be decoded" in str(info.value)
    assert "checksum" in str(info.value).lower()
    # another row group of the file is intact and reads right
    assert table.get((rows.column("k")[0].as_py(),)) == (
        rows.column("n")[0].as_py(),
        rows.column("s")[0].as_py(),
    )
    store.close()
    with pytest.raises(DataFileCorruptError, match=path.name):
        read_table(str(root), "op", 0, "v", 0)  # a scan
