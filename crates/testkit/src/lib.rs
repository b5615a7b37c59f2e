//! Shared by the tests and benchmarks of every crate of the workspace (a
//! dev-dependency only): where Redis and the test database are, the test
//! database created and migrated once per process, a reference node started
//! in-process on an ephemeral port, the node's answer read, and the
//! checking client that judges a balancer's every answer ([`checker`]).

pub mod checker;

use std::sync::Arc;

use tokio::sync::OnceCell;

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

#[cfg(test)]
mod tests {
    use super::parse_clicks;

    #[test]
    fn the_count_is_read_from_the_answer_and_nothing_else_passes() {
        assert_eq!(parse_clicks("You clicked 42 times"), Some(42));
        assert_eq!(parse_clicks("You clicked 1 times\n"), Some(1));
        assert_eq!(parse_clicks("You clicked many times"), None);
        assert_eq!(parse_clicks("<html>502</html>"), None);
    }
}
