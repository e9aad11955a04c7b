//! The stand-in's HTTP/1.1, hand-written on purpose: one request per
//! connection (its body read by `Content-Length`, no chunked bodies),
//! `Connection: close`, nothing else; a server framework would be larger than the whole fixture.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::exchange::{ENDLESS, Request, State};
use crate::{Error, Options};

/// Serve until the process is stopped. Prints `listening on http://ADDR`
/// first, so a caller that asked for port 0 learns the port.
pub async fn serve(opts: Options) -> Result<(), Error> {
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let state = Arc::new(State::new(opts)?);
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    loop {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| format!("accept: {e}"))?;
        let state = state.clone();
        tokio::spawn(async move {
            let _ = handle(stream, &state).await;
        });
    }
}

async fn handle(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 64 * 1024 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split_whitespace();
    let method = request_line.next().unwrap_or("GET").to_string();
    let target = request_line.next().unwrap_or("/").to_string();
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<(String, String)>>();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let mut body = buf[end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    let counted = InFlight::count(state);
    let delay = match &state.opts.slow {
        Some((text, wait)) if target.contains(text.as_str()) => *wait,
        _ => state.opts.delay,
    };
    let request = Request {
        method,
        target,
        headers,
        body,
    };
    if let Some(raw) = crate::odd::answer(state, &request) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        drop(counted);
        return crate::odd::write(stream, raw).await;
    }
    // Another API's shape if the path is one of theirs, else YouTube's.
    let (status, mut headers, body) = crate::apis::answer(state, &request)
        .unwrap_or_else(|| crate::youtube::answer(state, &request));
    crate::odd::relink(state, &mut headers);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if headers.iter().any(|(k, _)| *k == ENDLESS) {
        return endless(stream).await;
    }
    let reason = match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Service Unavailable",
    };
    // (a 304 has no body: RFC 9110 §15.4.5)
    let body = match status {
        304 => String::new(),
        _ => crate::large::text(&state.opts, &request.target, status, &body),
    };
    let (body, coding) = crate::odd::encode(state, body.into_bytes());
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(coding) = coding {
        out.push_str(&format!("Content-Encoding: {coding}\r\n"));
    }
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    // (no longer in flight once the answer can reach the client, which may
    // then send its next request before this task ends)
    drop(counted);
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// One request in flight, counted in [`State::in_flight`] from when it was
/// read until its answer is about to be sent (or the connection drops).
struct InFlight<'s>(&'s State);

impl<'s> InFlight<'s> {
    fn count(state: &'s State) -> Self {
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A 200 whose JSON body never ends: 64 KiB every 1.5 ms (about 40 MiB/s),
/// until the client hangs up (or 64 GiB, whichever comes first).
async fn endless(mut stream: TcpStream) -> std::io::Result<()> {
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=UTF-8\r\nConnection: close\r\n\r\n{\"items\":[",
        )
        .await?;
    let item = br#"{"kind":"youtube#video","id":"endless"},"#;
    let chunk: Vec<u8> = item
        .iter()
        .copied()
        .cycle()
        .take(item.len() * 1600)
        .collect();
    for _ in 0..(64u64 << 30) / chunk.len() as u64 {
        stream.write_all(&chunk).await?;
        tokio::time::sleep(std::time::Duration::from_micros(1500)).await;
    }
    Ok(())
}
