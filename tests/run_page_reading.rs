//! How a run reads its pages (issue 23, items 3 and 5): streaming, only
//! what a pointer names, so a page of tens of megabytes costs about its own
//! size with a settled cost and a fan-out after it; and one reading for
//! every reader, so a value that cannot be read is lost on its own, and
//! said, never silently with the rest of its page.

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::standin::Standin;
use crate::common::yaml::{Config, Credential, Job, Step, limit};

/// One region: `/ids` (page numbers until an empty page) whose `units`
/// cost is settled from the page itself, then a fan-out over its ids.
fn yaml(d: &Deployment, base: &str) -> String {
    yaml_for(&embedded_store(d), base)
}

fn yaml_for(store: &str, base: &str) -> String {
    let ids = Step::new("ids")
        .url(&format!("\"{base}/ids\""))
        .query(r#"{ key: "{secret}" }"#)
        .paginate("{ page: page, start: 1, until_empty: /items, max_pages: 3 }");
    let details = Step::new("videos.list")
        .for_each(r#"{ from: /items/*/id/n, batch: 10, join: ",", per_page: 10 }"#)
        .url(&format!("\"{base}/youtube/v3/videos\""))
        .query(r#"{ part: statistics, id: "{batch}", key: "{secret}" }"#);
    Config::new(store)
        .http("{ timeout: 20s, connect_timeout: 2s, retries: 0 }")
        .credential(Credential::new("main").pool("units", &[limit(1000, "1h")]))
        .endpoint("ids", "{ units: { estimate: 5, actual: /items/0/id/n } }")
        .endpoint("videos.list", "1")
        .job(Job::new("details", "main").step(ids).step(details))
        .render()
}

/// The ids each fan-out request asked for.
fn batches(up: &Standin) -> Vec<String> {
    up.seen()
        .iter()
        .filter(|s| s.path == "/youtube/v3/videos")
        .map(|s| {
            let url = reqwest::Url::parse(&format!(
                "http://x/?{}",
                s.query.clone().unwrap_or_default()
            ))
            .unwrap();
            url.query_pairs()
                .find(|(k, _)| k == "id")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_page_of_32_mb_with_a_settled_cost_and_a_fan_out_runs_under_a_memory_limit() {
    // 32,000,000 bytes of `[0,0,…]` before the items: as a tree, about
    // 32 bytes a byte (1.4 GB with the fan-out's reading); read as it
    // streams, the page itself and little more.
    let up = Standin::start(&["--pages", "1", "--items", "4", "--large-page", "32000000"]);
    let d = Deployment::new("");
    d.write(&yaml(&d, &up.base()));
    // The data segment (heap and the memory mapped for large blocks): the
    // address space (`--as`) also counts the 64 MB that malloc reserves
    // for each thread's arena, as many as threads met, which made the
    // bound depend on scheduling. 150 MB: the page read, and written,
    // with room to spare; a tree of it is several times that.
    let r = crate::common::deployment::run(
        &mut d.cmd_via(&["prlimit", "--data=150000000", "--"], &["run"]),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("finished"), "{r:?}");
    assert_eq!(batches(&up), ["0,v1,2,v3"], "{r:?}");
    // Both pages of ids written whole.
    let files = d.outputs("details");
    assert_eq!(files.len(), 3, "{files:?}");
    let first = d.path().join("out/details").join(&files[0]);
    assert!(std::fs::metadata(first).unwrap().len() > 32_000_000);
}

#[test]
fn a_value_that_cannot_be_read_is_lost_alone_and_the_run_says_so() {
    // The page's items: an id cut mid-emoji (`"cut \ud83d"`) first, then
    // 0 v1 2 v3; beside them nesting 200 deep. The page is JSON to every
    // reader: written, its other values fanned out.
    let up = Standin::start(&["--pages", "1", "--items", "4", "--odd-ids"]);
    let d = Deployment::new("");
    d.write(&yaml(&d, &up.base()));
    let r = d.portion(&["run"]);
    assert_eq!(batches(&up), ["0,v1,2,v3"], "{r:?}");
    assert_eq!(d.outputs("details").len(), 3, "{r:?}");
    // One value lost: said, and not a run that "finished" with 0.
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("1 value(s) at /items/*/id/n cannot be read"),
        "{r:?}"
    );
    assert!(r.stderr.contains("1 fan-out value(s) LOST"), "{r:?}");
    assert!(!r.stderr.contains("finished"), "{r:?}");
}

/// One step over `/ids`, its items rows of `out/ids.db` keyed at `/id/n`.
fn rows_yaml(d: &Deployment, base: &str) -> String {
    let ids = Step::new("ids")
        .url(&format!("\"{base}/ids\""))
        .query(r#"{ key: "{secret}" }"#)
        .paginate("{ page: page, start: 1, until_empty: /items, max_pages: 3 }");
    Config::new(&embedded_store(d))
        .http("{ timeout: 20s, connect_timeout: 2s, retries: 0 }")
        .credential(Credential::new("main").pool("units", &[limit(1000, "1h")]))
        .endpoint("ids", "1")
        .job(
            Job::new("ids", "main").step(ids).output(
                "{ sqlite: { path: out/ids.db, table: ids, items: /items/*, key: /id/n } }",
            ),
        )
        .render()
}

/// The rows of `out/ids.db`, key and item, by key.
fn rows(d: &Deployment) -> Vec<(String, String)> {
    let db = rusqlite::Connection::open(d.path().join("out/ids.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT key, item FROM ids ORDER BY key")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Issue 36, item 12: the SQLite sink reads a page as every other reader
/// does, one item at a time, so a page of 25 MB (`[0,0,…]` beside its
/// items: about 32 bytes of tree a byte) is written to a table within the
/// memory the folder's run takes (a tree of it needs several hundred MB).
#[test]
fn a_page_of_25_mb_is_written_to_sqlite_under_a_memory_limit() {
    let up = Standin::start(&["--pages", "1", "--items", "4", "--large-page", "25000000"]);
    let d = Deployment::new("");
    d.write(&rows_yaml(&d, &up.base()));
    // The data segment, as for the folder's run above.
    let r = crate::common::deployment::run(
        &mut d.cmd_via(&["prlimit", "--data=150000000", "--"], &["run"]),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("finished"), "{r:?}");
    let keys: Vec<String> = rows(&d).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["0", "2", "v1", "v3"], "{r:?}");
}

/// Issue 36, item 8: numbers past 64 bits are rows' keys and items as the
/// page writes them: `123456789012345678901234` and `-0` are not a
/// double's `1.2345678901234568e23` and `-0.0` (two ids a double makes
/// one would be one row).
#[test]
fn numbers_past_64_bits_are_row_keys_and_items_as_written() {
    let up = Standin::start(&["--pages", "1", "--items", "2", "--long-ids"]);
    let d = Deployment::new("");
    d.write(&rows_yaml(&d, &up.base()));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rows = rows(&d);
    let got: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(got, ["-0", "0", "123456789012345678901234", "v1"], "{r:?}");
    assert_eq!(rows[2].1, r#"{"id":{"n":123456789012345678901234}}"#);
    assert_eq!(rows[0].1, r#"{"id":{"n":-0}}"#);
}
