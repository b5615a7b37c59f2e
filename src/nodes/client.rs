//! Talking to nodes. Presses go through a pooled keep-alive hyper client
//! (the hot path; reqwest costs about a quarter of the throughput there);
//! admin calls (`/clean`, `/health`) go through reqwest.

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

use super::table::NodeEntry;

static JSON: http::HeaderValue = http::HeaderValue::from_static("application/json");

/// Largest node answer we read: `You clicked 2147483647 times` is 28 bytes.
const MAX_PRESS_BODY: usize = 1024;
/// Largest `/process` answer passed through.
const MAX_PROCESS_BODY: usize = 1 << 20;

/// Why a call to a node failed. Every variant but [`Request`](Self::Request)
/// is something the node did, and counts as a node failure (design.md §4.8,
/// §4.13).
#[derive(Debug, thiserror::Error)]
pub enum NodeCallError {
    /// The request could not be built: the client's doing, not the node's.
    #[error("the request to the node could not be built: {0}")]
    Request(String),
    #[error("cannot reach the node: {0}")]
    Transport(String),
    #[error("the node did not answer in time")]
    Timeout,
    #[error("the node answered HTTP {0}")]
    Status(StatusCode),
    #[error("the node answered an unexpected body: {0:?}")]
    Body(String),
}

impl NodeCallError {
    /// The node did not answer at all (as opposed to answering badly).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, NodeCallError::Transport(_) | NodeCallError::Timeout)
    }

    /// Whether the node is to blame (everything but a request we could not build).
    pub fn is_node_fault(&self) -> bool {
        !matches!(self, NodeCallError::Request(_))
    }
}

/// The TLS set-up towards nodes could not be built.
#[derive(Debug, thiserror::Error)]
#[error("TLS towards nodes: {0}")]
pub struct TlsError(String);

/// A node's answer on the pooled client.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<http::HeaderValue>,
    pub body: Bytes,
}

/// What a node's `/health` says of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeHealth {
    pub name: Option<String>,
    /// Changes when the node restarts (and so lost its counts).
    pub instance: Option<String>,
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
    hot: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    admin: reqwest::Client,
    timeout: Duration,
    connect_timeout: Duration,
}

impl NodeClient {
    /// Speaks HTTP, and HTTPS to nodes whose certificates chain to the
    /// Mozilla roots or to one of `extra_roots` (PEM, `NODE_CA_FILE`).
    pub fn new(
        timeout: Duration,
        connect_timeout: Duration,
        extra_roots: Option<&[u8]>,
    ) -> Result<Self, TlsError> {
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
        let hot = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(256)
            .build(connector);
        // Redirects are never followed: a node that redirects its /clean to
        // another node must not make us wipe that one.
        let mut admin = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect_timeout)
            .timeout(timeout);
        for cert in &extra {
            let cert = reqwest::Certificate::from_der(cert).map_err(|e| TlsError(e.to_string()))?;
            admin = admin.add_root_certificate(cert);
        }
        let admin = admin.build().map_err(|e| TlsError(e.to_string()))?;
        Ok(Self {
            hot,
            admin,
            timeout,
            connect_timeout,
        })
    }

    /// Forwards one press and returns the node's own count.
    pub async fn press(&self, node: &NodeEntry, session_id: &str) -> Result<i64, NodeCallError> {
        #[derive(serde::Serialize)]
        struct PressBody<'a> {
            session_id: &'a str,
        }
        let body = Bytes::from(
            serde_json::to_vec(&PressBody { session_id })
                .map_err(|e| NodeCallError::Request(e.to_string()))?,
        );
        let answer = match node.press_pool(self.connect_timeout) {
            Some(pool) => {
                let parsed = tokio::time::timeout(self.timeout, pool.post(&body, MAX_PRESS_BODY))
                    .await
                    .map_err(|_| NodeCallError::Timeout)?
                    .map_err(|e| NodeCallError::Transport(e.error))?;
                Answer {
                    status: StatusCode::from_u16(parsed.status)
                        .map_err(|_| NodeCallError::Body(format!("status {}", parsed.status)))?,
                    content_type: None,
                    body: Bytes::from(parsed.body),
                }
            }
            None => {
                let mut request = Request::new(Full::new(body));
                *request.method_mut() = Method::POST;
                *request.uri_mut() = node.press_uri.clone();
                request
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, JSON.clone());
                self.send(request, MAX_PRESS_BODY).await?
            }
        };
        if !answer.status.is_success() {
            return Err(NodeCallError::Status(answer.status));
        }
        parse_clicks(&answer.body)
    }

    /// `GET {address}{path_and_query}` through the pooled client; the
    /// node's answer comes back unless it is a 5xx or a redirect (never
    /// followed: a node that redirects is misbehaving).
    pub async fn get(&self, address: &str, path_and_query: &str) -> Result<Answer, NodeCallError> {
        let uri: http::Uri = format!("{address}{path_and_query}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| NodeCallError::Request(e.to_string()))?;
        let request = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .body(Full::new(Bytes::new()))
            .map_err(|e| NodeCallError::Request(e.to_string()))?;
        let answer = self.send(request, MAX_PROCESS_BODY).await?;
        if answer.status.is_server_error() || answer.status.is_redirection() {
            return Err(NodeCallError::Status(answer.status));
        }
        Ok(answer)
    }

    /// One request on the pooled client, body read up to `limit` bytes, all
    /// within `NODE_TIMEOUT_MS`.
    async fn send(
        &self,
        request: Request<Full<Bytes>>,
        limit: usize,
    ) -> Result<Answer, NodeCallError> {
        let call = async {
            let response = self
                .hot
                .request(request)
                .await
                .map_err(|e| NodeCallError::Transport(error_chain(&e)))?;
            let status = response.status();
            let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
            let body = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|e| NodeCallError::Transport(e.to_string()))?
                .to_bytes();
            Ok(Answer {
                status,
                content_type,
                body,
            })
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| NodeCallError::Timeout)?
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
        let response = self
            .admin
            .post(format!("{address}/clean"))
            .json(&body)
            .send()
            .await
            .map_err(reqwest_error)?;
        let status = response.status();
        let text = response.text().await.map_err(reqwest_error)?;
        if !status.is_success() {
            return Err(NodeCallError::Status(status));
        }
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
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

    /// `GET /health`: any 2xx within the timeout is healthy. Returns what
    /// the node says of itself (`{"name":..,"instance":..}`, as the
    /// reference node does), if anything.
    pub async fn health(&self, address: &str) -> Result<NodeHealth, NodeCallError> {
        let response = self
            .admin
            .get(format!("{address}/health"))
            .send()
            .await
            .map_err(reqwest_error)?;
        if !response.status().is_success() {
            return Err(NodeCallError::Status(response.status()));
        }
        let body = response.text().await.unwrap_or_default();
        let value = serde_json::from_str::<serde_json::Value>(&body).ok();
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(name)?.as_str().map(str::to_owned))
                .filter(|n| !n.is_empty() && n.len() <= 255 && !n.chars().any(char::is_control))
        };
        Ok(NodeHealth {
            name: field("name"),
            instance: field("instance"),
        })
    }
}

/// Reads `You clicked N times`.
pub fn parse_clicks(body: &[u8]) -> Result<i64, NodeCallError> {
    let text = std::str::from_utf8(body).map_err(|_| NodeCallError::Body("not UTF-8".into()))?;
    text.trim()
        .strip_prefix("You clicked ")
        .and_then(|rest| {
            rest.strip_suffix(" times")
                .or_else(|| rest.strip_suffix(" time"))
        })
        .and_then(|n| n.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .ok_or_else(|| NodeCallError::Body(text.chars().take(80).collect()))
}

fn reqwest_error(e: reqwest::Error) -> NodeCallError {
    if e.is_timeout() {
        NodeCallError::Timeout
    } else {
        NodeCallError::Transport(error_chain(&e))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_count_from_a_node_answer() {
        assert_eq!(parse_clicks(b"You clicked 5 times").unwrap(), 5);
        assert_eq!(parse_clicks(b"You clicked 1 time\n").unwrap(), 1);
        for bad in [
            &b"OK"[..],
            b"You clicked -1 times",
            b"You clicked many times",
            b"\xff",
        ] {
            assert!(parse_clicks(bad).is_err());
        }
    }
}
