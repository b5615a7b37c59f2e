//! Sweep benchmark (issue 3): one sweep of 10,000 expired sessions among
//! 1,000,000 live ones. Prints wall time, Redis commands issued and Redis
//! memory per live session. Needs Redis and Postgres like the tests; on a
//! Redis Cluster (`REDIS_URL=redis+cluster://...`, its primaries) every
//! Redis figure is summed over the primaries:
//!
//!     cargo bench --bench sweep            # SWEEP_LIVE=1000000 SWEEP_EXPIRED=10000
//!
//! It uses its own key prefix and deletes its keys afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nodes_control::store::Sessions;
use nodes_control::{Application, Config};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every Redis server behind `REDIS_URL` (each primary of a cluster):
/// `INFO` is per server, so each figure is the sum over them.
struct Servers(Vec<redis::aio::MultiplexedConnection>);

impl Servers {
    async fn connect() -> Self {
        let mut conns = Vec::new();
        for url in testkit::redis_servers() {
            let client = redis::Client::open(url).unwrap();
            conns.push(client.get_multiplexed_async_connection().await.unwrap());
        }
        Self(conns)
    }

    async fn info(&mut self, section: Option<&str>) -> Vec<String> {
        let mut infos = Vec::new();
        for conn in &mut self.0 {
            let mut cmd = redis::cmd("INFO");
            if let Some(section) = section {
                cmd.arg(section);
            }
            infos.push(cmd.query_async(conn).await.unwrap());
        }
        infos
    }

    /// An integer field of `INFO`, summed.
    async fn sum(&mut self, field: &str) -> i64 {
        self.info(None)
            .await
            .iter()
            .filter_map(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("{field}:")))
                    .and_then(|v| v.trim().parse::<i64>().ok())
            })
            .sum()
    }

    /// Redis's CPU time so far (user and system), in seconds.
    async fn cpu(&mut self) -> f64 {
        self.info(Some("cpu"))
            .await
            .iter()
            .flat_map(|info| {
                ["used_cpu_user:", "used_cpu_sys:"].map(|field| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(field))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .unwrap_or(0.0)
                })
            })
            .sum()
    }

    async fn reset_stats(&mut self) {
        for conn in &mut self.0 {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(conn)
                .await
                .unwrap();
        }
    }

    /// Each command's time (ms) and calls since the reset, over all servers.
    async fn command_stats(&mut self) -> Vec<(String, f64, u64)> {
        let mut totals: std::collections::BTreeMap<String, (f64, u64)> = Default::default();
        for info in self.info(Some("commandstats")).await {
            for line in info.lines() {
                let Some((name, fields)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(':'))
                else {
                    continue;
                };
                let field = |key: &str| {
                    fields
                        .split(',')
                        .find_map(|f| f.strip_prefix(key)?.parse::<f64>().ok())
                };
                if let (Some(usec), Some(calls)) = (field("usec="), field("calls=")) {
                    let total = totals.entry(name.to_owned()).or_default();
                    total.0 += usec / 1000.0;
                    total.1 += calls as u64;
                }
            }
        }
        totals
            .into_iter()
            .map(|(name, (ms, calls))| (name, ms, calls))
            .collect()
    }

    /// Deletes every key that starts with `prefix`, server by server, one
    /// key a command (a cluster refuses a command over keys of two slots).
    async fn delete_prefix(&mut self, prefix: &str) {
        for conn in &mut self.0 {
            let mut keys: Vec<String> = Vec::new();
            {
                let mut scan = conn.clone();
                let mut iter: redis::AsyncIter<String> =
                    redis::AsyncCommands::scan_match(&mut scan, format!("{prefix}*"))
                        .await
                        .unwrap();
                while let Some(key) = iter.next_item().await {
                    keys.push(key.unwrap());
                }
            }
            for chunk in keys.chunks(10_000) {
                let mut pipe = redis::pipe();
                for key in chunk {
                    pipe.cmd("UNLINK").arg(key).ignore();
                }
                let _: () = pipe.query_async(conn).await.unwrap();
            }
        }
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing; nothing to list
    }
    let live = env_or("SWEEP_LIVE", 1_000_000);
    let expired = env_or("SWEEP_EXPIRED", 10_000);
    let redis_url = testkit::redis_url();
    let database_url = testkit::database_url();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("bench-{run}:");

    // A fresh machine has no test database yet: made (and migrated) here,
    // as the tests make it.
    testkit::ensure_database().await;
    let mut config = Config::new(&database_url, &redis_url, "bench");
    config.redis_key_prefix = prefix.clone();
    config.sweep_interval_secs = 3600; // we sweep by hand
    config.health_check_interval_ms = 60_000;
    let app = Application::build(config)
        .await
        .expect("Redis and Postgres answer");
    let ctx = app.context();
    let sweeper = app.sweeper();
    tokio::spawn(app.run_until_stopped(std::future::pending()));

    let mut nodes = Vec::new();
    for node in testkit::spawn_cluster("b", 3, false).await {
        ctx.admin.add(&node.address, None, None).await.unwrap();
        nodes.push(node.address);
    }

    let mut servers = Servers::connect().await;
    let memory_before = servers.sum("used_memory").await;

    // Place every session through the real placement script.
    let store: Arc<Sessions> = Arc::new(ctx.store.sessions.clone());
    let now = nodes_control_now();
    let started = Instant::now();
    futures::stream::iter(0..live + expired)
        .map(|i| {
            let store = store.clone();
            let run = &run;
            async move {
                let (id, exp) = if i < expired {
                    (format!("{run}-exp-{i}"), now - 1000)
                } else {
                    (format!("{run}-live-{i}"), now + 3_600_000)
                };
                store.place(&id, 0, exp, None, None, None).await.unwrap();
            }
        })
        .buffer_unordered(256)
        .collect::<()>()
        .await;
    println!(
        "placed {} sessions in {:.1?}",
        live + expired,
        started.elapsed()
    );
    let memory_after = servers.sum("used_memory").await;

    // Give the expiring sessions real clicks so the nodes archive them.
    let http = reqwest::Client::new();
    futures::stream::iter(0..expired)
        .map(|i| {
            let http = http.clone();
            let store = store.clone();
            let run = &run;
            async move {
                let id = format!("{run}-exp-{i}");
                let node = store.lookup(&id).await.unwrap().unwrap().node;
                http.post(format!("{node}/press"))
                    .json(&serde_json::json!({ "session_id": id }))
                    .send()
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<()>()
        .await;

    // Background commands (fence polls, heartbeats) over the same span, to subtract.
    let idle_start = servers.sum("total_commands_processed").await;
    let idle_clock = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let own = 2 * servers.0.len() as i64; // the two INFOs on each server
    let idle_rate = (servers.sum("total_commands_processed").await - idle_start - own) as f64
        / idle_clock.elapsed().as_secs_f64();

    // The walk alone (it reads, and drops strays it finds): what finding
    // the expired sessions costs,
    // apart from archiving them.
    let redis_cpu_before = servers.cpu().await;
    let started = Instant::now();
    let walks = nodes
        .iter()
        .map(|node| store.expiring(node, nodes_control_now(), usize::MAX));
    let found: usize = futures::future::join_all(walks)
        .await
        .into_iter()
        .map(|ids| ids.unwrap().len())
        .sum();
    let walk_wall = started.elapsed();
    let walk_cpu_ms = (servers.cpu().await - redis_cpu_before) * 1000.0;
    assert_eq!(found, expired);

    let redis_cpu_before = servers.cpu().await;
    servers.reset_stats().await;
    let commands_before = servers.sum("total_commands_processed").await;
    // Another client during the sweep: a PING every millisecond, to each
    // server in turn, on connections and an OS thread of its own (not this
    // runtime, which the sweep keeps busy), timed; the longest is how long
    // the sweep kept Redis from answering anyone else.
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let probe = {
        let mut probe_conns: Vec<redis::Connection> = testkit::redis_servers()
            .into_iter()
            .map(|url| redis::Client::open(url).unwrap().get_connection().unwrap())
            .collect();
        let probing = probing.clone();
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            for turn in 0.. {
                if !probing.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let servers = probe_conns.len();
                let conn = &mut probe_conns[turn % servers];
                let sent = Instant::now();
                let _: String = redis::cmd("PING").query(conn).unwrap();
                longest = longest.max(sent.elapsed());
                std::thread::sleep(Duration::from_millis(1));
            }
            longest
        })
    };
    let started = Instant::now();
    let report = sweeper.sweep_once(nodes_control_now()).await.unwrap();
    let wall = started.elapsed();
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    let longest_wait = probe.join().unwrap();
    let redis_cpu_ms = (servers.cpu().await - redis_cpu_before) * 1000.0;
    let mut busiest = servers.command_stats().await;
    let commands = servers.sum("total_commands_processed").await - commands_before - own / 2;
    let background = (idle_rate * wall.as_secs_f64()).round() as i64;

    assert_eq!(report.expired, expired);
    assert_eq!(report.unmapped, expired);
    println!("sweep of {expired} expired among {live} live sessions:");
    println!("  wall time            {wall:.1?}");
    println!(
        "  redis commands       {} (total {commands}, minus ~{background} from background polls)",
        commands - background
    );
    println!("  redis CPU            {redis_cpu_ms:.1} ms (the sweep's and the background's)");
    println!("  of which the walk    {walk_wall:.1?} wall, {walk_cpu_ms:.1} ms redis CPU (measured alone, before)");
    println!("  longest redis answer {longest_wait:.1?} (a PING every ms during the sweep, to each server in turn)");
    // The commands that took most of Redis's time (a script's own calls
    // are counted in it and again under their names).
    busiest.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, ms, calls) in busiest.iter().take(6) {
        println!("    {name:<20} {ms:>7.1} ms in {calls} calls");
    }
    println!(
        "  redis memory/session {} bytes ({} sessions, {:.1} MiB)",
        (memory_after - memory_before) / (live + expired) as i64,
        live + expired,
        (memory_after - memory_before) as f64 / 1048576.0
    );

    servers.delete_prefix(&prefix).await;
    let ids: Vec<String> = (0..expired).map(|i| format!("{run}-exp-{i}")).collect();
    let pool = sqlx::PgPool::connect(&database_url).await.unwrap();
    sqlx::query("DELETE FROM session_archive WHERE session_id = ANY($1)")
        .bind(&ids)
        .execute(&pool)
        .await
        .unwrap();
}

fn nodes_control_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
