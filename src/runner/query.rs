//! Setting a request's query parameters: one the URL already has (in its
//! own text, or set earlier) is replaced where it stands, never sent twice.
//! Appending a page number to `?page=1&per_page=50` sent `page=1&…&page=2`,
//! and a server that reads the first copy served page 1 on every page, each
//! one charged. Parameters not set here keep their text exactly as written.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use reqwest::Url;

/// What `application/x-www-form-urlencoded` leaves as is (a space becomes
/// `+`): the encoding `query_pairs_mut` gave these parameters before.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

/// Set each `(name, value)` of `pairs`, in order, in `url`'s query: the
/// first parameter of that name gets the value, any later one is dropped,
/// and a name not there yet is appended. An empty query is removed.
pub fn set_query(url: &mut Url, pairs: &[(&str, String)]) {
    // (decoded name, the parameter's text)
    let mut params: Vec<(String, String)> = url
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| (decode(p.split('=').next().unwrap_or("")), p.to_string()))
        .collect();
    for (name, value) in pairs {
        let text = format!("{}={}", encode(name), encode(value));
        match params.iter().position(|(n, _)| n == name) {
            Some(first) => {
                params[first].1 = text;
                let mut i = 0;
                params.retain(|(n, _)| {
                    i += 1;
                    i - 1 == first || n != name
                });
            }
            None => params.push((name.to_string(), text)),
        }
    }
    let query: Vec<String> = params.into_iter().map(|(_, text)| text).collect();
    url.set_query((!query.is_empty()).then(|| query.join("&")).as_deref());
}

fn encode(s: &str) -> String {
    // A `%20` can only be an encoded space: a `%` itself becomes `%25`.
    utf8_percent_encode(s, FORM).to_string().replace("%20", "+")
}

fn decode(s: &str) -> String {
    percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(url: &str, pairs: &[(&str, &str)]) -> String {
        let mut url = Url::parse(url).unwrap();
        let pairs: Vec<(&str, String)> = pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
        set_query(&mut url, &pairs);
        url.into()
    }

    #[test]
    fn a_parameter_already_there_is_replaced_in_place() {
        assert_eq!(
            set(
                "http://h/x",
                &[
                    ("page", "1"),
                    ("per_page", "50"),
                    ("key", "k"),
                    ("page", "2")
                ]
            ),
            "http://h/x?page=2&per_page=50&key=k"
        );
        assert_eq!(
            set(
                "http://h/three?page=9&a=%2C,b&page=3",
                &[("page", "7"), ("key", "a b+c&")]
            ),
            "http://h/three?page=7&a=%2C,b&key=a+b%2Bc%26"
        );
        // Names are compared decoded; other parameters keep their text.
        assert_eq!(
            set("http://h/?p%61ge=1&x=y+z", &[("page", "2")]),
            "http://h/?page=2&x=y+z"
        );
        assert_eq!(set("http://h/?", &[]), "http://h/");
        assert_eq!(set("http://h/", &[("e", "")]), "http://h/?e=");
    }
}
