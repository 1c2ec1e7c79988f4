"""Each route's share of a campaign's drawing time, kept by the run's processes together.

The drawing time of a budget, times the number of xdist workers, is the campaign's
worker-time. Every route gets its share of it from the start (equal shares, or the weights
of --fuzz-route-weights), and its items divide that share as they come: an item starting
is allowed what its route has left over the route's items not yet started. An item that
ends early leaves the rest to its route's later items; one that overruns takes from them.
No item takes from another route, so a route whose items are handed out last still has its
whole share when they come.

The ledger is one SQLite file in the run's report folder (as bucket_claims' is), because
xdist hands items to workers as they free up and no worker knows what the others spent.

The worker-time is planned once, by the first item to begin (its process's clock, from then
to the end of the drawing, times the workers), and kept in the ledger: the route probe and
the workers' start-up before it are no route's time.

    >>> shares = RouteShares("reports/run/shares.sqlite", workers=2, draw_end=time.time() + 480,
    ...                      items={"a": 7, "b": 7})
    >>> round(shares.begin("a", "fuzz/test_fuzz.py::test_fuzz[a-float32-0-view]"))
    69
"""
from __future__ import annotations

import os
import sqlite3
import time

from torchsim_diff.campaign.options import BadOption

LOCK_WAIT_S = 60.0


def parse_batches(text: str | None) -> dict:
    """route -> cases compiled as one program, from "inductor=4,triton=2"; routes not named: 1."""
    return _per_route(text, lambda value: int(value) if value.isdigit() and int(value) >= 1 else None,
                      "route=cases with a positive number of cases (e.g. inductor=4)")


def parse_weights(text: str | None) -> dict:
    """route -> weight from "triton-spike=2,inductor=0.5"; routes not named weigh 1."""
    return _per_route(text, _positive_number, "route=weight with a positive weight (e.g. triton-spike=2)")


def _positive_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None


def _per_route(text: str | None, value_of, form: str) -> dict:
    """route -> value_of(what follows its '=') from "a=1,b=2"; a part that is no route=value
    (value_of gives None) is a BadOption that names it and `form`."""
    found = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        route, _, value = part.partition("=")
        parsed = value_of(value.strip())
        if not route.strip() or parsed is None:
            raise BadOption(f"{part.strip()!r} is not {form}")
        found[route.strip()] = parsed
    return found


class RouteShares:
    """The drawing time of `workers` processes until draw_end (time.time()) split over the
    routes of `items` (route -> its fuzz items) by `weights` (route -> weight, default 1);
    see the module docstring."""

    def __init__(self, path: str, *, workers: int, draw_end: float, items: dict, weights: dict | None = None):
        self.path, self.workers, self.draw_end = path, max(1, workers), draw_end
        weights = {route: (weights or {}).get(route, 1.0) for route in items}
        total = sum(weights.values()) or 1.0
        self.weight = {route: weight / total for route, weight in weights.items()}
        self.items = dict(items)
        self._worker_seconds: float | None = None

    def share(self, route: str, db=None) -> float:
        """`route`'s seconds of drawing time, on the plan the ledger `db` holds (made now if
        it holds none; without a ledger, this process's own)."""
        if self._worker_seconds is None:
            planned = max(0.0, self.draw_end - time.time()) * self.workers
            if db is not None:
                db.execute("INSERT OR IGNORE INTO plan VALUES (0, ?)", (planned,))
                planned = db.execute("SELECT worker_seconds FROM plan").fetchone()[0]
            self._worker_seconds = planned
        return self._worker_seconds * self.weight.get(route, 0.0)

    def begin(self, route: str, item: str) -> float:
        """The seconds `item` may draw for: what `route` has left over its items not yet begun
        (never below 0). Begun again (a rerun), an item keeps its first allowance. Where the
        ledger cannot be kept, each item gets an equal part of its route's share."""
        try:
            return self._begin(route, item)
        except (OSError, sqlite3.Error):
            return self.share(route) / max(1, self.items.get(route, 1))

    def _begin(self, route: str, item: str) -> float:
        with self._ledger() as db:
            row = db.execute("SELECT allowed FROM items WHERE item = ?", (item,)).fetchone()
            if row:
                return row[0]
            used, begun = db.execute("SELECT COALESCE(SUM(COALESCE(spent, allowed)), 0), COUNT(*) FROM items "
                                     "WHERE route = ?", (route,)).fetchone()
            waiting = max(1, self.items.get(route, 1) - begun)
            allowed = max(0.0, (self.share(route, db) - used) / waiting)
            db.execute("INSERT INTO items (item, route, allowed) VALUES (?, ?, ?)", (item, route, allowed))
            return allowed

    def end(self, item: str, spent_s: float) -> None:
        """`item` took spent_s seconds: that, not its allowance, is what its route has used."""
        try:
            with self._ledger() as db:
                db.execute("UPDATE items SET spent = ? WHERE item = ?", (spent_s, item))
        except (OSError, sqlite3.Error):
            pass                    # its allowance stays counted: the later items get a fair part still

    def _ledger(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        return _Ledger(self.path)


class _Ledger:
    """One transaction on the ledger, begun IMMEDIATE so that two items beginning at once
    see each other's allowance."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("CREATE TABLE IF NOT EXISTS items (item TEXT PRIMARY KEY, route TEXT NOT NULL, "
                        "allowed REAL NOT NULL, spent REAL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS plan (id INTEGER PRIMARY KEY, worker_seconds REAL NOT NULL)")
        return self.db

    def __exit__(self, kind, value, traceback):
        try:
            self.db.execute("ROLLBACK" if kind else "COMMIT")
        finally:
            self.db.close()


def spent_by_route(path: str) -> dict:
    """route -> seconds the items of a ledger at `path` took (an item not ended counts its
    allowance); {} where there is no ledger, or it cannot be read."""
    if not os.path.exists(path):
        return {}
    try:
        with _Ledger(path) as db:
            return dict(db.execute("SELECT route, SUM(COALESCE(spent, allowed)) FROM items GROUP BY route"))
    except sqlite3.Error:
        return {}


STARVED_SHARE = 0.10              # a route with fewer of the cases than this is said apart


def share_rows(routes: list, records, spent: dict) -> list:
    """Per route of `routes` (those the run fuzzed): its cases, their share of all, the
    drawing time its items took (spent: route -> seconds, spent_by_route) and its share."""
    cases = {route: 0 for route in routes}
    for record in records:
        if record.route in cases:
            cases[record.route] += 1
    all_cases, all_time = sum(cases.values()) or 1, sum(spent.get(r, 0.0) for r in routes) or 1.0
    return [{"route": route, "cases": cases[route], "% of cases": round(100.0 * cases[route] / all_cases),
             "drawing s": round(spent.get(route, 0.0)), "% of time": round(100.0 * spent.get(route, 0.0) / all_time),
             "s per case": round(spent[route] / cases[route], 2) if cases[route] and route in spent else None}
            for route in routes]


def starved_lines(rows: list) -> list:
    """One line per route that ran fewer than STARVED_SHARE of the cases, with the reason."""
    total = sum(row["cases"] for row in rows)
    if not total:
        return []
    pace = sorted(row["s per case"] for row in rows if row["s per case"])
    typical = pace[len(pace) // 2] if pace else None
    return [f"route {row['route']} ran {row['cases']} of {total} cases ({row['% of cases']}%): {_why(row, typical)}"
            for row in rows if row["cases"] < STARVED_SHARE * total]


def _why(row: dict, typical: float | None) -> str:
    if not row["drawing s"]:
        return "none of its items began before the drawing time ended"
    if not row["cases"]:
        return (f"its items took {row['drawing s']} s and finished no case (its start-up, or cases still "
                f"running at the deadline)")
    if row["% of time"] < 100 * STARVED_SHARE:
        return f"its items took {row['% of time']}% of the drawing time (they ended early or began late)"
    return (f"its cases take {row['s per case']} s each against {typical} s on the routes' median, "
            f"in {row['% of time']}% of the drawing time")
