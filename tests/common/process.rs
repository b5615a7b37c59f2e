//! Real processes a fault test can kill, stop and restart: the reference
//! `click-node` binary and a `redis-server` of the test's own.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A free port on loopback (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `target/<profile>/click-node`, which `cargo test --workspace` builds
/// (the click-node package has integration tests, so its binary is built).
pub fn click_node_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let binary = dir.join("click-node");
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build -p click-node` (cargo test --workspace builds it)",
        binary.display()
    );
    binary
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// A `click-node` process.
pub struct NodeProcess {
    pub name: String,
    pub port: u16,
    pub address: String,
    database_url: String,
    flags: Vec<String>,
    child: Option<Child>,
}

impl NodeProcess {
    pub fn start(name: &str, database_url: &str) -> Self {
        Self::start_with(name, database_url, &[])
    }

    /// With more flags (`--clean-all`).
    pub fn start_with(name: &str, database_url: &str, flags: &[&str]) -> Self {
        let port = free_port();
        let mut node = Self {
            name: name.to_owned(),
            port,
            address: format!("http://127.0.0.1:{port}"),
            database_url: database_url.to_owned(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
            child: None,
        };
        node.spawn();
        node
    }

    fn spawn(&mut self) {
        let child = Command::new(click_node_binary())
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--name", &self.name, "--database-url", &self.database_url])
            .args(
                // No delay, unless the test sets one.
                (!self.flags.iter().any(|f| f == "--min-delay-ms"))
                    .then_some(["--min-delay-ms", "0", "--max-delay-ms", "0"])
                    .into_iter()
                    .flatten(),
            )
            .args(
                // 1 s for Postgres, unless the test says otherwise.
                (!self.flags.iter().any(|f| f == "--archive-timeout-ms"))
                    .then_some(["--archive-timeout-ms", "1000"])
                    .into_iter()
                    .flatten(),
            )
            .args(&self.flags)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("click-node starts");
        self.child = Some(child);
        wait_for_port(self.port);
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("node is running").id()
    }

    /// kill -9: the process and its counts are gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }

    /// A fresh process on the same port (empty counts).
    #[allow(dead_code)] // the fault suite's; the api tests never restart a node process
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGSTOP: the node hangs, its sockets stay open.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    /// SIGCONT: it wakes and works through what queued meanwhile.
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// A `redis-server` of the test's own, without or with AOF persistence.
pub struct RedisProcess {
    pub port: u16,
    dir: PathBuf,
    aof: bool,
    child: Option<Child>,
}

impl RedisProcess {
    pub fn start(aof: bool) -> Self {
        let dir = std::env::temp_dir().join(format!("nc-redis-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self {
            port: free_port(),
            dir,
            aof,
            child: None,
        };
        redis.spawn();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--dir", self.dir.to_str().unwrap()]);
        if self.aof {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)");
        self.child = Some(child);
        wait_for_port(self.port);
    }

    /// kill -9, then start again on the same port and data directory: empty
    /// without AOF, with everything it had acknowledged with it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }

    pub fn start_again(&mut self) {
        self.spawn();
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_for_port(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("nothing listens on port {port}");
}

/// A `nodes-control` process of the test's own (its own Redis key prefix,
/// health checks every 200 ms), with extra environment and its stdout.
pub struct BalancerProcess {
    child: Child,
    pub url: String,
    http: reqwest::Client,
    /// Its Redis key prefix (its own, or a test's it joined).
    prefix: String,
}

impl BalancerProcess {
    pub async fn start(env: &[(&str, &str)], stdout: Stdio) -> Self {
        Self::start_binary(env!("CARGO_BIN_EXE_nodes-control").as_ref(), env, stdout).await
    }

    /// A replica of another build of the balancer: a release of the same
    /// storage layout, for a rolling upgrade (scripts/previous-release.sh).
    pub async fn start_binary(
        binary: &std::path::Path,
        env: &[(&str, &str)],
        stdout: Stdio,
    ) -> Self {
        super::ensure_database().await;
        let port = free_port();
        let prefix = env
            .iter()
            .find(|(name, _)| *name == "REDIS_KEY_PREFIX")
            .map_or_else(
                || format!("{}:", super::unique("process")),
                |(_, p)| p.to_string(),
            );
        super::teardown::joined(&prefix);
        let child = Command::new(binary)
            .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
            .env("DATABASE_URL", super::database_url())
            .env("REDIS_URL", super::redis_url())
            .env("REDIS_KEY_PREFIX", &prefix)
            .env("ADMIN_TOKEN", super::ADMIN_TOKEN)
            .env("HEALTH_CHECK_INTERVAL_MS", "200")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .expect("the balancer starts");
        let balancer = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            prefix,
        };
        for _ in 0..100 {
            let ready = balancer
                .http
                .get(format!("{}/readyz", balancer.url))
                .send()
                .await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return balancer;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the balancer did not become ready");
    }

    /// SIGSTOP: the replica stops dead (no heartbeat, no ack, presses
    /// held where they are), its sockets open.
    #[allow(dead_code)] // the fault suite's
    pub fn pause(&self) {
        signal(self.child.id(), "STOP");
    }

    /// SIGCONT: it goes on from where it stopped.
    #[allow(dead_code)] // the fault suite's
    pub fn resume(&self) {
        signal(self.child.id(), "CONT");
    }

    /// kill -9: the replica is gone at once, its presses under way with it
    /// (their clients see the connection reset).
    #[allow(dead_code)] // the fault suite's
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as an orchestrator stops a replica it replaces, and waits
    /// for it to leave (within its shutdown grace).
    #[allow(dead_code)] // the fault suite's
    pub fn stop(&mut self) {
        signal(self.child.id(), "TERM");
        let _ = self.child.wait();
    }

    pub async fn metrics(&self) -> String {
        let response = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }

    /// `POST /node` with the admin token; asserts a 200.
    pub async fn node(&self, action: &str, address: &str) {
        let response = self
            .http
            .post(format!("{}/node", self.url))
            .bearer_auth(super::ADMIN_TOKEN)
            .json(&serde_json::json!({ "action": action, "address": address }))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{action} {address}: {}",
            response.status()
        );
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A press sent from a task of its own (its answer comes later, e.g.
    /// once a stopped node or replica resumes): its status and body.
    #[allow(dead_code)] // the fault suite's
    pub fn press_in_background(
        &self,
        session: &str,
    ) -> tokio::task::JoinHandle<(reqwest::StatusCode, String)> {
        let (http, url) = (self.http.clone(), self.url.clone());
        let body = serde_json::json!({ "session_id": session });
        tokio::spawn(async move {
            let answer = http
                .post(format!("{url}/press"))
                .json(&body)
                .send()
                .await
                .unwrap();
            (answer.status(), answer.text().await.unwrap())
        })
    }

    pub async fn press(&self, session: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/press", self.url))
            .json(&serde_json::json!({ "session_id": session }))
            .send()
            .await
            .unwrap()
    }
}

impl Drop for BalancerProcess {
    fn drop(&mut self) {
        // (Killed already, by a test: nothing to wake.)
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        super::teardown::left(&self.prefix);
    }
}
