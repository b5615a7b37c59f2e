//! What a test leaves behind goes with its last application: every Redis
//! key under its prefix and its rows in Postgres (those of its cluster, and
//! the archive rows of the sessions it pressed through [`TestApp::press`]).
//! Replicas of one test share a prefix, and a test may drop one replica
//! while another serves on, so the prefix is cleaned only when the last
//! application using it is dropped.
//!
//! An in-process application counts as gone when the task running it ends
//! ([`LeavesOnDrop`]), not when the test drops its handle: a registry check
//! under way between reading the layout and declaring an empty registry
//! complete would write the keys back (its reads and writes span several
//! slots, so no script makes them one step).
//!
//! An application of another kind (a balancer a script started) may still
//! be running then: its next registry check would find the registry gone
//! and no member in Postgres, and declare an empty one complete again (256
//! group epochs and a few control keys under a prefix nobody cleans). So
//! the prefix's layout key is set first to a version no release reads, with
//! a TTL: a replica that meets it stops serving and writes nothing more,
//! and the key goes by itself.
//!
//! [`TestApp::press`]: super::TestApp::press

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// Per prefix: the applications using it, the sessions they pressed.
type Live = HashMap<String, (usize, HashSet<String>)>;

static LIVE: LazyLock<Mutex<Live>> = LazyLock::new(Mutex::default);

fn live() -> std::sync::MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// An application with this prefix started.
pub fn joined(prefix: &str) {
    live().entry(prefix.to_owned()).or_default().0 += 1;
}

/// A session a test pressed under this prefix: its archive row goes too.
pub fn pressed(prefix: &str, session_id: &str) {
    if let Some((_, sessions)) = live().get_mut(prefix) {
        sessions.insert(session_id.to_owned());
    }
}

/// Calls [`left`] when dropped: held by the task that runs an in-process
/// application, so it leaves once its loops have stopped or its runtime
/// has dropped them.
pub struct LeavesOnDrop(pub String);

impl Drop for LeavesOnDrop {
    fn drop(&mut self) {
        left(&self.0);
    }
}

/// An application with this prefix was dropped; the last one cleans up, on
/// a thread of its own (the test's runtime may have one thread, busy here).
pub fn left(prefix: &str) {
    let sessions = {
        let mut live = live();
        let Some(entry) = live.get_mut(prefix) else {
            return;
        };
        entry.0 -= 1;
        if entry.0 > 0 {
            return;
        }
        live.remove(prefix).map(|(_, s)| s).unwrap_or_default()
    };
    let prefix = prefix.to_owned();
    let cleaning = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let work = clean(&prefix, sessions.into_iter().collect());
        let finished =
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(10), work).await });
        if finished.is_err() {
            eprintln!("teardown of {prefix} did not finish in 10 s; its keys may stay");
        }
    });
    let _ = cleaning.join();
}

/// The layout version that tells a replica still running to stop.
const TORN_DOWN: &str = "torn-down-by-the-tests";

async fn clean(prefix: &str, sessions: Vec<String>) {
    let mut servers = testkit::redis_servers();
    servers.push(format!("redis://{}", testkit::single_redis_addr()));
    servers.dedup();
    // On a cluster one primary holds the control slot; the others refuse.
    for server in &servers {
        let _ = tombstone(server, prefix).await;
    }
    // Postgres first: an application still stopping that found its Redis
    // state gone would otherwise rebuild it from the rows.
    if let Ok(pool) = sqlx::PgPool::connect(&testkit::database_url()).await {
        for table in ["session_placements", "node_events", "clean_tokens", "nodes"] {
            let _ = sqlx::query(&format!("DELETE FROM {table} WHERE cluster = $1"))
                .bind(prefix)
                .execute(&pool)
                .await;
        }
        let _ = sqlx::query("DELETE FROM session_archive WHERE session_id = ANY($1)")
            .bind(&sessions)
            .execute(&pool)
            .await;
        pool.close().await;
    }
    for server in &servers {
        let _ = unlink_prefix(server, prefix).await;
    }
}

/// The prefix's layout key, set to [`TORN_DOWN`] for 30 s.
async fn tombstone(server: &str, prefix: &str) -> redis::RedisResult<()> {
    let client = redis::Client::open(server)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("SET")
        .arg(format!("{prefix}{{ctl}}layout"))
        .arg(TORN_DOWN)
        .arg("EX")
        .arg(30)
        .query_async(&mut conn)
        .await
}

/// Every key under `prefix` on `server` but the tombstone.
async fn unlink_prefix(server: &str, prefix: &str) -> redis::RedisResult<()> {
    testkit::unlink_prefix(server, prefix, |key| !key.ends_with("{ctl}layout")).await
}
