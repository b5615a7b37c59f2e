//! What `REDIS_URL` names: one Redis, or the seed nodes of a Redis Cluster.

/// A parsed `REDIS_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `redis://host:port/db`: one Redis.
    Single(String),
    /// `redis+cluster://host1:port1,host2:port2` (credentials, if any,
    /// before the first host apply to every node), or a comma-separated
    /// list of `redis://` URLs: seed nodes of a cluster, as `redis://` URLs.
    /// Any one reachable seed is enough; the client learns the rest.
    Cluster(Vec<String>),
}

impl RedisTarget {
    pub fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            let (credentials, hosts) = match rest.rsplit_once('@') {
                Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
                None => (String::new(), rest),
            };
            let hosts = hosts.trim_end_matches('/');
            let seeds: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|host| !host.is_empty())
                .map(|host| format!("redis://{credentials}{host}"))
                .collect();
            if seeds.is_empty() {
                return Err(
                    "redis+cluster:// names no seed node (redis+cluster://host:port,host:port)"
                        .into(),
                );
            }
            return Ok(Self::Cluster(seeds));
        }
        if url.starts_with("rediss+cluster://") {
            return Err("TLS to a Redis Cluster is not supported; use redis+cluster://".into());
        }
        if url.contains(',') {
            let seeds: Vec<String> = url
                .split(',')
                .map(str::trim)
                .filter(|seed| !seed.is_empty())
                .map(str::to_owned)
                .collect();
            if let Some(bad) = seeds.iter().find(|seed| !seed.starts_with("redis://")) {
                return Err(format!(
                    "a list of cluster seeds must be redis:// URLs, not {bad:?}"
                ));
            }
            return Ok(Self::Cluster(seeds));
        }
        Ok(Self::Single(url.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::RedisTarget;

    #[test]
    fn a_plain_url_is_one_redis() {
        assert_eq!(
            RedisTarget::parse("redis://127.0.0.1:6379/2"),
            Ok(RedisTarget::Single("redis://127.0.0.1:6379/2".into()))
        );
    }

    #[test]
    fn a_cluster_url_names_every_seed_with_the_shared_credentials() {
        assert_eq!(
            RedisTarget::parse("redis+cluster://:secret@10.0.0.1:7000,10.0.0.2:7000/"),
            Ok(RedisTarget::Cluster(vec![
                "redis://:secret@10.0.0.1:7000".into(),
                "redis://:secret@10.0.0.2:7000".into(),
            ]))
        );
    }

    #[test]
    fn a_list_of_urls_is_a_cluster_and_each_must_be_a_redis_url() {
        assert_eq!(
            RedisTarget::parse("redis://a:1, redis://b:2"),
            Ok(RedisTarget::Cluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        assert!(RedisTarget::parse("redis://a:1,b:2").is_err());
        assert!(RedisTarget::parse("redis+cluster://").is_err());
        assert!(RedisTarget::parse("rediss+cluster://a:1").is_err());
    }
}
