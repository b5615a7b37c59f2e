//! A reference `click-node` on its own thread and tokio runtime, so a test
//! can kill it like a process: dropping the runtime closes its listener and
//! every open connection at once.

use std::net::SocketAddr;
use std::sync::Arc;

use click_node::{Config, Node};

pub struct TestNode {
    pub name: String,
    pub address: String,
    pub addr: SocketAddr,
    pub node: Arc<Node>,
    clean_all: bool,
    stop: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

impl TestNode {
    pub fn start(name: &str, clean_all: bool) -> Self {
        Self::start_on(name, clean_all, "127.0.0.1:0".parse().unwrap())
    }

    pub fn start_on(name: &str, clean_all: bool, addr: SocketAddr) -> Self {
        let mut config = Config::for_tests(name, &super::database_url());
        config.clean_all = clean_all;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        // The node's runtime lives on its own thread: tests run inside a
        // runtime, where another one can be neither driven nor dropped.
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let started = runtime.block_on(async {
                let node = Node::new(&config).unwrap();
                // Re-binding a just-killed node's port can race its teardown.
                for _ in 0..100 {
                    if let Ok(listener) = tokio::net::TcpListener::bind(addr).await {
                        let bound = listener.local_addr().unwrap();
                        tokio::spawn(click_node::serve(
                            listener,
                            node.clone(),
                            std::future::pending(),
                        ));
                        return (node, bound);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                panic!("cannot bind {addr}")
            });
            ready_tx.send(started).unwrap();
            let _ = stop_rx.recv();
            // Waits for every task to be dropped, so every socket is closed
            // when `kill` returns, as the kernel closes a killed process's.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
        });
        let (node, addr) = ready_rx.recv().expect("node thread starts");
        Self {
            name: name.to_owned(),
            address: format!("http://127.0.0.1:{}", addr.port()),
            addr,
            node,
            clean_all,
            stop: Some((stop_tx, thread)),
        }
    }

    /// Kills the node: its port stops answering, its counts are gone.
    pub fn kill(&mut self) {
        if let Some((stop, thread)) = self.stop.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }

    /// A fresh node process on the same address (empty counts).
    pub fn restart(&mut self) {
        self.kill();
        *self = Self::start_on(&self.name.clone(), self.clean_all, self.addr);
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
    }
}
