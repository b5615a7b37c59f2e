//! A node's answer to a press, read from the bytes of its connection. The
//! head is parsed by `httparse` (hyper's parser); the body is framed the
//! three ways HTTP/1.1 allows: `Content-Length`, chunked, or up to the end
//! of the connection. Anything else (two lengths, a length beside chunked,
//! a bad chunk) is refused: the node answered badly.

/// An answer read whole.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    pub status: u16,
    pub body: Vec<u8>,
    /// Bytes of the connection it took.
    pub len: usize,
    /// The connection may carry another request.
    pub reusable: bool,
}

/// What the bytes read so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Not a whole answer yet.
    Partial,
    /// The body runs to the end of the connection, which has not come yet.
    UntilClose,
    Done(Parsed),
}

/// Headers read from a node's answer; more is a bad answer.
const MAX_HEADERS: usize = 32;

/// Reads the answer at the start of `buf`, at most `limit` body bytes.
/// `eof`: the connection has ended after `buf`.
pub fn parse_answer(buf: &[u8], limit: usize, eof: bool) -> Result<Read, String> {
    let mut at = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let head_len = match response.parse(&buf[at..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if eof => {
                return Err("the node closed the connection before answering".to_owned())
            }
            Ok(httparse::Status::Partial) => return Ok(Read::Partial),
            Err(e) => return Err(format!("the node's answer is not HTTP: {e}")),
        };
        let status = response.code.unwrap_or(0);
        let version = response.version.unwrap_or(0);
        if (100..200).contains(&status) {
            // An interim answer (100 Continue): the real one follows.
            at += head_len;
            continue;
        }
        let framing = framing(response.headers)?;
        let mut reusable = version == 1 && !framing.close || version == 0 && framing.keep_alive;
        let body_at = at + head_len;
        let rest = &buf[body_at..];
        let (body, body_len) = match framing.length {
            _ if status == 204 || status == 304 => (Vec::new(), 0),
            Length::Fixed(n) if n > limit => {
                return Err(format!("the node's answer is larger than {limit} bytes"))
            }
            Length::Fixed(n) if rest.len() < n && eof => {
                return Err("the node closed the connection in its answer's body".to_owned())
            }
            Length::Fixed(n) if rest.len() < n => return Ok(Read::Partial),
            Length::Fixed(n) => (rest[..n].to_vec(), n),
            Length::Chunked => match dechunk(rest, limit)? {
                Some(done) => done,
                None if eof => {
                    return Err("the node closed the connection in its answer's body".to_owned())
                }
                None => return Ok(Read::Partial),
            },
            Length::UntilClose if rest.len() > limit => {
                return Err(format!("the node's answer is larger than {limit} bytes"))
            }
            Length::UntilClose if !eof => return Ok(Read::UntilClose),
            Length::UntilClose => {
                reusable = false;
                (rest.to_vec(), rest.len())
            }
        };
        return Ok(Read::Done(Parsed {
            status,
            body,
            len: body_at + body_len,
            reusable,
        }));
    }
}

enum Length {
    Fixed(usize),
    Chunked,
    UntilClose,
}

struct Framing {
    length: Length,
    close: bool,
    keep_alive: bool,
}

fn framing(headers: &[httparse::Header<'_>]) -> Result<Framing, String> {
    let mut length = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive = false;
    for header in headers {
        let value = std::str::from_utf8(header.value).unwrap_or("");
        if header.name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("the node sent a bad Content-Length: {value:?}"))?;
            if length.is_some_and(|m| m != n) {
                return Err("the node sent two different Content-Lengths".to_owned());
            }
            length = Some(n);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return Err(format!(
                    "the node sent a Transfer-Encoding we do not read: {value:?}"
                ));
            }
            chunked = true;
        } else if header.name.eq_ignore_ascii_case("connection") {
            for option in value.split(',').map(str::trim) {
                close |= option.eq_ignore_ascii_case("close");
                keep_alive |= option.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    let length = match (length, chunked) {
        (Some(_), true) => {
            return Err("the node sent both Content-Length and Transfer-Encoding".to_owned())
        }
        (Some(n), false) => Length::Fixed(n),
        (None, true) => Length::Chunked,
        (None, false) => {
            close = true;
            Length::UntilClose
        }
    };
    Ok(Framing {
        length,
        close,
        keep_alive,
    })
}

/// A chunked body at the start of `buf`: the body and the bytes it took,
/// or `None` if it is not whole yet.
fn dechunk(buf: &[u8], limit: usize) -> Result<Option<(Vec<u8>, usize)>, String> {
    let bad = |what: &str| format!("the node sent a bad chunked body: {what}");
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(&buf[at..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(bad("chunk size")),
        };
        at += size_len;
        if size == 0 {
            break;
        }
        let size = usize::try_from(size).map_err(|_| bad("chunk size"))?;
        if body.len() + size > limit {
            return Err(format!("the node's answer is larger than {limit} bytes"));
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size;
        if &buf[at..at + 2] != b"\r\n" {
            return Err(bad("no line end after a chunk"));
        }
        at += 2;
    }
    // Trailers, if any, up to an empty line.
    loop {
        let Some(end) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        at += end + 2;
        if end == 0 {
            return Ok(Some((body, at)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn done(buf: &[u8]) -> Parsed {
        match parse_answer(buf, 1024, false) {
            Ok(Read::Done(parsed)) => parsed,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_plain_answer_is_read_and_the_connection_kept() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 18\r\n\r\nYou clicked 1 timesHTTP/1.1";
        let parsed = done(raw);
        assert_eq!(parsed.body, b"You clicked 1 time");
        assert_eq!(parsed.len, raw.len() - b"sHTTP/1.1".len());
        assert!(parsed.reusable);
    }

    #[test]
    fn connection_close_and_http_1_0_end_the_connection() {
        assert!(
            !done(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").reusable
        );
        assert!(!done(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").reusable);
        assert!(
            done(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n")
                .reusable
        );
    }

    #[test]
    fn a_body_without_length_runs_to_the_end_of_the_connection() {
        let raw = b"HTTP/1.1 200 OK\r\n\r\nYou clicked 2 times";
        assert_eq!(parse_answer(raw, 1024, false), Ok(Read::UntilClose));
        match parse_answer(raw, 1024, true) {
            Ok(Read::Done(parsed)) => {
                assert_eq!(parsed.body, b"You clicked 2 times");
                assert!(!parsed.reusable);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interim_answer_is_skipped() {
        let parsed =
            done(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!((parsed.status, parsed.body.as_slice()), (200, &b"ok"[..]));
    }

    #[test]
    fn ambiguous_or_oversized_answers_are_refused() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
            b"garbage\r\n\r\n",
        ] {
            assert!(
                parse_answer(raw, 1024, false).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn an_answer_cut_by_the_end_of_the_connection_is_an_error() {
        assert!(parse_answer(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
            1024,
            true
        )
        .is_err());
        assert!(parse_answer(b"HTTP/1.1 200", 1024, true).is_err());
        assert!(parse_answer(b"", 1024, true).is_err());
    }

    fn chunked(body: &[u8], cuts: &[usize], trailer: bool) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut at = 0;
        for &cut in cuts {
            let end = (at + cut).min(body.len());
            if end > at {
                out.extend_from_slice(format!("{:x}\r\n", end - at).as_bytes());
                out.extend_from_slice(&body[at..end]);
                out.extend_from_slice(b"\r\n");
                at = end;
            }
        }
        if at < body.len() {
            out.extend_from_slice(format!("{:X}\r\n", body.len() - at).as_bytes());
            out.extend_from_slice(&body[at..]);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n");
        if trailer {
            out.extend_from_slice(b"X-Trailer: 1\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    proptest! {
        /// However a body is chunked, it reads back whole, and no strict
        /// prefix of the answer reads as done.
        #[test]
        fn a_chunked_body_reads_back_whole(
            body in prop::collection::vec(any::<u8>(), 0..300),
            cuts in prop::collection::vec(1usize..50, 0..10),
            trailer in any::<bool>(),
            next in prop::collection::vec(any::<u8>(), 0..20),
        ) {
            let raw = chunked(&body, &cuts, trailer);
            let mut stream = raw.clone();
            stream.extend_from_slice(&next);
            let parsed = done(&stream);
            prop_assert_eq!(&parsed.body, &body);
            prop_assert_eq!(parsed.len, raw.len());
            for cut in 0..raw.len() {
                prop_assert_eq!(parse_answer(&raw[..cut], 1024, false), Ok(Read::Partial));
            }
        }

        #[test]
        fn a_fixed_body_reads_back_whole(body in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut raw = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            raw.extend_from_slice(&body);
            prop_assert_eq!(&done(&raw).body, &body);
            for cut in 0..raw.len() {
                prop_assert_eq!(parse_answer(&raw[..cut], 1024, false), Ok(Read::Partial));
            }
        }

        #[test]
        fn any_bytes_parse_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), eof in any::<bool>()) {
            let _ = parse_answer(&bytes, 1024, eof);
        }
    }
}
