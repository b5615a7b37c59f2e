//! A node's pool of keep-alive connections for presses (plain `http://`
//! nodes), speaking HTTP/1.1 itself: a press is one write of a request
//! rendered once per node and one read of the answer, parsed by
//! [`wire`](super::wire). The hyper client this replaces drove every
//! exchange through its dispatcher and a channel; the profile of the press
//! path put about a tenth of the balancer's time there.
//!
//! A pooled connection the node closed meanwhile is noticed when it is
//! taken (it has become readable while idle); a request whose write fails
//! on a pooled connection is retried once on a fresh one (nothing of it was
//! sent). Anything else is the node's failure, as before: a press it may
//! have counted is never sent twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{parse_answer, Parsed, Read};

/// Most idle connections kept per node.
const MAX_IDLE: usize = 256;
/// Free room a read of an answer is given.
const READ_ROOM: usize = 512;

struct Conn {
    stream: TcpStream,
    /// Bytes read past the last answer (none from a well-behaved node).
    buf: BytesMut,
}

pub struct PressPool {
    /// `host:port` of the node.
    authority: String,
    /// The request line and headers up to `content-length: `.
    head: Vec<u8>,
    connect_timeout: Duration,
    /// Idle connections. A std mutex: held only to push or pop.
    idle: Mutex<Vec<Conn>>,
    /// Connections carrying a press now: what the node has accepted.
    busy: AtomicUsize,
}

/// Counts a connection as carrying a press until dropped.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub enum PoolError {
    /// No connection within the connect timeout: nothing was sent. From a
    /// node that goes on answering others, a sign of a full listen backlog.
    ConnectTimeout,
    /// No connection (refused, unreachable): nothing was sent.
    Connect(String),
    /// The request may have reached the node.
    Exchange(String),
}

impl PoolError {
    fn sent(error: impl Into<String>) -> Self {
        PoolError::Exchange(error.into())
    }
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::ConnectTimeout => f.write_str("connect timed out"),
            PoolError::Connect(e) | PoolError::Exchange(e) => f.write_str(e),
        }
    }
}

impl PressPool {
    /// `path` is the node's press path, `host` its `Host` header.
    pub fn new(authority: String, host: &str, path: &str, connect_timeout: Duration) -> Self {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: "
        )
        .into_bytes();
        Self {
            authority,
            head,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            busy: AtomicUsize::new(0),
        }
    }

    /// Connections carrying a press now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Posts `body` and reads the whole answer (body up to `limit` bytes).
    /// `sent` turns true once the whole request is written: until then the
    /// node cannot have acted on it.
    pub async fn post(
        &self,
        body: &[u8],
        limit: usize,
        sent: &std::sync::atomic::AtomicBool,
    ) -> Result<Parsed, PoolError> {
        let mut request = Vec::with_capacity(self.head.len() + 8 + body.len());
        request.extend_from_slice(&self.head);
        request.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(body);
        let mut conn = match self.checkout() {
            Some(mut pooled) => match pooled.stream.write_all(&request).await {
                Ok(()) => pooled,
                // The node closed it first: nothing of the request left.
                Err(_) => self.fresh(&request).await?,
            },
            None => self.fresh(&request).await?,
        };
        sent.store(true, Ordering::Release);
        self.busy.fetch_add(1, Ordering::Relaxed);
        let _busy = Busy(&self.busy);
        let answer = read_answer(&mut conn, limit).await?;
        if answer.reusable {
            self.checkin(conn);
        }
        Ok(answer)
    }

    /// A new connection with the request written on it.
    async fn fresh(&self, request: &[u8]) -> Result<Conn, PoolError> {
        let mut conn = self.connect().await?;
        conn.stream
            .write_all(request)
            .await
            .map_err(|e| PoolError::Connect(format!("sending the press: {e}")))?;
        Ok(conn)
    }

    /// An idle connection the node has not closed, if any. Each is probed
    /// with a read that must find nothing: one the node closed (or sent
    /// what it should not have) is dropped. The reactor's readiness alone
    /// may not have seen a close that just arrived, and a press written on
    /// a closed connection fails after it was sent: its outcome unknown, a
    /// 504 (model.md), where a fresh connection would serve it.
    fn checkout(&self) -> Option<Conn> {
        loop {
            let conn = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
            let mut probe = [0u8; 1];
            if conn.buf.is_empty()
                && matches!(conn.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                return Some(conn);
            }
        }
    }

    fn checkin(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, PoolError> {
        let stream =
            tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.authority))
                .await
                .map_err(|_| PoolError::ConnectTimeout)?
                .map_err(|e| PoolError::Connect(format!("connect: {e}")))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(512),
        })
    }
}

/// Reads until `buf` holds a whole answer; what follows it stays in `buf`.
async fn read_answer(conn: &mut Conn, limit: usize) -> Result<Parsed, PoolError> {
    let mut eof = false;
    loop {
        match parse_answer(&conn.buf, limit, eof).map_err(PoolError::sent)? {
            Read::Done(parsed) => {
                let _ = conn.buf.split_to(parsed.len);
                return Ok(parsed);
            }
            Read::Partial | Read::UntilClose => {}
        }
        if conn.buf.len() > 64 * 1024 {
            return Err(PoolError::sent("the node's answer has no end"));
        }
        // Room for a whole answer: what is left of the buffer after the
        // answers before it may be a few bytes, and an answer read in two
        // parts costs a second `recv` (a quarter of the answers, measured).
        // Reserving on an empty buffer reuses its allocation.
        conn.buf.reserve(READ_ROOM);
        let n = conn
            .stream
            .read_buf(&mut conn.buf)
            .await
            .map_err(|e| PoolError::sent(format!("reading the answer: {e}")))?;
        eof = n == 0;
    }
}

impl std::fmt::Debug for PressPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PressPool")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}
