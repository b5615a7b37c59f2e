//! Node addresses: validated and normalised once, so that `HTTP://Node1:8080/`
//! and `http://node1:8080` are the same node everywhere (design.md §3).

use std::fmt;

/// An absolute `http(s)://host[:port]` URL with a lower-case host and no
/// trailing slash, user-info, path, query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeAddress(String);

/// Longest DNS name (RFC 1035).
pub const MAX_HOST_BYTES: usize = 253;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid node address {input:?}: {reason}")]
pub struct AddressError {
    pub input: String,
    pub reason: &'static str,
}

/// Why a node address does not parse as a URL, in the operator's words.
fn unparsed(error: url::ParseError) -> &'static str {
    use url::ParseError::*;
    match error {
        InvalidPort => "its port is not a number from 0 to 65535",
        EmptyHost => "it has no host",
        InvalidIpv4Address | InvalidIpv6Address => "its IP address is malformed",
        InvalidDomainCharacter | IdnaError => "its host name has a character no host name has",
        _ => "it is not an absolute URL",
    }
}

impl NodeAddress {
    pub fn parse(input: &str) -> Result<Self, AddressError> {
        let fail = |reason| AddressError {
            input: input.to_owned(),
            reason,
        };
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(fail("it is empty"));
        }
        let url = url::Url::parse(trimmed).map_err(|error| fail(unparsed(error)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(fail("the scheme must be http or https"));
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| fail("it has no host"))?;
        if host.len() > MAX_HOST_BYTES {
            return Err(fail("the host name is longer than 253 bytes"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(fail("it must not carry user-info"));
        }
        if url.path() != "/" && !url.path().is_empty() {
            return Err(fail("it must not have a path"));
        }
        // `Url` normalises "http://h:80/" to path "/" but keeps "http://h:80/?"
        // as an empty query: both a query and a fragment are refused.
        if url.query().is_some() || trimmed.contains('?') {
            return Err(fail("it must not have a query"));
        }
        if url.fragment().is_some() || trimmed.contains('#') {
            return Err(fail("it must not have a fragment"));
        }
        let mut normalised = format!("{}://{}", url.scheme(), host.to_ascii_lowercase());
        if let Some(port) = url.port() {
            normalised.push(':');
            normalised.push_str(&port.to_string());
        }
        Ok(Self(normalised))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The socket addresses the node's host resolves to (with the scheme's
    /// default port); empty if it does not resolve.
    pub async fn resolve(&self) -> Vec<std::net::SocketAddr> {
        let Ok(url) = url::Url::parse(&self.0) else {
            return Vec::new();
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Vec::new();
        };
        // `host_str` keeps an IPv6 host in brackets, as `host:port` needs.
        let host = host.to_owned();
        let lookup = tokio::net::lookup_host(format!("{host}:{port}"));
        let resolved = tokio::time::timeout(std::time::Duration::from_secs(2), lookup).await;
        match resolved {
            Ok(Ok(addrs)) => addrs.collect(),
            _ => Vec::new(),
        }
    }

    /// `host:port` (with the scheme's default port), the default node name.
    pub fn host_port(&self) -> String {
        self.0
            .split_once("://")
            .map(|(_, rest)| rest.to_owned())
            .unwrap_or_default()
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_case_and_trailing_slash() {
        let a = NodeAddress::parse("HTTP://Node1.Example:8080/").unwrap();
        assert_eq!(a.as_str(), "http://node1.example:8080");
        assert_eq!(
            NodeAddress::parse("https://n:443").unwrap().as_str(),
            "https://n"
        );
        assert_eq!(
            NodeAddress::parse("http://[::1]:9000").unwrap().as_str(),
            "http://[::1]:9000"
        );
    }

    #[test]
    fn refuses_everything_but_scheme_host_and_port() {
        for bad in [
            "",
            "node1:8080",
            "/relative",
            "ftp://node1",
            "http://user:pw@node1",
            "http://user@node1",
            "http://node1/path",
            "http://node1?x=1",
            "http://node1/?",
            "http://node1#frag",
            "http://",
            "not a url",
            &format!("http://{}.example:80", "a".repeat(250)),
        ] {
            assert!(NodeAddress::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_port_out_of_range_is_named_as_the_problem() {
        let error = NodeAddress::parse("http://h:99999").unwrap_err();
        assert_eq!(error.reason, "its port is not a number from 0 to 65535");
        let error = NodeAddress::parse("not a url").unwrap_err();
        assert_eq!(error.reason, "it is not an absolute URL");
    }
}
