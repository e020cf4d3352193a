"""Values and pure functions: schemas and row layout, segments, tombstones, key filters, file
references. Nothing here touches storage or holds mutable state beyond one object."""
