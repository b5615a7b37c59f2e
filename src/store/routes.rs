//! On a Redis Cluster, which primary serves each session group, so that a
//! walk of the groups (the sweep, the tally, a removal) costs one pipeline
//! per primary instead of one request per group. Learnt from `CLUSTER
//! SLOTS` and dropped at the first sign it is stale (a slot moved): the
//! walk then goes group by group, where the client follows redirections,
//! and the next walk learns the routes again.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use redis::Value;

/// Hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// The hash slot of a key whose hash tag is `tag` (the text between the
/// first `{` and `}`), as Redis computes it.
pub fn slot_of_tag(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % SLOTS
}

/// A primary: host and port as `CLUSTER SLOTS` names it.
pub type Primary = (String, u16);

/// Slot ranges by their first slot: (last slot, the primary serving them).
pub type SlotMap = BTreeMap<u16, (u16, Primary)>;

/// The last known owner of every slot, shared by the store's clones.
#[derive(Clone, Default)]
pub struct Routes {
    known: Arc<RwLock<Option<Arc<SlotMap>>>>,
}

impl Routes {
    /// The owner of each slot range, by the range's first slot.
    pub fn get(&self) -> Option<Arc<SlotMap>> {
        self.known.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn forget(&self) {
        *self.known.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Remembers the answer to `CLUSTER SLOTS`; false if it is not one.
    pub fn learn(&self, reply: Value) -> bool {
        let Value::Array(ranges) = reply else {
            return false;
        };
        let mut owners = BTreeMap::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return false;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return false;
            };
            let host = match primary.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return false,
            };
            let Some(Value::Int(port)) = primary.get(1) else {
                return false;
            };
            owners.insert(*start as u16, (*end as u16, (host, *port as u16)));
        }
        *self.known.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(owners));
        true
    }
}

/// The primary that serves `slot`, if the routes cover it.
pub fn owner(routes: &SlotMap, slot: u16) -> Option<&Primary> {
    let (_, (end, primary)) = routes.range(..=slot).next_back()?;
    (slot <= *end).then_some(primary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_hashes_to_the_slot_redis_gives_it() {
        // CLUSTER KEYSLOT of "{user1000}x" and of "foo", from Redis.
        assert_eq!(slot_of_tag("user1000"), 3443);
        assert_eq!(slot_of_tag("foo"), 12182);
    }

    #[test]
    fn each_slot_is_served_by_the_primary_of_its_range() {
        let routes = Routes::default();
        let primary = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        assert!(routes.learn(Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(5460), primary(7001)]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), primary(7002)]),
        ])));
        let known = routes.get().unwrap();
        assert_eq!(owner(&known, 0).map(|p| p.1), Some(7001));
        assert_eq!(owner(&known, 5460).map(|p| p.1), Some(7001));
        assert_eq!(owner(&known, 5461).map(|p| p.1), Some(7002));
        assert!(!routes.learn(Value::Int(3)));
        routes.forget();
        assert!(routes.get().is_none());
    }
}
