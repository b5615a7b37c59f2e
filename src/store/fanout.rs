//! Every session group at once (see the layout in the module above): the
//! commands a caller builds for each group go in as few round trips as the
//! server allows, one pipeline on a single Redis, one per primary (or per
//! group) on a cluster, every primary served in parallel.

use std::collections::HashMap;

use super::routes::{owner, slot_of_tag, Primary};
use super::{Context, Core, StoreResult};

/// How many groups sessions are spread over: enough to spread over the
/// primaries of any cluster we plan for (see docs/capacity.md),
/// few enough that walking them all is one quick round of requests.
pub const GROUPS: usize = 256;

/// Every group's name, `00` to `ff`.
pub(super) fn all_groups() -> impl Iterator<Item = String> {
    (0..GROUPS).map(|group| format!("{group:02x}"))
}

impl Core {
    /// The commands `build` adds for each group, run in as few round
    /// trips as the server allows: one pipeline for all groups on a single
    /// Redis; on a cluster (a pipeline must stay in one slot) one per
    /// group, all at once. Returns each group's replies, group by group.
    pub(super) async fn query_groups<T: redis::FromRedisValue>(
        &self,
        context: &'static str,
        build: impl Fn(&str, &mut redis::Pipeline),
    ) -> StoreResult<Vec<Vec<T>>> {
        if !self.cluster {
            let mut pipe = redis::pipe();
            let mut sizes = Vec::with_capacity(GROUPS);
            for group in all_groups() {
                let before = pipe.len();
                build(&group, &mut pipe);
                sizes.push(pipe.len() - before);
            }
            let mut replies: std::collections::VecDeque<T> = pipe
                .query_async::<Vec<T>>(&mut self.conn())
                .await
                .context(context)?
                .into();
            return Ok(sizes
                .into_iter()
                .map(|size| replies.drain(..size.min(replies.len())).collect())
                .collect());
        }
        if let Some(replies) = self.query_groups_by_primary(&build).await {
            return Ok(replies);
        }
        let queries = all_groups().map(|group| {
            let mut pipe = redis::pipe();
            build(&group, &mut pipe);
            async move {
                if pipe.is_empty() {
                    return Ok(Vec::new());
                }
                pipe.query_async::<Vec<T>>(&mut self.conn())
                    .await
                    .context(context)
            }
        });
        futures::future::join_all(queries)
            .await
            .into_iter()
            .collect()
    }

    /// [`query_groups`](Self::query_groups) on a cluster whose routes are
    /// known: one pipeline per primary. `None` if the routes are unknown
    /// or stale (a slot moved: a reply is a redirection), after which the
    /// caller goes group by group; every walk is safe to repeat.
    async fn query_groups_by_primary<T: redis::FromRedisValue>(
        &self,
        build: &impl Fn(&str, &mut redis::Pipeline),
    ) -> Option<Vec<Vec<T>>> {
        if self.prefix.contains('{') {
            return None; // the prefix's tag puts every key in one slot
        }
        let routes = match self.routes.get() {
            Some(routes) => routes,
            None => {
                let slots: redis::Value = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut self.conn())
                    .await
                    .ok()?;
                self.routes.learn(slots).then_some(())?;
                self.routes.get()?
            }
        };
        /// One primary's pipeline and, per group in it, (group, commands).
        type Batch = (redis::Pipeline, Vec<(usize, usize)>);
        let mut by_primary: HashMap<&Primary, Batch> = HashMap::new();
        for (i, group) in all_groups().enumerate() {
            let primary = owner(&routes, slot_of_tag(&format!("s:{group}")))?;
            let (pipe, parts) = by_primary.entry(primary).or_default();
            let before = pipe.len();
            build(&group, pipe);
            parts.push((i, pipe.len() - before));
        }
        let calls = by_primary
            .into_iter()
            .map(|((host, port), (pipe, parts))| async move {
                // A primary none of whose groups has a command this round
                // (the walk's later rounds read only some lists): nothing
                // to send, and the client refuses an empty pipeline, which
                // would read as stale routes.
                if pipe.is_empty() {
                    return (parts, Some(Ok(Vec::new())));
                }
                let replies = self.conn().to_primary(pipe, host.clone(), *port).await;
                (parts, replies)
            });
        let mut replies: Vec<Vec<T>> = (0..GROUPS).map(|_| Vec::new()).collect();
        let mut stale = false;
        for (parts, answer) in futures::future::join_all(calls).await {
            let Some(Ok(values)) = answer else {
                stale = true;
                continue;
            };
            let mut values = values.into_iter();
            for (i, size) in parts {
                let group: Vec<redis::Value> = values.by_ref().take(size).collect();
                stale |= group.len() < size;
                for value in group {
                    // A redirection (or any error) read as a plain value:
                    // the walk goes group by group, through the client.
                    if matches!(value, redis::Value::ServerError(_)) {
                        stale = true;
                        continue;
                    }
                    match redis::from_redis_value(value) {
                        Ok(reply) => replies[i].push(reply),
                        Err(_) => stale = true,
                    }
                }
            }
        }
        if stale {
            self.routes.forget();
            return None;
        }
        Some(replies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_256_groups_each_named_once() {
        let groups: std::collections::HashSet<String> = all_groups().collect();
        assert_eq!(groups.len(), GROUPS);
        assert!(groups.contains("00") && groups.contains("ff"));
    }
}
