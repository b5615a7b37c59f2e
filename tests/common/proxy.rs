//! A TCP proxy a test can cut and restore, to take Redis or Postgres away
//! from the balancer without stopping the servers other tests share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub struct TcpProxy {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    /// When set, bytes are no longer forwarded and nothing is closed: a
    /// silent partition, as a dropped route or a stuck firewall makes it.
    blackholed: Arc<AtomicBool>,
    /// Bytes sent towards the target so far.
    bytes_up: Arc<std::sync::atomic::AtomicU64>,
    connections: Arc<Mutex<CancellationToken>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let blackholed = Arc::new(AtomicBool::new(false));
        let bytes_up = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let connections = Arc::new(Mutex::new(CancellationToken::new()));
        let task = tokio::spawn({
            let open = open.clone();
            let blackholed = blackholed.clone();
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
                    let bytes_up = bytes_up.clone();
                    tokio::spawn(async move {
                        let Ok(outbound) = TcpStream::connect(target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = cancel.cancelled() => {}
                            _ = pipe(inbound, outbound, blackholed, bytes_up) => {}
                        }
                    });
                }
            }
        });
        Self {
            addr,
            open,
            blackholed,
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
/// retransmits would, and flow again once the partition heals).
async fn pipe(
    inbound: TcpStream,
    outbound: TcpStream,
    blackholed: Arc<AtomicBool>,
    bytes_up: Arc<std::sync::atomic::AtomicU64>,
) {
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let up = copy_unless(
        &mut in_read,
        &mut out_write,
        blackholed.clone(),
        Some(bytes_up),
    );
    let down = copy_unless(&mut out_read, &mut in_write, blackholed, None);
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

async fn copy_unless(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    blackholed: Arc<AtomicBool>,
    counted: Option<Arc<std::sync::atomic::AtomicU64>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while blackholed.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
        if let Some(counted) = &counted {
            counted.fetch_add(n as u64, Ordering::SeqCst);
        }
    }
}
