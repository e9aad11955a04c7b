//! Decoding a body the HTTP client left encoded. reqwest decodes `gzip`,
//! `br` and `zstd` as they stream in, but matches their names exactly
//! (RFC 9110 §8.4.1 says case-insensitively: `GZIP` came undecoded) and
//! has no `deflate` that takes the raw stream some servers send for it
//! (its decoder wants zlib's wrapper; curl reads both). Those are decoded
//! here, after the body is read, with the crates reqwest's decoders use:
//! the encoded body is bounded by the read's limit, and what it decodes
//! to by the same limit, so a compression bomb costs no more than a page.

use std::io::Read;

/// What decoding a body came to.
pub enum Decoded {
    /// The body decoded.
    Body(Vec<u8>),
    /// Not a coding portion decodes (`compress`, a stack of codings).
    Unknown,
    /// It decodes to more than the limit.
    TooBig,
    /// It does not decode: why.
    Failed(String),
}

/// `body` decoded from `coding`, at most `limit` bytes of it.
pub fn body(coding: &str, body: &[u8], limit: u64) -> Decoded {
    let reader: Box<dyn Read + '_> = match coding.to_ascii_lowercase().as_str() {
        "gzip" | "x-gzip" => Box::new(flate2::read::MultiGzDecoder::new(body)),
        // zlib's wrapper starts with a method byte of 8 and a check that
        // makes the first two bytes a multiple of 31; a raw stream is read
        // as it is.
        "deflate" if zlib_wrapped(body) => Box::new(flate2::read::ZlibDecoder::new(body)),
        "deflate" => Box::new(flate2::read::DeflateDecoder::new(body)),
        "br" => Box::new(brotli::Decompressor::new(body, 4096)),
        "zstd" => match zstd::stream::read::Decoder::new(body) {
            Ok(d) => Box::new(d),
            Err(e) => return Decoded::Failed(format!("{coding}: {e}")),
        },
        _ => return Decoded::Unknown,
    };
    let mut out = Vec::new();
    match reader.take(limit.saturating_add(1)).read_to_end(&mut out) {
        Ok(_) if out.len() as u64 > limit => Decoded::TooBig,
        Ok(_) => Decoded::Body(out),
        Err(e) => Decoded::Failed(format!("{coding}: {e}")),
    }
}

fn zlib_wrapped(body: &[u8]) -> bool {
    match body {
        [cmf, flg, ..] => cmf & 0x0f == 8 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn raw_deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn deflate_raw_or_wrapped_and_names_in_any_case_are_decoded_within_the_limit() {
        let json = br#"{"items":[1,2,3]}"#;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(json).unwrap();
        let zlib = z.finish().unwrap();
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        g.write_all(json).unwrap();
        let gzip = g.finish().unwrap();
        for (coding, bytes) in [
            ("deflate", raw_deflate(json)),
            ("Deflate", zlib),
            ("GZIP", gzip.clone()),
            ("x-gzip", gzip),
        ] {
            match body(coding, &bytes, 1024) {
                Decoded::Body(b) => assert_eq!(b, json, "{coding}"),
                _ => panic!("{coding}"),
            }
        }
        assert!(matches!(
            body("deflate", &raw_deflate(&[b'a'; 5000]), 4096),
            Decoded::TooBig
        ));
        assert!(matches!(body("gzip, gzip", b"", 10), Decoded::Unknown));
        assert!(matches!(body("compress", b"", 10), Decoded::Unknown));
        assert!(matches!(
            body("gzip", b"\x1f\x8bnot", 10),
            Decoded::Failed(_)
        ));
    }
}
