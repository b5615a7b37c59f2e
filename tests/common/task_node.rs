//! Nodes we did not write for the balancer: `tests/nodes/task_node.py`, a
//! Python node that speaks the task's API only (`/press`, `/clean`), run as
//! real processes in the variants the conformance suite takes through their
//! paces. Killed with SIGKILL like any process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::process::free_port;

/// How the node differs from the plainest one (threads, HTTP/1.0, no
/// `/health`, clean-all, no tokens: all of them are that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The task's API only, one thread per request, HTTP/1.0.
    TaskOnly,
    /// Answers in the task template's words: `You clicked the button N times`.
    ButtonWording,
    /// One request at a time (Python's `HTTPServer`, as `php artisan
    /// serve`), listen backlog 5, 20 ms a press.
    OneAtATime,
    /// Behind a proxy that closes keep-alive connections after three
    /// requests or an idle second.
    BehindProxy,
    /// HTTPS, with a certificate from a CA of the test's own.
    Https,
    /// 50-150 ms a press, as the load experiments' agents answer; many
    /// threads, listen backlog 5.
    Slow,
}

/// Certificates of an HTTPS node: the CA (for `NODE_CA_FILE`) and the
/// node's own.
pub struct Certificates {
    pub ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Certificates {
    /// A fresh CA and a certificate for 127.0.0.1 signed by it, as files.
    pub fn generate(tag: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let dir = std::env::temp_dir();
        let files = Self {
            ca: dir.join(format!("{tag}-ca.pem")),
            cert: dir.join(format!("{tag}-cert.pem")),
            key: dir.join(format!("{tag}-key.pem")),
        };
        std::fs::write(&files.ca, ca.pem()).unwrap();
        std::fs::write(&files.cert, leaf.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        for file in [&self.ca, &self.cert, &self.key] {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// One Python node process (and the proxy in front of it, for
/// [`Variant::BehindProxy`]).
pub struct TaskNode {
    pub address: String,
    node: Process,
    /// Kept for its `Drop`: the proxy process ends with the node.
    _proxy: Option<Process>,
}

struct Process {
    port: u16,
    args: Vec<String>,
    child: Option<Child>,
}

impl Process {
    fn start(port: u16, args: Vec<String>) -> Self {
        let mut process = Self {
            port,
            args,
            child: None,
        };
        process.spawn();
        process
    }

    fn spawn(&mut self) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/nodes/task_node.py");
        let child = Command::new("python3")
            .arg(script)
            .arg("--port")
            .arg(self.port.to_string())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs (the conformance suite needs it on the PATH)");
        self.child = Some(child);
        wait_for_port(self.port);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait_for_port(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Python node on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl TaskNode {
    /// Starts a node of `variant` archiving into the test database;
    /// `certificates` for [`Variant::Https`].
    pub fn start(variant: Variant, certificates: Option<&Certificates>) -> Self {
        let mut args = vec!["--database-url".to_owned(), super::database_url()];
        let words = |list: &[&str]| list.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        match variant {
            Variant::TaskOnly | Variant::BehindProxy => {}
            Variant::ButtonWording => args.extend(words(&["--wording", "button"])),
            Variant::OneAtATime => args.extend(words(&[
                "--one-at-a-time",
                "--min-delay-ms",
                "20",
                "--max-delay-ms",
                "20",
            ])),
            Variant::Https => {
                let certificates = certificates.expect("an HTTPS node needs certificates");
                args.push("--tls".to_owned());
                args.push(certificates.cert.display().to_string());
                args.push(certificates.key.display().to_string());
            }
            Variant::Slow => args.extend(words(&["--min-delay-ms", "50", "--max-delay-ms", "150"])),
        }
        let node = Process::start(free_port(), args);
        let scheme = if variant == Variant::Https {
            "https"
        } else {
            "http"
        };
        let (address, proxy) = if variant == Variant::BehindProxy {
            let port = free_port();
            let proxy = Process::start(
                port,
                vec![
                    "--proxy-to".to_owned(),
                    format!("http://127.0.0.1:{}", node.port),
                    "--keep-alive-requests".to_owned(),
                    "3".to_owned(),
                ],
            );
            (format!("http://127.0.0.1:{port}"), Some(proxy))
        } else {
            (format!("{scheme}://127.0.0.1:{}", node.port), None)
        };
        Self {
            address,
            node,
            _proxy: proxy,
        }
    }

    /// The plainest node ([`Variant::TaskOnly`]), which holds every
    /// `/clean` that archives for ever and creates `marker` when one arrives
    /// (a wipe it does at once, as when it is added): a clean in
    /// flight at the node for as long as a test wants, until it kills it.
    pub fn holding_cleans(marker: &std::path::Path) -> Self {
        let args = vec![
            "--database-url".to_owned(),
            super::database_url(),
            "--hold-cleans".to_owned(),
            marker.display().to_string(),
        ];
        let node = Process::start(free_port(), args);
        Self {
            address: format!("http://127.0.0.1:{}", node.port),
            node,
            _proxy: None,
        }
    }

    /// SIGKILL of the node (a proxy in front stays, answering 502).
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// A new process on the same port, counting from zero.
    pub fn restart(&mut self) {
        self.node.kill();
        self.node.spawn();
    }
}
