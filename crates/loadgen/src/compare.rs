//! The `compare` scenario: `agents` once per strategy, against a balancer
//! given for it (`--urls rr=http://..`) or one started for it here with
//! `STRATEGY` set, then one comparison table.
//!
//! A started balancer registers the nodes, and registering a node wipes its
//! sessions (`/clean archive=false`): point `compare` at nodes of its own,
//! as `make compare` does, not at a cluster serving users.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::agents::{self, AgentsOptions};
use crate::report::Report;

#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Strategy names as `STRATEGY` takes them; all are checked before
    /// anything starts.
    pub strategies: Vec<String>,
    /// Redis key prefix of the balancers started here (one per strategy,
    /// `{key_prefix}{strategy}:`); their keys are deleted when each stops.
    pub key_prefix: String,
    /// Balancers already running, by strategy.
    pub urls: Vec<(String, String)>,
    /// Where the started balancers' nodes come from: this balancer's `GET /nodes`...
    pub url: String,
    pub admin_token: Option<String>,
    /// ...or this list.
    pub nodes: Vec<String>,
    pub balancer_bin: Option<PathBuf>,
    /// Extra environment of the started balancers (they inherit this
    /// process's, `.env` included).
    pub balancer_env: Vec<(String, String)>,
    pub agents: AgentsOptions,
}

#[derive(Debug, Serialize)]
pub struct Comparison {
    pub strategies: Vec<Report>,
}

pub async fn run(opts: &CompareOptions) -> anyhow::Result<(Comparison, Vec<PathBuf>)> {
    // A typo in the last name must not cost the runs before it: starting a
    // balancer registers, and so wipes, the nodes.
    for strategy in &opts.strategies {
        strategy.parse::<balancing::StrategyKind>()?;
    }
    let mut reports = Vec::new();
    let mut files = Vec::new();
    for strategy in &opts.strategies {
        let mut agents = opts.agents.clone();
        agents.label = strategy.clone();
        let given = opts
            .urls
            .iter()
            .find(|(s, _)| s == strategy)
            .map(|(_, u)| u.clone());
        let outputs = match given {
            Some(url) => {
                agents.url = url;
                agents::run(&agents).await?
            }
            None => {
                let balancer = Started::spawn(opts, strategy).await?;
                agents.url = balancer.url.clone();
                let outputs = agents::run(&agents).await;
                balancer.stop().await;
                outputs?
            }
        };
        eprint!("{}", outputs.report.summary());
        files.extend(outputs.files);
        reports.push(outputs.report);
    }
    let comparison = Comparison {
        strategies: reports,
    };
    files.extend(write(&comparison, &opts.agents.out_dir)?);
    Ok((comparison, files))
}

fn write(comparison: &Comparison, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("compare.json");
    std::fs::write(&json, serde_json::to_string_pretty(comparison)?)?;
    let md = dir.join("compare.md");
    std::fs::write(&md, markdown(comparison))?;
    let chart = dir.join("compare.png");
    crate::plot::comparison(&chart, &comparison.strategies)?;
    Ok(vec![json, md, chart])
}

pub fn markdown(comparison: &Comparison) -> String {
    let mut md = String::from(
        "# Strategy comparison\n\n| strategy | requests per node | std % of mean | max - min | stickiness | p50 | p99 | errors |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in &comparison.strategies {
        let per_node: Vec<String> = r.nodes.iter().map(|(n, c)| format!("{n}: {c}")).collect();
        md.push_str(&format!(
            "| {} | {} | {:.2} % | {} | {:.1} % | {:.2} ms | {:.2} ms | {} |\n",
            r.label,
            per_node.join(", "),
            r.std_pct,
            r.spread,
            r.stickiness * 100.0,
            r.p50_ms,
            r.p99_ms,
            r.errors
        ));
    }
    md.push_str("\n![requests per node and response times, by strategy](compare.png)\n\n");
    md.push_str("Each strategy's own charts and report: `distribution_<strategy>.png`, ");
    md.push_str("`latency_<strategy>.png`, `<strategy>.md`.\n");
    md
}

/// A balancer process started for one strategy; killed when dropped.
struct Started {
    child: tokio::process::Child,
    url: String,
    key_prefix: String,
}

impl Started {
    async fn spawn(opts: &CompareOptions, strategy: &str) -> anyhow::Result<Self> {
        let nodes = if opts.nodes.is_empty() {
            nodes_of(opts).await?
        } else {
            opts.nodes.clone()
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let bin = balancer_bin(opts.balancer_bin.as_deref());
        let key_prefix = format!("{}{strategy}:", opts.key_prefix);
        let balancer = Self {
            child: tokio::process::Command::new(&bin)
                .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
                .env("STRATEGY", strategy)
                .env("NODES", nodes.join(","))
                .env("REDIS_KEY_PREFIX", &key_prefix)
                .env(
                    "ADMIN_TOKEN",
                    opts.admin_token.clone().unwrap_or_else(|| "loadgen".into()),
                )
                .env("RUST_LOG", "warn")
                .envs(opts.balancer_env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| {
                    format!(
                        "starting the balancer {} (set --balancer-bin)",
                        bin.display()
                    )
                })?,
            url: format!("http://127.0.0.1:{port}"),
            key_prefix,
        };
        let client = reqwest::Client::new();
        for _ in 0..100 {
            if client
                .get(format!("{}/readyz", balancer.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(balancer);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let url = balancer.url.clone();
        balancer.stop().await;
        anyhow::bail!("the balancer started for {strategy} did not become ready at {url}")
    }

    /// Stops the balancer and deletes the Redis keys it wrote (it shares
    /// `REDIS_URL` with this process). A failure to delete is reported, not
    /// fatal: the run's figures stand.
    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        if let Err(error) = delete_keys(&self.key_prefix).await {
            eprintln!(
                "warning: could not delete the Redis keys {}*: {error:#}",
                self.key_prefix
            );
        }
    }
}

/// Deletes every Redis key under `prefix` (of the Redis in `REDIS_URL`).
pub async fn delete_keys(prefix: &str) -> anyhow::Result<usize> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut keys: Vec<String> = Vec::new();
    {
        let mut scan = conn.clone();
        let mut iter: redis::AsyncIter<String> =
            redis::AsyncCommands::scan_match(&mut scan, format!("{prefix}*")).await?;
        while let Some(key) = iter.next_item().await {
            keys.push(key?);
        }
    }
    for chunk in keys.chunks(1000) {
        redis::cmd("UNLINK")
            .arg(chunk)
            .query_async::<()>(&mut conn)
            .await?;
    }
    Ok(keys.len())
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn nodes_of(opts: &CompareOptions) -> anyhow::Result<Vec<String>> {
    let token = opts
        .admin_token
        .as_deref()
        .context("give --nodes, or --admin-token to read them from the balancer's GET /nodes")?;
    let nodes: Vec<serde_json::Value> = reqwest::Client::new()
        .get(format!("{}/nodes", opts.url.trim_end_matches('/')))
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| format!("reading the nodes of {}", opts.url))?
        .error_for_status()?
        .json()
        .await?;
    Ok(nodes
        .iter()
        .filter_map(|n| n["address"].as_str().map(str::to_owned))
        .collect())
}

/// `--balancer-bin`, else `nodes-control` beside this executable, else on PATH.
fn balancer_bin(given: Option<&Path>) -> PathBuf {
    if let Some(path) = given {
        return path.to_owned();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("nodes-control")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("nodes-control"))
}
