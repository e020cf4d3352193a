"""Templates of the key-cursor accessors of :mod:`fsstate.tables.cursor` (Python source).

Each template defines ``make(...)``, which returns the accessors as closures over its
arguments: the table's dicts and objects, the slow callables, the builtins they call and the
types of the exact-type test. Everything an accessor uses is a closure cell (builtins
included): ``LOAD_DEREF`` is one code unit where ``LOAD_GLOBAL`` carries a five-unit inline
cache, and in a cache-cold worker every line of bytecode read is a miss.

Placeholders (:class:`string.Template`, filled by :func:`fsstate.tables.cursor.render`):

* ``${types}``: the extra parameters holding the test's types (``, _t0, _t1``);
* ``${cond}``: the exact-type test of the value ``v``; ``${ucond}``: of the user key ``u``;
* ``${self_arg}`` / ``${self_}``: ``self`` / ``self, `` when the accessors are methods.

Invariants: a rendered template is plain Python that ruff and a reader can check (the test
suite renders every template for its schemas and lints the result); the fast paths are those
of the table methods, as :mod:`fsstate.tables.cursor` states.
"""

from __future__ import annotations

from string import Template

VALUE_ACCESSORS = Template(
    """def make(
    views, dirty, store, table, cursor, Timed, get_slow, update_slow, type, len, tuple${types}
):
    def get(${self_arg}):
        e = views.get(cursor.key)
        if type(e) is tuple:
            return e
        if type(e) is Timed and e[1] > table.now_ms:
            return e[0]
        return get_slow(${self_arg})

    def update(${self_}v):
        key = cursor.key
        if ${cond} and key in views:
            if not table.indexed:
                seq = store.next_seq
                store.next_seq = seq + 1
                views[key] = v
                dirty[key] = seq
                return
            idx = table._ttl
            ttl = table._ttl_ms
            if idx is not None and ttl is not None:
                seq = store.next_seq
                store.next_seq = seq + 1
                exp = table.now_ms + ttl
                views[key] = Timed((v, exp))
                dirty[key] = seq
                idx.set(key, exp)
                return
        update_slow(${self_}v)

    return get, update
"""
)

MAP_ACCESSORS = Template(
    """def make(
    views, dirty, store, table, cursor, ctl, Timed, get_slow, contains_slow, update_slow,
    type, len, tuple${types}
):
    def get_value(${self_}u):
        view = views.get(cursor.key)
        if view is not None:
            try:
                c = view.get(u)
            except TypeError:  # an unhashable user key: the method normalizes or refuses it
                return get_slow(${self_}u)
            if type(c) is tuple:
                return c
            if c is None:
                if ${ucond}:
                    return None
            elif type(c) is Timed and c[1] > table.now_ms:
                return c[0]
        return get_slow(${self_}u)

    def contains_key(${self_}u):
        view = views.get(cursor.key)
        if view is not None:
            try:
                c = view.get(u)
            except TypeError:  # an unhashable user key: the method normalizes or refuses it
                return contains_slow(${self_}u)
            if type(c) is tuple:
                return True
            if c is None:
                if ${ucond}:
                    return False
            elif type(c) is Timed and c[1] > table.now_ms:
                return True
        return contains_slow(${self_}u)

    def update_value(${self_}u, v):
        key = cursor.key
        view = views.get(key)
        if view is None or not (${cond}):
            update_slow(${self_}u, v)
            return
        idx = None
        if table.indexed:
            idx = table._ttl
            ttl = table._ttl_ms
            if idx is None or ttl is None:
                update_slow(${self_}u, v)
                return
        try:
            known = u in view
        except TypeError:  # an unhashable user key: the method normalizes or refuses it
            update_slow(${self_}u, v)
            return
        if known:
            del view[u]  # re-inserted last: maps iterate in last-write order
            grew = False
        elif ${ucond}:
            grew = True
        else:
            update_slow(${self_}u, v)
            return
        seq = store.next_seq
        store.next_seq = seq + 1
        if idx is None:
            view[u] = v
        else:
            exp = table.now_ms + ttl
            view[u] = Timed((v, exp))
            idx.set((key, u), exp)
        d = dirty.get(key)
        if d is None:
            d = dirty[key] = [None, {}]
        d[1][u] = seq
        if grew:
            ctl.growth -= 1
            if ctl.growth <= 0:
                ctl.check()

    return get_value, contains_key, update_value
"""
)

LIST_ACCESSORS = Template(
    """def make(views, dirty, store, table, cursor, ctl, append_slow, type, len, tuple${types}):
    def append_value(${self_}v):
        key = cursor.key
        view = views.get(key)
        if view is not None and ${cond} and not table.indexed:
            seq = store.next_seq
            store.next_seq = seq + 1
            view.append((v, None, seq))
            d = dirty.get(key)
            if d is None:
                d = dirty[key] = [None, {}]
            d[1][seq] = seq
            ctl.growth -= 1
            if ctl.growth <= 0:
                ctl.check()
        else:
            append_slow(${self_}v)

    return append_value
"""
)
