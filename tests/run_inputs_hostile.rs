//! Jobs of inputs as a hostile or careless user runs them (a review's
//! findings): files changed in the part not done, new stores after a paged
//! input was cut short, big numbers as keys, CSV quoting, repeated kills,
//! a reset while a run holds the lock, odd keys, huge lines.

use std::collections::BTreeMap;

use std::time::Duration;

use crate::common::deployment::{Deployment, embedded_store, kill, spawn};
use crate::common::inputs::{keys, per_key, write, yaml};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::wait_until;

fn limited(y: String, limit: u32) -> String {
    y.replace("limit: 1000, per: 1h", &format!("limit: {limit}, per: 1h"))
}

/// A once-job stopped by its quota has read ahead (its window) and put
/// those keys in the store's map of keys seen, with their lines. A line
/// removed from the part NOT done yet shifts the later ones up a line:
/// each is then taken for a repeat of itself and skipped, never done.
#[test]
fn a_line_removed_from_the_part_not_done_skips_no_input() {
    let redis = RedisServer::start();
    for store in [Some(redis.url()), None] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = store.unwrap_or_else(|| embedded_store(&d));
        let all = keys(0..20);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&limited(
            yaml(&store, &up.base(), "{ file: ids.txt }", true, 1),
            5,
        ));
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (75, 5), "{r:?}");
        // The operator drops K7 (not done yet) from the list.
        let rest: Vec<String> = all.iter().filter(|k| *k != "K7").cloned().collect();
        write(&d, "ids.txt", &(rest.join("\n") + "\n"));
        d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 1));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let want: BTreeMap<String, usize> = rest.iter().map(|k| (k.clone(), 1)).collect();
        assert_eq!(per_key(&up), want, "{}", r.stderr);
    }
}

/// The same with a line inserted before the part not done: every later
/// key moves down a line and is skipped as a repeat of itself.
#[test]
fn a_line_inserted_in_the_part_not_done_skips_no_input() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let all = keys(0..20);
    write(&d, "ids.txt", &(all.join("\n") + "\n"));
    d.write(&limited(
        yaml(&store, &up.base(), "{ file: ids.txt }", true, 1),
        5,
    ));
    assert_eq!(d.portion(&["run"]).code, 75);
    let mut more = all.clone();
    more.insert(10, "NEW".into());
    write(&d, "ids.txt", &(more.join("\n") + "\n"));
    d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 1));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let want: BTreeMap<String, usize> = more.iter().map(|k| (k.clone(), 1)).collect();
    assert_eq!(per_key(&up), want, "{}", r.stderr);
}

/// A job not `once` stopped mid-walk, its file then replaced by another
/// of other line lengths: the next run starts at the old byte offset,
/// mid-line, and sends the tail of a line as a key.
#[test]
fn a_not_once_job_never_sends_a_piece_of_a_line_as_a_key() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let long: Vec<String> = (0..20).map(|i| format!("LONGKEY{i:03}")).collect();
    write(&d, "ids.txt", &(long.join("\n") + "\n"));
    d.write(&limited(
        yaml(&store, &up.base(), "{ file: ids.txt }", false, 1),
        5,
    ));
    assert_eq!(d.portion(&["run"]).code, 75);
    let short: Vec<String> = (0..30).map(|i| format!("A{i}")).collect();
    write(&d, "ids.txt", &(short.join("\n") + "\n"));
    d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", false, 1));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Vec<String> = per_key(&up).into_keys().collect();
    let stray: Vec<&String> = sent
        .iter()
        .filter(|k| !long.contains(k) && !short.contains(k))
        .collect();
    assert!(
        stray.is_empty(),
        "keys in no file sent: {stray:?}: {}",
        r.stderr
    );
}

/// `.jsonl` keys that are numbers past 2^64 (issue 36, item 8): read as a
/// double, two ids became one text (the second skipped as a repeat); then
/// they were refused. Keys and `{input.NAME}` values are the numbers as
/// the file writes them, sent upstream so.
#[test]
fn a_jsonl_key_that_is_a_big_number_is_never_rounded() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(
        &d,
        "p.jsonl",
        "{\"id\": 12345678901234567890123, \"p\": 98765432109876543210.50}\n\
         {\"id\": 12345678901234567890124, \"p\": -0}\n{\"id\": 1E3, \"p\": \"c\"}\n",
    );
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: p.jsonl, key: /id }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Vec<(String, String)> = (up.seen().iter())
        .map(|s| {
            let url = reqwest::Url::parse(&format!("http://x/?{}", s.query.clone().unwrap()));
            let q = url
                .unwrap()
                .query_pairs()
                .find(|(k, _)| k == "q")
                .unwrap()
                .1
                .into_owned();
            (s.region.clone(), q)
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("12345678901234567890123", "98765432109876543210.50"),
            ("12345678901234567890124", "-0"),
            ("1E3", "c"),
        ]
        .map(|(k, q)| (k.to_string(), q.to_string())),
        "{r:?}"
    );
}

/// A CSV quote left open (issue 36, item 6): `X,"unclosed` made every
/// line after it one field ("inputs done 2", exit 0, the rest never
/// fetched). Its line is skipped with a warning naming it; the rows after
/// it are done.
#[test]
fn a_csv_quote_left_open_skips_its_line_and_the_rest_is_done() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let all = keys(0..50);
    let rows: String = all.iter().map(|k| format!("{k},p {k}\n")).collect();
    write(&d, "p.csv", &format!("id,p\nX,\"unclosed\n{rows}"));
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: p.csv, key: id }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(
        per_key(&up),
        crate::common::inputs::once_each(&all),
        "{r:?}"
    );
    assert!(
        r.stderr
            .contains("p.csv line 2: a quoted field is still open at the end of the file"),
        "{r:?}"
    );
}

/// A CSV file with a byte order mark, a quoted line break and CRLF, done
/// in two runs (a quota stop between): each record once.
#[test]
fn a_csv_with_a_bom_quoted_newlines_and_crlf_resumes_exactly() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    write(
        &d,
        "p.csv",
        "\u{feff}id,p\r\nA,\"x\r\ny\"\r\nB,\"q,\"\"r\"\"\"\r\nC,z\r\nD,\"\n\"\r\n",
    );
    d.write(&limited(
        yaml(&store, &up.base(), "{ file: p.csv, key: id }", true, 1),
        2,
    ));
    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (75, 2), "{r:?}");
    d.write(&yaml(
        &store,
        &up.base(),
        "{ file: p.csv, key: id }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let want: BTreeMap<String, usize> = ["A", "B", "C", "D"]
        .iter()
        .map(|k| (k.to_string(), 1))
        .collect();
    assert_eq!(per_key(&up), want, "{}", r.stderr);
    let qs: Vec<String> = up.seen().iter().filter_map(|s| s.query.clone()).collect();
    assert!(qs[0].contains("q=x%0D%0Ay&"), "{qs:?}");
}

/// Several kill -9 in a row in a concurrent once-job (8 in flight, a slow
/// upstream), Redis and the embedded store: no input skipped, at most 8
/// redone per kill, each result once on disk.
#[test]
fn repeated_kills_skip_nothing_and_redo_at_most_concurrency_each() {
    for redis in [None, Some(RedisServer::start())] {
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        let all = keys(0..120);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for at in [13usize, 31, 55, 80] {
            let slow = Standin::start(&["--delay", "120ms"]);
            d.write(&yaml(&store, &slow.base(), "{ file: ids.txt }", true, 8));
            let mut victim = spawn(&mut d.cmd(&["run"]));
            wait_until(Duration::from_secs(60), "pages never written", || {
                d.outputs("list").len() >= at
            });
            kill("-KILL", victim.id());
            victim.wait().unwrap();
            for (k, c) in per_key(&slow) {
                *seen.entry(k).or_default() += c;
            }
            // (one input by a run between kills: the killed run's lock
            // waited out)
            let up = Standin::start(&[]);
            d.write(&limited(
                yaml(&store, &up.base(), "{ file: ids.txt }", true, 8),
                1,
            ));
            let r = d.run_after_killed_lock();
            assert!(r.code == 75 || r.code == 0, "{r:?}");
            for (k, c) in per_key(&up) {
                *seen.entry(k).or_default() += c;
            }
        }
        let up = Standin::start(&[]);
        d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 8));
        let r = d.run_after_killed_lock();
        assert_eq!(r.code, 0, "{r:?}");
        for (k, c) in per_key(&up) {
            *seen.entry(k).or_default() += c;
        }
        assert_eq!(seen.len(), 120, "none skipped: {seen:?}");
        let redone: usize = seen.values().map(|c| c - 1).sum();
        assert!(redone <= 8 * 4, "{redone} redone: {seen:?}");
        let mut pages: BTreeMap<String, usize> = BTreeMap::new();
        for name in d.outputs("list") {
            if let Some((_, key, _, _)) = portion::page_name::parse("list", &name) {
                *pages.entry(key).or_default() += 1;
            }
        }
        assert_eq!(pages.len(), 120, "{pages:?}");
        assert!(pages.values().all(|n| *n == 1), "{pages:?}");
    }
}

/// `portion reset` while a run holds the job's lock: refused with 75, and
/// the run's place survives it.
#[test]
fn reset_while_a_run_holds_the_lock_is_refused_and_changes_nothing() {
    let d = Deployment::new("");
    let slow = Standin::start(&["--delay", "300ms"]);
    let all = keys(0..30);
    write(&d, "ids.txt", &(all.join("\n") + "\n"));
    d.write(&yaml(
        &embedded_store(&d),
        &slow.base(),
        "{ file: ids.txt }",
        true,
        2,
    ));
    let victim = spawn(&mut d.cmd(&["run"]));
    slow.wait_for(4);
    let r = d.portion(&["reset", "list", "--yes"]);
    assert_eq!(r.code, 75, "{r:?}");
    let r = crate::common::deployment::finish(victim);
    assert_eq!(r.code, 0, "{r:?}");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        slow.seen().len(),
        30,
        "nothing redone after the refused reset"
    );
}

/// The summary of a job of inputs counts the inputs there are, and says
/// where in the file the next run starts.
#[test]
fn the_summary_counts_the_inputs_there_are() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", &(keys(0..4).join("\n") + "\n"));
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "inputs done 4, 0 skipped; 4 pages written; next run starts at line 5 of its inputs"
        ),
        "{}",
        r.stderr
    );
    let r = d.portion(&["run"]);
    assert!(
        r.stderr
            .contains("inputs done 4, 0 skipped; 0 pages written"),
        "nothing to do: {}",
        r.stderr
    );
}

/// Keys a file name could trip on (`/`, `..`, `%2F` as text, unicode, a
/// space): each sent once, each a page of its own, and a new store finds
/// every one on disk (their page names read back).
#[test]
fn keys_with_slashes_dots_and_unicode_are_each_done_once_and_found_on_disk() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let odd = ["a/b", "..", ".", "a%2Fb", "é", "e\u{301}", "x y", "-", "_"];
    write(&d, "ids.txt", &(odd.join("\n") + "\n"));
    d.write(&yaml(&a.url(), &up.base(), "{ file: ids.txt }", true, 2));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let want: BTreeMap<String, usize> = odd.iter().map(|k| (k.to_string(), 1)).collect();
    assert_eq!(per_key(&up), want, "{}", r.stderr);
    assert_eq!(d.outputs("list").len(), odd.len());
    d.write(&yaml(&b.url(), &up.base(), "{ file: ids.txt }", true, 2));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(per_key(&up), want, "none fetched again: {}", r.stderr);
}

/// A key carrying the secret (as is, or percent-encoded) is skipped,
/// uncharged, and the secret is nowhere in the output.
#[test]
fn a_key_carrying_the_secret_is_skipped_and_never_shown() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nxdemo-keyx\nK1\nDEMO-KEY\n");
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Vec<String> = per_key(&up).into_keys().collect();
    assert!(!sent.iter().any(|k| k.contains("demo-key")), "{sent:?}");
    assert!(
        !r.stderr.contains("demo-key") && !r.stdout.contains("demo-key"),
        "{r:?}"
    );
    assert!(
        r.stderr.contains("ids.txt line 2: the key carries"),
        "{r:?}"
    );
}

/// A paged once-job stopped mid-input (pages 1 and 2 of K2 of 3 written),
/// then moved to a new store: K2's third page is never fetched, the new
/// store taking any key with a page of the last step as done.
#[test]
fn a_new_store_does_not_take_a_half_paged_input_as_done() {
    let up = Standin::start(&["--pages", "3"]);
    let d = Deployment::new("");
    let first = embedded_store(&d);
    let second = format!("embedded:{}", d.path().join("new.sqlite3").display());
    write(&d, "ids.txt", &(keys(0..4).join("\n") + "\n"));
    let paged = |store: &str, limit: &str| {
        yaml(store, &up.base(), "{ file: ids.txt }", true, 1)
            .replace("limit: 1000, per: 1h", limit)
            .replace(
                "key: \"{secret}\" }",
                "key: \"{secret}\" }\n        paginate: { token: /nextPageToken, param: pageToken, max_pages: 3 }",
            )
    };
    d.write(&paged(&first, "limit: 8, per: 1h"));
    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (75, 8), "{r:?}");
    d.write(&paged(&second, "limit: 100, per: 1h"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let pages: std::collections::BTreeSet<(String, u32)> = up
        .seen()
        .iter()
        .map(|s| (s.region.clone(), s.page))
        .collect();
    assert_eq!(
        pages.len(),
        12,
        "every page of every input: {pages:?}: {}",
        r.stderr
    );
}

/// A `.txt` line over 16 MiB is skipped, warned, uncharged; the inputs
/// around it done, and a resume past it works.
#[test]
fn a_huge_line_is_skipped_and_the_rest_done() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let huge = "h".repeat((16 << 20) + 10);
    write(&d, "ids.txt", &format!("K0\n{huge}\nK1\n"));
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("ids.txt line 2: longer than"),
        "{}",
        r.stderr
    );
    let want: BTreeMap<String, usize> = ["K0", "K1"].iter().map(|k| (k.to_string(), 1)).collect();
    assert_eq!(per_key(&up), want);
    write(&d, "ids.txt", &format!("K0\n{huge}\nK1\nK2\n"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(up.seen().len(), 3, "{}", r.stderr);
}

/// A slow input at the window's front: the others run up to the window's
/// cap (64) and no further; a kill -9 then redoes the slow one alone.
#[test]
fn a_slow_input_holds_the_window_at_its_cap_and_a_kill_redoes_it_alone() {
    for redis in [None, Some(RedisServer::start())] {
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        let all = keys(0..100);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        let slow = Standin::start(&["--slow", "regionCode=K0&=60s"]);
        d.write(&yaml(&store, &slow.base(), "{ file: ids.txt }", true, 2));
        let mut victim = spawn(&mut d.cmd(&["run"]));
        wait_until(Duration::from_secs(60), "63 pages never written", || {
            d.outputs("list").len() >= 63
        });
        // the cursor saved with the last of them
        wait_until(Duration::from_secs(30), "cursor", || {
            let r = d.portion(&["status", "--json"]);
            r.stdout.contains("K63")
        });
        kill("-KILL", victim.id());
        victim.wait().unwrap();
        let first = per_key(&slow);
        assert_eq!(first.len(), 64, "the window's cap: {first:?}");
        let up = Standin::start(&[]);
        d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 2));
        let r = d.run_after_killed_lock();
        assert_eq!(r.code, 0, "{r:?}");
        let second = per_key(&up);
        let redone: Vec<&String> = second.keys().filter(|k| first.contains_key(*k)).collect();
        assert_eq!(redone, [&"K0".to_string()], "{}", r.stderr);
        assert_eq!(first.len() + second.len(), 101);
    }
}
