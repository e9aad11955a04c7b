//! A small HTTP server in the test, for answers no stand-in gives: each
//! request's head in, raw bytes out (a status, headers, a body byte for
//! byte, broken if the test wants), on a free loopback port; the heads it
//! got, in order.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

/// A server whose answer to each request is `respond(request head)`,
/// raw; the request heads it got, in order.
pub fn serving(
    respond: impl Fn(&str) -> Vec<u8> + Send + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut chunk = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let answer = respond(&head);
            seen.lock().unwrap().push(head);
            let _ = conn.write_all(&answer);
        }
    });
    (base, heads)
}

/// An answer: status line, extra header lines, body.
pub fn raw(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    )
    .into_bytes();
    for h in headers {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// The request path of a head (its query left out).
pub fn path(head: &str) -> &str {
    let target = head.split(' ').nth(1).unwrap_or_default();
    target.split('?').next().unwrap_or_default()
}
