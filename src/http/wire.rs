//! The bytes of the one request the listener answers without hyper: a
//! plain `POST /press`. Everything here is about deciding, from a request's
//! head, whether it is plain enough; anything that is not goes to hyper and
//! the router unread, so the rules for odd requests (smuggling, limits,
//! `Expect`, HTTP/1.0, chunked bodies) stay hyper's and the router's.
//!
//! The head is parsed by `httparse` (hyper's own parser); this module only
//! reads its headers. It is property-tested against hyper's server itself,
//! run over an in-memory stream, in `tests`.

use std::cell::RefCell;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::extract::{is_json_content_type, MAX_BODY_BYTES};

/// A head not complete within this many bytes goes to hyper (which has
/// its own, larger limit and answers 431 past it).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Headers read; a request with more goes to hyper.
const MAX_HEADERS: usize = 32;

/// What a buffer's first request is.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// Its head is not complete yet.
    Partial,
    /// A plain press the listener serves itself.
    Press(PressHead),
    /// Anything else: hyper and the router answer it.
    Other,
}

#[derive(Debug, PartialEq, Eq)]
pub struct PressHead {
    /// Bytes of the head, the blank line included.
    pub head_len: usize,
    /// Bytes of the body that follows.
    pub content_length: usize,
    /// `Accept` asks for JSON.
    pub wants_json: bool,
    /// `Connection: close`: answer, then close.
    pub close: bool,
}

impl PressHead {
    /// Bytes of the whole request.
    pub fn len(&self) -> usize {
        self.head_len + self.content_length
    }
}

/// Reads the head at the start of `buf`. A press is served here only when
/// nothing about it is ambiguous: HTTP/1.1, target exactly `/press`, one
/// `Content-Length` of digits within the body limit, a JSON content type,
/// and none of `Transfer-Encoding`, `Expect`, `Upgrade`, or a `Connection`
/// option other than `keep-alive` / `close`.
pub fn classify(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Head::Partial,
        _ => return Head::Other,
    };
    if request.method != Some("POST")
        || request.path != Some("/press")
        || request.version != Some(1)
    {
        return Head::Other;
    }
    let mut content_length = None;
    let mut content_type = None;
    let mut accept = None;
    let mut close = false;
    for header in request.headers.iter() {
        let name = header.name;
        let Ok(value) = std::str::from_utf8(header.value) else {
            return Head::Other;
        };
        if name.eq_ignore_ascii_case("content-length") {
            match (content_length, parse_length(value)) {
                (None, Some(n)) => content_length = Some(n),
                _ => return Head::Other,
            }
        } else if name.eq_ignore_ascii_case("content-type") {
            if content_type.replace(value).is_some() {
                return Head::Other;
            }
        } else if name.eq_ignore_ascii_case("accept") {
            // The router reads the first one only; so do we.
            accept.get_or_insert(value);
        } else if name.eq_ignore_ascii_case("connection") {
            for option in value.split(',').map(str::trim) {
                if option.eq_ignore_ascii_case("close") {
                    close = true;
                } else if !option.eq_ignore_ascii_case("keep-alive") {
                    return Head::Other;
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            return Head::Other;
        }
    }
    match (content_length, content_type) {
        (Some(n), Some(content_type))
            if n <= MAX_BODY_BYTES && is_json_content_type(content_type) =>
        {
            Head::Press(PressHead {
                head_len,
                content_length: n,
                wants_json: super::extract::wants_json(accept),
                close,
            })
        }
        _ => Head::Other,
    }
}

/// Digits only (no sign, no list, no blank): what is unambiguous.
fn parse_length(value: &str) -> Option<usize> {
    if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// An answer's bytes: status line, our headers, `Content-Length`, body.
pub fn response(
    status: http::StatusCode,
    headers: &[(&str, &[u8])],
    body: &[u8],
    close: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    if close {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\ndate: ");
    with_date(|date| out.extend_from_slice(date));
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

thread_local! {
    /// The `Date` header, formatted once a second per thread (as hyper does).
    static DATE: RefCell<(SystemTime, Vec<u8>)> = const { RefCell::new((SystemTime::UNIX_EPOCH, Vec::new())) };
}

fn with_date(write: impl FnOnce(&[u8])) {
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        let now = SystemTime::now();
        if now.duration_since(cached.0).unwrap_or(Duration::MAX) >= Duration::from_secs(1) {
            let second = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| SystemTime::UNIX_EPOCH + Duration::from_secs(d.as_secs()))
                .unwrap_or(now);
            *cached = (second, httpdate::fmt_http_date(second).into_bytes());
        }
        write(&cached.1);
    });
}

/// A connection whose first bytes were already read: they are read again
/// first. Hands a connection to hyper after the listener looked at it.
pub struct Rewind<T> {
    prefix: Bytes,
    inner: T,
}

impl<T> Rewind<T> {
    pub fn new(prefix: Bytes, inner: T) -> Self {
        Self { prefix, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.prefix.has_remaining() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PLAIN: &[u8] = b"POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"session_id\":\"a\"}";

    fn press(head: &[u8]) -> Option<PressHead> {
        match classify(head) {
            Head::Press(p) => Some(p),
            _ => None,
        }
    }

    #[test]
    fn a_plain_press_is_served_here() {
        let head = press(PLAIN).expect("plain press");
        assert_eq!(head.content_length, 18);
        assert_eq!(&PLAIN[head.head_len..head.head_len + 2], b"{\"");
        assert!(!head.close && !head.wants_json);
    }

    #[test]
    fn an_incomplete_head_asks_for_more() {
        assert_eq!(classify(&PLAIN[..30]), Head::Partial);
        assert_eq!(classify(b""), Head::Partial);
    }

    #[test]
    fn anything_ambiguous_goes_to_hyper() {
        let cases: &[&[u8]] = &[
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: +5\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5, 5\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
            b"POST /press HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n",
            b"POST /press?x=1 HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n",
            b"GET /press HTTP/1.1\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Type: application/json\r\n Content-Length: 5\r\n\r\n",
            b"POST /press HTTP/1.1\r\nContent-Length : 5\r\nContent-Type: application/json\r\n\r\n",
            b"POST\t/press HTTP/1.1\r\n\r\n",
        ];
        for case in cases {
            assert_eq!(
                classify(case),
                Head::Other,
                "{}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn an_endless_head_goes_to_hyper() {
        let mut head = b"POST /press HTTP/1.1\r\nX: ".to_vec();
        head.resize(MAX_HEAD_BYTES, b'a');
        assert_eq!(classify(&head), Head::Other);
    }

    #[test]
    fn connection_close_and_accept_json_are_read() {
        let head = press(b"POST /press HTTP/1.1\r\nConnection: Close\r\nAccept: text/html, application/json\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}")
            .expect("plain press");
        assert!(head.close && head.wants_json);
    }

    #[test]
    fn rewind_reads_the_prefix_first() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::AsyncReadExt;
            let mut io = Rewind::new(Bytes::from_static(b"abc"), &b"def"[..]);
            let mut all = String::new();
            io.read_to_string(&mut all).await.unwrap();
            assert_eq!(all, "abcdef");
        });
    }

    fn header_line() -> impl Strategy<Value = String> {
        let names = prop::sample::select(vec![
            "Content-Length",
            "content-length",
            "Content-Type",
            "Transfer-Encoding",
            "Connection",
            "Accept",
            "Expect",
            "Host",
            "X-Session-Id",
        ]);
        let values = prop::sample::select(vec![
            "17",
            "0",
            "4096",
            "4097",
            "-1",
            "1 7",
            "application/json",
            "application/json; charset=latin1",
            "chunked",
            "close",
            "keep-alive",
            "keep-alive, upgrade",
            "100-continue",
            "",
        ]);
        (names, values).prop_map(|(n, v)| format!("{n}: {v}\r\n"))
    }

    /// What hyper's own HTTP/1 server reads from `raw` as its first
    /// request (method, target, whole body), run for real over an
    /// in-memory stream: the independent judge of `classify`. `None` when
    /// hyper refuses the request or its body does not arrive whole.
    fn hyper_reads(raw: &[u8]) -> Option<(String, String, Vec<u8>)> {
        use http_body_util::BodyExt;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, server) = tokio::io::duplex(64 * 1024);
            let (seen, got) = tokio::sync::oneshot::channel();
            let seen = std::sync::Mutex::new(Some(seen));
            let service = hyper::service::service_fn(
                move |request: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.lock().unwrap().take();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes().to_vec());
                        if let (Some(seen), Ok(body)) = (seen, body) {
                            let _ =
                                seen.send((parts.method.to_string(), parts.uri.to_string(), body));
                        }
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Empty::<Bytes>::new(),
                        ))
                    }
                },
            );
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(server), service);
            let serving = tokio::spawn(connection);
            // The client stays open (a half-close would end hyper's
            // connection before it answers): a body still to come times out.
            let mut client = client;
            tokio::io::AsyncWriteExt::write_all(&mut client, raw)
                .await
                .unwrap();
            let read = tokio::time::timeout(Duration::from_millis(500), got).await;
            drop(client);
            serving.abort();
            read.ok()?.ok()
        })
    }

    #[test]
    fn hyper_reads_the_plain_press_as_the_front_does() {
        let head = press(PLAIN).unwrap();
        let body = PLAIN[head.head_len..head.len()].to_vec();
        assert_eq!(
            hyper_reads(PLAIN),
            Some(("POST".to_owned(), "/press".to_owned(), body))
        );
        // And it is a judge that can disagree: a second length hyper refuses.
        let doubled = b"POST /press HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab";
        assert_eq!(hyper_reads(doubled), None);
    }

    proptest! {
        /// Whatever the headers, the front serves a request only when
        /// hyper's server (not only its parser: the whole HTTP/1 state
        /// machine, run for real) reads the same request from the same
        /// bytes: a `POST /press` whose body is exactly the bytes the front
        /// takes for it.
        #[test]
        fn a_press_served_here_is_framed_as_hyper_frames_it(
            mut lines in prop::collection::vec(header_line(), 0..6),
            typed in prop::bool::weighted(0.9),
            length_off in prop::sample::select(vec![0i64, 0, 0, -1, 1]),
            at in any::<prop::sample::Index>(),
            body in "[a-z{}\":]{0,40}",
        ) {
            // Mostly a press that could be plain, with odd lines among its
            // own: the cases where the two readers could disagree.
            let length = (body.len() as i64 + length_off).max(0);
            lines.insert(at.index(lines.len() + 1), format!("Content-Length: {length}\r\n"));
            if typed {
                lines.insert(at.index(lines.len() + 1), "Content-Type: application/json\r\n".to_owned());
            }
            let raw = format!("POST /press HTTP/1.1\r\nHost: x\r\n{}\r\n{body}", lines.concat());
            if let Head::Press(head) = classify(raw.as_bytes()) {
                prop_assert!(head.content_length <= MAX_BODY_BYTES);
                // A body still to come is the listener's to wait for.
                if raw.len() >= head.len() {
                    let ours = raw.as_bytes()[head.head_len..head.len()].to_vec();
                    let theirs = hyper_reads(raw.as_bytes());
                    prop_assert_eq!(theirs, Some(("POST".to_owned(), "/press".to_owned(), ours)));
                }
            }
        }

        /// Arbitrary bytes never panic, and a prefix of a request never
        /// classifies as a different request.
        #[test]
        fn any_bytes_classify_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = classify(&bytes);
        }

        #[test]
        fn every_prefix_of_a_plain_press_is_partial(cut in 0..PLAIN.len()) {
            let head = press(PLAIN).unwrap();
            if cut < head.head_len {
                prop_assert_eq!(classify(&PLAIN[..cut]), Head::Partial);
            } else {
                prop_assert_eq!(classify(&PLAIN[..cut]), Head::Press(head));
            }
        }
    }
}
