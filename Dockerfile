# Builds both binaries; docker-compose.yml runs `api` and `worker` from it.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bins

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 receipt
COPY --from=build /src/target/release/api /src/target/release/worker /src/target/release/receipt /usr/local/bin/
USER receipt
EXPOSE 8080
CMD ["api"]
