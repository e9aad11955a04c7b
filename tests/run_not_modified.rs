//! `on_not_modified` (issue 36, items 22 and 23): its default is
//! `continue`, so an API not sorted newest first gets a changed page past
//! an unchanged page 1 fetched; `end` is the opt-in for an API sorted
//! newest first; `check` shows what a step does with its validators.

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::standin::Standin;
use crate::run_conditional::{statuses, touch, yaml};

/// Pages in id order (no `sort=updated`): a touch changes the page its
/// issue is on, and no other.
fn unsorted(store: &str, base: &str, extra: &str) -> String {
    let text = yaml(store, base, 100, extra);
    assert!(text.contains("sort: updated"));
    text.replacen("sort: updated", "state: open", 1)
}

#[test]
fn by_default_a_304_on_page_one_walks_on_to_a_changed_page() {
    for (extra, walks_on) in [
        ("        conditional: true\n", true),
        (
            "        conditional: true\n        on_not_modified: end\n",
            false,
        ),
    ] {
        let up = Standin::start(&["--pages", "2", "--items", "3"]);
        let d = Deployment::new("");
        d.write(&unsorted(&embedded_store(&d), &up.base(), extra));
        assert_eq!(d.portion(&["run"]).code, 0);
        // Issues 0 and 2 (page 1) change, then issue 4 (page 2).
        touch(&up, "a/one");
        touch(&up, "a/one");
        assert_eq!(d.portion(&["run"]).code, 0);
        touch(&up, "a/one");
        let from = up
            .seen()
            .iter()
            .filter(|s| s.path != "/_standin/touch")
            .count();
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let one = |page, status| ("a/one".to_string(), page, status);
        let two = |page, status| ("a/two".to_string(), page, status);
        let want = if walks_on {
            vec![one(1, 304), one(2, 200), two(1, 304), two(2, 304)]
        } else {
            vec![one(1, 304), two(1, 304)]
        };
        assert_eq!(statuses(&up, from), want, "{extra}: {r:?}");
    }
}

/// `check` shows a step's `conditional`, what a 304 does
/// (`on_not_modified`, its default said), its `incremental` and the
/// endpoint's `not_modified` cost, not only `cost requests 1 per call`.
#[test]
fn check_shows_what_a_step_does_to_spend_less() {
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let incremental = "        incremental: { from: /*/updated_at, param: since, initial: \"2020-01-01T00:00:00Z\" }\n";
    for (extra, says) in [
        (
            format!("        conditional: true\n{incremental}"),
            "on_not_modified: continue (a 304 walks on",
        ),
        (
            "        conditional: true\n        on_not_modified: end\n".to_string(),
            "on_not_modified: end (a 304 ends the key's walk",
        ),
    ] {
        d.write(&yaml(&store, "http://127.0.0.1:9", 100, &extra));
        let r = d.portion(&["check"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.stdout
                .contains("cost requests 1 per call (answered 304: 0 in each pool)"),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout
                .contains("conditional: each page's ETag/Last-Modified sent back"),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains(says), "{}", r.stdout);
        assert_eq!(
            r.stdout.contains(
                "incremental: since=the largest /*/updated_at of the key's last complete walk, \"2020-01-01T00:00:00Z\" before any"
            ),
            extra.contains("incremental"),
            "{}",
            r.stdout
        );
    }
}
