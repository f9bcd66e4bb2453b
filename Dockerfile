# syntax=docker/dockerfile:1
# Build: wheels for the pinned dependencies. Run: a slim image, non-root, gunicorn.
FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /build
COPY requirements.lock pyproject.toml ./
RUN pip wheel --wheel-dir /wheels -r requirements.lock

FROM python:3.11-slim-bookworm AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=bailinghub.settings BAILING_VAR_DIR=/app/var OMP_NUM_THREADS=2
RUN groupadd --system bailing && useradd --system --gid bailing --home-dir /app --shell /usr/sbin/nologin bailing
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels /wheels/* && rm -rf /wheels
COPY --chown=bailing:bailing . .
RUN mkdir -p /app/var/media /app/var/static && chown -R bailing:bailing /app/var \
    && SECRET_KEY=collectstatic-only DATABASE_URL=postgres://unused@localhost/unused REDIS_URL=redis://localhost:6379/0 \
       python manage.py collectstatic --noinput
USER bailing
EXPOSE 8000
# Workers and threads sized from the cores (WEB_CONCURRENCY / WEB_THREADS override): bailinghub/gunicorn.py.
CMD ["gunicorn", "-c", "python:bailinghub.gunicorn", "--bind", "0.0.0.0:8000", "bailinghub.wsgi:application"]
