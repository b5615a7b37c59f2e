//! `nodes-control admin ...`: the admin API from a terminal. Each command
//! is one request; the answer is printed as indented JSON, an error answer
//! as its sentence on stderr with exit code 1.

use clap::{Parser, Subcommand};
use serde_json::Value;

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
        source: reqwest::Error,
    },
    #[error("--url {0:?} is not a URL")]
    Url(String),
    /// The balancer's own error, as it said it.
    #[error("{status}: {message}")]
    Refused { status: u16, message: String },
}

impl AdminCli {
    /// Sends the command; the answer as indented JSON.
    pub async fn run(&self) -> Result<String, CliError> {
        let base = url::Url::parse(&self.url).map_err(|_| CliError::Url(self.url.clone()))?;
        let at = |segments: &[&str]| {
            let mut url = base.clone();
            url.path_segments_mut()
                .map_err(|()| CliError::Url(self.url.clone()))?
                .pop_if_empty()
                .extend(segments);
            Ok::<_, CliError>(url)
        };
        let http = reqwest::Client::new();
        let request = match &self.command {
            AdminCommand::Nodes => http.get(at(&["nodes"])?),
            AdminCommand::Events { node, since, limit } => {
                let mut query: Vec<(&str, String)> = Vec::new();
                query.extend(node.clone().map(|n| ("node", n)));
                query.extend(since.clone().map(|s| ("since", s)));
                query.extend(limit.map(|l| ("limit", l.to_string())));
                http.get(at(&["events"])?).query(&query)
            }
            AdminCommand::Session { id } => http.get(at(&["sessions", id])?),
            command => http.post(at(&["node"])?).json(&body(command)),
        };
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|source| CliError::Unreachable {
                url: self.url.clone(),
                source,
            })?;
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            let message = answer["error"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| answer.to_string());
            return Err(CliError::Refused { status, message });
        }
        Ok(serde_json::to_string_pretty(&answer).unwrap_or_default())
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
