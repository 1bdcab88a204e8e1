"""A store belongs to the process that opened it: ``os.fork()`` with a store
open, and ``pickle`` (what a process pool would send).

Each fork test runs a real program that opens a store, forks, and lets the child
end the way a plain forked child does (a normal exit: atexit handlers and
finalizers run). The child is refused the parent's store in words, at once,
and can open its own; the parent's connections, receivers, claims, locks and
open transaction come through whole. Before alkstore disowned inherited
stores, the child's calls talked over the parent's PostgreSQL sockets (each
side reading the other's answers) and its exit rolled back the parent's
transaction on both engines, leaving a malformed SQLite file.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import pytest

import alkstore

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform cannot fork")

_REFUSED_IN_THE_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import alkstore

    target = sys.argv[1]
    store = alkstore.open(target)
    queue = store.queue("forked")
    for n in range(5):
        queue.enqueue({"n": n})
    held = queue.claim_one("parent")
    wakes = store.listen("chan")
    lock = store.try_lock("held", "parent", 60)
    tx = store.begin_tx()
    tx.enqueue_tx("forked", None, {"in": "tx"})

    child = os.fork()
    if child == 0:
        signal.alarm(30)  # a hang fails the test by its exit code, not by a stuck run
        outcomes = {}
        calls = {
            "claim_one": lambda: queue.claim_one("child"),
            "enqueue": lambda: queue.enqueue({"from": "child"}),
            "ack": held.ack,
            "heartbeat": lambda: held.heartbeat(5),
            "notify": lambda: store.notify("chan", 1),
            "listen": lambda: store.listen("other"),
            "enqueue_tx": lambda: tx.enqueue_tx("forked", None, {}),
            "commit": tx.commit,
            "begin_tx": store.begin_tx,
            "renew": lock.renew,
            "try_lock": lambda: store.try_lock("other", "child", 5),
            "publish": lambda: store.stream("events").publish({}),
            "inspect": lambda: store.inspect().queues(),
        }
        for name, call in calls.items():
            started = time.monotonic()
            try:
                call()
                outcomes[name] = "returned"
            except alkstore.Closed as exc:
                outcomes[name] = "Closed" if "forked" in str(exc) else f"Closed: {exc}"
            except BaseException as exc:
                outcomes[name] = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - started > 1:
                outcomes[name] += " (slow)"
        outcomes["recv"] = repr(wakes.recv(1))
        outcomes["repr"] = repr(store)
        store.close()  # the parent's connections stay open
        with alkstore.open(target) as own:
            outcomes["own store"] = [stats.name for stats in own.inspect().queues()]
        print(json.dumps({"child": outcomes}), flush=True)
        sys.exit(0)  # a normal exit: finalizers run

    _, status = os.waitpid(child, 0)
    tx.enqueue_tx("forked", None, {"in": "tx, after the fork"})
    tx.commit()
    store.notify("chan", 1)
    parent = {
        "child status": status,
        "recv": repr(wakes.recv(10)),
        "ack": held.ack(),
        "renew": lock.renew(),
        "drained": sorted(json.dumps(job.payload) for job in queue.claim_batch("parent", 20)),
    }
    print(json.dumps({"parent": parent}), flush=True)
    store.close()
    """
)

_CHILD_EXITS_DURING_THE_PARENTS_TRANSACTION = textwrap.dedent(
    """
    import gc, json, os, sqlite3, sys
    import alkstore

    target = sys.argv[1]
    store = alkstore.open(target)
    # A commit first, so that the WAL holds frames (SQLite) when the transaction begins.
    store.queue("orders").enqueue({"order": "before the transaction"})
    tx = store.begin_tx()
    tx.execute("CREATE TABLE orders (id integer PRIMARY KEY, note text)")
    # More than SQLite's page cache holds: the transaction's pages are in the
    # WAL before it commits, as a big transaction's are.
    tx.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000) "
        "INSERT INTO orders (id, note) SELECT i, :note FROM n",
        {"note": "x" * 500},
    )
    tx.enqueue_tx("orders", None, {"order": "before the fork"})
    tx.connection  # the enqueue is sent, not held back

    child = os.fork()
    if child == 0:
        del tx
        gc.collect()  # the child drops its copy of the handle...
        sys.exit(0)  # ...and exits normally
    _, status = os.waitpid(child, 0)

    for n in range(30_001, 30_201):
        tx.execute("INSERT INTO orders VALUES (:n, :note)", {"n": n, "note": "y" * 500})
    tx.enqueue_tx("orders", None, {"order": "after the fork"})
    tx.commit()
    result = {
        "child status": status,
        "jobs": sorted(job.payload["order"] for job in store.queue("orders").claim_batch("p", 9)),
    }
    with store.transaction() as check:
        result["orders"] = check.execute("SELECT count(*) FROM orders")[0][0]
    store.close()
    if not target.startswith("postgresql"):
        with sqlite3.connect(target) as db:
            result["integrity"] = db.execute("PRAGMA integrity_check").fetchone()[0]
    print(json.dumps(result), flush=True)
    """
)


_CHILD_WRITES_AFTER_A_FORK_DURING_A_WRITE = textwrap.dedent(
    """
    import json, os, sys
    import alkstore

    target = sys.argv[1]
    store = alkstore.open(target)
    tx = store.begin_tx()
    tx.enqueue_tx("q", None, "the parent's")
    committed, told = os.pipe()
    child = os.fork()
    if child == 0:
        os.read(committed, 1)
        with alkstore.open(target, busy_timeout_s=0.2) as own:
            report = {"reads": [stats.name for stats in own.inspect().queues()]}
            try:
                own.queue("q").enqueue("the child's")
                report["write"] = "written"
            except alkstore.Database as exc:
                report["write"] = str(exc)
        print(json.dumps({"child": report}), flush=True)
        os._exit(0)
    tx.commit()
    os.write(told, b"x")
    os.waitpid(child, 0)
    print(json.dumps({"parent": [job.payload for job in store.queue("q").claim_batch("p", 9)]}))
    """
)


def _run(script: str, dsn: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", script, dsn],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = {"stderr": done.stderr}  # a child's error goes there
    for line in done.stdout.splitlines():
        found.update(json.loads(line))
    return found


@needs_fork
def test_a_forked_child_is_refused_the_parents_store_which_keeps_working(dsn: str) -> None:
    found = _run(_REFUSED_IN_THE_CHILD, dsn)
    assert "child" in found, found  # the parent's report holds the child's exit status
    child = found["child"]
    assert isinstance(child, dict)
    reported = {"recv", "repr", "own store"}
    calls = {name: outcome for name, outcome in child.items() if name not in reported}
    assert calls == dict.fromkeys(calls, "Closed"), child
    assert child["recv"] == "None"  # an inherited receiver is closed: nothing to wait for
    assert "inherited from process" in child["repr"]
    assert child["own store"] == ["forked"]
    assert found["parent"] == {
        "child status": 0,
        "recv": "Wake(channel='chan')",
        "ack": True,
        "renew": True,
        "drained": sorted(
            json.dumps(payload)
            for payload in [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"in": "tx"},
                            {"in": "tx, after the fork"}]
        ),
    }  # fmt: skip


@needs_fork
def test_a_child_exiting_leaves_the_parents_open_transaction_whole(app_dsn: str) -> None:
    found = _run(_CHILD_EXITS_DURING_THE_PARENTS_TRANSACTION, app_dsn)
    assert found["child status"] == 0
    assert found["jobs"] == ["after the fork", "before the fork", "before the transaction"]
    assert found["orders"] == 30_200
    if not app_dsn.startswith("postgresql"):
        assert found["integrity"] == "ok"


def test_a_store_and_what_holds_it_refuse_pickle_in_words(dsn: str) -> None:
    """What a process pool would send another process: refused saying why."""
    with alkstore.open(dsn) as store:
        queue = store.queue("pickled")
        queue.enqueue({"n": 1})
        job = queue.claim_one("w")
        assert job is not None
        for held in (store, queue, job, store.stream("s")):
            with pytest.raises(TypeError, match="belongs to the process that opened it"):
                pickle.dumps(held)
        assert job.ack()  # refusing changed nothing


@needs_fork
def test_a_sqlite_child_forked_during_a_write_is_told_why_it_cannot_write(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite keeps its locks' state in the process: a child forked while a
    write transaction was open holds that write lock in its copy for good,
    even after the parent commits. No engine can undo that; the error says so."""
    found = _run(_CHILD_WRITES_AFTER_A_FORK_DURING_A_WRITE, str(tmp_path / "store.db"))
    assert "child" in found, found
    child = found["child"]
    assert isinstance(child, dict)
    assert child["reads"] == ["q"]
    assert "database is locked" in child["write"]
    assert "forked from one that had" in child["write"]
    assert "'spawn' or 'forkserver'" in child["write"]
    assert found["parent"] == ["the parent's"]
