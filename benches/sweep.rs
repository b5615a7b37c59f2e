//! Sweep benchmark (issue 3): one sweep of 10,000 expired sessions among
//! 1,000,000 live ones. Prints wall time, Redis commands issued and Redis
//! memory per live session. Needs Redis and Postgres like the tests:
//!
//!     cargo bench --bench sweep            # SWEEP_LIVE=1000000 SWEEP_EXPIRED=10000
//!
//! It uses its own key prefix and deletes its keys afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nodes_control::store::SessionStore;
use nodes_control::{Application, Config};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn redis_info(conn: &mut redis::aio::MultiplexedConnection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").query_async(conn).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Redis's CPU time so far (user and system), in seconds.
async fn redis_cpu(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .unwrap();
    ["used_cpu_user:", "used_cpu_sys:"]
        .iter()
        .filter_map(|field| {
            info.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
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

    let client = redis::Client::open(redis_url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let memory_before = redis_info(&mut conn, "used_memory").await;

    // Place every session through the real placement script.
    let store: Arc<SessionStore> = Arc::new(ctx.store.clone());
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
                store.place(&id, 0, exp, None, None).await.unwrap();
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
    let memory_after = redis_info(&mut conn, "used_memory").await;

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
    let idle_start = redis_info(&mut conn, "total_commands_processed").await;
    let idle_clock = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rate = (redis_info(&mut conn, "total_commands_processed").await - idle_start - 2)
        as f64
        / idle_clock.elapsed().as_secs_f64();

    // The walk alone (it reads, and drops strays it finds): what finding
    // the expired sessions costs,
    // apart from archiving them.
    let redis_cpu_before = redis_cpu(&mut conn).await;
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
    let walk_cpu_ms = (redis_cpu(&mut conn).await - redis_cpu_before) * 1000.0;
    assert_eq!(found, expired);

    let redis_cpu_before = redis_cpu(&mut conn).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    let commands_before = redis_info(&mut conn, "total_commands_processed").await;
    // A press's lookup during the sweep: one command every millisecond on
    // a connection and an OS thread of its own (not this runtime, which the
    // sweep keeps busy), timed; the longest is how long the sweep kept
    // Redis from answering anyone else.
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let probe = {
        let mut probe_conn = client.get_connection().unwrap();
        let (probing, key) = (probing.clone(), format!("{prefix}probe"));
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            while probing.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let _: Option<String> = redis::cmd("HGET")
                    .arg(&key)
                    .arg("x")
                    .query(&mut probe_conn)
                    .unwrap();
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
    let redis_cpu_ms = (redis_cpu(&mut conn).await - redis_cpu_before) * 1000.0;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    let commands = redis_info(&mut conn, "total_commands_processed").await - commands_before - 1;
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
    println!("  longest redis answer {longest_wait:.1?} (a lookup sent every ms during the sweep)");
    // The commands that took most of Redis's time (a script's own calls
    // are counted in it and again under their names).
    let mut busiest: Vec<(String, f64, u64)> = stats
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.parse::<f64>().ok())
            };
            Some((
                name.to_owned(),
                field("usec=")? / 1000.0,
                field("calls=")? as u64,
            ))
        })
        .collect();
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

    // Clean up our keys.
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
        redis::cmd("UNLINK")
            .arg(chunk)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
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
