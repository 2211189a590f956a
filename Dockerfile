# The drover image: one static binary, nothing else, run as a non-root user.
#
#   docker build -t drover:dev .        (or: buildah bud -t drover:dev .)
#
# Stage 1 builds `drover` with the glibc target and crt-static, which links glibc into the
# binary: the result runs on an empty filesystem. Stage 2 is that empty filesystem.
FROM docker.io/library/rust:1.95.0-bookworm AS build
WORKDIR /src
COPY . .
ENV RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cargo build --release --locked --bin drover --target x86_64-unknown-linux-gnu \
 && install -D -m 0755 target/x86_64-unknown-linux-gnu/release/drover /out/drover

FROM scratch
LABEL org.opencontainers.image.title="drover" \
      org.opencontainers.image.description="Drover: gang scheduling, hierarchical fair share and preemption for batch and AI work on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/drover-dev/drover"
COPY --from=build /out/drover /drover
# Numeric, so that the kubelet can check runAsNonRoot; the chart sets the same ids.
USER 65532:65532
ENTRYPOINT ["/drover"]
