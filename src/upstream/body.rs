//! Reading an answer's body: bounded by `http.max_body` (an error
//! answer's by what its reasons and excerpt need), decoded, its byte
//! order mark dropped.

use reqwest::StatusCode;

use super::{Answer, answers, decode, describe};
use crate::config::Secret;

/// How much of an error answer's body is read: enough for its reasons and
/// an excerpt.
const ERROR_BODY: u64 = 64 * 1024;

/// A UTF-8 byte order mark.
pub(super) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The body of an answer that is not a redirect, and the
/// `Content-Encoding` left on it when portion could not decode it; or,
/// for a 2xx, the answer when that body can never be a page.
pub(super) async fn read(
    resp: reqwest::Response,
    status: StatusCode,
    max_body: u64,
    secrets: &[&Secret],
) -> Result<(Vec<u8>, Option<String>), Answer> {
    // A page is read up to `max_body`, never past it; an error answer up
    // to what its reasons and excerpt need.
    let page = answers::is_page(status);
    let limit = if page {
        max_body
    } else {
        max_body.min(ERROR_BODY)
    };
    // (a compressed body is decoded as it streams in, and has no declared
    // size then: `max_body` bounds what it decodes to)
    let declared = resp.content_length();
    let mut encoding = undecoded(resp.headers());
    if page && let Some(n) = declared.filter(|n| *n > max_body) {
        return Err(Answer::Fatal(too_big(status, max_body, Some(n))));
    }
    let body = match read_body(resp, limit).await {
        Ok((body, false)) => body,
        Ok((_, true)) if page => {
            return Err(Answer::Fatal(too_big(status, max_body, None)));
        }
        Ok((body, true)) => body,
        Err(e) if page && corrupt(&e) => {
            return Err(Answer::Unusable(format!(
                "HTTP {status} with a body that cannot be decoded ({}): not retried, since every attempt is charged and would get the same",
                describe(&e, secrets)
            )));
        }
        Err(e) if page => return Err(Answer::Transient(describe(&e, secrets))),
        // An error answer is handled by its status, whatever its body: a
        // 429 whose body does not decode still blocks, a 404 is still
        // refused (retried, each attempt charged, it blocked nothing).
        Err(_) => Vec::new(),
    };
    // A coding the client left alone that portion decodes itself (a name in
    // capitals, deflate raw or zlib-wrapped): bounded by `limit` decoded.
    let body = match encoding.as_deref().map(|c| decode::body(c, &body, limit)) {
        None | Some(decode::Decoded::Unknown) => body,
        Some(decode::Decoded::Body(decoded)) => {
            encoding = None;
            decoded
        }
        Some(decode::Decoded::TooBig) if page => {
            return Err(Answer::Fatal(too_big(status, max_body, None)));
        }
        Some(decode::Decoded::Failed(why)) if page => {
            return Err(Answer::Unusable(format!(
                "HTTP {status} with a body that cannot be decoded ({why}): not retried, since every attempt is charged and would get the same"
            )));
        }
        Some(_) => {
            encoding = None;
            Vec::new()
        }
    };
    // A UTF-8 byte order mark before JSON is dropped (RFC 8259 §8.1 lets a
    // parser ignore it): every reader, and the page written, see the JSON.
    let body = match body.strip_prefix(BOM) {
        Some(rest) => rest.to_vec(),
        None => body,
    };
    Ok((body, encoding))
}

/// The `Content-Encoding` of a response the client did not decode (one
/// it has no decoder for: it removes the header of those it decodes).
fn undecoded(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let coding = headers.get(reqwest::header::CONTENT_ENCODING)?;
    let coding = String::from_utf8_lossy(coding.as_bytes())
        .trim()
        .to_string();
    (!coding.eq_ignore_ascii_case("identity")).then_some(coding)
}

/// Whether a body read failed on data the decoder refuses (a corrupt
/// compressed body), not on the connection: the same bytes come again.
/// The decoder's own failure is an `io::Error` right under reqwest's
/// (a truncated stream, `UnexpectedEof`, may be the connection's); one
/// of the connection comes under hyper's error instead.
fn corrupt(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::Other
                    | std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::InvalidInput
            );
        }
        if !s.is::<reqwest::Error>() {
            return false;
        }
        source = s.source();
    }
    false
}

/// Read a body as it streams in, at most `limit` bytes; `true` when there
/// was more (the rest is not read: the connection is dropped). Memory is
/// the body itself: the buffer grows by doubling, never beyond `limit`.
async fn read_body(
    mut resp: reqwest::Response,
    limit: u64,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let declared = resp.content_length().map_or(0, |n| n as usize);
    let mut body = Vec::with_capacity(declared.min(limit));
    while let Some(chunk) = resp.chunk().await? {
        let room = limit - body.len();
        let take = chunk.len().min(room);
        if body.capacity() < body.len() + take {
            let want = (body.capacity() * 2).max(body.len() + take).min(limit);
            body.reserve_exact(want - body.len());
        }
        body.extend_from_slice(&chunk[..take]);
        if take < chunk.len() {
            return Ok((body, true));
        }
    }
    Ok((body, false))
}

fn too_big(status: StatusCode, max_body: u64, declared: Option<u64>) -> String {
    let size = match declared {
        Some(n) => format!("of {} ({n} bytes)", fmt_bytes(n)),
        None => "that goes on".into(),
    };
    format!(
        "HTTP {status} with a body {size} past http.max_body, {} ({max_body} bytes): not read further; raise http.max_body if pages really are this large",
        fmt_bytes(max_body)
    )
}

/// Bytes in the largest binary unit that keeps one decimal.
fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_shown_in_binary_units() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(32 << 20), "32 MiB");
        assert_eq!(fmt_bytes(1_500_000), "1.4 MiB");
    }
}
