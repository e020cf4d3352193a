"""Aggregation over a change stream with retractions: count, sum, min, max (and avg).

Input rows carry ``op`` (+1 insert, -1 delete). Count, sum and avg keep running totals; min and
max cannot (after the largest value is retracted the next largest must be known), so for each
of them the state keeps a count per distinct value of each group in a map table, in value
order, and the current extreme in the group's row. After a retraction removes the extreme, the
next one comes from the map's ordered entries (:meth:`fsstate.tables.scan.ScanTable.entries`,
first or last N, never the whole group) through a small per-group top-N cache, as RisingWave
does: the cache holds the group's top values as a prefix of the value order, is kept in step
with every change, and is refilled from state when it runs empty.

Tables: ``groups`` (value table keyed by the group columns: ``_rows``, the count and sum
partials, the current min / max of each such aggregate and, over floating point, its count of
NaN values ``_nan<i>``) and ``values_<i>`` per min / max aggregate (map table: group -> {value:
count}, NaN left out: stored keys do not match NaN to NaN; NaN sits above every number, so the
NaN count decides a max with a NaN and a min without numbers).

With ``keys=[]`` there is one global group, as Spark's aggregate without ``GROUP BY``: it always
has a result (``count`` 0, the others null over no rows), emitted by partition 0 in its first
epoch and never removed; every input row must reach partition 0 (:class:`LocalQuery` routes a
stage without keys there; a row in another partition is refused with a ConfigError). The
group is stored under a constant key column ``_global``.

Types and results are :mod:`fsstate.operators.aggregates`' (Spark's): sums of decimals are exact
decimals, ``avg`` of a decimal is a decimal, ``min`` / ``max`` take every orderable type (NaN
above every number).

Output (``output="changelog"``): for each group whose result changed, ``op`` -1 with the old
result (if it had one) and +1 with the new one (if it still has rows). ``output="upsert"``: one
row per changed group, ``op`` +1 with the new result or -1 with the old one when the group is
gone.

Combining before the shuffle: without min / max (and with keys), the per-group totals of an
epoch's rows (rows, counts, sums, each weighted by ``op``) are what the epoch adds to the
state, and totals of parts add up: :meth:`RetractAggregate.combine` computes them on any part
of the input and the combined copy adds up the parts' totals before applying them, as it
does its own.

Invariants: after every epoch, applying all emitted changes gives exactly a batch
recomputation of the aggregate over the input's current rows (groups with no rows absent);
deletes of rows that were never inserted are the caller's error (counts never go below zero:
such a delete is ignored); nulls are skipped as in SQL. Floating-point sums are running totals,
so after retractions they equal the recomputation up to rounding (and a retracted NaN or
infinity leaves the sum NaN); integer and decimal sums are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError
from fsstate.operators.aggregates import Agg, add_sums, average, nan_equal
from fsstate.operators.base import Epoch, Operator, require_columns, take_rows
from fsstate.operators.combining import ROWS as COMBINED_ROWS
from fsstate.operators.combining import batch_stats
from fsstate.store.partition import PartitionStore

OP = "op"
ROWS = "_rows"
GLOBAL = "_global"  # the constant key column of the one group of ``keys=[]``
OUTPUTS = ("changelog", "upsert")
TOP_N = 16  # values kept per group in the min / max cache
CACHE_GROUPS_MAX = 65_536  # groups a min / max cache holds at most (then it starts over)


class RetractAggregate(Operator):
    """Aggregates over a change stream per group (see the module docstring).

    Args:
        name: the operator's state name.
        keys: group columns.
        aggs: aggregates (count, sum, avg, min, max).
        output: ``"changelog"`` or ``"upsert"``.
        top_n: values per group the min / max cache holds.
    """

    def __init__(
        self,
        name: str,
        *,
        keys: Sequence[str],
        aggs: Sequence[Agg],
        output: str = "changelog",
        top_n: int = TOP_N,
    ) -> None:
        super().__init__(name)
        if output not in OUTPUTS:
            raise ConfigError(f"operator {name!r}: output must be one of {OUTPUTS}")
        if not aggs:
            raise ConfigError(f"operator {name!r}: give at least one aggregate")
        if top_n < 1:
            raise ConfigError(f"operator {name!r}: top_n must be >= 1")
        self.keys, self.aggs, self.output, self.top_n = list(keys), list(aggs), output, top_n
        self.gkeys = self.keys or [GLOBAL]  # the state's key columns
        self._cache_top: dict[int, dict[Any, list[Any]]] | None = None

    def reset_caches(self) -> None:
        self._cache_top = None

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        input_schema = self.schema_of(input_schema)
        require_columns(self.name, input_schema, [*self.keys, OP])
        fields = [input_schema.field(k).with_nullable(True) for k in self.keys]
        fields += [pa.field(a.name, a.result_type(input_schema, self.name)) for a in self.aggs]
        return pa.schema([*fields, pa.field(OP, pa.int8(), nullable=False)])

    def _state_fields(self, schema: pa.Schema) -> list[pa.Field]:
        out = [pa.field(ROWS, pa.int64())]
        for i, a in enumerate(self.aggs):
            t = a.result_type(schema, self.name)
            if a.func == "count":
                out.append(pa.field(f"_c{i}", pa.int64()))
            elif a.func in ("sum", "avg"):
                st = a.sum_type(schema, self.name)
                out += [pa.field(f"_s{i}", st), pa.field(f"_n{i}", pa.int64())]
            else:
                out.append(pa.field(f"_x{i}", t))
                if pa.types.is_floating(t):
                    out.append(pa.field(f"_nan{i}", pa.int64()))
        return out

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        input_schema = self.schema_of(input_schema)
        self.output_schema(input_schema)
        self.input_schema = input_schema
        key = pa.schema(
            [input_schema.field(k).with_nullable(True) for k in self.keys]
            or [pa.field(GLOBAL, pa.int8(), nullable=False)]
        )
        self.groups = store.value_table(
            "groups", pa.schema(self._state_fields(input_schema)), key_schema=key
        )
        self.values: dict[int, Any] = {}
        for i, a in enumerate(self.aggs):
            if a.func in ("min", "max"):
                assert a.column is not None
                ukey = pa.schema([input_schema.field(a.column).with_name("value")])
                self.values[i] = store.map_table(
                    f"values_{i}", ukey, pa.schema([("count", pa.int64())]), key_schema=key
                )
        if self._cache_top is None:
            self._cache_top = {i: {} for i in self.values}

    # -- combining before the shuffle ----------------------------------------------------------
    def can_combine(self, input_schema: pa.Schema) -> bool:
        return bool(self.keys) and all(a.func in ("count", "sum", "avg") for a in self.aggs)

    def combined_schema(self, input_schema: pa.Schema) -> pa.Schema:
        self.output_schema(input_schema)
        fields = [input_schema.field(k).with_nullable(True) for k in self.keys]
        fields.append(pa.field("_d_sum", pa.int64()))
        for i, a in enumerate(self.aggs):
            if a.func == "count" and a.column is not None:
                fields.append(pa.field(f"_c{i}_sum", pa.int64()))
            elif a.func in ("sum", "avg"):
                st = a.sum_type(input_schema, self.name)
                fields += [pa.field(f"_s{i}_sum", st), pa.field(f"_n{i}_sum", pa.int64())]
        fields.append(pa.field(COMBINED_ROWS, pa.int64()))
        return pa.schema(fields)

    def combine(self, batch: pa.Table, late_ms: int) -> pa.Table:
        """The rows' totals per group (see the module docstring)."""
        schema = self.combined_schema(batch.schema)
        self.input_schema = batch.schema
        if not batch.num_rows:
            return schema.empty_table()
        delta = self._delta(batch, with_rows=True)
        return (
            delta.rename_columns(
                [COMBINED_ROWS if c == "_r_count" else c for c in delta.column_names]
            )
            .select(schema.names)
            .cast(schema)
        )

    def _delta(self, batch: pa.Table, with_rows: bool = False) -> pa.Table:
        """Per group of ``batch``: ``_d_sum`` (rows, op-weighted), and the op-weighted count,
        sum and NaN totals of the aggregates that keep them (and, ``with_rows``, the rows as
        ``_r_count``)."""
        op = batch.column(OP).combine_chunks().cast(pa.int64())
        cols: dict[str, Any] = {k: batch.column(k) for k in self.gkeys}
        cols["_d"] = op
        specs: list[tuple[Any, ...]] = [("_d", "sum")]
        if with_rows:
            cols["_r"] = op
            specs.append(("_r", "count", pc.CountOptions(mode="all")))
        for i, a in enumerate(self.aggs):
            if a.func == "count":
                if a.column is None:
                    continue
                cols[f"_c{i}"] = pc.multiply(
                    pc.is_valid(batch.column(a.column)).cast(pa.int64()), op
                )
                specs.append((f"_c{i}", "sum"))
            elif a.func in ("sum", "avg"):
                t = a.sum_type(self.input_schema, self.name)
                v = batch.column(a.column).combine_chunks().cast(t)
                cols[f"_s{i}"] = _times(v, op)
                cols[f"_n{i}"] = pc.multiply(pc.is_valid(v).cast(pa.int64()), op)
                specs += [(f"_s{i}", "sum"), (f"_n{i}", "sum")]
            elif pa.types.is_floating(batch.schema.field(a.column).type):
                nan = pc.fill_null(pc.is_nan(batch.column(a.column)), False)
                cols[f"_nan{i}"] = pc.multiply(nan.cast(pa.int64()), op)
                specs.append((f"_nan{i}", "sum"))
        return pa.table(cols).group_by(self.gkeys, use_threads=False).aggregate(specs)

    # -- one epoch ---------------------------------------------------------------------------
    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        schema = self.output_schema(self.input_schema)
        if not self.keys:
            if not self._global_partition(batch, epoch):
                return schema.empty_table()
            batch = _global_batch(batch)
        combined = self.raw_schema is not None
        self.last_stats = batch_stats(0, 0, 0, combined)
        if not batch.num_rows:
            return schema.empty_table()
        rows, batch, delta, op = self._epoch_delta(batch, combined)
        self.last_stats = batch_stats(rows, batch.num_rows, delta.num_rows, combined)
        keys = delta.select(self.gkeys)
        old = self.groups.get_many(keys)
        found = np.asarray(old.column("_found").to_numpy(zero_copy_only=False), dtype=bool)
        new_state, new_rows = self._new_state(batch, op, keys, old, delta)
        alive = new_rows > 0 if self.keys else np.ones(len(new_rows), dtype=bool)
        self._store_groups(keys, found, new_state, alive)
        return self._changes(keys, old, found, new_state, alive, schema)

    def _global_partition(self, batch: pa.Table, epoch: Epoch) -> bool:
        """Whether this partition runs the global group of ``keys=[]`` (partition 0 only; a
        row in another partition is refused)."""
        if epoch.partition == 0:
            return True
        if batch.num_rows:
            raise ConfigError(
                f"operator {self.name!r}: a global aggregate (keys=[]) got "
                f"{batch.num_rows} rows in partition {epoch.partition}; route every row "
                "of a stage without keys to partition 0"
            )
        return False

    def _epoch_delta(
        self, batch: pa.Table, combined: bool
    ) -> tuple[int, pa.Table, pa.Table, pa.Array | None]:
        """(input rows, the batch, its per-group totals as :meth:`_delta` makes them, its
        ``op`` column): a combined copy adds up the totals of every input partition (its
        batch has no ``op``: None)."""
        if not combined:
            op = batch.column(OP).combine_chunks().cast(pa.int64())
            return batch.num_rows, batch, self._delta(batch), op
        rows = int(pc.sum(batch.column(COMBINED_ROWS)).as_py() or 0)
        batch = batch.drop_columns([COMBINED_ROWS])
        sums = [c for c in batch.column_names if c not in self.gkeys]
        delta = batch.group_by(self.gkeys, use_threads=False).aggregate([(c, "sum") for c in sums])
        renamed = {f"{c}_sum": c for c in sums}
        delta = delta.rename_columns([renamed.get(c, c) for c in delta.column_names])
        return rows, batch, delta, None

    def _new_state(
        self,
        batch: pa.Table,
        op: pa.Array | None,
        keys: pa.Table,
        old: pa.Table,
        delta: pa.Table,
    ) -> tuple[pa.Table, np.ndarray[Any, Any]]:
        """The groups' new state rows (old state plus the epoch's totals, min / max from the
        value tables) and their new row counts."""
        fields = self._state_fields(self.input_schema)
        new: dict[str, pa.Array] = {}
        old_rows = pc.fill_null(old.column(ROWS), 0).to_numpy(zero_copy_only=False)
        new_rows = np.maximum(old_rows + delta.column("_d_sum").to_numpy(), 0)
        new[ROWS] = pa.array(new_rows, pa.int64())
        for i, a in enumerate(self.aggs):
            if a.func == "count" and a.column is not None:
                new[f"_c{i}"] = _add(old.column(f"_c{i}"), delta.column(f"_c{i}_sum"))
            elif a.func in ("sum", "avg"):
                new[f"_s{i}"] = add_sums(old.column(f"_s{i}"), delta.column(f"_s{i}_sum"))
                new[f"_n{i}"] = _add(old.column(f"_n{i}"), delta.column(f"_n{i}_sum"))
        for i in self.values:
            assert op is not None  # a combined copy has no min / max (can_combine)
            new[f"_x{i}"] = self._extreme(i, batch, op, keys, old.column(f"_x{i}"))
            if f"_nan{i}" in old.column_names:
                new[f"_nan{i}"] = _add(old.column(f"_nan{i}"), delta.column(f"_nan{i}_sum"))
        new_state = pa.Table.from_arrays(
            [new.get(f.name, pa.nulls(len(keys), f.type)).cast(f.type) for f in fields],
            schema=pa.schema(fields),
        )
        return new_state, new_rows

    def _store_groups(
        self,
        keys: pa.Table,
        found: np.ndarray[Any, Any],
        new_state: pa.Table,
        alive: np.ndarray[Any, Any],
    ) -> None:
        """Write the groups that still have rows, delete those that had and have none now
        (and forget their cached top values); a top-N cache over its bound is emptied."""
        if alive.any():
            self.groups.put_many(take_rows(keys, alive), take_rows(new_state, alive))
        gone = found & ~alive
        if gone.any():
            gone_keys = take_rows(keys, gone)
            self.groups.delete_many(gone_keys)
            for g in zip(*(gone_keys.column(k).to_pylist() for k in self.gkeys)):
                for cache in (self._cache_top or {}).values():
                    cache.pop(g, None)
        for cache in (self._cache_top or {}).values():
            if len(cache) > CACHE_GROUPS_MAX:
                cache.clear()

    def _extreme(
        self, i: int, batch: pa.Table, op: pa.Array, keys: pa.Table, current: pa.ChunkedArray
    ) -> pa.Array:
        """Apply the epoch's value changes of min / max aggregate ``i``; its new value per group."""
        a = self.aggs[i]
        assert a.column is not None and self._cache_top is not None
        table = self.values[i]
        want_max = a.func == "max"
        vals = batch.column(a.column)
        flat = pa.table({**{k: batch.column(k) for k in self.gkeys}, "_v": vals, "_d": op})
        ok = pc.is_valid(vals)
        if pa.types.is_floating(vals.type):  # NaN is counted in the group's row, not mapped
            ok = pc.and_(ok, pc.invert(pc.fill_null(pc.is_nan(vals), True)))
        flat = take_rows(flat, np.asarray(ok.to_numpy(zero_copy_only=False), bool))
        net = flat.group_by([*self.gkeys, "_v"], use_threads=False).aggregate([("_d", "sum")])
        net = take_rows(net, net.column("_d_sum").to_numpy() != 0)
        cache = self._cache_top[i]
        removed_top: set[Any] = set()
        if net.num_rows:
            gk, uk = net.select(self.gkeys), net.select(["_v"])
            got = table.get_many(gk, uk)
            have = pc.fill_null(got.column("count"), 0).to_numpy(zero_copy_only=False)
            now = np.maximum(have + net.column("_d_sum").to_numpy(), 0)
            up = now > 0
            if up.any():
                table.put_many(take_rows(gk, up), take_rows(uk, up), pa.table({"count": now[up]}))
            if (~up).any():
                table.delete_many(take_rows(gk, ~up), take_rows(uk, ~up))
            groups = _tuples(net, self.gkeys)
            values = net.column("_v").to_pylist()
            cur = dict(zip(_tuples(keys, self.gkeys), current.to_pylist()))
            for g, v, n, was in zip(groups, values, now, have):
                top = cache.get(g)
                if n == 0 and was > 0:
                    if top is not None and v in top:
                        top.remove(v)
                    if cur.get(g) == v:
                        removed_top.add(g)
                elif n > 0 and was == 0 and top and _before(v, top[-1], want_max):
                    # the cache stays a prefix of the group's value order: only a value
                    # before its last one can join it (an empty cache is refilled from state)
                    top.append(v)
                    top.sort(reverse=want_max)
                    del top[self.top_n :]
        # new extreme: old one vs the epoch's inserts, unless the old one was removed
        out = current.to_pylist()
        key_list = _tuples(keys, self.gkeys)
        if net.num_rows:
            adds = take_rows(net, net.column("_d_sum").to_numpy() > 0)
            best = adds.group_by(self.gkeys, use_threads=False).aggregate([("_v", a.func)])
            best_of = dict(zip(_tuples(best, self.gkeys), best.column(f"_v_{a.func}").to_pylist()))
        else:
            best_of = {}
        for j, g in enumerate(key_list):
            if g in removed_top:
                out[j] = self._refill(i, g, want_max)
            else:
                cand = [x for x in (out[j], best_of.get(g)) if x is not None]
                out[j] = (max(cand) if want_max else min(cand)) if cand else None
        return pa.array(out, type=self.groups.spec.value_schema.field(f"_x{i}").type)

    def _refill(self, i: int, g: Any, want_max: bool) -> Any:
        """The group's extreme after its old one left: from the cache, else from state."""
        assert self._cache_top is not None
        cache = self._cache_top[i]
        top = cache.get(g)
        if not top:
            got = self.values[i].entries(g, reverse=want_max, limit=self.top_n)
            top = cache[g] = got.column("value").to_pylist()
        return top[0] if top else None

    def _changes(
        self,
        keys: pa.Table,
        old: pa.Table,
        found: np.ndarray[Any, Any],
        new_state: pa.Table,
        alive: np.ndarray[Any, Any],
        schema: pa.Schema,
    ) -> pa.Table:
        """Output rows for the groups whose result changed."""
        before = self._results(old, keys, schema)
        after = self._results(new_state, keys, schema)
        names = [a.name for a in self.aggs]
        same = np.ones(len(found), dtype=bool)
        for n in names:
            eq = nan_equal(before.column(n), after.column(n))
            same &= np.asarray(eq.to_numpy(zero_copy_only=False), bool)
        same &= found == alive
        retract = found & ~same
        insert = alive & ~same
        if self.output == "upsert":
            retract = retract & ~alive
        parts = []
        if retract.any():
            parts.append(_with_op(take_rows(before, retract), -1, schema))
        if insert.any():
            parts.append(_with_op(take_rows(after, insert), 1, schema))
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _results(self, state: pa.Table, keys: pa.Table, schema: pa.Schema) -> pa.Table:
        cols = [keys.column(k) for k in self.keys]
        for i, a in enumerate(self.aggs):
            if a.func == "count":
                src = state.column(ROWS if a.column is None else f"_c{i}")
                cols.append(pc.fill_null(src, 0))
            elif a.func == "sum":
                n = state.column(f"_n{i}")
                cols.append(
                    pc.if_else(pc.greater(pc.fill_null(n, 0), 0), state.column(f"_s{i}"), None)
                )
            elif a.func == "avg":
                t = a.result_type(self.input_schema, self.name)
                cols.append(average(state.column(f"_s{i}"), state.column(f"_n{i}"), t))
            else:
                cols.append(_with_nan(a.func, state, i))
        fields = list(schema)[:-1]
        return pa.Table.from_arrays(
            [c.cast(f.type) for c, f in zip(cols, fields)], schema=pa.schema(fields)
        )


def _tuples(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(table.column(k).to_pylist() for k in names)))


def _add(old: pa.ChunkedArray, delta: pa.ChunkedArray) -> pa.Array:
    """Counts: ``old + delta`` (a null is 0)."""
    return pc.add(pc.fill_null(old, 0), pc.fill_null(delta.cast(pa.int64()), 0))


def _times(v: pa.Array, op: pa.Array) -> pa.Array:
    """``v * op`` in ``v``'s type. Decimals: by sign where ``op`` is -1, 0 or 1 (an Arrow decimal
    product would widen the type past 38 digits); other multiplicities exactly, value by value."""
    if not pa.types.is_decimal(v.type):
        return pc.multiply(v, op.cast(v.type))
    if pc.all(pc.less_equal(pc.abs(op), 1)).as_py() is not False:
        zero = pc.subtract(v, v).cast(v.type)
        return pc.if_else(pc.equal(op, 0), zero, pc.if_else(pc.less(op, 0), pc.negate(v), v))
    prod = [None if x is None else x * m for x, m in zip(v.to_pylist(), op.to_pylist())]
    return pa.array(prod, v.type)


def _global_batch(batch: pa.Table) -> pa.Table:
    """The batch of a ``keys=[]`` aggregate with its constant key column, plus one row that
    changes nothing (``op`` 0, null values) so the global group is visited every epoch."""
    nothing = pa.Table.from_arrays(
        [pa.array([0], f.type) if f.name == OP else pa.nulls(1, f.type) for f in batch.schema],
        schema=batch.schema,
    )
    out = pa.concat_tables([batch, nothing]) if batch.num_rows else nothing
    return out.append_column(GLOBAL, pa.array(np.zeros(out.num_rows, np.int8)))


def _with_nan(func: str, state: pa.Table, i: int) -> pa.Array:
    """The min / max of aggregate ``i`` from its extreme over the other values and its NaN
    count: NaN is above every number (a max with a NaN is NaN, a min only without numbers)."""
    x = state.column(f"_x{i}").combine_chunks()
    if f"_nan{i}" not in state.column_names:
        return x
    nan = pc.greater(pc.fill_null(state.column(f"_nan{i}"), 0), 0)
    if func == "min":
        nan = pc.and_(nan, pc.is_null(x))
    out: pa.Array = pc.if_else(nan, pa.scalar(float("nan"), x.type), x)
    return out


def _before(v: Any, w: Any, want_max: bool) -> bool:
    """Whether ``v`` comes before ``w`` in the cache's order (values here are never NaN)."""
    return bool(v > w) if want_max else bool(v < w)


def _with_op(rows: pa.Table, op: int, schema: pa.Schema) -> pa.Table:
    ops = pa.array(np.full(rows.num_rows, op, dtype=np.int8))
    return pa.Table.from_arrays([*rows.columns, ops], schema=schema)
