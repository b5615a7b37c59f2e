//! The stack without Docker (`make up` / `make down`: scripts/up.sh and
//! scripts/down.sh), run for real on ports of its own.

use crate::common;

use std::path::{Path, PathBuf};

use common::process::{click_node_binary, free_port};
use common::{database_url, redis_url, unique, ADMIN_TOKEN};

/// Four consecutive free ports after the returned base (three nodes and
/// a fourth started by `make node N=4`).
fn free_node_base() -> u16 {
    loop {
        let base = free_port();
        let free = (1..=4).all(|i| {
            base.checked_add(i)
                .is_some_and(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        });
        if free {
            return base;
        }
    }
}

struct Stack {
    run: PathBuf,
    balancer_port: u16,
    node_base: u16,
    prefix: String,
}

impl Stack {
    fn new() -> Self {
        let prefix = format!("{}:", unique("stack"));
        common::teardown::joined(&prefix);
        Self {
            run: std::env::temp_dir().join(unique("stack")),
            balancer_port: free_port(),
            node_base: free_node_base(),
            prefix,
        }
    }

    async fn script(&self, name: &str) -> std::process::Output {
        self.script_with(name, &[]).await
    }

    async fn script_with(&self, name: &str, args: &[&str]) -> std::process::Output {
        let bin = click_node_binary();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("scripts/{name}.sh"));
        tokio::process::Command::new("bash")
            .arg(script)
            .args(args)
            .env("RUN_DIR", &self.run)
            .env("BALANCER_PORT", self.balancer_port.to_string())
            .env("NODE_PORT_BASE", self.node_base.to_string())
            .env("BIN_DIR", bin.parent().unwrap())
            .env("SKIP_BUILD", "1")
            .env("DATABASE_URL", database_url())
            .env("REDIS_URL", redis_url())
            .env("REDIS_KEY_PREFIX", &self.prefix)
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .env("MIN_DELAY_MS", "0")
            .env("MAX_DELAY_MS", "0")
            .output()
            .await
            .expect("bash runs")
    }

    async fn press(&self, session: &str) -> (u16, String) {
        let response = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/press", self.balancer_port))
            .json(&serde_json::json!({ "session_id": session }))
            .send()
            .await
            .expect("the balancer answers");
        (response.status().as_u16(), response.text().await.unwrap())
    }
}

/// Its Redis keys and Postgres rows go with it.
impl Drop for Stack {
    fn drop(&mut self) {
        common::teardown::left(&self.prefix);
    }
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_up_twice_refuses_the_second_and_leaves_the_first_serving() {
    common::ensure_database().await;
    let stack = Stack::new();
    let first = stack.script("up").await;
    assert!(first.status.success(), "up failed: {}", stderr(&first));
    let session = unique("stack");
    assert_eq!(
        stack.press(&session).await,
        (200, "You clicked 1 times".into())
    );

    let second = stack.script("up").await;
    assert!(!second.status.success(), "a second stack said it was up");
    assert!(
        stderr(&second).contains("already up"),
        "{}",
        stderr(&second)
    );
    // The first stack's pid files are intact and it still serves.
    assert_eq!(
        stack.press(&session).await,
        (200, "You clicked 2 times".into())
    );

    let down = stack.script("down").await;
    assert!(down.status.success(), "{}", stderr(&down));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", stack.balancer_port)).is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "make down left the balancer running"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&stack.run);
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// `make node N=..` starts a fourth node of the stack or restarts one of
/// its own, and `make down` stops those too: nothing is left listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_node_starts_and_restarts_nodes_that_make_down_stops() {
    common::ensure_database().await;
    let stack = Stack::new();
    let up = stack.script("up").await;
    assert!(up.status.success(), "up failed: {}", stderr(&up));
    let pid_of = |n: u32| std::fs::read_to_string(stack.run.join(format!("n{n}.pid"))).unwrap();
    let fourth = stack.script_with("node", &["4"]).await;
    assert!(fourth.status.success(), "{}", stderr(&fourth));
    assert!(listening(stack.node_base + 4), "n4 does not listen");
    let before = pid_of(2);
    let restarted = stack.script_with("node", &["2"]).await;
    assert!(restarted.status.success(), "{}", stderr(&restarted));
    assert!(
        stdout(&restarted).contains("stopped n2"),
        "{}",
        stdout(&restarted)
    );
    assert_ne!(pid_of(2), before, "n2 is a new process");
    assert!(listening(stack.node_base + 2), "n2 does not listen again");
    let down = stack.script("down").await;
    assert!(stdout(&down).contains("n4"), "{}", stdout(&down));
    for port in [
        stack.balancer_port,
        stack.node_base + 1,
        stack.node_base + 2,
        stack.node_base + 4,
    ] {
        testkit::eventually(
            std::time::Duration::from_secs(10),
            &format!("port {port} closed"),
            || async move { testkit::holds(!listening(port), || port) },
        )
        .await;
    }
    let _ = std::fs::remove_dir_all(&stack.run);
}

/// The README's "Try it", run top to bottom against a `make up` stack (on
/// ports of its own, a session id of its own): every command succeeds but
/// the one it says fails, and the answers it shows are the ones given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_s_try_it_runs_in_order_on_the_make_up_stack() {
    common::ensure_database().await;
    let stack = Stack::new();
    let up = stack.script("up").await;
    assert!(up.status.success(), "up failed: {}", stderr(&up));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme.find("## Try it").unwrap()..readme.find("### Errors").unwrap()];
    let block = &section[section.find("```sh\n").unwrap() + 6..];
    let block = &block[..block.find("```").unwrap()];
    let session = unique("try-it");
    let balancer = env!("CARGO_BIN_EXE_nodes-control");
    let text = block
        .replace(
            "localhost:8000",
            &format!("127.0.0.1:{}", stack.balancer_port),
        )
        .replace(
            "127.0.0.1:8084",
            &format!("127.0.0.1:{}", stack.node_base + 4),
        )
        .replace("\"u1\"", &format!("\"{session}\""))
        .replace("/sessions/u1", &format!("/sessions/{session}"))
        .replace("admin session u1", &format!("admin session {session}"))
        .replace("./target/release/nodes-control", balancer)
        .replace(
            "make node N=4",
            &format!("bash {}/scripts/node.sh 4", root.display()),
        );
    // Commands, continuation lines joined; each with whether it must fail.
    let mut commands: Vec<(String, bool)> = Vec::new();
    let (mut pending, mut fails) = (String::new(), false);
    for line in text.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            fails |= trimmed.contains("an error");
            continue;
        }
        pending.push_str(line.trim_end_matches('\\'));
        pending.push(' ');
        if !line.ends_with('\\') {
            commands.push((std::mem::take(&mut pending), fails));
            fails = false;
        }
    }
    assert!(commands.len() >= 15, "{commands:?}");
    let mut answers = Vec::new();
    for (command, must_fail) in &commands {
        if command.starts_with("export ") {
            continue; // the token: given to every command below
        }
        let output = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(command)
            .env("RUN_DIR", &stack.run)
            .env("NODE_PORT_BASE", stack.node_base.to_string())
            .env("BIN_DIR", click_node_binary().parent().unwrap())
            .env("DATABASE_URL", database_url())
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .env(
                "NODES_CONTROL_URL",
                format!("http://127.0.0.1:{}", stack.balancer_port),
            )
            .env("MIN_DELAY_MS", "0")
            .env("MAX_DELAY_MS", "0")
            .output()
            .await
            .unwrap();
        assert_eq!(
            output.status.success(),
            !must_fail,
            "{command}\nstdout: {}\nstderr: {}",
            stdout(&output),
            stderr(&output)
        );
        answers.push(stdout(&output));
    }
    let said = |what: &str| answers.iter().any(|a| a.contains(what));
    for shown in [
        "You clicked 1 times",
        "\"clicks\":2",
        "\"result\":\"added\"",
        "\"result\":\"draining\"",
        "\"result\":\"removed\"",
        "\"status\":\"ok\"",
    ] {
        assert!(said(shown), "no answer shows {shown}: {answers:#?}");
    }
    let _ = stack.script("down").await;
    let _ = std::fs::remove_dir_all(&stack.run);
}

/// Each `ports:` line of a compose file, with the service it is under.
fn published_ports(file: &str) -> Vec<(String, String)> {
    let compose =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let mut service = String::new();
    let mut published = Vec::new();
    for line in compose.lines() {
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':')) {
            if !name.starts_with(' ') {
                service = name.to_owned();
            }
        }
        if let Some(ports) = line.trim().strip_prefix("ports:") {
            let mapping = ports
                .trim()
                .trim_matches(|c| c == '[' || c == ']' || c == '"');
            published.push((service.clone(), mapping.to_owned()));
        }
    }
    published
}

/// The compose stack falls back to a well-known admin token, so it must
/// not be reachable from other hosts unless the operator says so; and a
/// developer's machine often runs a Postgres and a Redis of its own on
/// their usual ports, which a published store would collide with.
#[test]
fn docker_compose_publishes_only_the_balancer_on_loopback_so_it_runs_beside_local_stores() {
    let published = published_ports("docker-compose.yml");
    let services: Vec<&str> = published.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(services, ["balancer"], "{published:?}");
    assert!(
        published[0].1.starts_with("${PUBLISH_ADDR:-127.0.0.1}:"),
        "{published:?} is published beyond loopback by default"
    );
    // The stores' file, for a host without Postgres and Redis: both on
    // loopback at their usual ports.
    let stores = published_ports("docker-compose.stores.yml");
    assert_eq!(
        stores,
        [
            (
                "postgres".to_owned(),
                "127.0.0.1:${POSTGRES_PORT:-5432}:5432".to_owned()
            ),
            (
                "redis".to_owned(),
                "127.0.0.1:${REDIS_PORT:-6379}:6379".to_owned()
            ),
        ]
    );
}

/// The README's "Bring your own node": its Python node, saved as
/// `node.py`, started and added by the lines printed under it, on a `make
/// up` stack. It takes new sessions, and a removal archives them into the
/// database it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_s_own_node_starts_and_is_added_as_printed() {
    common::ensure_database().await;
    let stack = Stack::new();
    let up = stack.script("up").await;
    assert!(up.status.success(), "up failed: {}", stderr(&up));
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = &readme[readme.find("## Bring your own node").unwrap()..];
    let block = |fence: &str| {
        let start = section.find(fence).unwrap() + fence.len();
        section[start..start + section[start..].find("```").unwrap()].to_owned()
    };
    std::fs::write(stack.run.join("node.py"), block("```python\n")).unwrap();
    let port = free_port();
    let commands = block("```sh\n")
        .replace("8090", &port.to_string())
        .replace(
            "postgres://postgres@127.0.0.1:5432/nodes_control",
            &database_url(),
        )
        .replace(
            "localhost:8000",
            &format!("127.0.0.1:{}", stack.balancer_port),
        );
    // The node in the background, as printed, outlives this shell: given a
    // moment to listen before the add (a user types the next line later).
    let commands = commands.replacen("&\n", "&\nsleep 1\n", 1);
    // Into files, not pipes: the node left running holds them open.
    let (out, err) = (stack.run.join("own.out"), stack.run.join("own.err"));
    let status = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -e\n{commands}"))
        .current_dir(&stack.run)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .status()
        .await
        .unwrap();
    let said = std::fs::read_to_string(&out).unwrap();
    let complaint = std::fs::read_to_string(&err).unwrap();
    let node = format!("http://127.0.0.1:{port}");
    let outcome = async {
        assert!(status.success(), "{said}\n{complaint}");
        assert!(
            said.contains("\"result\":\"added\"") && said.contains("\"state\":\"up\""),
            "{said}"
        );
        // New sessions go to the node with the fewest (ties by name): one
        // of the first four, with three other nodes, lands on the new one.
        let mut session = None;
        for i in 0..4 {
            let id = unique(&format!("own-node-{i}"));
            let served = reqwest::Client::new()
                .post(format!("http://127.0.0.1:{}/press", stack.balancer_port))
                .json(&serde_json::json!({ "session_id": id }))
                .send()
                .await
                .unwrap();
            if served.headers()["x-served-by"] == "py" {
                assert_eq!(served.text().await.unwrap(), "You clicked 1 times");
                session = Some(id);
                break;
            }
        }
        let session = session.expect("none of four new sessions went to the new node");
        let removed: serde_json::Value = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/node", stack.balancer_port))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({ "action": "remove", "address": node }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(removed["archived"], true, "{removed}");
        let archive = nodes_control::archive::Archive::connect_lazy(
            &database_url(),
            "readme",
            std::time::Duration::from_secs(5),
        )
        .unwrap();
        let total = archive.fold_one(&session).await.unwrap();
        assert_eq!(total, 1, "archived into the database it was given");
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    let _ = std::process::Command::new("pkill")
        .args(["-f", &format!("node.py {port}")])
        .status();
    let _ = stack.script("down").await;
    let _ = std::fs::remove_dir_all(&stack.run);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
