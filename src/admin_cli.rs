//! `nodes-control admin ...`: the admin API from a terminal. Each command
//! is one request; the answer is printed as indented JSON, an error answer
//! as its sentence on stderr with exit code 1. A node added that did not
//! answer is registered down: the answer is printed, and a warning beside
//! it on stderr.

use std::time::Duration;

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http::{header, Method, Request};
use http_body_util::Full;
use serde_json::Value;

use crate::nodes::client::TlsError;
use crate::nodes::{NodeCallError, NodeClient};

#[derive(Debug, Parser)]
#[command(
    name = "nodes-control admin",
    about = "Calls the admin API of a running balancer"
)]
pub struct AdminCli {
    /// The balancer to talk to.
    #[arg(
        long,
        env = "NODES_CONTROL_URL",
        default_value = "http://127.0.0.1:8000"
    )]
    pub url: String,
    /// The balancer's admin token.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub token: String,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Lists the nodes: address, name, weight, state, sessions, in-flight.
    Nodes,
    /// Adds a node (or re-weights a known one).
    Add {
        /// `http(s)://host[:port]`.
        address: String,
        /// Its name in answers and metrics (default: the name it reports).
        #[arg(long)]
        name: Option<String>,
        /// Its weight, 1..1000.
        #[arg(long)]
        weight: Option<u32>,
    },
    /// Removes a node now, archiving its sessions.
    Remove { address: String },
    /// Drains a node: no new sessions; removed when empty or at the deadline.
    Drain {
        address: String,
        /// Remove it at the latest this many seconds from now.
        #[arg(long)]
        deadline_secs: Option<u64>,
    },
    /// The audit log, newest first.
    Events {
        /// Only this node's events.
        #[arg(long)]
        node: Option<String>,
        /// Only events at or after this RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// At most this many (1..1000).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// Where a session lives, what is archived for it, its placements.
    Session { id: String },
}

/// Why a command did not print an answer.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{url} did not answer: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: NodeCallError,
    },
    #[error("--url {0:?} is not a URL")]
    Url(String),
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The balancer's own error, as it said it.
    #[error("{status}: {message}")]
    Refused { status: u16, message: String },
}

impl AdminCli {
    /// Sends the command: the answer as indented JSON, and a warning for
    /// stderr where the answer says something went only half well (a node
    /// added that did not answer, and was registered down).
    pub async fn run(&self) -> Result<(String, Option<String>), CliError> {
        let url = self.url(&self.command)?;
        let (method, body) = match &self.command {
            AdminCommand::Nodes | AdminCommand::Events { .. } | AdminCommand::Session { .. } => {
                (Method::GET, Bytes::new())
            }
            command => (Method::POST, Bytes::from(body(command).to_string())),
        };
        let request = Request::builder()
            .method(method)
            .uri(url.as_str())
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|_| CliError::Url(self.url.clone()))?;
        // The same client the balancer talks to its nodes with (TLS with
        // the Mozilla roots included); 30 s, as a removal may take a while.
        let client = NodeClient::new(Duration::from_secs(30), Duration::from_secs(5), None)?;
        let answer = client
            .call(request)
            .await
            .map_err(|source| CliError::Unreachable {
                url: self.url.clone(),
                source,
            })?;
        let status = answer.status.as_u16();
        let answer: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            let message = answer["error"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| answer.to_string());
            return Err(CliError::Refused { status, message });
        }
        let address = answer["address"].as_str().unwrap_or_default();
        let warning = match (answer["result"].as_str(), answer["state"] == "down") {
            (Some("added"), true) => Some(format!(
                "{address} was added but is down ({}); it is brought up once it answers its health checks",
                answer["reason"].as_str().unwrap_or("no reason given"),
            )),
            (Some("released"), true) => Some(format!(
                "{address} is no longer held down but did not answer yet; it is brought up once it answers its health checks"
            )),
            _ => None,
        };
        Ok((
            serde_json::to_string_pretty(&answer).unwrap_or_default(),
            warning,
        ))
    }

    /// The URL of the command's request, from `--url`.
    fn url(&self, command: &AdminCommand) -> Result<url::Url, CliError> {
        let invalid = || CliError::Url(self.url.clone());
        let mut url = url::Url::parse(&self.url).map_err(|_| invalid())?;
        let segments: &[&str] = match command {
            AdminCommand::Nodes => &["nodes"],
            AdminCommand::Events { .. } => &["events"],
            AdminCommand::Session { id } => &["sessions", id],
            _ => &["node"],
        };
        url.path_segments_mut()
            .map_err(|()| invalid())?
            .pop_if_empty()
            .extend(segments);
        if let AdminCommand::Events { node, since, limit } = command {
            let mut query = url.query_pairs_mut();
            if let Some(node) = node {
                query.append_pair("node", node);
            }
            if let Some(since) = since {
                query.append_pair("since", since);
            }
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
        }
        Ok(url)
    }
}

/// The `POST /node` body of a membership command.
fn body(command: &AdminCommand) -> Value {
    match command {
        AdminCommand::Add {
            address,
            name,
            weight,
        } => {
            serde_json::json!({ "action": "add", "address": address, "name": name, "weight": weight })
        }
        AdminCommand::Remove { address } => {
            serde_json::json!({ "action": "remove", "address": address })
        }
        AdminCommand::Drain {
            address,
            deadline_secs,
        } => {
            serde_json::json!({ "action": "drain", "address": address, "deadline_secs": deadline_secs })
        }
        _ => Value::Null,
    }
}
