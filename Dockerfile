# envkit: one image that serves any envkit environment with `envkit serve`.
#
#   docker build -t envkit .                                    # from the repository root
#   docker run -p 8000:8000 envkit                              # the bundled echo env
#   docker run -p 8000:8000 -e MAX_CONCURRENT_ENVS=16 envkit wordle
#   docker run -p 8000:8000 -v "$PWD/my_env:/env:ro" envkit /env --session-timeout 60
#
# The argument is what `envkit serve` takes (a bundled env name, an env folder, or module:Class),
# followed by any of its options. An env's own Space Dockerfile (envs/echo/Dockerfile, the
# `envkit new` template) takes the same steps with the env installed from its staged folder.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOST=0.0.0.0 PORT=8000
RUN useradd --create-home --uid 1000 envkit
WORKDIR /home/envkit
COPY pyproject.toml README.md /tmp/envkit-src/
COPY src /tmp/envkit-src/src
COPY envs /tmp/envkit-src/envs
COPY templates /tmp/envkit-src/templates
RUN pip install /tmp/envkit-src && rm -rf /tmp/envkit-src
USER envkit
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ['PORT'], timeout=4)"
# MAX_CONCURRENT_ENVS (sessions at once) and SESSION_TIMEOUT_S (idle seconds) are read at start-up.
ENTRYPOINT ["sh", "-c", "exec envkit serve \"$0\" --host \"$HOST\" --port \"$PORT\" \"$@\""]
CMD ["echo"]
