"""Executable statement of the rules in RULES.md: a tiny pure-Python model of
Spark 4.3's windowed aggregation, session windows, stream-stream join and
dropDuplicatesWithinWatermark over micro-batches.  Same call shapes and output
row format as spark_ref.run_* (minus the SparkSession / workdir arguments);
returns [{"batch_id", "rows", "watermark_ms"}].  Used by compare_model.py to
check the rules against the recorded Spark outputs in expected/.

Times are epoch seconds in the inputs; internally microseconds (Spark's
TIMESTAMP unit); watermarks are milliseconds (Spark's unit).
"""

# ruff: noqa: E741
from __future__ import annotations

import math
from dataclasses import dataclass

US = 1_000_000


def _us(t) -> int:
    return round(t * US)


def _out(us: int):
    return us // US if us % US == 0 else us / US


def _floor_ms(us: int) -> int:  # DateTimeUtils.microsToMillis (floorDiv)
    return us // 1000


def _sort_key(d: dict):
    return tuple((k, d[k] is None, "" if d[k] is None else d[k]) for k in sorted(d))


# ------------------------------------------------------------------ watermarks


def batch_watermarks(
    per_input_times: list[list[list[int]]], delays_ms: list[int], policy: str = "min"
) -> tuple[list[int], int]:
    """per_input_times[i][b] = event times (us) of input i in batch b.
    Returns (wm used by each batch, wm after the last batch)."""
    nb = max(len(x) for x in per_input_times)
    op_wm: list[int | None] = [None] * len(per_input_times)
    glob = 0
    used = []
    for b in range(nb):
        used.append(glob)
        for i, times in enumerate(per_input_times):
            ts = times[b] if b < len(times) else []
            if ts:
                new = _floor_ms(max(ts)) - delays_ms[i]
                if op_wm[i] is None or new > op_wm[i]:
                    op_wm[i] = new
        vals = [w if w is not None else 0 for w in op_wm]
        chosen = min(vals) if policy == "min" else max(vals)
        if chosen > glob:
            glob = chosen
    return used, glob


def _plan_batches(n_data: int, used: list[int], final: int, no_data: bool, legacy: bool = False):
    """(batch_id, wm_late_ms, wm_evict_ms, is_data) for every executed batch.
    Default (statefulOperator.allowMultiple=true): late filter uses the watermark
    of the previous executed batch, eviction the current one.  legacy=True
    (allowMultiple=false): both use the current batch watermark."""
    out = []
    prev = 0
    for b in range(n_data):
        out.append((b, used[b] if legacy else prev, used[b], True))
        prev = used[b]
    if no_data and n_data and final > used[-1]:
        out.append((n_data, final if legacy else prev, final, False))
    return out


# --------------------------------------------------------------- window agg


def _windows(t_us: int, size_us: int, slide_us: int, start_us: int = 0):
    n = math.ceil(size_us / slide_us)
    rem = (t_us - start_us) % slide_us  # python % == Spark's "remainder<0 ? +slide" fix-up
    last = t_us - rem
    res = []
    for i in range(n):
        ws = last - i * slide_us
        we = ws + size_us
        if size_us % slide_us == 0 or (ws <= t_us < we):
            res.append((ws, we))
    return res


def _agg(vals: list[dict], aggs) -> dict:
    out = {}
    for fn, c in aggs:
        if fn == "count" and c == "*":
            out["count"] = len(vals)
            continue
        xs = [v[c] for v in vals if v.get(c) is not None]
        name = f"{fn}_{c}"
        if fn == "count":
            out[name] = len(xs)
        elif fn == "sum":
            out[name] = sum(xs) if xs else None
        elif fn == "min":
            out[name] = min(xs) if xs else None
        elif fn == "max":
            out[name] = max(xs) if xs else None
        elif fn == "avg":
            out[name] = (sum(xs) / len(xs)) if xs else None
    return out


def model_window_agg(
    batches,
    *,
    key,
    time,
    size_s=None,
    slide_s=None,
    session_gap_s=None,
    aggs=(("count", "*"),),
    delay_s=0,
    output_mode="append",
    no_data_batches=True,
    start_s=None,
    local_merge=False,
    legacy=False,
    **_,
):
    keys = [key] if isinstance(key, str) else list(key)
    used, final = batch_watermarks(
        [[[_us(r[time]) for r in b] for b in batches]], [round(delay_s * 1000)]
    )
    plan = _plan_batches(len(batches), used, final, no_data_batches, legacy)
    if session_gap_s is None:
        size = _us(size_s)
        slide = _us(slide_s) if slide_s is not None else size
        st = _us(start_s) if start_s is not None else 0
        return _model_time_windows(batches, plan, keys, time, (size, slide, st), aggs, output_mode)

    # ---- session windows (append only; Spark 4.3 rejects update mode)
    if output_mode != "append":
        raise ValueError("session windows: only append (and complete) are supported by Spark")
    return _model_session_windows(batches, plan, keys, time, _us(session_gap_s), aggs, local_merge)


def _window_row(state: dict[tuple, list[dict]], g: tuple, keys: list, aggs) -> dict:
    kk, ws, we = g
    d = {k: v for k, v in zip(keys, kk)}
    d.update({"window_start": _out(ws), "window_end": _out(we)})
    d.update(_agg(state[g], aggs))
    return d


def _add_to_time_windows(state, rows, keys, time, spec, late) -> list[tuple]:
    """Adds each on-time row to its windows' state; returns the windows touched, in order."""
    size, slide, st = spec
    touched = []
    for r in rows:
        kk = tuple(r.get(k) for k in keys)
        for ws, we in _windows(_us(r[time]), size, slide, st):
            if we <= late * 1000:  # late: window.end <= wmLate
                continue
            g = (kk, ws, we)
            state.setdefault(g, []).append(r)
            if g not in touched:
                touched.append(g)
    return touched


def _model_time_windows(batches, plan, keys, time, spec, aggs, output_mode):
    """Tumbling / sliding windows; spec = (size_us, slide_us, start_us)."""
    res = []
    state: dict[tuple, list[dict]] = {}
    for bid, late, ev, is_data in plan:
        rows = batches[bid] if is_data else []
        touched = _add_to_time_windows(state, rows, keys, time, spec, late)
        if output_mode == "update":
            out = [_window_row(state, g, keys, aggs) for g in touched]
            for g in [g for g in state if g[2] <= ev * 1000]:
                del state[g]
        else:
            evict = [g for g in state if g[2] <= ev * 1000]
            out = [_window_row(state, g, keys, aggs) for g in evict]
            for g in evict:
                del state[g]
        res.append({"batch_id": bid, "rows": sorted(out, key=_sort_key), "watermark_ms": ev})
    return res


def _add_to_sessions(sess, rows, keys, time, gap, late, local_merge) -> None:
    bykey: dict[tuple, list[list]] = {}
    for r in rows:
        t = _us(r[time])
        bykey.setdefault(tuple(r.get(k) for k in keys), []).append([t, t + gap, [r]])
    for kk, new in bykey.items():
        if local_merge:
            new = _merge(new)
        new = [s for s in new if not (s[1] <= late * 1000)]  # late: session.end <= wmLate
        if not new:
            continue
        sess[kk] = _merge(sess.get(kk, []) + new)


def _evict_sessions(sess, keys, aggs, ev) -> list[dict]:
    """Removes the sessions ending at or before the watermark ev; returns their output rows."""
    out = []
    for kk in list(sess):
        keep = []
        for s in sess[kk]:
            if s[1] <= ev * 1000:
                d = {k: v for k, v in zip(keys, kk)}
                d.update({"window_start": _out(s[0]), "window_end": _out(s[1])})
                d.update(_agg(s[2], aggs))
                out.append(d)
            else:
                keep.append(s)
        if keep:
            sess[kk] = keep
        else:
            del sess[kk]
    return out


def _model_session_windows(batches, plan, keys, time, gap, aggs, local_merge):
    res = []
    sess: dict[tuple, list[list]] = {}  # key -> [[start, end, rows], ...]
    for bid, late, ev, is_data in plan:
        rows = batches[bid] if is_data else []
        _add_to_sessions(sess, rows, keys, time, gap, late, local_merge)
        out = _evict_sessions(sess, keys, aggs, ev)
        res.append({"batch_id": bid, "rows": sorted(out, key=_sort_key), "watermark_ms": ev})
    return res


def _merge(sessions: list[list]) -> list[list]:
    out: list[list] = []
    for s in sorted(sessions, key=lambda s: s[0]):
        if out and s[0] <= out[-1][1]:  # next.start <= cur.end -> same session
            out[-1][1] = max(out[-1][1], s[1])
            out[-1][2] = out[-1][2] + s[2]
        else:
            out.append([s[0], s[1], list(s[2])])
    return out


# ------------------------------------------------------------------- join


def model_join(
    left_batches,
    right_batches,
    *,
    key,
    time="t",
    lower_s=0,
    upper_s=0,
    how="inner",
    left_delay_s=0,
    right_delay_s=0,
    no_data_batches=True,
    watermark_policy="min",
    **_,
):
    n = max(len(left_batches), len(right_batches))
    # Spark's optimizer infers isnotnull(key) on the sides where a null key can produce no
    # output (both for inner, the right for left outer) and pushes it below the watermark:
    # such rows never exist for the join, not even for the watermark (seen in Spark 4.3's plans)
    lb = [[r for r in b if how != "inner" or r[key] is not None] for b in left_batches]
    rb = [[r for r in b if r[key] is not None] for b in right_batches]
    lb += [[]] * (n - len(lb))
    rb += [[]] * (n - len(rb))
    used, final = batch_watermarks(
        [[[_us(r[time]) for r in b] for b in lb], [[_us(r[time]) for r in b] for b in rb]],
        [round(left_delay_s * 1000), round(right_delay_s * 1000)],
        watermark_policy,
    )
    plan = _plan_batches(n, used, final, no_data_batches)
    j = _Join(
        key=key,
        time=time,
        lo_us=_us(lower_s),
        up_us=_us(upper_s),
        lcols=list(dict.fromkeys(c for b in lb for r in b for c in r)),
        rcols=list(dict.fromkeys(c for b in rb for r in b for c in r)),
    )

    lstate: list[list] = []  # [row, matched]
    rstate: list[list] = []
    res = []
    for bid, late, W, is_data in plan:
        L = lb[bid] if is_data else []
        Rr = rb[bid] if is_data else []
        # state watermarks (ms, inclusive eviction on t_us <= wm*1000), from
        # r.t >= l.t - lower  (right side)   and   r.t <= l.t + upper (left side)
        lwm = W - round(upper_s * 1000) - 1
        rwm = W - round(lower_s * 1000) - 1
        out: list[dict] = []
        _join_left_rows(j, L, rstate, lstate, late, out)
        _join_right_rows(j, Rr, lstate, rstate, late, rwm, how, out)
        lstate = _evict_join_state(j, lstate, lwm, how in ("left_outer", "full_outer"), out, True)
        rstate = _evict_join_state(j, rstate, rwm, how in ("right_outer", "full_outer"), out, False)
        for d in out:
            for c in (f"l_{time}", f"r_{time}"):
                if d.get(c) is not None:
                    d[c] = _out(_us(d[c]))
        res.append({"batch_id": bid, "rows": sorted(out, key=_sort_key), "watermark_ms": W})
    return res


@dataclass(frozen=True)
class _Join:
    """The fixed parameters of a modelled stream-stream join."""

    key: str
    time: str
    lo_us: int
    up_us: int
    lcols: list
    rcols: list

    def cond(self, l, r) -> bool:
        key, time = self.key, self.time
        # SQL equality: a null key matches nothing (Spark's optimizer adds isnotnull filters)
        return (
            l[key] is not None
            and l[key] == r[key]
            and (_us(l[time]) - self.lo_us <= _us(r[time]) <= _us(l[time]) + self.up_us)
        )

    def row(self, l, r) -> dict:
        d = {}
        for c in self.lcols:
            d[f"l_{c}"] = None if l is None else l.get(c)
        for c in self.rcols:
            d[f"r_{c}"] = None if r is None else r.get(c)
        return d


def _join_left_rows(j: _Join, L, rstate, lstate, late, out) -> None:
    """Joins the batch's on-time left rows with the right state, then stores them."""
    for l in L:
        if _us(l[j.time]) <= late * 1000:
            continue
        m = False
        for rs in rstate:
            if j.cond(l, rs[0]):
                out.append(j.row(l, rs[0]))
                rs[1] = True
                m = True
        lstate.append([l, m])


def _join_right_rows(j: _Join, Rr, lstate, rstate, late, rwm, how, out) -> None:
    """Joins the batch's on-time right rows with the left state, then stores those that stay."""
    for r in Rr:
        if _us(r[j.time]) <= late * 1000:
            continue
        m = False
        for ls in lstate:
            if j.cond(ls[0], r):
                out.append(j.row(ls[0], r))
                ls[1] = True
                m = True
        evict_now = _us(r[j.time]) <= rwm * 1000
        if not evict_now or how in ("right_outer", "full_outer"):
            rstate.append([r, m])


def _evict_join_state(j: _Join, state, wm, outer, out, left) -> list[list]:
    """Drops the entries at or before wm (emitting unmatched ones if this side is outer);
    returns the entries kept."""
    keep = []
    for s in state:
        if _us(s[0][j.time]) <= wm * 1000:
            if not s[1] and outer:
                out.append(j.row(s[0], None) if left else j.row(None, s[0]))
        else:
            keep.append(s)
    return keep


# ------------------------------------------------------------------- dedup


def model_dedup(batches, *, cols, time="t", delay_s=0, no_data_batches=True, **_):
    used, final = batch_watermarks(
        [[[_us(r[time]) for r in b] for b in batches]], [round(delay_s * 1000)]
    )
    plan = _plan_batches(len(batches), used, final, no_data_batches)
    delay_us = round(delay_s * 1000) * 1000
    state: dict[tuple, int] = {}
    res = []
    for bid, late, ev, is_data in plan:
        out = []
        for r in batches[bid] if is_data else []:
            t = _us(r[time])
            if t <= late * 1000:
                continue
            k = tuple(r.get(c) for c in cols)
            if k in state:
                continue
            state[k] = t + delay_us
            d = dict(r)
            d[time] = _out(t)
            out.append(d)
        for k in [k for k, e in state.items() if ev * 1000 >= e]:
            del state[k]
        res.append({"batch_id": bid, "rows": sorted(out, key=_sort_key), "watermark_ms": ev})
    return res
