//! A TCP proxy a test can cut and restore, to take Redis or Postgres away
//! from the balancer without stopping the servers other tests share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub struct TcpProxy {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    /// When set, bytes are no longer forwarded and nothing is closed: a
    /// silent partition, as a dropped route or a stuck firewall makes it.
    blackholed: Arc<AtomicBool>,
    /// Answers held back, on the connections that sent a marker.
    hold: Arc<Hold>,
    /// Bytes sent towards the target so far.
    bytes_up: Arc<AtomicU64>,
    connections: Arc<Mutex<CancellationToken>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let blackholed = Arc::new(AtomicBool::new(false));
        let hold = Arc::new(Hold::default());
        let bytes_up = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(Mutex::new(CancellationToken::new()));
        let task = tokio::spawn({
            let open = open.clone();
            let blackholed = blackholed.clone();
            let hold = hold.clone();
            let bytes_up = bytes_up.clone();
            let connections = connections.clone();
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let cancel = connections.lock().unwrap().clone();
                    let blackholed = blackholed.clone();
                    let hold = hold.clone();
                    let bytes_up = bytes_up.clone();
                    tokio::spawn(async move {
                        let Ok(outbound) = TcpStream::connect(target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = cancel.cancelled() => {}
                            _ = pipe(inbound, outbound, blackholed, hold, bytes_up) => {}
                        }
                    });
                }
            }
        });
        Self {
            addr,
            open,
            blackholed,
            hold,
            bytes_up,
            connections,
            task,
        }
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        let mut token = self.connections.lock().unwrap();
        token.cancel();
        *token = CancellationToken::new();
    }

    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.blackholed.store(false, Ordering::SeqCst);
        *self.hold.marker.lock().unwrap() = None;
    }

    /// Holds the target's answers on every connection that sends a
    /// request holding `marker` (from that request on; the request
    /// itself reaches the target, which acts on it) until
    /// [`restore`](Self::restore).
    pub fn hold_answers_to(&self, marker: &str) {
        *self.hold.marker.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }

    /// Bytes of answers held back so far.
    pub fn held_bytes(&self) -> u64 {
        self.hold.held.load(Ordering::SeqCst)
    }

    /// Bytes sent towards the target so far.
    pub fn bytes_up(&self) -> u64 {
        self.bytes_up.load(Ordering::SeqCst)
    }

    /// Stops forwarding without closing anything: connections (old and
    /// new) stay open and silent until [`restore`](Self::restore).
    pub fn blackhole(&self) {
        self.blackholed.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// Copies both ways; while `blackholed`, nothing moves (bytes wait, as TCP
/// retransmits would, and flow again once the partition heals). Answers
/// on a connection that sent the hold's marker wait while it is set.
async fn pipe(
    inbound: TcpStream,
    outbound: TcpStream,
    blackholed: Arc<AtomicBool>,
    hold: Arc<Hold>,
    bytes_up: Arc<AtomicU64>,
) {
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let marked = AtomicBool::new(false);
    let held_here = || marked.load(Ordering::SeqCst) && hold.holding();
    let up = copy(
        &mut in_read,
        &mut out_write,
        |chunk| {
            if hold.marks(chunk) {
                marked.store(true, Ordering::SeqCst);
            }
        },
        || blackholed.load(Ordering::SeqCst),
        |n| {
            bytes_up.fetch_add(n as u64, Ordering::SeqCst);
        },
    );
    let down = copy(
        &mut out_read,
        &mut in_write,
        |chunk| {
            if held_here() {
                hold.held.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
        },
        || blackholed.load(Ordering::SeqCst) || held_here(),
        |_| {},
    );
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// Copies `from` to `to`, each chunk seen by `read` as it arrives, held
/// while `stopped`, counted by `written` once forwarded.
async fn copy(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    read: impl Fn(&[u8]),
    stopped: impl Fn() -> bool,
    written: impl Fn(usize),
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        read(&buffer[..n]);
        while stopped() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
        written(n);
    }
}

/// Answers held back on the connections that sent a marker
/// ([`TcpProxy::hold_answers_to`]).
#[derive(Default)]
struct Hold {
    marker: Mutex<Option<Vec<u8>>>,
    /// Bytes of answers held so far.
    held: AtomicU64,
}

impl Hold {
    fn holding(&self) -> bool {
        self.marker.lock().unwrap().is_some()
    }

    fn marks(&self, chunk: &[u8]) -> bool {
        let marker = self.marker.lock().unwrap();
        marker
            .as_deref()
            .is_some_and(|m| chunk.windows(m.len()).any(|w| w == m))
    }
}
