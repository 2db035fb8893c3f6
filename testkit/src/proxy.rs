//! A TCP proxy of the tests' own, put between a process and a server
//! (Postgres, Redis) to make the network between them misbehave as real
//! ones do: it forwards by default, and can be told to blackhole (read
//! nothing more, answer nothing, keep every connection open, and accept
//! new ones only to leave them silent), to add latency with jitter, to
//! let only one direction through, or to cut every open connection.
//! Healing lets what was held back through, in order.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use rand::Rng;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// Which way bytes go through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// From the process to the server.
    ToServer,
    /// From the server back to the process.
    ToClient,
}

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything as it comes.
    None,
    /// Carry nothing either way; connections stay open, and new ones are
    /// accepted and left unanswered.
    Blackhole,
    /// Hold each chunk `ms` milliseconds, plus up to `jitter_ms` more.
    Latency { ms: u64, jitter_ms: u64 },
    /// Carry bytes only this way.
    OnlyWay(Way),
}

impl Fault {
    fn lets_through(self, way: Way) -> bool {
        match self {
            Fault::None | Fault::Latency { .. } => true,
            Fault::Blackhole => false,
            Fault::OnlyWay(only) => only == way,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct State {
    fault: Fault,
    /// Raised by [`FaultProxy::cut`]: connections of an older generation
    /// close.
    generation: u64,
}

/// A proxy listening on a free loopback port; it stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    accepting: JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy to `upstream`, forwarding.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (state, _) = watch::channel(State {
            fault: Fault::None,
            generation: 0,
        });
        let state = Arc::new(state);
        let accepting = tokio::spawn(accept(listener, upstream, state.clone()));
        FaultProxy {
            addr,
            state,
            accepting,
        }
    }

    /// A proxy to the server of `url` (`postgres://user@host:port/db`,
    /// `redis://host:port/`), and the same URL through the proxy.
    pub async fn in_front_of(url: &str) -> (FaultProxy, String) {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let (user, host_port) = match authority.rsplit_once('@') {
            Some((user, host_port)) => (format!("{user}@"), host_port),
            None => (String::new(), authority),
        };
        let upstream = tokio::net::lookup_host(host_port)
            .await
            .ok()
            .and_then(|mut addrs| addrs.find(SocketAddr::is_ipv4))
            .unwrap_or_else(|| panic!("the address of {host_port}"));
        let proxy = FaultProxy::start(upstream).await;
        let through = format!("{scheme}://{user}{}{path}", proxy.addr());
        (proxy, through)
    }

    /// Where processes connect instead of the server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, do this to the bytes.
    pub fn set(&self, fault: Fault) {
        self.state.send_modify(|state| state.fault = fault);
    }

    /// Forward again, and let through what was held back.
    pub fn heal(&self) {
        self.set(Fault::None);
    }

    /// Closes every connection open now; new ones are served.
    pub fn cut(&self) {
        self.state.send_modify(|state| state.generation += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        // Connections end with their generation.
        self.cut();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, state: Arc<watch::Sender<State>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        tokio::spawn(serve(client, upstream, state.subscribe()));
    }
}

/// One connection: opened upstream once the proxy carries bytes toward
/// the server, then pumped both ways until either side closes or the
/// connection is cut.
async fn serve(client: TcpStream, upstream: SocketAddr, mut state: watch::Receiver<State>) {
    let generation = state.borrow().generation;
    let opened = wait_for(&mut state, generation, |fault| {
        fault.lets_through(Way::ToServer)
    })
    .await;
    if !opened {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let to_server = pump(
        client_read,
        server_write,
        Way::ToServer,
        state.clone(),
        generation,
    );
    let to_client = pump(server_read, client_write, Way::ToClient, state, generation);
    // When one way ends, the other has nothing left to answer.
    tokio::select! {
        () = to_server => {}
        () = to_client => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    way: Way,
    mut state: watch::Receiver<State>,
    generation: u64,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        // A held direction reads nothing, so the sender's writes back up
        // as they would behind a silent network.
        if !wait_for(&mut state, generation, |fault| fault.lets_through(way)).await {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            () = cut(&mut state, generation) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let fault = state.borrow().fault;
        if let Fault::Latency { ms, jitter_ms } = fault {
            let jitter = if jitter_ms > 0 {
                rand::rng().random_range(0..=jitter_ms)
            } else {
                0
            };
            tokio::time::sleep(Duration::from_millis(ms + jitter)).await;
        }
        // A chunk read before a blackhole is held until it heals.
        if !wait_for(&mut state, generation, |fault| fault.lets_through(way)).await {
            return;
        }
        let written = tokio::select! {
            written = to.write_all(&buffer[..n]) => written,
            () = cut(&mut state, generation) => return,
        };
        if written.is_err() {
            return;
        }
    }
}

/// Waits until the fault lets `open` hold; `false` when the connection was
/// cut (or the proxy dropped) first.
async fn wait_for(
    state: &mut watch::Receiver<State>,
    generation: u64,
    open: impl Fn(Fault) -> bool,
) -> bool {
    loop {
        {
            let now = state.borrow_and_update();
            if now.generation != generation {
                return false;
            }
            if open(now.fault) {
                return true;
            }
        }
        if state.changed().await.is_err() {
            return false;
        }
    }
}

/// Ends when the connection is cut or the proxy dropped.
async fn cut(state: &mut watch::Receiver<State>, generation: u64) {
    loop {
        if state.borrow().generation != generation {
            return;
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}
