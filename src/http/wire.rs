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
    let Some(fields) = PressFields::read(request.headers) else {
        return Head::Other;
    };
    match (fields.content_length, fields.content_type) {
        (Some(n), Some(content_type))
            if n <= MAX_BODY_BYTES && is_json_content_type(content_type) =>
        {
            Head::Press(PressHead {
                head_len,
                content_length: n,
                wants_json: super::extract::wants_json(fields.accept),
                close: fields.close,
            })
        }
        _ => Head::Other,
    }
}

/// The header fields a press is answered by here.
#[derive(Default)]
struct PressFields<'a> {
    content_length: Option<usize>,
    content_type: Option<&'a str>,
    accept: Option<&'a str>,
    close: bool,
}

impl<'a> PressFields<'a> {
    /// `None`: a field this path leaves to the router (one it reads
    /// otherwise, or twice, or not at all).
    fn read(headers: &[httparse::Header<'a>]) -> Option<Self> {
        let mut fields = Self::default();
        for header in headers {
            let name = header.name;
            let value = std::str::from_utf8(header.value).ok()?;
            if name.eq_ignore_ascii_case("content-length") {
                match (fields.content_length, parse_length(value)) {
                    (None, Some(n)) => fields.content_length = Some(n),
                    _ => return None,
                }
            } else if name.eq_ignore_ascii_case("content-type") {
                if fields.content_type.replace(value).is_some() {
                    return None;
                }
            } else if name.eq_ignore_ascii_case("accept") {
                // The router reads the first one only; so do we.
                fields.accept.get_or_insert(value);
            } else if name.eq_ignore_ascii_case("connection") {
                for option in value.split(',').map(str::trim) {
                    if option.eq_ignore_ascii_case("close") {
                        fields.close = true;
                    } else if !option.eq_ignore_ascii_case("keep-alive") {
                        return None;
                    }
                }
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                || name.eq_ignore_ascii_case("expect")
                || name.eq_ignore_ascii_case("upgrade")
            {
                return None;
            }
        }
        Some(fields)
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
mod tests;
