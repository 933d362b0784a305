# syntax=docker/dockerfile:1
# prflow's image with a container daemon. `task image` (go run ./deploy/image) builds the same
# image without one: a static binary on an empty base, a CA bundle, a non-root user and /tmp.
#
#   docker build --build-arg VERSION=v0.1.0 -t prflow:v0.1.0 .
#   docker run --rm prflow:v0.1.0 --version
#
# No git in the image: server, worker and agent never run the git CLI (release-repo writes use
# the forges' APIs or go-git in process). Only `prflow dev` and the tests need git (they start a
# git smart-HTTP server), and they do not run from this image.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH:-amd64} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/usr/local/bin/prflow ./cmd/prflow
RUN mkdir -p /out/etc/ssl/certs /out/tmp /out/usr/share/doc/prflow \
 && chmod 1777 /out/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ \
 && cp LICENSE /out/usr/share/doc/prflow/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nprflow:x:65532:65532:prflow:/tmp:/sbin/nologin\n' > /out/etc/passwd \
 && printf 'root:x:0:\nprflow:x:65532:\n' > /out/etc/group

FROM scratch
COPY --from=build /out/ /
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt HOME=/tmp
LABEL org.opencontainers.image.title=prflow \
      org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.source=https://github.com/prflow/prflow
WORKDIR /tmp
# Numeric, so Kubernetes can check runAsNonRoot.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/prflow"]
