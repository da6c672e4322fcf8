# The bub image: the bus daemon (bub serve), every bub command, and the
# example echo agent for bub spawner. FROM scratch, because no base image
# can be pulled here and none is needed: the binaries are static
# (CGO_ENABLED=0) and carry their own TLS roots (cmd/bub/roots.go). There
# is no shell, so HEALTHCHECK runs bub itself.
#
# Build with `make image`, which builds the binaries on the host into
# build/image/ (the only part of the context .dockerignore lets in) and
# runs docker build.
FROM scratch

# /tmp for anything that asks os.TempDir; /data is the store and, for the
# spawner, the agents' workspaces, owned by the user below so that a new
# named volume mounted there is too (Docker copies the ownership of the
# image's directory into an empty volume).
COPY build/image/tmp /tmp
COPY --chown=65532:65532 build/image/data /data
COPY build/image/bub build/image/echo-agent /usr/local/bin/
# The example BCP agent definitions (examples/agents), which the
# compose stack's gateway serves; mount your own over /etc/bub/agents.
COPY build/image/agents /etc/bub/agents

ENV PATH=/usr/local/bin
# A numeric user (the conventional "nonroot" id), since there is no
# /etc/passwd to name one in. Nothing in the image runs as root.
USER 65532:65532
WORKDIR /data
VOLUME ["/data"]
EXPOSE 7892

# bub healthcheck asks http://127.0.0.1:7892/readyz, or BUB_HEALTHCHECK_URL
# for a bus on another port or with TLS (hence no --url here: the flag
# would win over the variable). /readyz answers 503 while the bus drains,
# so an orchestrator stops sending peers to a bus that is shutting down.
# Other services from this image (bub spawner) serve no health endpoint
# and disable this check.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
  CMD ["bub", "healthcheck"]

ENTRYPOINT ["bub"]
# Listening on every address needs auth (a --config with an auth:
# section) or an explicit --allow-anonymous: bub serve refuses an open bus
# other hosts can reach.
CMD ["serve", "--listen", "0.0.0.0:7892", "--data-dir", "/data"]
