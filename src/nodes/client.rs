//! Talking to nodes: one hyper client with one TLS set-up (the Mozilla
//! roots and `NODE_CA_FILE`) for every call (presses to `https://` nodes,
//! `/process`, `/clean`, health checks), never following a redirect. The
//! one exception is the hot path: presses to plain `http://` nodes go
//! through each node's own connection pool (`pool.rs`, reading answers
//! with `wire.rs`), kept because it measured faster: 1.35x the presses of
//! hyper's client at 0.71x its p99 (docs/benchmarks.md). A node needs to answer `/press` and `/clean` only:
//! everything else it offers (a health path, an instance id, clean tokens,
//! selective cleans) is detected ([`NodeClient::detect`]) and never
//! required.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::answer::clicks_of;
use super::error::{error_chain, timed_out, NodeCallError};
use super::link::Link;
use super::record::Offers;

static JSON: http::HeaderValue = http::HeaderValue::from_static("application/json");

/// Largest node answer we read: `You clicked 2147483647 times` is 28 bytes.
const MAX_PRESS_BODY: usize = 1024;
/// Largest `/process` answer passed through.
const MAX_PROCESS_BODY: usize = 1 << 20;
/// Largest `/clean` answer read: the ids a selective clean names (a clean
/// names at most `MAX_PER_CLEAN` sessions of at most 255 bytes each).
const MAX_CLEAN_BODY: usize = 16 << 20;
/// Largest health answer read (a name, an instance id, features).
const MAX_HEALTH_BODY: usize = 64 << 10;

/// The TLS set-up towards nodes could not be built.
#[derive(Debug, thiserror::Error)]
#[error("TLS towards nodes: {0}")]
pub struct TlsError(String);

/// A node's reply on the pooled client.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: Option<http::HeaderValue>,
    pub body: Bytes,
}

/// What a node's health check says of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeHealth {
    pub name: Option<String>,
    /// Changes when the node restarts (and so lost its counts).
    pub instance: Option<String>,
    /// What the node offers beyond the task's API, as far as the check
    /// tells (a TCP check tells nothing).
    pub offers: Offers,
}

/// How the health check tells that a node's process serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// `GET path`: any answer below 500 is healthy.
    Http { path: String },
    /// A TCP connect.
    Tcp,
    /// Serving nodes are not probed (only failed presses count); a down
    /// node is tried with a TCP connect.
    Off,
}

/// What a `/clean` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanOutcome {
    /// The node forgot every session (`OK`, or a node that ignores `session_ids`).
    All,
    /// The node cleaned only these sessions (`{"cleaned":[..]}`).
    Only(Vec<String>),
}

#[derive(Clone)]
pub struct NodeClient {
    hot: HotClient,
    timeout: Duration,
    connect_timeout: Duration,
    probe: Probe,
}

impl NodeClient {
    /// Speaks HTTP, and HTTPS to nodes whose certificates chain to the
    /// Mozilla roots or to one of `extra_roots` (PEM, `NODE_CA_FILE`).
    pub fn new(
        timeout: Duration,
        connect_timeout: Duration,
        extra_roots: Option<&[u8]>,
    ) -> Result<Self, TlsError> {
        // A connect is part of a press: never longer than the press may take.
        let connect_timeout = connect_timeout.min(timeout);
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let extra = match extra_roots {
            Some(pem) => CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsError(format!("reading NODE_CA_FILE: {e}")))?,
            None => Vec::new(),
        };
        for cert in &extra {
            roots
                .add(cert.clone())
                .map_err(|e| TlsError(format!("NODE_CA_FILE holds a bad certificate: {e}")))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // hyper's client follows no redirect: a node that redirects its
        // /clean to another node must not make us wipe that one.
        let hot = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(256)
            .build(connector);
        Ok(Self {
            hot,
            timeout,
            connect_timeout,
            probe: Probe::Http {
                path: "/health".to_owned(),
            },
        })
    }

    /// Checks nodes with `probe` (`HEALTH_CHECK`, `HEALTH_CHECK_PATH`).
    pub fn with_probe(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    pub fn probe_kind(&self) -> &Probe {
        &self.probe
    }

    /// One press to a node, as a future that owns what it needs and reads
    /// the node's count. The
    /// caller bounds it ([`timeout`](Self::timeout)); the connect is bounded
    /// by `NODE_CONNECT_TIMEOUT_MS`. `epoch`: the fencing epoch the mapping
    /// was read under, sent only to a node that enforces it. `sent` turns
    /// true once the request may have reached the node.
    pub fn press(
        &self,
        link: &Arc<Link>,
        session_id: &str,
        epoch: Option<u64>,
        sent: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Exchange, NodeCallError> {
        #[derive(serde::Serialize)]
        struct PressBody<'a> {
            session_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            epoch: Option<u64>,
        }
        let body = Bytes::from(
            serde_json::to_vec(&PressBody { session_id, epoch })
                .map_err(|e| NodeCallError::Request(e.to_string()))?,
        );
        if link.press_pool(self.connect_timeout).is_some() {
            // The hot path: the node's own pool; nothing cloned but the link.
            let (link, connect_timeout) = (link.clone(), self.connect_timeout);
            return Ok(Box::pin(async move {
                // Always there (checked above; a node's scheme never changes).
                let pool = link
                    .press_pool(connect_timeout)
                    .ok_or_else(|| NodeCallError::Request("no press pool".to_owned()))?;
                let parsed =
                    pool.post(&body, MAX_PRESS_BODY, &sent)
                        .await
                        .map_err(|e| match e {
                            super::pool::PoolError::ConnectTimeout => NodeCallError::ConnectTimeout,
                            super::pool::PoolError::Connect(e) => NodeCallError::Unsent(e),
                            super::pool::PoolError::Exchange(e) => NodeCallError::Transport(e),
                        })?;
                let status = StatusCode::from_u16(parsed.status)
                    .map_err(|_| NodeCallError::Body(format!("status {}", parsed.status)))?;
                clicks_of(status, &parsed.body)
            }));
        }
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = link.press_uri.clone();
        request
            .headers_mut()
            .insert(header::CONTENT_TYPE, JSON.clone());
        let hot = self.hot.clone();
        // hyper's client does not say when the request went out.
        sent.store(true, std::sync::atomic::Ordering::Release);
        Ok(Box::pin(async move {
            let answer = exchange(&hot, request, MAX_PRESS_BODY).await?;
            clicks_of(answer.status, &answer.body)
        }))
    }

    /// `NODE_TIMEOUT_MS`: how long a node may take to answer a call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET {address}{path_and_query}` through the pooled client; any
    /// answer but a 5xx or a redirect (a node that redirects misbehaves).
    pub async fn get(&self, address: &str, path_and_query: &str) -> Result<Reply, NodeCallError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(node_uri(address, path_and_query)?)
            .body(Full::new(Bytes::new()))
            .map_err(|e| NodeCallError::Request(e.to_string()))?;
        let answer = self.send(request, MAX_PROCESS_BODY).await?;
        if answer.status.is_server_error() || answer.status.is_redirection() {
            return Err(NodeCallError::Status(answer.status));
        }
        Ok(answer)
    }

    /// One request on the pooled client, whatever it answers, body read up
    /// to 1 MiB, within the client's timeout: the admin CLI's, on the stack
    /// the balancer talks to its nodes on.
    pub async fn call(&self, request: Request<Full<Bytes>>) -> Result<Reply, NodeCallError> {
        self.send(request, 1 << 20).await
    }

    /// One request on the pooled client, within `NODE_TIMEOUT_MS` (an
    /// answer there when the timer fires is taken: a clean that the node
    /// answered is settled, its node not declared down).
    async fn send(
        &self,
        request: Request<Full<Bytes>>,
        limit: usize,
    ) -> Result<Reply, NodeCallError> {
        super::deadline::within(self.timeout, exchange(&self.hot, request, limit)).await
    }

    /// `POST /clean`; with `session_ids`, a node that supports it cleans
    /// only those, any other node cleans everything. `generation` is the
    /// clean token a node that carries it writes into the archive rows.
    pub async fn clean(
        &self,
        address: &str,
        archive: bool,
        session_ids: Option<&[String]>,
        generation: Option<i64>,
    ) -> Result<CleanOutcome, NodeCallError> {
        let mut body = serde_json::json!({ "archive": archive });
        if let Some(ids) = session_ids {
            body["session_ids"] = serde_json::json!(ids);
        }
        if let Some(generation) = generation {
            body["generation"] = serde_json::json!(generation);
        }
        let request = Request::builder()
            .method(Method::POST)
            .uri(node_uri(address, "/clean")?)
            .header(header::CONTENT_TYPE, JSON.clone())
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| NodeCallError::Request(e.to_string()))?;
        let answer = self.send(request, MAX_CLEAN_BODY).await?;
        if !answer.status.is_success() {
            return Err(NodeCallError::Status(answer.status));
        }
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&answer.body) {
            if let Some(ids) = value.get("cleaned").and_then(|c| c.as_array()) {
                return Ok(CleanOutcome::Only(
                    ids.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect(),
                ));
            }
        }
        Ok(CleanOutcome::All)
    }

    /// One health check, as `HEALTH_CHECK` says (a down node under `off`:
    /// a connect). Any HTTP answer below 500 proves the process serves.
    pub async fn check(&self, address: &str, down: bool) -> Result<NodeHealth, NodeCallError> {
        match &self.probe {
            Probe::Http { path } => self.get_health(address, path).await,
            Probe::Tcp => self.connect(address).await.map(|()| NodeHealth::default()),
            Probe::Off if down => self.connect(address).await.map(|()| NodeHealth::default()),
            Probe::Off => Ok(NodeHealth::default()),
        }
    }

    /// The first check of a node (added, or recovering): the configured
    /// check (under `off` a connect), then what the node offers.
    pub async fn first_check(&self, address: &str) -> Result<NodeHealth, NodeCallError> {
        let checked = self.check(address, true).await?;
        match &self.probe {
            Probe::Http { .. } => Ok(checked),
            Probe::Tcp | Probe::Off => Ok(self.detect(address).await.unwrap_or_default()),
        }
    }

    /// Wipes a node (`/clean archive=false`) and tells whether it cleans
    /// selectively: asked to clean no session at all, a selective node
    /// says so (`{"cleaned":[]}`), any other cleans everything or refuses.
    /// The full wipe follows in every case. `token`: the wipe's clean
    /// token, a fencing node's new floor (no press read before it counts).
    pub async fn wipe(&self, address: &str, token: Option<i64>) -> Result<bool, NodeCallError> {
        let selective = matches!(
            self.clean(address, false, Some(&[]), None).await,
            Ok(CleanOutcome::Only(_))
        );
        self.clean(address, false, None, token).await?;
        Ok(selective)
    }

    /// What a node offers beyond `/press` and `/clean`, read from its
    /// health path whatever `HEALTH_CHECK` is (a node without one offers
    /// nothing more). `Err` only when the node did not answer at all.
    pub async fn detect(&self, address: &str) -> Result<NodeHealth, NodeCallError> {
        let path = match &self.probe {
            Probe::Http { path } => path.as_str(),
            Probe::Tcp | Probe::Off => "/health",
        };
        self.get_health(address, path).await
    }

    /// `GET {address}{path}`: below 500 (or 501) is healthy; a 2xx JSON answer may
    /// say the node's name, its instance id and its `features`.
    async fn get_health(&self, address: &str, path: &str) -> Result<NodeHealth, NodeCallError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(node_uri(address, path)?)
            .body(Full::new(Bytes::new()))
            .map_err(|e| NodeCallError::Request(e.to_string()))?;
        let answer = self.send(request, MAX_HEALTH_BODY).await?;
        let status = answer.status;
        // 501: a server with no GET at all (Python's http.server without
        // do_GET) says so; it serves all the same.
        if status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED {
            return Err(NodeCallError::Status(status));
        }
        if !status.is_success() {
            return Ok(NodeHealth::default());
        }
        let value = serde_json::from_slice::<serde_json::Value>(&answer.body).ok();
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(name)?.as_str().map(str::to_owned))
                .filter(|n| !n.is_empty() && n.len() <= 255 && !n.chars().any(char::is_control))
        };
        let features: Vec<&str> = value
            .as_ref()
            .and_then(|v| v.get("features")?.as_array())
            .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        let instance = field("instance");
        Ok(NodeHealth {
            name: field("name"),
            offers: Offers {
                health: true,
                instance_id: instance.is_some(),
                clean_tokens: features.contains(&"clean_tokens"),
                selective_clean: features.contains(&"session_ids"),
                fencing: features.contains(&"fencing"),
            },
            instance,
        })
    }

    /// A TCP connect to the node's host and port, within the connect timeout.
    async fn connect(&self, address: &str) -> Result<(), NodeCallError> {
        let uri: http::Uri = address
            .parse()
            .map_err(|e: http::uri::InvalidUri| NodeCallError::Request(e.to_string()))?;
        let host = uri.host().unwrap_or_default();
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        let host = host.trim_start_matches('[').trim_end_matches(']');
        tokio::time::timeout(
            self.connect_timeout,
            tokio::net::TcpStream::connect((host, port)),
        )
        .await
        .map_err(|_| NodeCallError::ConnectTimeout)?
        .map(drop)
        .map_err(|e| NodeCallError::Unsent(format!("connect: {e}")))
    }
}

/// A press on its way to a node (see [`NodeClient::press`]).
pub type Exchange =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<i64, NodeCallError>> + Send>>;

type HotClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One request on the pooled hyper client, body read up to `limit` bytes.
async fn exchange(
    hot: &HotClient,
    request: Request<Full<Bytes>>,
    limit: usize,
) -> Result<Reply, NodeCallError> {
    let response = hot.request(request).await.map_err(|e| {
        if e.is_connect() && timed_out(&e) {
            NodeCallError::ConnectTimeout
        } else if e.is_connect() {
            NodeCallError::Unsent(error_chain(&e))
        } else {
            NodeCallError::Transport(error_chain(&e))
        }
    })?;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let body = Limited::new(response.into_body(), limit)
        .collect()
        .await
        .map_err(|e| NodeCallError::Transport(e.to_string()))?
        .to_bytes();
    Ok(Reply {
        status,
        content_type,
        body,
    })
}

/// `{address}{path}` as a request target.
fn node_uri(address: &str, path: &str) -> Result<http::Uri, NodeCallError> {
    format!("{address}{path}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| NodeCallError::Request(e.to_string()))
}
