//! Shared by the tests and benchmarks of every crate of the workspace (a
//! dev-dependency only): where Redis and the test database are, the test
//! database created and migrated once per process, a reference node started
//! in-process on an ephemeral port, the node's answer read, and the
//! checking client that judges a balancer's every answer ([`checker`]).

pub mod checker;

use std::sync::Arc;

use tokio::sync::OnceCell;

/// Every key under `prefix`, on every server of the tests' Redis (a
/// cluster's keys are spread over its primaries).
pub async fn keys_under(prefix: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for server in redis_servers() {
        let client = redis::Client::open(server.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        found.extend(keys.into_iter().map(|key| (server.clone(), key)));
    }
    found
}

/// The keys under `prefix` on one server that `doomed` picks, one `UNLINK`
/// each (on a cluster a command stays in one slot): what a test's
/// balancer left.
pub async fn unlink_prefix(
    server: &str,
    prefix: &str,
    doomed: impl Fn(&str) -> bool,
) -> redis::RedisResult<()> {
    let client = redis::Client::open(server)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        let mut pipe = redis::pipe();
        for key in keys.iter().filter(|k| doomed(k)) {
            pipe.cmd("UNLINK").arg(key).ignore();
        }
        if !keys.is_empty() {
            // A replica refuses (READONLY); its primary is scanned too.
            let _ = pipe.query_async::<()>(&mut conn).await;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The Redis the tests use (`REDIS_URL`, else 127.0.0.1:6379).
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Each Redis server behind [`redis_url`], as `redis://` URLs: the seeds
/// of a cluster (`redis+cluster://a,b,c` or a comma-separated list), for a
/// test that reads keys server by server; else the one server.
pub fn redis_servers() -> Vec<String> {
    let url = redis_url();
    match url.strip_prefix("redis+cluster://") {
        Some(hosts) => hosts
            .trim_end_matches('/')
            .split(',')
            .map(|host| format!("redis://{}", host.trim()))
            .collect(),
        None => url.split(',').map(|u| u.trim().to_owned()).collect(),
    }
}

/// The test database (`TEST_DATABASE_URL`, else `nodes_control_test` on
/// 127.0.0.1:5432, user postgres).
pub fn database_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/nodes_control_test".into())
}

/// The one Redis server a test can stand a proxy in front of:
/// [`redis_url`]'s, or, when that names a cluster (a proxy in front of one
/// seed cannot stand for it: replies redirect past it), the plain Redis of
/// `REDIS_SINGLE_URL`, else 127.0.0.1:6379.
pub fn single_redis_addr() -> std::net::SocketAddr {
    let url = redis_url();
    let single = if url.starts_with("redis+cluster://") || url.contains(',') {
        std::env::var("REDIS_SINGLE_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    } else {
        url
    };
    socket_addr(&single, 6379)
}

/// Where the test database's Postgres listens (from [`database_url`]).
pub fn postgres_addr() -> std::net::SocketAddr {
    socket_addr(&database_url(), 5432)
}

/// `scheme://[user@]host[:port][/..]` -> its socket address.
fn socket_addr(url: &str, default_port: u16) -> std::net::SocketAddr {
    use std::net::ToSocketAddrs;
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let with_port = if host_port
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("{url} names no address this machine resolves"))
}

static DATABASE: OnceCell<()> = OnceCell::const_new();

/// Creates the test database if it is missing and applies the project's
/// migrations, once per process. Panics if Postgres does not answer: every
/// test that calls it needs it.
pub async fn ensure_database() {
    use sqlx::migrate::MigrateDatabase;
    DATABASE
        .get_or_init(|| async {
            let url = database_url();
            if !sqlx::Postgres::database_exists(&url).await.unwrap_or(false) {
                // Another test binary may create it at the same moment.
                let _ = sqlx::Postgres::create_database(&url).await;
            }
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("Postgres answers on 127.0.0.1:5432");
            // A checkout of another commit may have migrated the shared
            // test database further; migrations only add.
            let mut migrator = sqlx::migrate!("../../migrations");
            migrator.set_ignore_missing(true);
            migrator.run(&pool).await.expect("the migrations apply");
        })
        .await;
}

/// A reference node serving on an ephemeral port of 127.0.0.1 in the
/// current runtime (it stops with it).
pub struct SpawnedNode {
    /// `http://127.0.0.1:{port}`.
    pub address: String,
    pub node: Arc<click_node::Node>,
}

/// Starts a reference node named `name` on the test database (made ready
/// first); `clean_all`: it ignores `session_ids` on `/clean`, like a
/// third-party node.
pub async fn spawn_node(name: &str, clean_all: bool) -> SpawnedNode {
    ensure_database().await;
    let mut config = click_node::Config::for_tests(name, &database_url());
    config.clean_all = clean_all;
    let node = click_node::Node::new(&config).expect("a node for tests builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("an ephemeral port");
    let address = format!("http://{}", listener.local_addr().expect("a bound port"));
    tokio::spawn(click_node::serve(
        listener,
        node.clone(),
        std::future::pending(),
    ));
    SpawnedNode { address, node }
}

/// `n` reference nodes named `{prefix}1` .. `{prefix}n` (see [`spawn_node`]).
pub async fn spawn_cluster(prefix: &str, n: usize, clean_all: bool) -> Vec<SpawnedNode> {
    let mut nodes = Vec::with_capacity(n);
    for i in 1..=n {
        nodes.push(spawn_node(&format!("{prefix}{i}"), clean_all).await);
    }
    nodes
}

/// Deals `sessions` out to `workers` (each session to one worker, so its
/// presses are sequential and each answer can be judged).
pub fn deal(sessions: &[String], workers: usize) -> Vec<Vec<String>> {
    sessions
        .chunks(sessions.len().div_ceil(workers.max(1)).max(1))
        .map(|c| c.to_vec())
        .collect()
}

/// The count in a node's (or the balancer's) `You clicked N times`.
pub fn parse_clicks(body: &str) -> Option<i64> {
    body.trim()
        .strip_prefix("You clicked ")?
        .strip_suffix(" times")?
        .parse()
        .ok()
}

/// Polls `check` every 20 ms until it gives `Some`, and returns that; panics
/// with `what` and the last observation `check` reported (its `Err`) once
/// `within` has passed. The one way the tests wait for a condition: a test
/// that asserts something did *not* happen first waits this way for the
/// positive evidence that the moment to look has come.
pub async fn eventually<T, E, F, Fut>(within: std::time::Duration, what: &str, mut check: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}; last seen: {last:?}")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

/// For [`eventually`]: `Ok(())` when `condition` holds, else the `seen`
/// it is reported with.
pub fn holds<E>(condition: bool, seen: impl FnOnce() -> E) -> Result<(), E> {
    if condition {
        Ok(())
    } else {
        Err(seen())
    }
}

#[cfg(test)]
mod tests {
    use super::{eventually, holds, parse_clicks, socket_addr};
    use std::time::Duration;

    #[test]
    fn the_count_is_read_from_the_answer_and_nothing_else_passes() {
        assert_eq!(parse_clicks("You clicked 42 times"), Some(42));
        assert_eq!(parse_clicks("You clicked 1 times\n"), Some(1));
        assert_eq!(parse_clicks("You clicked many times"), None);
        assert_eq!(parse_clicks("<html>502</html>"), None);
    }

    #[tokio::test]
    async fn eventually_returns_what_the_check_found_once_it_holds() {
        let mut polls = 0;
        let found = eventually(Duration::from_secs(5), "the third poll", || {
            polls += 1;
            let now = polls;
            async move {
                if now >= 3 {
                    Ok(now)
                } else {
                    Err(now)
                }
            }
        })
        .await;
        assert_eq!(found, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "never: not within 50ms; last seen: \"still no\"")]
    async fn eventually_names_the_condition_and_the_last_observation_when_time_runs_out() {
        eventually(Duration::from_millis(50), "never", || async {
            holds(false, || "still no")
        })
        .await
    }

    #[test]
    fn a_url_gives_its_host_and_port_or_the_default_port() {
        assert_eq!(
            socket_addr("postgres://postgres@127.0.0.1:5433/db", 5432).to_string(),
            "127.0.0.1:5433"
        );
        assert_eq!(
            socket_addr("redis://127.0.0.1", 6379).to_string(),
            "127.0.0.1:6379"
        );
        assert_eq!(
            socket_addr("redis://:secret@127.0.0.1:7000/0", 6379).port(),
            7000
        );
    }
}
