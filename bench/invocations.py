"""Governed tool invocations: the hub's overhead per call and calls/s with 20 concurrent agents.

Needs a running hub (web + a Celery worker that consumes the dispatcher's queue), e.g. `make run`,
and runs its own business backend in this process: a ThreadingHTTPServer on 127.0.0.1 that checks
every call's signature with apps.demo_business.verify and answers a small JSON body.

    make run      # or gunicorn + a celery worker, see bench/README.md
    python -m bailinghub.embedded exec -- .venv/bin/python bench/invocations.py \
        [--base-url http://127.0.0.1:8000] [--calls 200] [--agents 20] [--seconds 30]

Set-up, in the server's database: project `bench-invocations`, a route whose one provider points
at this process's backend (re-pointed each run), one agent session (and one open run) per agent.

1. Overhead (one agent, sequential): `--calls` read-only calls straight to the backend, signed
   as the hub signs them (the direct path), then `--calls` governed invocations through the hub
   (`POST /agent-api/v1/tool-invocations`, a new `invocation_id` each: checks, journal, the
   Celery dispatch, the signed call, the recorded answer). Prints p50/p95 of each and their
   difference: the hub's overhead per call.
2. Throughput: `--agents` agents each invoking in a loop for `--seconds`; calls/s, p50/p95/p99,
   states other than `executed` and errors (goal: none).
3. Task metering: a session of its own joins a task (apps.tasks; unlimited writes, 4 permits);
   `--calls` calls under a run bound to the task alternate with as many under an unbound run of a
   second fresh session — p50/p95 of each and the added latency of a task-bound invocation.

Every request is a new HTTP connection, as in bench/load.py. Figures, never assertions; only
loopback targets.

Measured 2026-12-01 on the shared 2-core machine at a load average of 15–18 (other work running):
gunicorn 2×12 threads, one worker on the dispatcher's queue. Direct signed call p50 0.7–2 ms;
through the hub p50 243–317 ms, p95 393–552 ms, so the hub's overhead per call is p50 ≈ 240–315 ms,
p95 ≈ 390–545 ms (about 16 queries on the web side and 10 in the dispatcher, plus the Celery hop;
the dispatcher's task itself took p50 320 ms there, its HTTP call 7 ms). 20 agents: 3.7 calls/s
with a prefork worker of 2 processes, 4.7 calls/s with a threads worker of 8 (dispatch waits on I/O:
give the dispatcher's queue, TOOL_DISPATCH_QUEUE, a worker of its own with a threads pool). The
web and worker processes used about 65 ms of CPU per call.
Task metering (stage 3, 08:48 the same day, load average about 12, gunicorn 2 workers, a threads
worker of 8, --calls 100): unbound p50 227.8 / p95 359.3 ms, task-bound p50 268.0 / p95 432.2 ms:
a task-bound call costs p50 +40 ms, p95 +73 ms (the membership check, the task row lock for the
permit, the charge row and two ledger entries per call).
On the quiet machine (09:31 UTC, load average < 2, the same set-up, --agents 20 --seconds 20): direct
p50 0.6 / p95 0.8 ms, through the hub p50 67.8 / p95 86.8 ms — overhead p50 67 ms, p95 86 ms; 20
agents 24.6 calls/s (p50 792 ms, p95 1,217 ms, all executed); task metering adds p50 +10 ms,
p95 +6 ms (10 agents: 18.6 calls/s, overhead p50 85 ms, task metering p50 +11 / p95 +15 ms).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import secrets
import sys
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import django_setup, percentiles

PROJECT_SLUG = "bench-invocations"
ROUTE = "bench-tools"
SECRET = "bench-invocations-signing-secret"  # noqa: S105 -- a bench backend's own key
SPEC = """
openapi: 3.0.3
info: {title: Bench backend, version: "1"}
paths:
  /items/{item_id}:
    get:
      operationId: item_read
      summary: Read an item
      parameters:
        - {name: item_id, in: path, required: true, schema: {type: string}}
      x-agent-capability:
        version: "1"
        scope: items.read
        execution: {readonly: true, idempotent: true, timeout_ms: 5000}
      responses:
        "200": {description: ok}
"""


def backend() -> ThreadingHTTPServer:
    from apps.demo_business.verify import InvalidSignature, verify_request

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            try:
                verify_request(secret=SECRET, method="GET", path_with_query=self.path, body=b"",
                               headers=dict(self.headers.items()), now=time.time())
                status, body = 200, json.dumps({"item": self.path.rsplit("/", 1)[-1], "stock": 12}).encode()
            except InvalidSignature:
                status, body = 401, b'{"error":"invalid_signature"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def setup(*, base_url: str, agents: int) -> list[tuple[str, str]]:
    """(access token, session id) per agent (each its own session); runs are opened over HTTP, as a
    host does."""
    from apps.agent_auth.models import AgentClient
    from apps.agent_auth.services import agent_client_create, authorization_approve, authorization_create, code_exchange
    from apps.projects.models import Project
    from apps.projects.services import project_create
    from apps.routes.models import Route
    from apps.routes.services import route_create
    from apps.tools.models import ToolProvider
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from apps.tools.services import provider_create, provider_update

    project = Project.objects.filter(slug=PROJECT_SLUG).first() or project_create(name="Bench invocations",
                                                                                   slug=PROJECT_SLUG)
    route = Route.objects.filter(project=project, key=ROUTE).first() or route_create(
        project=project, key=ROUTE, name="Bench tools", system_prompt="bench", agent_client_enabled=True)
    provider = ToolProvider.objects.filter(project=project, name="bench-backend").first()
    if provider is None:
        provider = provider_create(project=project, name="bench-backend", base_url=base_url, secret=SECRET,
                                   spec=SPEC.encode()).provider
    else:
        provider = provider_update(provider=provider, base_url=base_url)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["item_read"])],
                    tools_direct_enabled=True)
    client = AgentClient.objects.filter(app_id="bench-invocations").first()
    if client is None:
        client, _ = agent_client_create(project=project, app_id="bench-invocations", name="Bench invocations",
                                        allowed_routes=[ROUTE], agent_authorize_url="https://bench.example.com/a")
    out = []
    run = secrets.randbelow(250) + 2
    for index in range(agents):
        verifier = base64.urlsafe_b64encode(secrets.token_bytes(48)).rstrip(b"=").decode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        authorization = authorization_create(
            client_app_id=client.app_id, redirect_uri="http://127.0.0.1:9/callback", state="bench-state-1234",
            requested_routes=[ROUTE], device_label="bench", code_challenge=challenge,
            requester_ip=f"127.{run}.{index // 250}.{index % 250 + 1}")
        redirect = authorization_approve(client=client, authorization_id=authorization.pk,
                                         principal={"id": f"bench-{index}", "roles": []},
                                         on_behalf_of=f"bench-{index}@example.com", allowed_routes=[ROUTE])
        code = parse_qs(urlsplit(redirect).query)["code"][0]
        issued = code_exchange(client_app_id=client.app_id, code=code, redirect_uri=authorization.redirect_uri,
                               code_verifier=verifier)
        out.append((issued.access_token, str(issued.session.pk)))
    return out


def task_bound_run(base: str, *, token: str, session_id: str) -> tuple[str, str]:
    """A task whose one member is this session (the bench route, its own conversation, item_read),
    and a run bound to it, opened over HTTP."""
    from apps.projects.models import Project
    from apps.tasks.services import MemberSpec, PolicySpec, task_create

    conversation = f"bench-task-{uuid.uuid4().hex}"
    member = MemberSpec(session_id=session_id, workspace=ROUTE, client_conversation_id=conversation,
                        allowed_tools=("item_read",))
    task, _ = task_create(project=Project.objects.get(slug=PROJECT_SLUG), user=None, request_id=uuid.uuid4().hex,
                          members=[member], policy=PolicySpec(max_write_calls=None, max_concurrent=4))
    turn = uuid.uuid4().hex
    status, answer, _ = request(base, "POST", f"/agent-api/v1/workspaces/{ROUTE}/turns", token=token, body={
        "client_conversation_id": conversation, "client_turn_id": turn, "user_message_id": turn,
        "user_input": "read an item", "task_binding": {"schema_version": "bailing.agent-task-binding.v1",
                                                       "task_id": str(task.pk), "scope_hash": task.scope_hash}})
    if status != 200:
        raise SystemExit(f"opening a task-bound turn failed: {status} {answer}")
    return answer["run_id"], answer["capability_revision"]


def request(base: str, method: str, path: str, *, token: str = "", body: dict | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict, float]:
    parts = urlsplit(base)
    data = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else None
    sent = dict(headers or {})
    if token:
        sent["Authorization"] = f"Bearer {token}"
    if data is not None:
        sent["Content-Type"] = "application/json"
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        payload = response.read()
        status = response.status
    except OSError as exc:
        return 0, {"error": type(exc).__name__}, (time.perf_counter() - started) * 1000
    finally:
        connection.close()
    elapsed = (time.perf_counter() - started) * 1000
    try:
        return status, json.loads(payload or b"{}"), elapsed
    except ValueError:
        return status, {"error": "not_json"}, elapsed


def open_run(base: str, token: str) -> tuple[str, str]:
    turn = uuid.uuid4().hex
    status, answer, _ = request(base, "POST", f"/agent-api/v1/workspaces/{ROUTE}/turns", token=token, body={
        "client_conversation_id": f"bench-{turn}", "client_turn_id": turn, "user_message_id": turn,
        "user_input": "read an item"})
    if status != 200:
        raise SystemExit(f"opening a turn failed: {status} {answer}")
    return answer["run_id"], answer["capability_revision"]


def invoke(base: str, token: str, run_id: str, revision: str, n: int) -> tuple[int, dict, float]:
    return request(base, "POST", "/agent-api/v1/tool-invocations", token=token, body={
        "invocation_id": secrets.token_hex(32), "route": ROUTE, "capability_revision": revision,
        "agent_run_id": run_id, "tool": "item_read", "arguments": {"item_id": f"SKU-{n}"}})


def direct(backend_url: str, n: int) -> float:
    from apps.tools.dispatch import request_build

    compiled = {"method": "GET", "path": "/items/{item_id}", "scope": "items.read",
                "parameter_locations": [{"argument": "item_id", "in": "path", "name": "item_id"}]}
    outbound = request_build(base_url=backend_url, compiled=compiled, arguments={"item_id": f"SKU-{n}"},
                             secret=SECRET, job_id=str(uuid.uuid4()), idempotency_key=secrets.token_hex(32),
                             on_behalf_of="bench@example.com", timestamp=int(time.time()))
    status, _, ms = request(backend_url, "GET", outbound.target, headers=outbound.headers)
    if status != 200:
        raise SystemExit(f"the direct call failed: {status}")
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    if urlsplit(args.base_url).hostname not in {"127.0.0.1", "localhost", "::1"}:
        raise SystemExit("bench/invocations.py only targets a server on this machine (loopback).")
    if not 1 <= args.agents <= 200 or not 1 <= args.calls <= 10_000 or not 0 < args.seconds <= 3600:
        raise SystemExit("--agents 1–200, --calls 1–10000, --seconds 0–3600.")
    django_setup()
    server = backend()
    backend_url = f"http://127.0.0.1:{server.server_address[1]}/bench"
    sessions = setup(base_url=backend_url, agents=args.agents + 2)
    tokens = [token for token, _ in sessions[: args.agents]]
    runs = [open_run(args.base_url, token) for token in tokens]

    for n in range(10):  # warm both paths (connections, the worker's first task)
        direct(backend_url, n)
        invoke(args.base_url, tokens[0], *runs[0], n)
    direct_ms = [direct(backend_url, n) for n in range(args.calls)]
    hub_ms: list[float] = []
    states: Counter = Counter()
    for n in range(args.calls):
        status, answer, ms = invoke(args.base_url, tokens[0], *runs[0], n)
        states[f"{status} {answer.get('state') or answer.get('error')}"] += 1
        if status == 200 and answer.get("state") == "executed":
            hub_ms.append(ms)
    d, h = percentiles(direct_ms), percentiles(hub_ms)
    print(json.dumps({"sequential_calls": args.calls, "answers": dict(states)}))
    print(f"{'path':<8} {'n':>5} {'p50 ms':>8} {'p95 ms':>8}")
    print(f"{'direct':<8} {d['n']:>5} {d['p50']:>8} {d['p95']:>8}")
    print(f"{'hub':<8} {h['n']:>5} {h.get('p50', '-'):>8} {h.get('p95', '-'):>8}")
    if h["n"]:
        print(f"hub overhead per call: p50 {h['p50'] - d['p50']:.1f} ms, p95 {h['p95'] - d['p95']:.1f} ms")

    series: list[float] = []
    outcomes: Counter = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + args.seconds

    def agent(index: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            status, answer, ms = invoke(args.base_url, tokens[index], *runs[index], index * 1_000_000 + n)
            with lock:
                outcomes[f"{status} {answer.get('state') or answer.get('error')}"] += 1
                if status == 200 and answer.get("state") == "executed":
                    series.append(ms)

    threads = [threading.Thread(target=agent, args=(index,)) for index in range(args.agents)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    figures = percentiles(series)
    print(f"{args.agents} agents, {seconds:.1f} s: {len(series)} executed = {len(series) / seconds:.1f} calls/s; "
          f"p50 {figures.get('p50')} ms, p95 {figures.get('p95')} ms, p99 {figures.get('p99')} ms")
    print(json.dumps({"answers": dict(outcomes)}))

    (bound_token, bound_session), (free_token, _) = sessions[args.agents:]
    bound_run = task_bound_run(args.base_url, token=bound_token, session_id=bound_session)
    free_run = open_run(args.base_url, free_token)
    timed: dict[str, list[float]] = {"unbound": [], "task-bound": []}
    answers: Counter = Counter()
    for n in range(args.calls):  # alternating, so a drift of the machine's speed hits both alike
        for name, token, run in (("unbound", free_token, free_run), ("task-bound", bound_token, bound_run)):
            status, answer, ms = invoke(args.base_url, token, *run, 2_000_000_000 + n)
            answers[f"{name} {status} {answer.get('state') or answer.get('error')}"] += 1
            if status == 200 and answer.get("state") == "executed":
                timed[name].append(ms)
    u, t = percentiles(timed["unbound"]), percentiles(timed["task-bound"])
    print(json.dumps({"task_metering": dict(answers)}))
    print(f"{'path':<11} {'n':>5} {'p50 ms':>8} {'p95 ms':>8}")
    for name, figures in (("unbound", u), ("task-bound", t)):
        print(f"{name:<11} {figures['n']:>5} {figures.get('p50', '-'):>8} {figures.get('p95', '-'):>8}")
    if u["n"] and t["n"]:
        print(f"task metering adds: p50 {t['p50'] - u['p50']:.1f} ms, p95 {t['p95'] - u['p95']:.1f} ms")
    server.shutdown()


if __name__ == "__main__":
    main()
