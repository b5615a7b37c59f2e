//! A Redis Cluster of a test's own: three primaries on loopback
//! (`scripts/redis-cluster.sh`), which the test may reshard or crash.

use std::net::TcpListener;
use std::process::Command;

use redis::aio::MultiplexedConnection;

pub struct LoopbackCluster {
    /// The primaries listen on `base`, `base + 1`, `base + 2` (and their
    /// cluster bus 10,000 higher).
    pub base: u16,
    url: String,
}

/// Six free ports: three for the primaries, three for their bus.
fn free_base() -> u16 {
    loop {
        let base = 21_000 + (uuid::Uuid::new_v4().as_u128() % 18_000) as u16;
        let free = (0..3).all(|i| {
            TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + i + 10_000)).is_ok()
        });
        if free {
            return base;
        }
    }
}

fn script(args: &[String]) -> String {
    let out = Command::new("bash")
        .arg("scripts/redis-cluster.sh")
        .args(args)
        .output()
        .expect("scripts/redis-cluster.sh runs");
    assert!(
        out.status.success(),
        "redis-cluster.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl LoopbackCluster {
    pub fn start() -> Self {
        let base = free_base();
        let url = script(&["start".into(), base.to_string()]);
        Self { base, url }
    }

    /// `redis+cluster://` with every primary as a seed.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn ports(&self) -> [u16; 3] {
        [self.base, self.base + 1, self.base + 2]
    }

    /// kill -9 primary `n` and start it again, empty (it keeps its slots).
    pub fn crash(&self, n: u16) {
        script(&["crash".into(), self.base.to_string(), n.to_string()]);
    }

    /// Primary `n` writes a snapshot (an RDB)...
    pub fn save(&self, n: u16) {
        script(&["save".into(), self.base.to_string(), n.to_string()]);
    }

    /// ...and, kill -9'd, comes back on it.
    pub fn roll_back(&self, n: u16) {
        script(&["rollback".into(), self.base.to_string(), n.to_string()]);
    }

    pub async fn conn(&self, port: u16) -> MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// The hash slot of `key`, as the cluster computes it.
    pub async fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut self.conn(self.base).await)
            .await
            .unwrap()
    }

    /// The port of the primary that serves `slot`, as primary `asked` sees it.
    pub async fn owner(&self, slot: u16, asked: u16) -> u16 {
        let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.conn(asked).await)
            .await
            .unwrap();
        for range in ranges {
            let int = |v: &redis::Value| match v {
                redis::Value::Int(i) => *i,
                other => panic!("not a number: {other:?}"),
            };
            let (start, end) = (int(&range[0]), int(&range[1]));
            if (start..=end).contains(&(slot as i64)) {
                let redis::Value::Array(primary) = &range[2] else {
                    panic!("no primary in {range:?}");
                };
                return int(&primary[1]) as u16;
            }
        }
        panic!("slot {slot} has no owner");
    }

    async fn id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async(&mut self.conn(port).await)
            .await
            .unwrap()
    }

    /// Moves `slot` and its keys to primary `to`, the way `redis-cli
    /// --cluster reshard` does: importing/migrating, `MIGRATE` a few keys
    /// at a time, then the new owner is told to every primary. Returns how
    /// many keys moved.
    pub async fn move_slot(&self, slot: u16, to: u16) -> usize {
        let from = self.owner(slot, self.base).await;
        if from == to {
            return 0;
        }
        let (from_id, to_id) = (self.id(from).await, self.id(to).await);
        let mut src = self.conn(from).await;
        let mut dst = self.conn(to).await;
        let setslot = |state: &str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
            cmd
        };
        setslot("IMPORTING", &from_id)
            .query_async::<()>(&mut dst)
            .await
            .unwrap();
        setslot("MIGRATING", &to_id)
            .query_async::<()>(&mut src)
            .await
            .unwrap();
        let mut moved = 0;
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(10)
                .query_async(&mut src)
                .await
                .unwrap();
            if keys.is_empty() {
                break;
            }
            moved += keys.len();
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query_async::<()>(&mut src)
                .await
                .unwrap();
        }
        for port in [to, from].into_iter().chain(self.ports()) {
            setslot("NODE", &to_id)
                .query_async::<()>(&mut self.conn(port).await)
                .await
                .unwrap();
        }
        moved
    }
}

impl Drop for LoopbackCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg("scripts/redis-cluster.sh")
            .arg("stop")
            .arg(self.base.to_string())
            .output();
    }
}
