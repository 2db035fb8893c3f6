//! The Postgres connections Receipt opens send each message at once: with
//! Nagle's algorithm on, a message written in more than one segment waits
//! for the server's delayed acknowledgement (about 40 ms on Linux) before
//! its last segment goes out, which put a submit's median latency at 1,000
//! requests a second near 90 ms. sqlx leaves the option unset; the patched
//! `sqlx-core` in `vendor/` sets it (see `vendor/PATCHES.md`).

#![allow(unsafe_code)]

use std::{net::TcpStream, os::fd::BorrowedFd};

use sqlx::Connection;

const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// This process's TCP connections to `port`, with their `TCP_NODELAY`.
fn nodelay_of_connections_to(port: u16) -> Vec<bool> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Some(fd) = entry
            .ok()
            .and_then(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: the descriptor is open for as long as this borrow (read_dir
        // listed it, and nothing in this test closes descriptors meanwhile);
        // it is only duplicated, never closed through the borrow.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(owned) = borrowed.try_clone_to_owned() else {
            continue;
        };
        let stream = TcpStream::from(owned);
        if let (Ok(peer), Ok(nodelay)) = (stream.peer_addr(), stream.nodelay())
            && peer.port() == port
        {
            found.push(nodelay);
        }
    }
    found
}

#[tokio::test]
async fn postgres_connections_send_without_waiting_for_acknowledgements() {
    let connection = sqlx::PgConnection::connect(POSTGRES)
        .await
        .expect("Postgres on 127.0.0.1:5432");
    let nodelay = nodelay_of_connections_to(5432);
    connection.close().await.expect("close");
    assert!(!nodelay.is_empty(), "no connection to port 5432 found");
    assert!(
        nodelay.iter().all(|on| *on),
        "TCP_NODELAY off on a Postgres connection: {nodelay:?}"
    );
}
