//! Setting a request's query parameters: one the URL already has (in its
//! own text, or set earlier) is replaced where it stands, never sent twice.
//! Appending a page number to `?page=1&per_page=50` sent `page=1&…&page=2`,
//! and a server that reads the first copy served page 1 on every page, each
//! one charged. Parameters not set here keep their text exactly as written.

use reqwest::Url;

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
        .map(|p| (name_of(p), p.to_string()))
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

/// `application/x-www-form-urlencoded`, as `query_pairs_mut` gave these
/// parameters before (a space is `+`).
fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A parameter's name, decoded.
fn name_of(param: &str) -> String {
    form_urlencoded::parse(param.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default()
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
