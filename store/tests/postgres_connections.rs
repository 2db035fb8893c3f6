//! What Receipt's Postgres connections promise, as sqlx makes them.
//!
//! Connections speak TLS when the server offers it (`sslmode=prefer`, the
//! default) and insist on it when told (`sslmode=require`).
//!
//! Each message goes out at once: with Nagle's algorithm on, a message
//! written in more than one segment waits for the server's delayed
//! acknowledgement (about 40 ms on Linux) before its last segment goes out.
//! sqlx sets `TCP_NODELAY` on its sockets.
//!
//! A pool pings a connection (a round trip) before handing it out and after
//! it is given back (sqlx's defaults, which the store keeps): a connection
//! whose backend has ended, while out of the pool or idle in it, fails its
//! ping and the pool closes it rather than hand it out.

#![allow(unsafe_code)]

use std::{net::TcpStream, os::fd::BorrowedFd};

use sqlx::{Connection, PgConnection, PgPool, postgres::PgPoolOptions};

const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The same server over TLS, when it offers it (sqlx prefers it), and
/// without.
const POSTGRES_EACH_WAY: [&str; 2] = [
    POSTGRES,
    "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
];

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

/// Ends the backend of the server process `pid` and waits until it is gone.
async fn terminate_backend(pid: i32) {
    let mut admin = PgConnection::connect(POSTGRES).await.expect("admin");
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 10000)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .expect("terminate");
    assert!(ended, "backend {pid} did not end");
    admin.close().await.expect("close admin");
}

async fn backend_pid(conn: &mut PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
}

/// Whether the server sees this connection as TLS.
async fn speaks_tls(conn: &mut PgConnection) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(conn)
        .await
        .expect("pg_stat_ssl")
}

#[tokio::test]
async fn a_pool_never_hands_out_a_connection_whose_backend_ended() {
    for url in POSTGRES_EACH_WAY {
        never_hands_out_a_connection_whose_backend_ended(url).await;
    }
}

async fn never_hands_out_a_connection_whose_backend_ended(url: &str) {
    let pool: PgPool = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("Postgres on 127.0.0.1:5432");
    // Ended while out of the pool (as a fault that cuts a busy connection)
    // and while idle in it, in turn: every next statement gets a live one.
    let mut pids = Vec::new();
    for round in 0..10 {
        let mut conn = pool.acquire().await.expect("acquire");
        let pid = backend_pid(&mut conn).await.unwrap_or_else(|e| {
            panic!("{url} round {round}: a dead connection was handed out: {e}")
        });
        assert!(!pids.contains(&pid), "round {round}: backend {pid} again");
        pids.push(pid);
        if round % 2 == 0 {
            terminate_backend(pid).await;
            drop(conn);
        } else {
            drop(conn);
            terminate_backend(pid).await;
        }
    }
    pool.close().await;
}

#[tokio::test]
async fn a_connection_insists_on_tls_when_told_to() {
    let mut conn = PgConnection::connect(&format!("{POSTGRES}?sslmode=require"))
        .await
        .expect("Postgres on 127.0.0.1:5432 with ssl = on (Debian's default)");
    assert!(
        speaks_tls(&mut conn).await,
        "sslmode=require connected without TLS"
    );
    conn.close().await.expect("close");
}
