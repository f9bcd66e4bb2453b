"""BailingHub settings: every value comes from the environment (see .env.example).

Production differs from development only by environment values. With DATABASE_URL or REDIS_URL
unset, the embedded servers of bailinghub.embedded are started (or reused) under ./var/.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from urllib.parse import unquote

import environ
from django.core.exceptions import ImproperlyConfigured

from bailinghub import embedded

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = embedded.VAR_DIR

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)


def _secret_key() -> str:
    key = env.str("SECRET_KEY", default="")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off. Set SECRET_KEY in the environment "
            "(for example: python -c 'import secrets; print(secrets.token_urlsafe(50))')."
        )
    # Development only: one generated key, kept under ./var/ so sessions survive restarts.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "apps.runtime.admin_site.ConsoleAdminConfig",  # django.contrib.admin with the console dashboard
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "apps.core",
    "apps.projects",
    "apps.routes",
    "apps.agent_auth",
    "apps.knowledge",
    "apps.tasks",
    "apps.tools",
    "apps.ledger",
    "apps.answers",
    "apps.runtime",
    "apps.demo_business",  # its URLs are mounted only when DEMO_BUSINESS_ENABLED
]

MIDDLEWARE = [
    "apps.core.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from the web process itself (gunicorn serves no files): collected ones in
    # production, straight from the apps' folders in development.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "apps.core.middleware.NoStoreMiddleware",
    "apps.core.middleware.HttpsRequiredMiddleware",
    "apps.core.middleware.ServiceUnavailableMiddleware",
    "apps.core.middleware.ApiExceptionMiddleware",
    "apps.core.middleware.ContentCharsetMiddleware",
    # Before anything that reads request.POST (CSRF), so no body is buffered past its limit.
    "apps.core.middleware.BodySizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "apps.core.middleware.CommonMiddleware",  # Django's, without APPEND_SLASH on the agent prefixes
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "bailinghub.urls"
WSGI_APPLICATION = "bailinghub.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env.str("DATABASE_URL", default="") or embedded.postgres_start()[0]
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
# A Unix-socket directory given as ?host=/path (the embedded server's form) or percent-encoded.
_db_options = DATABASES["default"].setdefault("OPTIONS", {})
if not DATABASES["default"].get("HOST") and "host" in _db_options:
    DATABASES["default"]["HOST"] = _db_options.pop("host")
DATABASES["default"]["HOST"] = unquote(DATABASES["default"].get("HOST") or "")
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
# Session settings for every connection (libpq `options`). Searches are short, latency-bound
# queries: a parallel plan's worker start-up doubled keyword-search time on 2 cores (p50 19 → 9 ms
# at 100k chunks), and JIT compilation only costs at this size.
_db_options.setdefault("options", env.str("DATABASE_SESSION_OPTIONS",
                                          default="-c max_parallel_workers_per_gather=0 -c jit=off"))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A database host that drops packets held a connection attempt for the kernel's TCP timeout
# (about two minutes): a web request, or a Celery worker's main process handing work back.
_db_options.setdefault("connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT", default=10))
# Parallel test runs against one server need distinct test databases.
DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME", default="") or None}

REDIS_URL = env.str("REDIS_URL", default="") or embedded.redis_start()[0]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True
# Times in the console carry their zone's name (bailinghub/formats/en/formats.py).
FORMAT_MODULE_PATH = ["bailinghub.formats"]

STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=str(VAR_DIR / "static"))
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
MEDIA_ROOT = env.path("MEDIA_ROOT", default=str(VAR_DIR / "media"))

# Request bodies are limited by apps.core.middleware.BodySizeLimitMiddleware (streamed, with
# per-view overrides); Django's own whole-body check would answer first with a bare 400.
DATA_UPLOAD_MAX_MEMORY_SIZE = None
BAILING_JSON_BODY_MAX_BYTES = env.int("BAILING_JSON_BODY_MAX_BYTES", default=1_048_576)
# A request that stops arriving: its head must come whole within this many seconds, and its body
# may not go this long without a byte (nginx's client_header_timeout and client_body_timeout).
# Past it the read ends (bailinghub.gunicorn's worker for the head: the connection closes;
# bailinghub.wsgi for the body: 408) and the web thread serves others. The answer is written under
# it too, 64 KiB at a time (nginx's send_timeout): a client that does not take a slice within it,
# about 2 KiB/s at 30 s, is cut off. gunicorn reads and writes with no timeout: a client that sent
# half a request, or stopped reading a large answer, held a thread for good, and a few held every
# thread. 0: no limit.
BAILING_REQUEST_READ_TIMEOUT_SECONDS = env.float("BAILING_REQUEST_READ_TIMEOUT_SECONDS", default=30.0)
# Path prefixes whose responses are never cached (the builder API's too: it answers one-time
# secrets, a generated provider signing secret), and those whose errors are JSON: the
# /agent-auth/ pages for people (authorize, login) answer their errors as HTML pages.
BAILING_NO_STORE_PREFIXES = ("/agent-auth/", "/agent-api/", "/api/")
BAILING_JSON_ERROR_PREFIXES = ("/agent-auth/", "/agent-api/", "/api/", "/healthz", "/readyz", "/demo-business/")
# ...except the browser pages of agent auth, whose errors are HTML pages for a person (these exact
# paths: anything else under /agent-auth/ is the API's).
BAILING_HTML_ERROR_PATHS = ("/agent-auth/authorize", "/agent-auth/login")
# JSON APIs whose error list is closed (Agent Auth v1): a body they cannot take (another media
# type or charset, a chunked body where it is not read, one over the limit) is 400 invalid_request
# there, not 411/413/415.
BAILING_CLOSED_ERROR_PREFIXES = ("/agent-auth/",)
# The code of a 503 while PostgreSQL or Redis is down, where a closed list names its own (Agent
# Auth v1: agent_auth_unavailable); service_unavailable elsewhere.
BAILING_UNAVAILABLE_CODES = {"/agent-auth/": "agent_auth_unavailable"}
# Agent hosts follow no redirect: APPEND_SLASH never answers under these.
BAILING_NO_REDIRECT_PREFIXES = ("/agent-auth/", "/agent-api/")

SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
CSRF_FAILURE_VIEW = "apps.agent_auth.pages.csrf_failure"  # HTML on the sign-in pages; Django's elsewhere
SESSION_COOKIE_HTTPONLY = True
# Where a sign-in goes when its `next` is missing or off-site (Django drops those): the console. The
# default, /accounts/profile/, is no page here, and a correct password on a link carrying an off-site
# `next` ended on a 404.
LOGIN_REDIRECT_URL = "admin:index"
# Messages wait for the next page in the session (a row in the database), not in Django's default
# `messages` cookie: that one is signed, not encrypted, and a one-time token or a generated signing
# secret shown in a message went to the browser's cookie jar and back in clear. A message leaves the
# session when it is shown.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env.bool("BEHIND_TLS_PROXY", False) else None
# HTTPS only, when the deployment says so (both off by default: `make run` serves plain HTTP on
# loopback). HSTS is sent on HTTPS responses only; the redirect leaves the health probes alone.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
# Agent hosts follow no redirect (contracts-beyond-seeds §6), so the agent APIs are never sent to
# HTTPS: apps.core.middleware.HttpsRequiredMiddleware refuses them in JSON over plain HTTP instead.
# Agent Auth's own sign-in and authorization pages are browser pages and keep the redirect.
BAILING_HTTPS_REFUSED_PREFIXES = ("/agent-auth/v1/", "/agent-api/")
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$",
                          *(rf"^{re.escape(prefix.strip('/'))}(/|$)" for prefix in BAILING_HTTPS_REFUSED_PREFIXES)]

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["apps.core.parsers.StrictJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "apps.core.negotiation.StrictContentNegotiation",
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "apps.core.exceptions.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "bailinghub.openapi.AutoSchema",
    # OPTIONS answers {} with the URL's methods in Allow, on every API (agent, Agent Auth, builder, RAG).
    "DEFAULT_METADATA_CLASS": "apps.core.metadata.AllowOnlyMetadata",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

# The OpenAPI 3.1 description of the agent and builder APIs, served at /api/schema/ (bailinghub.openapi).
SPECTACULAR_SETTINGS = {
    "TITLE": "BailingHub API",
    "DESCRIPTION": "Agent Auth v1 (/agent-auth/v1/), Agent Client Runtime v1 (/agent-api/v1/) and the builder "
                   "API (/api/v1/builder/). Every error is {\"error\": code, \"message\": ...}; each operation "
                   "lists the codes it can answer.",
    "VERSION": "1.0.0",
    "OAS_VERSION": "3.1.0",
    "DEFAULT_GENERATOR_CLASS": "bailinghub.openapi.Generator",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "bailinghub.openapi.complete_operations"],
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
}

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or embedded.celery_url(REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or CELERY_BROKER_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=3600)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=3300)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task running when the broker connection drops goes on (its ack is lost; the message comes back
# after the visibility timeout and finds its work done: ingestion leases, the dispatch journal).
# Cancelling it would stop an ingestion for a blip, and a tool call mid-request would turn uncertain.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# A send to a hung broker (a Redis that stopped answering, a network that drops its packets) waited
# forever: an upload or a tool call held its web thread for the whole outage, and enough of them
# took a web process down. Every Redis command of the broker and of the result backend now gives
# up after BROKER_SOCKET_TIMEOUT_SECONDS (kombu's default is none), and a send that fails is tried
# once more (Celery's default: three times): a send fails within about three timeouts (the publish,
# a reconnect, the retry), and an upload sends no more of its documents after one fails
# (dispatch.documents_enqueue), as when the broker is down; the watchdogs send the work once it is
# back. Keep it above a second: a worker's wait for messages (BRPOP) is one.
BROKER_SOCKET_TIMEOUT_SECONDS = env.float("BROKER_SOCKET_TIMEOUT_SECONDS", default=3.0)
if BROKER_SOCKET_TIMEOUT_SECONDS <= 1:
    raise ImproperlyConfigured("BROKER_SOCKET_TIMEOUT_SECONDS must be over 1: a worker waits a second for messages.")
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": BROKER_SOCKET_TIMEOUT_SECONDS,
                                   "socket_connect_timeout": BROKER_SOCKET_TIMEOUT_SECONDS}
CELERY_REDIS_SOCKET_TIMEOUT = BROKER_SOCKET_TIMEOUT_SECONDS
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = BROKER_SOCKET_TIMEOUT_SECONDS
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5,
                                    "interval_max": 0.5}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_DEFAULT_QUEUE = "celery"
# Sends a large document's ingestion and every rebuild to their own queue, so that small uploads
# never wait behind them (apps.knowledge.tasks.task_route).
CELERY_TASK_ROUTES = ["apps.knowledge.tasks.task_route"]
# The beat scheduler's state lives with the rest of the local state (BAILING_VAR_DIR).
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# `make run`'s workers (0: automatic): the default queue's worker runs one process per core (at
# least two), the large-document queue's worker half as many (at least one).
DEVSERVER_WORKER_CONCURRENCY = env.int("CELERY_CONCURRENCY", default=0)
DEVSERVER_LARGE_WORKER_CONCURRENCY = env.int("CELERY_LARGE_CONCURRENCY", default=0)
# What `make run` keeps up beside its children, looked at every few seconds (devserver.supervise):
# the embedded Redis, a daemon of its own, when it is the one in use.
DEVSERVER_KEEP_UP = "bailinghub.embedded.redis_keep_up" if embedded.redis_url() == REDIS_URL else ""

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "apps.core.logging.RequestIdFilter"},
        "redact": {"()": "apps.core.logging.RedactSecretsFilter"},
    },
    "formatters": {
        "plain": {"()": "apps.core.logging.RedactingFormatter",
                  "format": "%(asctime)s %(levelname)-7s [%(request_id)s] %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["request_id", "redact"],
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "pgserver": {"level": "WARNING"},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # Replaces Django's own console and mail handlers (DEFAULT_LOGGING), which write around
        # this configuration's redaction: one set of handlers for every logger.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}

# knowledge
KNOWLEDGE_UPLOAD_MAX_BYTES = env.int("KNOWLEDGE_UPLOAD_MAX_BYTES", default=50 * 1024 * 1024)
KNOWLEDGE_UPLOAD_MAX_FILES = env.int("KNOWLEDGE_UPLOAD_MAX_FILES", default=20)
# Expansion bombs: a document's text is capped at RATIO x its size and at MAX_TEXT_CHARS, its
# chunks at MAX_CHUNKS; conversion stops as soon as a cap is passed.
KNOWLEDGE_MAX_TEXT_RATIO = env.int("KNOWLEDGE_MAX_TEXT_RATIO", default=20)
KNOWLEDGE_MAX_TEXT_CHARS = env.int("KNOWLEDGE_MAX_TEXT_CHARS", default=20_000_000)
KNOWLEDGE_MAX_CHUNKS = env.int("KNOWLEDGE_MAX_CHUNKS", default=20_000)
# A JSON document's objects and arrays, counted before it is parsed: each is a Python object of
# ~150 bytes in the worker, and an empty one adds no text for the caps above to stop.
KNOWLEDGE_JSON_MAX_CONTAINERS = env.int("KNOWLEDGE_JSON_MAX_CONTAINERS", default=1_000_000)
# And its values (numbers, strings, objects, arrays), counted the same way: all are held as Python
# objects before any text is made (a million small ones, ~300 MB in the worker).
KNOWLEDGE_JSON_MAX_VALUES = env.int("KNOWLEDGE_JSON_MAX_VALUES", default=1_000_000)
# A CSV document's rows (the header aside): each is a block of ~110 bytes in the worker, however short.
KNOWLEDGE_CSV_MAX_ROWS = env.int("KNOWLEDGE_CSV_MAX_ROWS", default=1_000_000)
# And a row's cells (a spreadsheet's columns at most): the csv module holds a row whole, ~60 bytes a
# cell however short, before the caps above see it.
KNOWLEDGE_CSV_MAX_COLUMNS = env.int("KNOWLEDGE_CSV_MAX_COLUMNS", default=16_384)
# A text or Markdown document's paragraphs (code blocks and tables count too): each is ~100 bytes
# in the worker however short, and a short one spends little of the text caps above.
KNOWLEDGE_MAX_PARAGRAPHS = env.int("KNOWLEDGE_MAX_PARAGRAPHS", default=1_000_000)
# A PDF document's pages, counted before they are read (the declared count at upload): each is
# ~2.5 KB of Python objects in the worker however empty, and an empty page adds no text.
KNOWLEDGE_PDF_MAX_PAGES = env.int("KNOWLEDGE_PDF_MAX_PAGES", default=10_000)
KNOWLEDGE_DEFAULT_CHUNK_STRATEGY = env.json(
    "KNOWLEDGE_DEFAULT_CHUNK_STRATEGY",
    default={"strategy": "auto", "min_chars": 256, "max_chars": 768, "overlap_chars": 96},
)
KNOWLEDGE_PARENT_MAX_CHARS = env.int("KNOWLEDGE_PARENT_MAX_CHARS", default=4000)
# Each child's sentence windows, at most this many characters (apps.knowledge.pipeline.windows;
# 0: none). Snapshotted per generation: a change reaches a KB at its next rebuild.
KNOWLEDGE_WINDOW_CHARS = env.int("KNOWLEDGE_WINDOW_CHARS", default=96)
# provider -> Embedder class (apps.knowledge.pipeline.embedders), chosen with import_string.
KNOWLEDGE_EMBEDDERS = {
    "local": "apps.knowledge.pipeline.embedders.local.E5Embedder",
    "use": "apps.knowledge.pipeline.embedders.use.UseEmbedder",
    "openai": "apps.knowledge.pipeline.embedders.openai.OpenAIEmbedder",
    "hashing": "apps.knowledge.pipeline.embedders.hashing.HashingEmbedder",
    **env.dict("KNOWLEDGE_EMBEDDERS", default={}),
}
KNOWLEDGE_EMBED_BATCH_SIZE = env.int("KNOWLEDGE_EMBED_BATCH_SIZE", default=16)
# Threads per process for the local embedders. One: on a small machine the web process (query
# embeddings) and the worker (documents) embed at once, and spinning OpenMP threads that
# contend make a 15 ms query embedding take 200 ms or more (measured here, 2 cores).
KNOWLEDGE_EMBED_THREADS = env.int("KNOWLEDGE_EMBED_THREADS", default=1)
# BLAS threads for embedding documents with the local e5 model (ingestion, in the worker). One:
# on a busy 2-core machine (load 9-18) two OpenBLAS threads waiting on each other burned CPU and
# embedded 6x fewer passages per CPU-second than one (bench/embed_speed.py); raise it on a
# machine with cores to spare.
KNOWLEDGE_EMBED_DOCUMENT_THREADS = env.int("KNOWLEDGE_EMBED_DOCUMENT_THREADS", default=1)
# A linear map applied to the local e5 model's knowledge-search query vectors (not tool search's;
# a 384 × 384 .npy; empty: none), for a domain with judged queries of its own:
# bench/query_adapter.py trains one and measures it on held-out queries. None ships: one trained
# on the four dev sets raised the vector channel on held-out folds and not hybrid search
# (bench/README.md, stop 40). A model's option {"query_adapter": false} leaves its queries as
# the model embeds them.
KNOWLEDGE_E5_QUERY_ADAPTER = env.str("KNOWLEDGE_E5_QUERY_ADAPTER", default="")
KNOWLEDGE_OPENAI_TIMEOUT_SECONDS = env.float("KNOWLEDGE_OPENAI_TIMEOUT_SECONDS", default=60.0)
KNOWLEDGE_OPENAI_MAX_RETRIES = env.int("KNOWLEDGE_OPENAI_MAX_RETRIES", default=5)
KNOWLEDGE_OPENAI_BACKOFF_SECONDS = env.float("KNOWLEDGE_OPENAI_BACKOFF_SECONDS", default=1.0)
# RAG answers (apps.answers): the generator for every route — `extractive` (offline) or
# `openai_compatible` (chat completions at RAG_LLM_BASE_URL) — and per-route overrides keyed
# "<project slug>/<route key>", e.g. {"shop/support": {"name": "openai_compatible", "model": "m"}}.
RAG_GENERATOR = env.str("RAG_GENERATOR", default="extractive")
RAG_LLM_BASE_URL = env.str("RAG_LLM_BASE_URL", default="")
RAG_LLM_API_KEY = env.str("RAG_LLM_API_KEY", default="")
RAG_LLM_MODEL = env.str("RAG_LLM_MODEL", default="")
RAG_LLM_TIMEOUT_SECONDS = env.float("RAG_LLM_TIMEOUT_SECONDS", default=20.0)
RAG_LLM_MAX_RETRIES = env.int("RAG_LLM_MAX_RETRIES", default=1)
RAG_ROUTE_GENERATORS = env.json("RAG_ROUTE_GENERATORS", default={})
# RAG answers "not found" when the search's scores are calibrated (hybrid, the local e5 model in
# every bound KB) and its best candidate scores below this: the probability that the knowledge
# answers the question at all, times the passage's fused score. Chosen by bench/rag.py --fit (bench/README.md, "RAG
# answers": the floor that gains most right answers less off-topic ones answered, with questions
# typed plainly and as chat; a table of floors there); 0 answers from whatever ranks first.
RAG_EVIDENCE_SCORE_MIN = env.float("RAG_EVIDENCE_SCORE_MIN", default=0.4)
if not 0 <= RAG_EVIDENCE_SCORE_MIN <= 1:
    raise ImproperlyConfigured(
        f"RAG_EVIDENCE_SCORE_MIN must be between 0 and 1, not {RAG_EVIDENCE_SCORE_MIN:g}: it is compared with "
        "calibrated evidence scores, which are probabilities (0 turns the floor off).")
KNOWLEDGE_TASK_QUEUE = env.str("KNOWLEDGE_TASK_QUEUE", default="") or None
# Documents from this size up, and rebuilds, are ingested on KNOWLEDGE_LARGE_TASK_QUEUE (unless
# KNOWLEDGE_TASK_QUEUE pins every ingestion task to one queue).
KNOWLEDGE_LARGE_DOCUMENT_BYTES = env.int("KNOWLEDGE_LARGE_DOCUMENT_BYTES", default=256 * 1024)
KNOWLEDGE_LARGE_TASK_QUEUE = env.str("KNOWLEDGE_LARGE_TASK_QUEUE", default="knowledge.large")
KNOWLEDGE_TASK_SLICE_SECONDS = env.int("KNOWLEDGE_TASK_SLICE_SECONDS", default=600)
KNOWLEDGE_HEARTBEAT_STALE_SECONDS = env.int("KNOWLEDGE_HEARTBEAT_STALE_SECONDS", default=300)
KNOWLEDGE_MAX_ATTEMPTS = env.int("KNOWLEDGE_MAX_ATTEMPTS", default=5)
# A document queued this long that no worker has claimed while its Celery queue is empty lost its
# message (a Redis restarted without its data): the watchdog sends it again then, not once its
# lease-long wait (KNOWLEDGE_HEARTBEAT_STALE_SECONDS) has run out.
KNOWLEDGE_QUEUED_RESEND_SECONDS = env.int("KNOWLEDGE_QUEUED_RESEND_SECONDS", default=60)
# A run that loses its database connection (a restart, a failover) gives its attempt back and is
# sent again; a document or rebuild that loses it this many times fails, naming the database.
KNOWLEDGE_MAX_CONNECTION_LOSSES = env.int("KNOWLEDGE_MAX_CONNECTION_LOSSES", default=10)
# How long such a run waits for the database to answer again; still down, it sends itself on for
# as long again, as the same run, which waits that long once more before it claims the work: an
# outage (a restart, a failover) up to about three times this, from when the run meets it, costs
# no attempt (kept well under KNOWLEDGE_HEARTBEAT_STALE_SECONDS, or the watchdog may hand the work
# over first). Past that, the watchdog hands it over once the lease has run out.
KNOWLEDGE_DATABASE_WAIT_SECONDS = env.int("KNOWLEDGE_DATABASE_WAIT_SECONDS", default=30)
KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = env.int("KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS", default=120)
# PostgreSQL's maintenance_work_mem while a worker builds a generation's HNSW and GIN indexes
# (apps.knowledge.generation_indexes): the HNSW build is several times faster while the graph fits.
KNOWLEDGE_VECTOR_INDEX_BUILD_MEMORY = env.str("KNOWLEDGE_VECTOR_INDEX_BUILD_MEMORY", default="1GB")
KNOWLEDGE_DELETE_LOCK_TIMEOUT_MS = env.int("KNOWLEDGE_DELETE_LOCK_TIMEOUT_MS", default=5000)
# External sources (documents registered by URL): the worker's fetch is capped in time and size;
# hosts resolving to private, loopback or link-local addresses are refused unless one of these
# CIDRs (e.g. "10.1.0.0/16" for an intranet wiki) permits them.
KNOWLEDGE_URL_TIMEOUT_SECONDS = env.float("KNOWLEDGE_URL_TIMEOUT_SECONDS", default=20.0)
KNOWLEDGE_URL_MAX_BYTES = env.int("KNOWLEDGE_URL_MAX_BYTES", default=20 * 1024 * 1024)
KNOWLEDGE_URL_ALLOWED_NETWORKS = env.list("KNOWLEDGE_URL_ALLOWED_NETWORKS", default=[])
# A KB's reranker is called at the address its base URL resolves to, checked the same way: a
# reranker inside the deployment's own network (e.g. "10.2.0.0/16") needs its network here.
KNOWLEDGE_RERANK_ALLOWED_NETWORKS = env.list("KNOWLEDGE_RERANK_ALLOWED_NETWORKS", default=[])
KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS = env.int("KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS", default=60)
# Hybrid search outside a transaction runs its vector channel on a second connection, beside the
# keyword channel (apps.knowledge.pipeline.parallel): one more connection per process.
KNOWLEDGE_SEARCH_PARALLEL = env.bool("KNOWLEDGE_SEARCH_PARALLEL", default=True)
# Retrieval tuning: keys and defaults are declared and documented in
# apps.knowledge.pipeline.retrieval_settings (checked at start-up). JSON, e.g. {"search_candidates": 80}.
KNOWLEDGE_RETRIEVAL = env.json("KNOWLEDGE_RETRIEVAL", default={})
CELERY_BEAT_SCHEDULE = {
    **globals().get("CELERY_BEAT_SCHEDULE", {}),
    "knowledge-watchdog": {"task": "knowledge.watchdog", "schedule": float(KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS)},
    "tools-invocation-watchdog": {"task": "tools.invocation_watchdog",
                                  "schedule": env.float("TOOL_WATCHDOG_INTERVAL_SECONDS", default=60.0)},
}
# The governed calls' watchdog runs this often (apps.tools.invocations.invocation_watchdog).
TOOL_WATCHDOG_INTERVAL_SECONDS = CELERY_BEAT_SCHEDULE["tools-invocation-watchdog"]["schedule"]

# Tool providers' signing secrets are encrypted at rest with these Fernet keys, newest first; the
# first encrypts, all decrypt (apps.tools.crypto). Required when DEBUG is off.
TOOL_SECRET_KEYS = env.list("TOOL_SECRET_KEYS", default=[])

# Governed tool invocations (apps.tools.invocations). A web request waits this long for a dispatched
# call to settle, then answers in_progress (agent hosts time out after 15 s).
TOOL_INVOCATION_WAIT_SECONDS = env.float("TOOL_INVOCATION_WAIT_SECONDS", default=8.0)
if not 0 <= TOOL_INVOCATION_WAIT_SECONDS <= 12:
    raise ImproperlyConfigured(
        f"TOOL_INVOCATION_WAIT_SECONDS must be between 0 and 12, not {TOOL_INVOCATION_WAIT_SECONDS:g}: agent hosts "
        "give up on a request after 15 s (contracts-beyond-seeds §6), and a call still unsettled then answers "
        "in_progress for the host to resume.")
# A pending approval expires after this long, and then reads as denied.
TOOL_APPROVAL_TTL_SECONDS = env.int("TOOL_APPROVAL_TTL_SECONDS", default=24 * 3600)
# Past a tool's timeout_ms plus this grace, a dispatch with no recorded answer is uncertain.
TOOL_DISPATCH_GRACE_SECONDS = env.int("TOOL_DISPATCH_GRACE_SECONDS", default=10)
# A call queued but not yet claimed this long ago is handed to the dispatcher again (lost message).
TOOL_DISPATCH_REQUEUE_SECONDS = env.int("TOOL_DISPATCH_REQUEUE_SECONDS", default=30)
# At most this much of a business answer is read; the rest is never downloaded.
TOOL_RESPONSE_MAX_BYTES = env.int("TOOL_RESPONSE_MAX_BYTES", default=256 * 1024)
# Tool providers are business systems, often on the deployment's own network: any address is
# called except these (CIDRs) — cloud metadata services (169.254.169.254 and IPv6 link-local,
# AWS's fd00:ec2::254, Alibaba's 100.100.100.200), unspecified, multicast and broadcast. An
# operator's base URL (or a DNS answer that changes later) never reaches them.
TOOL_PROVIDER_DENIED_NETWORKS = env.list("TOOL_PROVIDER_DENIED_NETWORKS", default=[
    "169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32", "0.0.0.0/8", "::/128",
    "224.0.0.0/4", "ff00::/8", "255.255.255.255/32"])
# The dispatcher's queue (empty: the default queue) and its hard time limit (timeout_ms is at most 600 s).
TOOL_DISPATCH_QUEUE = env.str("TOOL_DISPATCH_QUEUE", default="") or None
TOOL_DISPATCH_TASK_TIME_LIMIT = env.int("TOOL_DISPATCH_TASK_TIME_LIMIT", default=630)
# The embedder of capability search's tool index (apps.tools.semantic): a provider of
# KNOWLEDGE_EMBEDDERS, its model name and dimension. Changing it makes every index stale (searches
# stay lexical) until each provider's index is rebuilt (manage.py tools_index_rebuild).
TOOL_EMBEDDER = env.json("TOOL_EMBEDDER", default={"provider": "local", "name": "multilingual-e5-small",
                                                   "dimension": 384})

# The demo business system (apps.demo_business) under /demo-business/: a small shop that verifies
# the hub's signed calls like any business backend. On by default only in development; when on
# outside development it needs its own signing secret (the provider secret it is registered with).
DEMO_BUSINESS_ENABLED = env.bool("DEMO_BUSINESS_ENABLED", default=DEBUG)
DEMO_BUSINESS_SIGNING_SECRET = env.str("DEMO_BUSINESS_SIGNING_SECRET", default="") or (
    "bailinghub-demo-business-development-signing-key" if DEBUG else "")
# Each signed call waits this long before it runs (tests of concurrency and timeouts); 0 in use.
DEMO_BUSINESS_RESPONSE_DELAY_MS = env.int("DEMO_BUSINESS_RESPONSE_DELAY_MS", default=0)


def _reachable(bind: str) -> str:
    """host:port to reach a server bound at `bind` from this machine (a wildcard host: loopback)."""
    host, _, port = bind.rpartition(":")
    return f"{'127.0.0.1' if host in ('', '0.0.0.0', '::', '[::]') else host}:{port}"  # noqa: S104 -- read, not bound


# Where the hub reaches the demo shop (seed_demo registers it there): `make run`'s own address,
# where WEB_BIND puts the web server.
WEB_BIND = env.str("WEB_BIND", default="") or "127.0.0.1:8000"
# Where this machine reaches `make run`'s web server (its own pages, as the demo data links them).
WEB_ORIGIN = f"http://{_reachable(WEB_BIND)}"
DEMO_BUSINESS_BASE_URL = env.str("DEMO_BUSINESS_BASE_URL", default=f"{WEB_ORIGIN}/demo-business")
if DEMO_BUSINESS_ENABLED and not DEMO_BUSINESS_SIGNING_SECRET:
    raise ImproperlyConfigured(
        "DEMO_BUSINESS_SIGNING_SECRET is required when DEMO_BUSINESS_ENABLED is on and DEBUG is off "
        "(or set DEMO_BUSINESS_ENABLED=false).")
if DEMO_BUSINESS_ENABLED and len(DEMO_BUSINESS_SIGNING_SECRET.strip()) < 16:  # the providers' own rule
    raise ImproperlyConfigured("DEMO_BUSINESS_SIGNING_SECRET needs at least 16 characters, not only spaces: it is "
                               "the signing secret of the demo tool provider.")
