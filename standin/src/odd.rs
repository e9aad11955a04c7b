//! Answers that are not what a client hopes for, on demand, for the tests
//! of what `portion` does with them; apart from the API shapes so each stays
//! one switch:
//!
//! * `--refuse K=V[&K=V…]`: a request whose query has every such pair
//!   (values as decoded) is answered 400 `invalid`, as an upstream
//!   answers an expired page token or a batch it rejects.
//! * `--encode CODING` (`gzip`, `deflate`, `br`, `zstd`): every answer's
//!   body is compressed so, with its `Content-Encoding`.
//! * `--link-form FORM`: the `Link` header of the GitHub shape is sent
//!   `utf8` (raw UTF-8 in its URLs: `q=café`), `unclosed` (a stray link
//!   whose `<` is never closed, before the real one) or `unterminated` (a
//!   quoted parameter left open before the real one).
//! * `/odd/204/…`, `/odd/html/…`, `/odd/xml/…`, `/odd/encoding/…`,
//!   `/odd/corrupt/…`: a 204 without a body, a 200 HTML page, a 200 XML
//!   page, a 200 whose `Content-Encoding` is one no client decodes
//!   (`compress`), a 200 gzip body that does not decode.
//! * `/odd/bomb/BYTES`: a 200 JSON body of BYTES once decoded, compressed
//!   (in `--encode`'s coding, else gzip) to a small fraction of that.
//! * `/hop-keyless/REST`: a 302 to `/REST` with the query less its `key`,
//!   as a server whose Location does not repeat the query.

use std::io::Write;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::exchange::{Request, State, write_log};

/// A raw answer: status, headers, body bytes.
pub struct Raw {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

/// The answer of an odd path or a refused request, or `None`.
pub fn answer(state: &State, request: &Request) -> Option<Raw> {
    let url = request.url()?;
    let raw = refused(state, &url)
        .or_else(|| odd_path(state, &url))
        .or_else(|| keyless_hop(&url))?;
    log(state, request, &url, raw.status);
    Some(raw)
}

fn refused(state: &State, url: &url::Url) -> Option<Raw> {
    let refuse = state.opts.refuse.as_deref()?;
    let wanted = form_pairs(refuse);
    let have = form_pairs(url.query().unwrap_or_default());
    if wanted.is_empty() || !wanted.iter().all(|p| have.contains(p)) {
        return None;
    }
    let body = json!({ "error": { "code": 400, "message": "Request contains an invalid argument.",
        "errors": [{ "message": "Invalid page token or batch.", "domain": "global", "reason": "invalid" }] }});
    Some(json_raw(400, body.to_string().into_bytes()))
}

/// A query's (or an option's) pairs, as decoded.
pub fn form_pairs(text: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(text.as_bytes())
        .into_owned()
        .collect()
}

fn odd_path(state: &State, url: &url::Url) -> Option<Raw> {
    let rest = url.path().strip_prefix("/odd/")?;
    let (what, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let typed = |kind: &str, body: &str| Raw {
        status: 200,
        headers: vec![("Content-Type", kind.to_string())],
        body: body.as_bytes().to_vec(),
    };
    Some(match what {
        "204" => Raw {
            status: 204,
            headers: Vec::new(),
            body: Vec::new(),
        },
        "html" => typed(
            "text/html; charset=utf-8",
            "<!DOCTYPE html><html><body>Hello</body></html>",
        ),
        "xml" => typed(
            "application/xml",
            "<?xml version=\"1.0\"?><items><item>1</item></items>",
        ),
        "encoding" => Raw {
            status: 200,
            headers: vec![
                ("Content-Type", "application/json".into()),
                ("Content-Encoding", "compress".into()),
            ],
            body: vec![0x1f, 0x9d, 0x90, 0x7b, 0x22, 0x00, 0x8a],
        },
        "corrupt" => Raw {
            status: 200,
            headers: vec![
                ("Content-Type", "application/json".into()),
                ("Content-Encoding", "gzip".into()),
            ],
            // A gzip header, then no deflate stream at all.
            body: [
                &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff][..],
                b"\xff\xfenot deflate",
            ]
            .concat(),
        },
        "bomb" => {
            let bytes: usize = tail.parse().unwrap_or(1 << 24);
            let coding = state.opts.encode.as_deref().unwrap_or("gzip");
            let mut raw = json_raw(200, bomb(coding, bytes));
            raw.headers.push(("Content-Encoding", coding.to_string()));
            raw
        }
        _ => return None,
    })
}

/// `{"items":[],"pad":"aaa…"}` of `bytes`, compressed in `coding` as it is
/// made: the stand-in never holds it decoded.
fn bomb(coding: &str, bytes: usize) -> Vec<u8> {
    let mut enc = Encoder::new(coding);
    enc.write(br#"{"items":[],"pad":""#);
    let chunk = vec![b'a'; 64 * 1024];
    let mut left = bytes.saturating_sub(22);
    while left > 0 {
        let n = left.min(chunk.len());
        enc.write(&chunk[..n]);
        left -= n;
    }
    enc.write(br#""}"#);
    enc.finish()
}

fn keyless_hop(url: &url::Url) -> Option<Raw> {
    let rest = url.path().strip_prefix("/hop-keyless/")?;
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .into_owned()
        .filter(|(k, _)| k != "key")
        .collect();
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(kept)
        .finish();
    Some(Raw {
        status: 302,
        headers: vec![("Location", format!("/{rest}?{query}"))],
        body: Vec::new(),
    })
}

fn json_raw(status: u16, body: Vec<u8>) -> Raw {
    Raw {
        status,
        headers: vec![("Content-Type", "application/json; charset=UTF-8".into())],
        body,
    }
}

fn log(state: &State, request: &Request, url: &url::Url, status: u16) {
    let q = |k: &str| {
        url.query_pairs()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.into_owned())
    };
    let token = q("pageToken");
    let page: u32 = token
        .as_deref()
        .and_then(|t| t.strip_prefix("CAUQ"))
        .and_then(|n| n.parse().ok())
        .or_else(|| q("page").and_then(|p| p.parse().ok()))
        .unwrap_or(0);
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    write_log(
        state,
        json!({
            "at_us": at, "method": request.method, "path": url.path(),
            "region": q("regionCode").or_else(|| q("region")).unwrap_or_default(),
            "page": page, "token": token, "status": status, "query": url.query(),
        }),
    );
}

/// Send a raw answer and close.
pub async fn write(mut stream: TcpStream, raw: Raw) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} Odd\r\nContent-Length: {}\r\nConnection: close\r\n",
        raw.status,
        raw.body.len()
    );
    for (k, v) in raw.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&raw.body).await?;
    stream.shutdown().await
}

/// `--encode`: the body compressed, and its `Content-Encoding`; as it is
/// without the option.
pub fn encode(state: &State, body: Vec<u8>) -> (Vec<u8>, Option<String>) {
    match state.opts.encode.as_deref() {
        Some(coding) => {
            let mut enc = Encoder::new(coding);
            enc.write(&body);
            (enc.finish(), Some(coding.to_string()))
        }
        None => (body, None),
    }
}

/// `--link-form`: a `Link` header's value as the form asks.
pub fn relink(state: &State, headers: &mut [(&'static str, String)]) {
    let Some(form) = state.opts.link_form.as_deref() else {
        return;
    };
    for (k, v) in headers.iter_mut() {
        if !k.eq_ignore_ascii_case("link") {
            continue;
        }
        *v = match form {
            "utf8" => v.replace("page=", "q=café&page="),
            "unclosed" => format!(r#"</stray?page=0; rel="prev", {v}"#),
            "unterminated" => format!(r#"</first>; title="left open, {}"#, v.replace('"', "")),
            _ => v.clone(),
        };
    }
}

/// One of the codings a client may decode.
enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Deflate(flate2::write::ZlibEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    fn new(coding: &str) -> Self {
        let level = flate2::Compression::default();
        match coding {
            "deflate" => Self::Deflate(flate2::write::ZlibEncoder::new(Vec::new(), level)),
            "br" => Self::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                5,
                22,
            ))),
            "zstd" => Self::Zstd(zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd")),
            _ => Self::Gzip(flate2::write::GzEncoder::new(Vec::new(), level)),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let _ = match self {
            Self::Gzip(e) => e.write_all(bytes),
            Self::Deflate(e) => e.write_all(bytes),
            Self::Brotli(e) => e.write_all(bytes),
            Self::Zstd(e) => e.write_all(bytes),
        };
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Self::Gzip(e) => e.finish().unwrap_or_default(),
            Self::Deflate(e) => e.finish().unwrap_or_default(),
            Self::Brotli(e) => e.into_inner(),
            Self::Zstd(e) => e.finish().unwrap_or_default(),
        }
    }
}
