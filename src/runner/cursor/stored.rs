//! The cursor as the store keeps it: never with the credential's secret
//! in it (`status` shows it, and the store may be shared), yet put back
//! exactly where an upstream echoed the key into a next-page token.

use super::Cursor;
use crate::config::{Secret, redact};

/// A cursor as the store keeps it, and its text. A page token that carries
/// the secret (an upstream that echoes the key in its next-page link) is
/// kept masked, each occurrence `***` and its byte offsets in `secret_at`,
/// so `status` never shows the key and [`read_cursor`] puts it back. One
/// that carries it in another encoding (percent-encoded, …) cannot be put
/// back exactly: the cursor then points at the start of the step.
pub fn cursor_text(cursor: &Cursor, secret: &Secret) -> (Cursor, String) {
    let mut stored = cursor.clone();
    // A region ahead whose token carries the secret, in any encoding,
    // restarts its step rather than put the key in the store.
    for a in &mut stored.ahead {
        if a.place
            .token
            .as_ref()
            .is_some_and(|t| redact(t, &[secret]) != *t)
        {
            (a.place.page, a.place.token) = (0, None);
        }
    }
    let mut offsets = Vec::new();
    if let Some(token) = &cursor.place.token
        && !secret.expose().is_empty()
    {
        let mut masked = String::with_capacity(token.len());
        let mut rest = token.as_str();
        while let Some(at) = rest.find(secret.expose()) {
            masked.push_str(&rest[..at]);
            offsets.push(masked.len());
            masked.push_str("***");
            rest = &rest[at + secret.expose().len()..];
        }
        masked.push_str(rest);
        if redact(&masked, &[secret]) == masked {
            stored.place.token = Some(masked);
        } else {
            (stored.place.page, stored.place.token) = (0, None);
            offsets.clear();
        }
    }
    if offsets.is_empty() {
        let text = stored.encode();
        return (stored, text);
    }
    let mut json = serde_json::to_value(&stored).expect("a cursor always serializes");
    json["secret_at"] = serde_json::json!(offsets);
    (stored, json.to_string())
}

/// A stored cursor, its page token unmasked (see [`cursor_text`]); one whose
/// mask does not fit its token restarts its step.
pub fn read_cursor(text: &str, secret: &Secret) -> Option<Cursor> {
    let mut cursor = Cursor::decode(text)?;
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    let Some(offsets) = json.get("secret_at").and_then(|v| v.as_array()) else {
        return Some(cursor);
    };
    let token = cursor.place.token.take().unwrap_or_default();
    let mut out = String::with_capacity(token.len());
    let mut from = 0;
    for at in offsets.iter().map(|o| o.as_u64().map(|o| o as usize)) {
        match at {
            Some(at) if at >= from && token.get(at..at + 3) == Some("***") => {
                out.push_str(&token[from..at]);
                out.push_str(secret.expose());
                from = at + 3;
            }
            _ => {
                cursor.place.page = 0;
                return Some(cursor);
            }
        }
    }
    out.push_str(&token[from..]);
    cursor.place.token = Some(out);
    Some(cursor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::cursor::{Ahead, Place};

    fn regions() -> Vec<String> {
        ["US", "GB", "DE"].map(String::from).to_vec()
    }

    #[test]
    fn a_token_that_carries_the_secret_is_stored_masked_and_read_back() {
        let secret = Secret::new("K3y".into());
        let cursor = Cursor {
            run: 2,
            key: "US".into(),
            place: Place {
                step: 0,
                page: 3,
                token: Some("***K3y/next?key=K3y".into()),
                ..Place::default()
            },
            ..Cursor::default()
        };
        let (stored, text) = cursor_text(&cursor, &secret);
        assert_eq!(stored.place.token.as_deref(), Some("******/next?key=***"));
        assert!(!text.contains("K3y"), "{text}");
        assert_eq!(read_cursor(&text, &secret), Some(cursor.clone()));
        // Without the secret inside, the cursor is stored as it always was.
        let plain = Cursor {
            place: Place {
                token: Some("CAUQ3".into()),
                ..cursor.place.clone()
            },
            ..cursor.clone()
        };
        assert_eq!(cursor_text(&plain, &secret).1, plain.encode());
        // Another encoding cannot be put back: the step restarts.
        let encoded = Cursor {
            place: Place {
                token: Some("next?key=K%33y".into()),
                ..cursor.place
            },
            ..cursor
        };
        let (stored, text) = cursor_text(&encoded, &secret);
        assert_eq!((stored.place.page, stored.place.token), (0, None));
        assert!(!text.contains("K%33y"), "{text}");
    }

    #[test]
    fn regions_ahead_come_back_by_index_and_never_carry_the_secret() {
        let secret = Secret::new("K3y".into());
        let ahead = |region: &str, done: bool, token: Option<&str>| Ahead {
            key: region.into(),
            done,
            place: Place {
                page: u32::from(token.is_some()),
                token: token.map(String::from),
                ..Place::default()
            },
        };
        let cursor = Cursor {
            key: "GB".into(),
            ahead: vec![
                ahead("DE", true, None),
                ahead("US", false, Some("next?key=K3y")),
                ahead("FR", false, Some("CAUQ1")),
            ],
            ..Cursor::default()
        };
        let (stored, text) = cursor_text(&cursor, &secret);
        assert!(!text.contains("K3y"), "{text}");
        assert_eq!(
            (
                stored.ahead[1].place.page,
                stored.ahead[1].place.token.as_ref()
            ),
            (0, None)
        );
        let back = read_cursor(&text, &secret).unwrap();
        let starts = back.ahead_starts(&regions(), 1);
        let got: Vec<_> = starts
            .iter()
            .map(|(i, s)| {
                (
                    *i,
                    s.as_ref().map(|s| (s.place.page, s.place.token.as_deref())),
                )
            })
            .collect();
        // FR is no longer a region; DE served; US restarts its step.
        assert_eq!(got, [(2, None), (0, Some((0, None)))]);
        // The cursor's own region gone: the round restarts, nothing ahead.
        let gone = Cursor {
            key: "IT".into(),
            ..back
        };
        assert!(gone.ahead_starts(&regions(), 1).is_empty());
    }
}
