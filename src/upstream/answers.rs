//! The one table of what each upstream answer does. Every status an
//! upstream can send is read here and nowhere else (`src/answers_table.rs`
//! checks the crate's source for it): a page, the page as it was (304), a
//! hop to follow, sent again, the end of the job, or the end of its key
//! (a region, an input, a batch: recorded as failed, the run goes on and
//! exits 1 at its end). README's "What each answer does" is this table.
//!
//! The rule behind it: an answer about the credential (it is refused, its
//! quota is spent) ends the job, since every key would meet the same; an
//! answer about one request ends that request's key, never the job, when
//! the request carries its key (its URL, query, headers or body name the
//! region or input, or it carries what the upstream gave: a page token, a
//! batch); a request made from the file alone ends the job, as the file is
//! what to fix.

use reqwest::StatusCode;

/// What an answer does, as [`TABLE`] says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Does {
    /// A page: written, its rows stored, its next page followed.
    Page,
    /// 304 to a request that sent a validator: the page is as it was.
    Unchanged,
    /// A same-origin redirect: followed (charged), at most three hops.
    Followed,
    /// Sent again (charged) after a backoff, up to `http.retries`; then as
    /// the last column of its row says.
    Retried,
    /// The job stops (exit 75 when the credential's quota is spent: the
    /// ledger blocks it until the upstream's reset; exit 1 otherwise).
    EndsJob,
    /// Its key ends: recorded as failed, the run goes on, exit 1 at the end.
    EndsKey,
}

/// One row of the table: the answer, what it does when the request carries
/// its key, and what it does when the request is made from the file alone.
pub struct Row {
    pub answer: &'static str,
    pub with_key: Does,
    pub file_alone: Does,
}

/// The table, as README's "What each answer does" shows it (a test checks
/// that they agree, and that [`refusal`] and friends decide as it says).
pub const TABLE: &[Row] = &[
    Row {
        answer: "2xx with a JSON body",
        with_key: Does::Page,
        file_alone: Does::Page,
    },
    Row {
        answer: "2xx that can never be a page (no body, HTML or XML, a coding portion cannot decode)",
        with_key: Does::EndsKey,
        file_alone: Does::EndsKey,
    },
    Row {
        answer: "2xx whose JSON is cut short",
        with_key: Does::Retried,
        file_alone: Does::Retried,
    },
    Row {
        answer: "304 to a request that sent a validator",
        with_key: Does::Unchanged,
        file_alone: Does::Unchanged,
    },
    Row {
        answer: "304 to a request that sent no validator",
        with_key: Does::EndsKey,
        file_alone: Does::EndsKey,
    },
    Row {
        answer: "3xx to the same origin",
        with_key: Does::Followed,
        file_alone: Does::Followed,
    },
    Row {
        answer: "3xx elsewhere, or past three hops",
        with_key: Does::EndsKey,
        file_alone: Does::EndsJob,
    },
    Row {
        answer: "429; 403 with a quota reason or `Remaining: 0`",
        with_key: Does::EndsJob,
        file_alone: Does::EndsJob,
    },
    Row {
        answer: "401, 407; 400 or 403 with a reason about the key (`keyInvalid`, `API_KEY_INVALID`, …)",
        with_key: Does::EndsJob,
        file_alone: Does::EndsJob,
    },
    Row {
        answer: "any other 4xx (400, 403, 404, 409, 410, 413, 422, 451, …)",
        with_key: Does::EndsKey,
        file_alone: Does::EndsJob,
    },
    Row {
        answer: "408, 5xx, a network error or a timeout",
        with_key: Does::Retried,
        file_alone: Does::Retried,
    },
    Row {
        answer: "… still so after its retries, on an input",
        with_key: Does::EndsKey,
        file_alone: Does::EndsJob,
    },
    Row {
        answer: "… still so after its retries, on a region or a batch",
        with_key: Does::EndsJob,
        file_alone: Does::EndsJob,
    },
    Row {
        answer: "a host that does not exist, a certificate that does not verify, a body past `max_body`",
        with_key: Does::EndsKey,
        file_alone: Does::EndsJob,
    },
];

/// Reasons in a 403 body that mean the upstream's own quota is spent.
const QUOTA_REASONS: [&str; 4] = [
    "quotaExceeded",
    "dailyLimitExceeded",
    "rateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

/// Reasons in a 403 body that are about the key, not the request: every
/// request would meet them.
const KEY_REASONS: [&str; 10] = [
    "keyInvalid",
    "keyExpired",
    "accessNotConfigured",
    "ipRefererBlocked",
    "API_KEY_INVALID",
    "API_KEY_SERVICE_BLOCKED",
    "API_KEY_HTTP_REFERRER_BLOCKED",
    "API_KEY_IP_ADDRESS_BLOCKED",
    "SERVICE_DISABLED",
    "CONSUMER_INVALID",
];

/// What an answer's status is, before its body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    /// 2xx: a page, if its body is one.
    Page,
    /// 304.
    NotModified,
    /// Any other 3xx.
    Redirect,
    /// Anything else: a refusal, read by [`refusal`] once its body is.
    Refusal,
}

pub(super) fn status(status: StatusCode) -> Status {
    if status.is_success() {
        Status::Page
    } else if status == StatusCode::NOT_MODIFIED {
        Status::NotModified
    } else if status.is_redirection() {
        Status::Redirect
    } else {
        Status::Refusal
    }
}

/// A refusal (a status that is no page and no redirect), read with its
/// body's reasons and its headers' counts.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The upstream's own quota is spent (a reason to show).
    Quota(String),
    /// The credential is refused: every request would be.
    Credential,
    /// This request is refused for itself.
    Request,
    /// Worth another (charged) attempt.
    Transient,
}

/// What a refusal with `status`, its body's `reasons`, and headers that
/// say whether no units remain (`spent`), is.
pub(super) fn refusal(status: StatusCode, reasons: &[String], spent: bool) -> Refusal {
    let quota_reason = reasons.iter().find(|r| QUOTA_REASONS.contains(&r.as_str()));
    let code = status.as_u16();
    match code {
        429 => Refusal::Quota(quota_reason.cloned().unwrap_or_else(|| {
            if spent {
                "rate limit exceeded: no units remaining".into()
            } else {
                "too many requests".into()
            }
        })),
        403 if quota_reason.is_some() => Refusal::Quota(quota_reason.cloned().unwrap_or_default()),
        // GitHub answers a spent quota with 403 and X-RateLimit-Remaining: 0.
        403 if spent => Refusal::Quota("rate limit exceeded: no units remaining".into()),
        401 | 407 => Refusal::Credential,
        // (Google answers a bad key 400 API_KEY_INVALID, a blocked one 403)
        400 | 403 if reasons.iter().any(|r| KEY_REASONS.contains(&r.as_str())) => {
            Refusal::Credential
        }
        408 | 500..=599 => Refusal::Transient,
        _ => Refusal::Request,
    }
}

/// Whether a quota answer is a bare 429: no wait said, no word of a spent
/// daily quota; usually a short-term rate limit, so the credential is
/// blocked for its shortest window (doubling), not its longest.
pub fn bare_rate_limit(
    status: u16,
    reason: &str,
    retry_after: Option<std::time::Duration>,
) -> bool {
    status == 429
        && retry_after.is_none()
        && !["quotaExceeded", "dailyLimitExceeded"].contains(&reason)
}

/// Whether an answer of this status is read in full as a page could be
/// (up to `max_body`), rather than only as far as its reasons need.
pub(super) fn is_page(status: StatusCode) -> bool {
    status.is_success()
}

/// The method a redirect's next hop uses, as clients do: 303 (and 301/302
/// after a POST) switch to GET; 307 and 308 keep the method.
pub(super) fn redirect_method(status: StatusCode, method: &reqwest::Method) -> reqwest::Method {
    match status {
        StatusCode::SEE_OTHER => reqwest::Method::GET,
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND if *method == reqwest::Method::POST => {
            reqwest::Method::GET
        }
        _ => method.clone(),
    }
}

/// What a request's end does to the run, by who made it: one that carries
/// its key ends that key; one made from the file alone ends the job.
pub(super) fn ends(with_key: bool) -> Does {
    if with_key {
        Does::EndsKey
    } else {
        Does::EndsJob
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    fn code(n: u16) -> StatusCode {
        StatusCode::from_u16(n).unwrap()
    }

    #[test]
    fn refusals_are_read_as_the_table_says() {
        for n in [400, 403, 404, 405, 409, 410, 413, 414, 422, 451] {
            assert_eq!(refusal(code(n), &[], false), Refusal::Request, "{n}");
        }
        assert_eq!(
            refusal(code(403), &reasons(&["forbidden"]), false),
            Refusal::Request,
            "a private video is this request's"
        );
        for n in [401, 407] {
            assert_eq!(refusal(code(n), &[], false), Refusal::Credential, "{n}");
        }
        assert_eq!(
            refusal(code(403), &reasons(&["keyInvalid"]), false),
            Refusal::Credential
        );
        assert_eq!(
            refusal(code(400), &reasons(&["API_KEY_INVALID"]), false),
            Refusal::Credential
        );
        assert_eq!(
            refusal(code(403), &reasons(&["quotaExceeded"]), false),
            Refusal::Quota("quotaExceeded".into())
        );
        assert!(matches!(refusal(code(403), &[], true), Refusal::Quota(_)));
        assert!(matches!(refusal(code(429), &[], false), Refusal::Quota(_)));
        for n in [408, 500, 502, 503, 504, 599] {
            assert_eq!(refusal(code(n), &[], false), Refusal::Transient, "{n}");
        }
    }

    #[test]
    fn statuses_are_sorted_before_their_bodies_are_read() {
        assert_eq!(status(code(200)), Status::Page);
        assert_eq!(status(code(204)), Status::Page);
        assert_eq!(status(code(304)), Status::NotModified);
        assert_eq!(status(code(302)), Status::Redirect);
        assert_eq!(status(code(404)), Status::Refusal);
        assert_eq!(status(code(500)), Status::Refusal);
        assert_eq!(status(code(101)), Status::Refusal);
    }

    #[test]
    fn redirects_keep_or_switch_their_method_as_clients_do() {
        let post = reqwest::Method::POST;
        assert_eq!(redirect_method(code(303), &post), reqwest::Method::GET);
        assert_eq!(redirect_method(code(302), &post), reqwest::Method::GET);
        assert_eq!(redirect_method(code(307), &post), post);
        assert_eq!(redirect_method(code(308), &post), post);
        assert_eq!(
            redirect_method(code(301), &reqwest::Method::PUT),
            reqwest::Method::PUT
        );
    }

    /// README's "What each answer does" is this table, row for row.
    #[test]
    fn the_readme_shows_this_table() {
        let readme = include_str!("../../README.md");
        let shown = |d: Does| match d {
            Does::Page => "a page",
            Does::Unchanged => "the page as it was",
            Does::Followed => "followed",
            Does::Retried => "sent again",
            Does::EndsJob => "ends the job",
            Does::EndsKey => "ends its key",
        };
        for row in TABLE {
            let line = format!(
                "| {} | {} | {} |",
                row.answer,
                shown(row.with_key),
                shown(row.file_alone)
            );
            assert!(
                readme.lines().any(|l| l.trim() == line),
                "README lacks the row:\n{line}"
            );
        }
    }
}
