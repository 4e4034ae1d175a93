# idemlake container image.
#
#   docker build -t idemlake .                       # the engine alone
#   docker run --rm idemlake --version
#
# Your pipelines go in an image of their own built on this one (see examples/kubernetes/):
#
#   FROM idemlake
#   COPY tables/ /srv/pipelines/tables/
#
# Stage 1 builds the release binary (stripped: see [profile.release] in Cargo.toml); stage 2
# is Debian slim with only what the binary needs at run time:
#   - glibc and libgcc_s (in the base image; `ldd idemlake` lists nothing else),
#   - ca-certificates: S3 over HTTPS verifies the endpoint against the system's roots
#     (rustls with native roots),
#   - tzdata is not needed (the base image's copy goes unused): IANA time zones are compiled
#     into the binary (jiff's bundled tzdb for windows, chrono-tz for DataFusion's time zones).
# The runtime stage's package list is read by scripts/test-image, which checks the binary in a
# clean Debian root with exactly these packages when no Docker daemon is at hand.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src/ src/
COPY tests/ tests/
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin idemlake \
 && install -m 0755 target/release/idemlake /usr/local/bin/idemlake

FROM debian:${DEBIAN_RELEASE}-slim
# runtime-packages: ca-certificates
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /srv/pipelines --create-home idemlake
COPY --from=build /usr/local/bin/idemlake /usr/local/bin/idemlake
USER idemlake
WORKDIR /srv/pipelines
# `--project` defaults to the working directory: tables/ under /srv/pipelines.
ENTRYPOINT ["idemlake"]
CMD ["--help"]
