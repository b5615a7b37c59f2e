//! What a node is to the rest of the balancer: its state and its record in
//! the registry. Plain data with no dependency, so the store can persist it
//! and everything above can speak of it.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Takes new sessions and presses.
    Up,
    /// Failed: no traffic until it is healthy again and wiped.
    Down,
    /// Being removed: no new sessions; its sessions are being archived.
    Draining,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Down => "down",
            NodeState::Draining => "draining",
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeState {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "up" => Ok(NodeState::Up),
            "down" => Ok(NodeState::Down),
            "draining" => Ok(NodeState::Draining),
            _ => Err(()),
        }
    }
}

/// A node as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub address: String,
    pub name: String,
    pub weight: u32,
    pub state: NodeState,
    pub active_sessions: i64,
    /// The instance id the node reported when it was last wiped, if any:
    /// a node reporting another one restarted and lost its counts.
    pub instance: Option<String>,
    /// Why the node is down, when it is.
    pub reason: Option<String>,
    /// Down until an admin adds it again, not recovered by health checks:
    /// it takes no clean tokens and a `/clean` to it timed out, so that
    /// clean may still reach it after it serves again (design.md, "Held
    /// down").
    pub held_down: bool,
    /// Its number (Postgres assigns it): session mappings name their node
    /// by it.
    pub number: u64,
    /// What it offers beyond `/press` and `/clean`, as last detected.
    pub offers: Offers,
    /// The token of the node's last clean that the registry recorded: the
    /// fencing epoch presses to it carry (design.md, "Fencing at the node").
    pub epoch: u64,
}

impl NodeRecord {
    /// The record the registry's hash of a node holds (its fields as
    /// `HGETALL` lists them); `None` for an unregistered node (no fields).
    pub fn from_fields(
        address: &str,
        fields: &[(String, String)],
        sessions: Option<i64>,
    ) -> Option<Self> {
        if fields.is_empty() {
            return None;
        }
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        Some(NodeRecord {
            address: address.to_owned(),
            name: get("name").unwrap_or(address).to_owned(),
            weight: get("weight").and_then(|w| w.parse().ok()).unwrap_or(1),
            state: get("state")
                .and_then(|s| s.parse().ok())
                .unwrap_or(NodeState::Down),
            active_sessions: sessions.unwrap_or(0),
            instance: get("instance").filter(|i| !i.is_empty()).map(str::to_owned),
            reason: get("reason").filter(|r| !r.is_empty()).map(str::to_owned),
            held_down: get("held") == Some("1"),
            number: get("number").and_then(|n| n.parse().ok()).unwrap_or(0),
            offers: Offers::decode(get("offers").unwrap_or("")),
            epoch: get("epoch").and_then(|e| e.parse().ok()).unwrap_or(0),
        })
    }
}

/// What a node offers beyond the task's API (`/press`, `/clean`), detected
/// when it is added and when it recovers, and what each buys (the README's
/// table of guarantees).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Offers {
    /// Answers its health path (`HEALTH_CHECK_PATH`) with a 2xx.
    pub health: bool,
    /// Reports an instance id there: a restart is detected at the next
    /// health check (without it, a node that restarted between two checks
    /// is not noticed and its sessions go on from their base).
    pub instance_id: bool,
    /// Stamps its archive rows with the clean token it was given: a late
    /// archive after a failover is never counted.
    pub clean_tokens: bool,
    /// Cleans only the sessions named in `session_ids` (answers
    /// `{"cleaned":[..]}`); otherwise every clean forgets everything and
    /// live sessions are re-based.
    pub selective_clean: bool,
    /// Refuses a press under a fencing epoch older than its session's last
    /// clean: no pause, skew or stale cache of a replica can make a count
    /// go above the truth or reset, and its cleans need not wait for a
    /// silent replica.
    pub fencing: bool,
}

impl Offers {
    const NAMES: [&'static str; 5] = [
        "health",
        "instance_id",
        "clean_tokens",
        "selective_clean",
        "fencing",
    ];

    fn flags(self) -> [bool; 5] {
        [
            self.health,
            self.instance_id,
            self.clean_tokens,
            self.selective_clean,
            self.fencing,
        ]
    }

    /// The names of what it offers, comma-separated ("" for nothing), as
    /// the registry keeps them.
    pub fn encode(self) -> String {
        Self::NAMES
            .iter()
            .zip(self.flags())
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn decode(text: &str) -> Self {
        let has = |name: &str| text.split(',').any(|n| n == name);
        Offers {
            health: has("health"),
            instance_id: has("instance_id"),
            clean_tokens: has("clean_tokens"),
            selective_clean: has("selective_clean"),
            fencing: has("fencing"),
        }
    }

    /// A sentence for the audit log and the logs.
    pub fn describe(self) -> String {
        let words = [
            "a health path",
            "an instance id",
            "clean tokens",
            "selective cleans",
            "fenced presses",
        ];
        let offered: Vec<&str> = words
            .iter()
            .zip(self.flags())
            .filter(|(_, on)| *on)
            .map(|(word, _)| *word)
            .collect();
        match offered.as_slice() {
            [] => "offers the task's API only (/press, /clean)".to_owned(),
            _ => format!("offers {}", offered.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Offers;

    #[test]
    fn offers_survive_the_registry_text() {
        for offers in [
            Offers::default(),
            Offers {
                health: true,
                instance_id: true,
                clean_tokens: false,
                selective_clean: true,
                fencing: true,
            },
        ] {
            assert_eq!(Offers::decode(&offers.encode()), offers);
        }
        assert_eq!(
            Offers::decode("health,unknown"),
            Offers {
                health: true,
                ..Offers::default()
            }
        );
    }
}
