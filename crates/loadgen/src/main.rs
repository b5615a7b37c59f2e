use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use loadgen::agents::AgentsOptions;
use loadgen::compare::CompareOptions;
use loadgen::sessions::SessionsOptions;

#[derive(Parser)]
#[command(
    name = "loadgen",
    version,
    about = "Load experiments against nodes-control"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Stateless GET /process/{req_id}?user_id=N: distribution per node.
    Agents(AgentsArgs),
    /// POST /press sessions: counts 1, 2, 3, ... and stickiness checked.
    Sessions(SessionsArgs),
    /// `agents` once per strategy, one comparison table.
    Compare(CompareArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// The balancer.
    #[arg(long, env = "LOADGEN_URL", default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Where the reports and charts go.
    #[arg(long, env = "LOADGEN_OUT_DIR", default_value = "loadgen-out")]
    out_dir: PathBuf,
    /// Per-request timeout, ms.
    #[arg(long, env = "LOADGEN_TIMEOUT_MS", default_value_t = 10_000)]
    timeout_ms: u64,
}

#[derive(Args)]
struct AgentsArgs {
    #[command(flatten)]
    common: Common,
    /// Requests to send in all.
    #[arg(long, env = "LOADGEN_REQUESTS", default_value_t = 2000)]
    requests: usize,
    /// Distinct users (`user_id`s) the requests are spread over.
    #[arg(long, env = "LOADGEN_USERS", default_value_t = 200)]
    users: usize,
    /// Requests in flight at once.
    #[arg(long, env = "LOADGEN_CONCURRENCY", default_value_t = 10)]
    concurrency: usize,
    /// Names the output files.
    #[arg(long, default_value = "agents")]
    label: String,
    /// Seed of the shuffled user order.
    #[arg(long, env = "LOADGEN_SEED", default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
struct SessionsArgs {
    #[command(flatten)]
    common: Common,
    /// Sessions to press.
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    /// Presses per session.
    #[arg(long, default_value_t = 20)]
    presses: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Names the output files.
    #[arg(long, default_value = "sessions")]
    label: String,
}

#[derive(Args)]
struct CompareArgs {
    #[command(flatten)]
    common: Common,
    /// Strategies to compare, as STRATEGY takes them: rr, wrr, lc, ch,
    /// maglev, hrw, key-hash, ip-hash, random, p2c.
    #[arg(long, value_delimiter = ',', default_value = "rr,ch,p2c", value_parser = strategy_name)]
    strategies: Vec<String>,
    /// Balancers already running per strategy: rr=http://..,ch=http://..
    /// (others are started here with STRATEGY set).
    #[arg(long, value_delimiter = ',')]
    urls: Vec<String>,
    /// Nodes for started balancers (default: GET /nodes of --url).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    /// Admin token, to read the nodes from `GET /nodes` of --url.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The nodes-control binary to start (default: beside loadgen, or PATH).
    #[arg(long, env = "NODES_CONTROL_BIN")]
    balancer_bin: Option<PathBuf>,
    /// Requests to send in all.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Distinct users (`user_id`s) the requests are spread over.
    #[arg(long, default_value_t = 200)]
    users: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Seed of the shuffled user order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// A strategy name `STRATEGY` accepts, refused at parse time otherwise.
fn strategy_name(name: &str) -> Result<String, balancing::UnknownStrategy> {
    name.parse::<balancing::StrategyKind>()
        .map(|_| name.trim().to_owned())
}

fn agents_options(
    common: &Common,
    requests: usize,
    users: usize,
    concurrency: usize,
    label: String,
    seed: u64,
) -> AgentsOptions {
    AgentsOptions {
        url: common.url.clone(),
        requests,
        users,
        concurrency,
        label,
        out_dir: common.out_dir.clone(),
        seed,
        timeout: Duration::from_millis(common.timeout_ms),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    dotenvy::dotenv().ok();
    let cli = Cli::parse();
    let result = match cli.scenario {
        Scenario::Agents(a) => {
            let opts = agents_options(
                &a.common,
                a.requests,
                a.users,
                a.concurrency,
                a.label,
                a.seed,
            );
            loadgen::agents::run(&opts)
                .await
                .map(|o| (vec![o.report], o.files))
        }
        Scenario::Sessions(s) => {
            let opts = SessionsOptions {
                url: s.common.url.clone(),
                sessions: s.sessions,
                presses: s.presses,
                concurrency: s.concurrency,
                label: s.label,
                out_dir: s.common.out_dir.clone(),
                timeout: Duration::from_millis(s.common.timeout_ms),
            };
            loadgen::sessions::run(&opts)
                .await
                .map(|o| (vec![o.report], o.files))
        }
        Scenario::Compare(c) => {
            let agents = agents_options(
                &c.common,
                c.requests,
                c.users,
                c.concurrency,
                String::new(),
                c.seed,
            );
            let urls = c
                .urls
                .iter()
                .filter_map(|u| u.split_once('=').map(|(s, u)| (s.to_owned(), u.to_owned())))
                .collect();
            let opts = CompareOptions {
                strategies: c.strategies,
                key_prefix: format!("loadgen-{}-", uuid::Uuid::new_v4().simple()),
                urls,
                url: c.common.url.clone(),
                admin_token: c.admin_token,
                nodes: c.nodes,
                balancer_bin: c.balancer_bin,
                balancer_env: Vec::new(),
                agents,
            };
            loadgen::compare::run(&opts)
                .await
                .map(|(cmp, files)| (cmp.strategies, files))
        }
    };
    match result {
        Ok((reports, files)) => {
            for report in &reports {
                print!("{}", report.summary());
            }
            for file in &files {
                println!("wrote {}", file.display());
            }
            let failed = reports.iter().find(|r| r.errors > 0);
            match failed {
                Some(r) => {
                    eprintln!(
                        "error: {} of {} requests failed; first: {}",
                        r.errors,
                        r.requests,
                        r.error_samples.first().map(String::as_str).unwrap_or("?")
                    );
                    ExitCode::from(1)
                }
                None => ExitCode::SUCCESS,
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
