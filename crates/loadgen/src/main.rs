use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use loadgen::agents::AgentsOptions;
use loadgen::compare::CompareOptions;
use loadgen::rate::{RateOptions, RatePoint};
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
    /// POST /press open-loop at a fixed rate (as wrk2): one JSON line of
    /// latency percentiles counted from each press's intended send time.
    Rate(RateArgs),
    /// The latency-versus-rate chart (PNG) and table of `rate` lines (the
    /// median of the rounds of each balancer and rate).
    RateCurve(RateCurveArgs),
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

#[derive(Args)]
struct RateArgs {
    /// The balancer.
    #[arg(long, env = "LOADGEN_URL", default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Presses offered per second.
    #[arg(long)]
    rate: f64,
    /// Seconds of presses at that rate.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Keep-alive connections the presses share.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Session ids pressed in turn.
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// Session ids are `<prefix><n>` (default: a fresh one per run).
    #[arg(long)]
    prefix: Option<String>,
    /// Press every id once (closed loop, not measured) before the run.
    #[arg(long)]
    warm_up: bool,
    /// A press not answered in this many ms counts as an error.
    #[arg(long, default_value_t = 5_000)]
    timeout_ms: u64,
    /// Names the balancer in the output.
    #[arg(long, default_value = "balancer")]
    label: String,
}

#[derive(Args)]
struct RateCurveArgs {
    /// A file of `rate` output lines (JSON, one per point).
    input: PathBuf,
    /// The chart to write.
    #[arg(long, default_value = "latency-vs-rate.png")]
    out: PathBuf,
}

/// `host:port` of an `http://host:port` URL.
fn address_of(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("{url}: only http:// URLs are pressed open-loop"))?;
    Ok(rest.trim_end_matches('/').to_owned())
}

async fn rate(args: RateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.duration.is_finite() && args.duration > 0.0,
        "--duration must be a number of seconds above 0"
    );
    let opts = RateOptions {
        addr: address_of(&args.url)?,
        rate: args.rate,
        duration: Duration::from_secs_f64(args.duration),
        connections: args.connections,
        sessions: args.sessions,
        prefix: args.prefix.unwrap_or_else(|| {
            format!("rate-{}-", &uuid::Uuid::new_v4().simple().to_string()[..8])
        }),
        timeout: Duration::from_millis(args.timeout_ms),
        label: args.label,
    };
    if args.warm_up {
        let failed = loadgen::rate::warm_up(&opts).await?;
        anyhow::ensure!(
            failed == 0,
            "{failed} of {} warm-up presses failed",
            opts.sessions
        );
    }
    let point = loadgen::rate::run(&opts).await?;
    println!("{}", serde_json::to_string(&point)?);
    Ok(())
}

fn rate_curve(args: RateCurveArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("reading {}", args.input.display()))?;
    let points = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<Vec<RatePoint>, _>>()
        .with_context(|| format!("{}: not lines of `loadgen rate`", args.input.display()))?;
    let points = loadgen::rate::medians(&points);
    loadgen::plot::latency_vs_rate(&args.out, &points)?;
    print!("{}", loadgen::rate::table(&points));
    println!("wrote {}", args.out.display());
    Ok(())
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
        Scenario::Rate(args) => return exit_code(rate(args).await),
        Scenario::RateCurve(args) => return exit_code(rate_curve(args)),
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

fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
