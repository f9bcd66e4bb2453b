"""Load benchmark: N simulated agents against a running server (`make run`) for a fixed time.

    make run                      # in one terminal (web on http://127.0.0.1:8000)
    python -m bailinghub.embedded exec -- .venv/bin/python bench/load.py \
        [--base-url http://127.0.0.1:8000] [--agents 50] [--seconds 60] [--kb-chunks 2000] [--embedder hashing|use]

Set-up is bench/turns.py's, in the server's database: project `bench-turns`, a route with one
bound KB filled from `shared/bench/corpora` (reused by later runs), an agent client, and one
fresh session per agent (every agent is its own agent host: its own token, conversation and
memory). Each agent then loops until the time is up, choosing with fixed weights:

- turn (40 %): open a turn with a new id (memory, knowledge inline), then complete its run;
- knowledge search (30 %) and, when it gave a hint, a paged read of that reference (20 %);
- memories (10 %): list the session's memory notes.

Every request is a new HTTP connection (the harshest case for the server's accept loop). Prints
requests/s, p50/p95/p99 per endpoint, errors by status and code (goal: none), and the resident
memory of the server's processes (the process listening on the port, its parent and children)
before and after. Figures, never assertions; the loops are bounded by --seconds and stop by
themselves. Only loopback addresses are accepted as a target.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import django_setup, percentiles
from turns import EMBEDDERS, KB_ROUTE, corpus_queries, setup

WEIGHTS = [("turn", 0.4), ("search", 0.3), ("read", 0.2), ("memories", 0.1)]


def request(base: str, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict, float]:
    parts = urlsplit(base)
    data = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else None
    headers = {"Authorization": f"Bearer {token}"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        status = response.status
    except OSError as exc:  # reset, refused, timeout: an error of the server under load
        return 0, {"error": type(exc).__name__}, (time.perf_counter() - started) * 1000
    finally:
        connection.close()
    elapsed = (time.perf_counter() - started) * 1000
    try:
        answer = json.loads(payload or b"{}")
    except ValueError:
        answer = {"error": "not_json"}
    return status, answer, elapsed


def server_rss_mib(port: int) -> float | None:
    """Resident memory of the server listening on `port`: its process, parent and all children."""
    import psutil

    listeners = {c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                 and c.status == psutil.CONN_LISTEN and c.pid}
    if not listeners:
        return None
    processes = {}
    for pid in listeners:
        process = psutil.Process(pid)
        parent = process.parent()
        root = parent if parent and "gunicorn" in " ".join(parent.cmdline()) else process
        for member in [root, *root.children(recursive=True)]:
            processes[member.pid] = member
    total = 0
    for process in processes.values():
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return round(total / 2**20, 1)


def agent(*, base: str, token: str, route: str, deadline: float, queries: list[str], seed: int,
          series: dict[str, list[float]], errors: Counter, lock: threading.Lock) -> None:
    rng = random.Random(seed)
    conversation = f"load-{uuid.uuid4().hex[:12]}"
    refs: list[str] = []
    names, weights = zip(*WEIGHTS, strict=True)
    turn = 0
    while time.monotonic() < deadline:
        action = rng.choices(names, weights)[0]
        if action == "read" and not refs:
            action = "search"
        query = rng.choice(queries)
        calls: list[tuple[str, int, dict, float]] = []
        if action == "turn":
            turn += 1
            body = {"client_conversation_id": conversation, "client_turn_id": f"t{turn}",
                    "user_message_id": f"u{turn}", "user_input": f"{query}是怎么规定的？"}
            status, answer, ms = request(base, "POST", f"/agent-api/v1/workspaces/{route}/turns", token, body)
            calls.append(("turn", status, answer, ms))
            if status == 200:
                status, answer, ms = request(base, "POST", f"/agent-api/v1/runs/{answer['run_id']}/complete",
                                             token, {"assistant_message_id": f"a{turn}", "status": "completed",
                                                     "content": "根据相关规定办理。" * 20})
                calls.append(("complete", status, answer, ms))
        elif action == "search":
            status, answer, ms = request(base, "POST", f"/agent-api/v1/workspaces/{route}/knowledge/search", token,
                                         {"query": query})
            calls.append(("search", status, answer, ms))
            if status == 200:
                refs = [hint["ref"] for hint in answer.get("hints", [])] or refs
        elif action == "read":
            status, answer, ms = request(base, "POST", f"/agent-api/v1/workspaces/{route}/knowledge/read", token,
                                         {"ref": rng.choice(refs)})
            calls.append(("read", status, answer, ms))
            if status in (400, 409, 410):  # the reference aged or the document changed: search again
                refs = []
        else:
            status, answer, ms = request(base, "GET", f"/agent-api/v1/workspaces/{route}/memories", token)
            calls.append(("memories", status, answer, ms))
        with lock:
            for name, status, answer, ms in calls:
                if status == 200:
                    series.setdefault(name, []).append(ms)
                else:
                    errors[f"{name} {status} {answer.get('error')}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kb-chunks", type=int, default=2000)
    parser.add_argument("--embedder", choices=sorted(EMBEDDERS), default="hashing")
    args = parser.parse_args()
    parts = urlsplit(args.base_url)
    if parts.hostname not in {"127.0.0.1", "localhost", "::1"}:
        raise SystemExit("bench/load.py only targets a server on this machine (loopback).")
    if not 1 <= args.agents <= 500 or not 0 < args.seconds <= 3600:
        raise SystemExit("--agents must be 1–500 and --seconds 0–3600.")
    django_setup()
    # One device address per agent (and per run): the authorization rate limit counts per client
    # and address.
    run = random.randrange(2, 255)
    info = setup(kb_chunks=args.kb_chunks, embedder=args.embedder, want_kb=True, requester_ip=f"127.{run}.0.1")
    tokens = [info.pop("token")] + [setup(kb_chunks=0, embedder=args.embedder, want_kb=False,
                                          requester_ip=f"127.{run}.{index // 250}.{index % 250 + 1}")["token"]
                                    for index in range(1, args.agents)]
    queries = corpus_queries(2000)
    print(json.dumps({"setup": info, "agents": args.agents, "seconds": args.seconds}, ensure_ascii=False))
    rss_before = server_rss_mib(parts.port or 80)
    series: dict[str, list[float]] = {}
    errors: Counter = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + args.seconds
    threads = [threading.Thread(target=agent, kwargs=dict(
        base=args.base_url, token=token, route=KB_ROUTE, deadline=deadline, queries=queries, seed=index,
        series=series, errors=errors, lock=lock)) for index, token in enumerate(tokens)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    rss_after = server_rss_mib(parts.port or 80)
    total = sum(len(values) for values in series.values()) + sum(errors.values())
    print(f"requests: {total} in {seconds:.1f} s = {total / seconds:.1f}/s; errors: {sum(errors.values())}")
    print(f"{'endpoint':<10} {'count':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for name in ("turn", "complete", "search", "read", "memories"):
        values = series.get(name, [])
        figures = percentiles(values)
        print(f"{name:<10} {len(values):>6} {figures.get('p50', '-'):>8} {figures.get('p95', '-'):>8} "
              f"{figures.get('p99', '-'):>8}")
    for error, count in errors.most_common(10):
        print(f"error: {error} × {count}")
    print(f"server RSS MiB: before {rss_before}, after {rss_after}")


if __name__ == "__main__":
    main()
