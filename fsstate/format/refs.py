"""Small serializable pieces shared by manifests and run files.

* :class:`FileRef`: a state file as a manifest records it (path, rows, size, seq range, CRC).
* Schemas travel as base64 Arrow IPC schemas, small batches as base64 Arrow IPC streams, so
  types round-trip exactly.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class FileRef:
    """A state file referenced by a manifest.

    Attributes:
        path: path relative to the store directory.
        rows: number of rows.
        size_bytes: exact file size, checked before decoding.
        min_seq: smallest sequence number (data runs) or 0.
        max_seq: largest sequence number (data runs) or 0.
        crc32: CRC-32 of the whole file, checked whenever the whole file is read.
        arrow_bytes: size of the rows once decoded into Arrow (sizes reads and merges).
        drops_tombstones: the file is a bottom compaction (its merge dropped tombstones, so a
            deletion may have left no row). Kept for readers that predate
            ``tombstones_from_seq``: they reset a table that gained such a file.
        tombstones_from_seq: for a bottom compaction, every tombstone (delete or clear row)
            with ``seq >= tombstones_from_seq`` of the rows the file covers is still in it
            (None: the file dropped no tombstone, or, with ``drops_tombstones``, unknown).
            A copy whose version's ``next_seq`` is at least this catches up across the file.
    """

    path: str
    rows: int
    size_bytes: int
    min_seq: int = 0
    max_seq: int = 0
    crc32: int | None = None
    arrow_bytes: int | None = None
    drops_tombstones: bool = False
    tombstones_from_seq: int | None = None

    @property
    def decoded_bytes(self) -> int:
        """Decoded size (recorded, or estimated from the file size)."""
        return self.arrow_bytes if self.arrow_bytes is not None else 4 * self.size_bytes

    def to_json(self) -> dict[str, Any]:
        """JSON form for the manifest."""
        return {
            "path": self.path,
            "rows": self.rows,
            "size_bytes": self.size_bytes,
            "min_seq": self.min_seq,
            "max_seq": self.max_seq,
            "crc32": self.crc32,
            "arrow_bytes": self.arrow_bytes,
            "drops_tombstones": self.drops_tombstones,
            "tombstones_from_seq": self.tombstones_from_seq,
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> FileRef:
        """Inverse of :meth:`to_json`."""
        crc = obj.get("crc32")
        arrow = obj.get("arrow_bytes")
        horizon = obj.get("tombstones_from_seq")
        return FileRef(
            str(obj["path"]),
            int(obj["rows"]),
            int(obj["size_bytes"]),
            int(obj.get("min_seq", 0)),
            int(obj.get("max_seq", 0)),
            None if crc is None else int(crc),
            None if arrow is None else int(arrow),
            bool(obj.get("drops_tombstones", False)),
            None if horizon is None else int(horizon),
        )


def encode_schema(schema: pa.Schema | None) -> str | None:
    """Base64 Arrow IPC form of a schema (exact types, field names, nullability)."""
    if schema is None:
        return None
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str | None) -> pa.Schema | None:
    """Inverse of :func:`encode_schema`."""
    if text is None:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def encode_batch(batch: pa.RecordBatch | None) -> str | None:
    """Base64 Arrow IPC stream of a small record batch (range tombstones)."""
    if batch is None or batch.num_rows == 0:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def decode_batch(text: str | None) -> pa.RecordBatch | None:
    """Inverse of :func:`encode_batch`."""
    if text is None:
        return None
    reader = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text)))
    return reader.read_all().combine_chunks().to_batches()[0]
