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
        let service =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let seen = seen.lock().unwrap().take();
                async move {
                    let (parts, body) = request.into_parts();
                    let body = body.collect().await.map(|b| b.to_bytes().to_vec());
                    if let (Some(seen), Ok(body)) = (seen, body) {
                        let _ = seen.send((parts.method.to_string(), parts.uri.to_string(), body));
                    }
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Empty::<Bytes>::new(),
                    ))
                }
            });
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
