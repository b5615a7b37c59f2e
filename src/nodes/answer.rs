//! What a node's answer to a press says: the count, or a fencing refusal.

use http::StatusCode;

use super::error::NodeCallError;

/// The count in a node's answer to a press; a fencing refusal (409 with
/// `"code":"stale_epoch"`) is told apart; any other status is a failure.
pub(super) fn clicks_of(status: StatusCode, body: &[u8]) -> Result<i64, NodeCallError> {
    if status == StatusCode::CONFLICT {
        #[derive(serde::Deserialize)]
        struct Refusal<'a> {
            code: &'a str,
            fence: u64,
        }
        if let Ok(refusal) = serde_json::from_slice::<Refusal>(body) {
            if refusal.code == "stale_epoch" {
                return Err(NodeCallError::StaleEpoch {
                    fence: refusal.fence,
                });
            }
        }
    }
    if !status.is_success() {
        return Err(NodeCallError::Status(status));
    }
    parse_clicks(body)
}

/// Reads `You clicked N times`, also in the task template's words (`You
/// clicked the button N times`): the count is the number right before
/// `time(s)`, and the answer must begin with `You clicked`.
fn parse_clicks(body: &[u8]) -> Result<i64, NodeCallError> {
    let text = std::str::from_utf8(body).map_err(|_| NodeCallError::Body("not UTF-8".into()))?;
    text.trim()
        .strip_prefix("You clicked ")
        .and_then(|rest| {
            rest.strip_suffix(" times")
                .or_else(|| rest.strip_suffix(" time"))
        })
        .and_then(|rest| rest.rsplit(' ').next())
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .ok_or_else(|| NodeCallError::Body(text.chars().take(80).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_count_from_a_node_answer() {
        assert_eq!(parse_clicks(b"You clicked 5 times").unwrap(), 5);
        assert_eq!(parse_clicks(b"You clicked 1 time\n").unwrap(), 1);
        assert_eq!(parse_clicks(b"You clicked the button 7 times").unwrap(), 7);
        for bad in [
            &b"OK"[..],
            b"You clicked -1 times",
            b"You clicked many times",
            b"You clicked the button times",
            b"We clicked 3 times",
            b"\xff",
        ] {
            assert!(parse_clicks(bad).is_err());
        }
    }
}
