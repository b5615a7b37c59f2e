//! The listener answers plain presses itself and hands every other request
//! to the router: both paths must look the same from outside, and a
//! connection may carry both.

use crate::common;

use std::time::Duration;

use common::{spawn_cluster, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer read off a raw connection.
#[derive(Debug)]
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn connect(address: &str) -> TcpStream {
    TcpStream::connect(address.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads `count` answers (each framed by Content-Length) off `stream`.
async fn read_answers(stream: &mut TcpStream, count: usize) -> Vec<Raw> {
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    while answers.len() < count {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = response.parse(&buf) {
            let length: usize = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .unwrap_or(0);
            if buf.len() >= head + length {
                let answer = Raw {
                    status: response.code.unwrap(),
                    headers: response
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_owned(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                    body: String::from_utf8_lossy(&buf[head..head + length]).into_owned(),
                };
                answers.push(answer);
                buf.drain(..head + length);
                continue;
            }
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(
            n > 0,
            "the connection closed after {} answers",
            answers.len()
        );
        buf.extend_from_slice(&chunk[..n]);
    }
    answers
}

fn press_request(target: &str, session: &str, extra: &str) -> String {
    let body = format!(r#"{{"session_id":"{session}"}}"#);
    format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_press_answered_by_the_listener_looks_like_one_answered_by_the_router() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("same-answer");
    let mut stream = connect(&app.address).await;
    // `/press?via=router` is not plain (a query): the router answers it.
    for (target, accept) in [
        ("/press", ""),
        ("/press?via=router", ""),
        ("/press", "Accept: application/json\r\n"),
        ("/press?via=router", "Accept: application/json\r\n"),
    ] {
        stream
            .write_all(press_request(target, &session, accept).as_bytes())
            .await
            .unwrap();
    }
    let answers = read_answers(&mut stream, 4).await;
    let (listener, router) = (&answers[0], &answers[1]);
    assert_eq!((listener.status, router.status), (200, 200));
    assert_eq!(listener.body, "You clicked 1 times");
    assert_eq!(router.body, "You clicked 2 times");
    for name in ["content-type", "x-served-by"] {
        assert_eq!(listener.header(name), router.header(name), "{name}");
    }
    assert!(listener.header("date").is_some());
    let (listener, router) = (&answers[2], &answers[3]);
    let json = |raw: &Raw| serde_json::from_str::<serde_json::Value>(&raw.body).unwrap();
    assert_eq!(json(listener)["clicks"], 3);
    assert_eq!(json(router)["clicks"], 4);
    assert_eq!(json(listener)["session_id"], session.as_str());
    assert_eq!(
        listener.header("content-type"),
        router.header("content-type")
    );
}

#[tokio::test]
async fn a_bad_press_gets_the_routers_error_from_the_listener_too() {
    let (app, _nodes) = spawn_cluster(1).await;
    let mut stream = connect(&app.address).await;
    let bad = "POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n[\"u1\"]\n";
    let bad_routed = bad.replacen("/press", "/press?via=router", 1);
    stream.write_all(bad.as_bytes()).await.unwrap();
    stream.write_all(bad_routed.as_bytes()).await.unwrap();
    let answers = read_answers(&mut stream, 2).await;
    assert_eq!((answers[0].status, answers[1].status), (400, 400));
    assert_eq!(answers[0].body, answers[1].body);
    assert!(answers[0].body.contains("invalid_json"));
    assert_eq!(
        answers[0].header("content-type"),
        answers[1].header("content-type")
    );
}

#[tokio::test]
async fn pipelined_presses_are_answered_in_order_and_each_counted_once() {
    let (app, _nodes) = spawn_cluster(2).await;
    let session = unique("pipelined");
    let mut stream = connect(&app.address).await;
    let requests: String = (0..5)
        .map(|_| press_request("/press", &session, ""))
        .collect();
    stream.write_all(requests.as_bytes()).await.unwrap();
    let answers = read_answers(&mut stream, 5).await;
    let bodies: Vec<_> = answers.iter().map(|a| a.body.as_str()).collect();
    assert_eq!(
        bodies,
        (1..=5)
            .map(|n| format!("You clicked {n} times"))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_connection_goes_on_with_the_router_after_presses() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("then-router");
    let mut stream = connect(&app.address).await;
    stream
        .write_all(press_request("/press", &session, "").as_bytes())
        .await
        .unwrap();
    // The second request arrives in pieces, after the first answer.
    let first = read_answers(&mut stream, 1).await;
    assert_eq!(first[0].body, "You clicked 1 times");
    stream.write_all(b"GET /heal").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream
        .write_all(b"thz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    stream
        .write_all(press_request("/press", &session, "").as_bytes())
        .await
        .unwrap();
    let answers = read_answers(&mut stream, 2).await;
    assert_eq!(answers[0].status, 200, "{:?}", answers[0]);
    assert_eq!(answers[1].body, "You clicked 2 times");
}

#[tokio::test]
async fn connection_close_is_honoured_by_the_listener() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("close");
    let mut stream = connect(&app.address).await;
    stream
        .write_all(press_request("/press", &session, "Connection: close\r\n").as_bytes())
        .await
        .unwrap();
    let answers = read_answers(&mut stream, 1).await;
    assert_eq!(answers[0].header("connection"), Some("close"));
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("closed within 5 s")
        .unwrap();
    assert_eq!(n, 0, "nothing after the answer, then the end");
}

#[tokio::test]
async fn a_body_cut_short_by_the_client_is_never_counted() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("cut-body");
    let full = press_request("/press", &session, "");
    let mut stream = connect(&app.address).await;
    stream
        .write_all(&full.as_bytes()[..full.len() - 3])
        .await
        .unwrap();
    // The client gives up mid-body. Once the balancer has closed its side
    // it is done with that request (the evidence to wait for), and the cut
    // press was never counted.
    stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the balancer closes a connection whose body was cut")
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&rest).contains("clicked"),
        "a cut body was answered as a press: {}",
        String::from_utf8_lossy(&rest)
    );
    assert_eq!(app.press(&session).await.clicks(), 1);
}

#[tokio::test]
async fn presses_with_ambiguous_framing_are_refused_and_never_counted() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("ambiguous");
    let body = format!(r#"{{"session_id":"{session}"}}"#);
    let head = "POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    for framing in [
        format!(
            "Content-Length: {}\r\nContent-Length: {}\r\n",
            body.len(),
            body.len() + 1
        ),
        format!(
            "Content-Length: {}\r\nTransfer-Encoding: chunked\r\n",
            body.len()
        ),
        format!("Content-Length: +{}\r\n", body.len()),
    ] {
        let mut stream = connect(&app.address).await;
        stream
            .write_all(format!("{head}{framing}\r\n{body}").as_bytes())
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        let status = String::from_utf8_lossy(&answer[..n]);
        assert!(status.starts_with("HTTP/1.1 400"), "{framing:?}: {status}");
    }
    assert_eq!(app.press(&session).await.clicks(), 1, "none was counted");
}

/// A body announced over the limit with `Expect: 100-continue` is refused
/// from its head: the client is never invited to send the megabytes.
#[tokio::test]
async fn an_oversized_body_is_refused_before_it_is_invited() {
    let (app, _nodes) = spawn_cluster(1).await;
    let mut stream = connect(&app.address).await;
    stream
        .write_all(
            b"POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 10000000\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
    let mut first = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut first))
        .await
        .expect("an answer to the head alone")
        .unwrap();
    let head = String::from_utf8_lossy(&first[..n]).into_owned();
    assert!(
        head.starts_with("HTTP/1.1 413"),
        "the first answer is not the 413: {head:?}"
    );
}
