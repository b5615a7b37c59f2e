//! A node's pool of HTTP/1 connections for presses (plain `http://` nodes).
//!
//! Why not the general pooled client: it drives every connection from a
//! task of its own, so each press hops from the request's task to that task
//! and back. Here the request's own task polls the connection while it
//! waits for the answer (hyper's `client::conn::http1`, so the HTTP is still
//! hyper's), and the connection goes back to the pool idle.
//!
//! A pooled connection the node closed meanwhile is noticed when it is
//! taken (its pending end of stream is read first), and a request hyper
//! reports as never sent is retried once on a fresh connection; anything
//! else is the node's failure, as before (a press it may have counted is
//! never sent twice).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type Conn = (
    SendRequest<Full<Bytes>>,
    Connection<TokioIo<TcpStream>, Full<Bytes>>,
);

/// Most idle connections kept per node.
const MAX_IDLE: usize = 256;

pub struct PressPool {
    /// `host:port` of the node.
    authority: String,
    connect_timeout: Duration,
    /// Idle connections. A std mutex: held only to push or pop.
    idle: Mutex<Vec<Conn>>,
}

/// Why an exchange failed, and whether the request surely never left.
pub struct PoolError {
    pub error: String,
    pub not_sent: bool,
}

impl PressPool {
    pub fn new(authority: String, connect_timeout: Duration) -> Self {
        Self {
            authority,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// One request (made by `request`) and its whole answer, read with
    /// `read_body` (which gets the response and must consume its body).
    pub async fn exchange<T, F, Fut>(
        &self,
        request: impl Fn() -> Request<Full<Bytes>>,
        read_body: F,
    ) -> Result<T, PoolError>
    where
        F: Fn(Response<Incoming>) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        match self.checkout() {
            Some(conn) => match self.exchange_on(conn, request(), &read_body).await {
                // The node closed it first: the request never left.
                Err(error) if error.not_sent => {
                    let fresh = self.connect().await?;
                    self.exchange_on(fresh, request(), &read_body).await
                }
                other => other,
            },
            None => {
                let fresh = self.connect().await?;
                self.exchange_on(fresh, request(), &read_body).await
            }
        }
    }

    async fn exchange_on<T, F, Fut>(
        &self,
        (mut sender, mut conn): Conn,
        request: Request<Full<Bytes>>,
        read_body: &F,
    ) -> Result<T, PoolError>
    where
        F: Fn(Response<Incoming>) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let sending = &mut sender;
        let exchange = async move {
            sending.ready().await.map_err(|e| PoolError {
                not_sent: true,
                error: e.to_string(),
            })?;
            let response = sending.send_request(request).await.map_err(|e| PoolError {
                not_sent: e.is_canceled(),
                error: e.to_string(),
            })?;
            read_body(response).await.map_err(|error| PoolError {
                not_sent: false,
                error,
            })
        };
        // The connection is driven right here, beside the exchange.
        let result = {
            tokio::pin!(exchange);
            tokio::select! {
                biased;
                result = &mut exchange => result,
                ended = &mut conn => Err(PoolError {
                    not_sent: false,
                    error: match ended {
                        Ok(()) => "the node closed the connection".to_owned(),
                        Err(e) => e.to_string(),
                    },
                }),
            }
        };
        if result.is_ok() && !sender.is_closed() {
            self.checkin((sender, conn));
        }
        result
    }

    /// An idle connection the node has not closed, if any.
    fn checkout(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((sender, mut conn)) = idle.pop() {
            // Reads what arrived while it was idle (an end of stream).
            if (&mut conn).now_or_never().is_some() || sender.is_closed() {
                continue;
            }
            return Some((sender, conn));
        }
        None
    }

    fn checkin(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, PoolError> {
        let fail = |error: String| PoolError {
            not_sent: true,
            error,
        };
        let stream =
            tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.authority))
                .await
                .map_err(|_| fail("connect timed out".to_owned()))?
                .map_err(|e| fail(format!("connect: {e}")))?;
        let _ = stream.set_nodelay(true);
        http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(e.to_string()))
    }
}

impl std::fmt::Debug for PressPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PressPool")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}
