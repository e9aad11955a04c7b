//! A fan-out step's batches side by side (`concurrency` above 1): a
//! region's batches go out up to N at once, within the run's one limit of
//! requests in flight (shared with the other regions), each written under
//! its own batch number; a kill, a rejection or a signal leaves a cursor
//! from which the next run sends no written batch again. The stand-in's
//! search gives 3 pages of 40 ids a region; videos.list takes them 10 at a
//! time (12 batches a region). It holds every answer (`--delay`) and logs
//! how many requests it had in flight when each arrived. A fan-out
//! followed by another goes side by side too, and the next one gets the
//! values a one-at-a-time run would, in page order, across a kill or a stop.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::deployment::{Deployment, embedded_store, finish, kill, spawn};
use crate::common::redis::RedisServer;
use crate::common::standin::{Seen, Standin};
use crate::common::wait_until;
use crate::common::yaml::{self, Config, Credential, Job, Step};

/// `regions` searched (3 pages of 40 ids each), then videos.list over
/// the ids in batches of 10, `n` requests in flight at most, `limit`
/// units an hour.
fn yaml(store: &str, base: &str, regions: &str, n: usize, limit: u32) -> String {
    let search = Step::new("search.list")
        .url(&format!("\"{base}/youtube/v3/search\""))
        .query(r#"{ part: id, regionCode: "{region}", key: "{secret}" }"#)
        .paginate("{ token: /nextPageToken, param: pageToken, max_pages: 3 }");
    let details = Step::new("videos.list")
        .for_each(r#"{ from: /items/*/id/videoId, batch: 10, join: ",", per_page: 40 }"#)
        .url(&format!("\"{base}/youtube/v3/videos\""))
        .query(r#"{ part: statistics, id: "{batch}", key: "{secret}" }"#);
    let job = Job::new("details", "main")
        .set("regions", &format!("[{regions}]"))
        .set("concurrency", &n.to_string())
        .step(search)
        .step(details);
    Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 10s, connect_timeout: 2s, retries: 1, backoff: 20ms }")
        .credential(Credential::new("main").pool("units", &[yaml::limit(limit.into(), "1h")]))
        .endpoint("search.list", "1")
        .endpoint("videos.list", "1")
        .job(job)
        .render()
}

fn standin(delay: &str) -> Standin {
    Standin::start(&["--pages", "3", "--items", "40", "--delay", delay])
}

/// The ids a videos.list request asked for (`None` for a search).
fn batch(s: &Seen) -> Option<String> {
    if s.path != "/youtube/v3/videos" {
        return None;
    }
    let url = reqwest::Url::parse(&format!("http://x/?{}", s.query.clone().unwrap())).unwrap();
    url.query_pairs()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v.into_owned())
}

/// Batch `k` of `region`: ids 10k to 10k+9 of its 120, in order.
fn batch_ids(region: &str, k: u32) -> String {
    (10 * k..10 * k + 10)
        .map(|i| format!("{region}{:02}{:03}", i / 40, i % 40))
        .collect::<Vec<_>>()
        .join(",")
}

/// Each batch asked → how many times.
fn batches(seen: &[Seen]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for b in seen.iter().filter_map(batch) {
        *m.entry(b).or_insert(0) += 1;
    }
    m
}

fn searches(seen: &[Seen]) -> usize {
    seen.iter()
        .filter(|s| s.path == "/youtube/v3/search")
        .count()
}

fn max_in_flight(seen: &[Seen]) -> u64 {
    seen.iter().map(|s| s.in_flight).max().unwrap_or(0)
}

/// Page files as name → contents.
fn pages(d: &Deployment) -> BTreeMap<String, String> {
    d.outputs("details")
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(d.path().join("out/details").join(&f)).unwrap();
            (f, text)
        })
        .collect()
}

/// How many pages the folder holds. [`Deployment::outputs`] lists a
/// page's temporary file too (`.details~NAME~RANDOM.tmp`, there until just
/// after its page, across the folder's fsync): counted, a batch could seem
/// written while another is still to be sent, its number not yet in the
/// cursor (seen under load as a stop that left batch 11 unsent).
fn pages_written(d: &Deployment) -> usize {
    let files = d.outputs("details").into_iter();
    files.filter(|f| !f.starts_with('.')).count()
}

/// A page file's name without its run (`US.s1.p000003.json`).
fn without_run(name: &str) -> String {
    name.splitn(3, '.').nth(2).unwrap().to_string()
}

/// The fan-out's page files as batch number → how many.
fn batch_files(d: &Deployment, region: &str) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for f in d.outputs("details") {
        let page = without_run(&f);
        if let Some(n) = page.strip_prefix(&format!("{region}.s1.p")) {
            *m.entry(n[..6].parse().unwrap()).or_insert(0) += 1;
        }
    }
    m
}

#[test]
fn a_regions_batches_go_out_n_at_once_and_write_what_one_at_a_time_writes() {
    let redis = RedisServer::start();
    let up = standin("100ms");
    let d = Deployment::new("");
    d.write(&yaml(&redis.url(), &up.base(), "US, GB", 4, 1000));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");

    let seen = up.seen();
    // Four at once, never more, across both regions' searches and batches:
    // one limit for the run. Batches alone reach it too (a region's own).
    assert_eq!(max_in_flight(&seen), 4, "{seen:?}");
    let batch_peak = seen
        .iter()
        .filter(|s| batch(s).is_some())
        .map(|s| s.in_flight)
        .max();
    assert_eq!(batch_peak, Some(4), "{seen:?}");
    // Every batch sent once, with the ids it must hold; every page written once.
    let sent = batches(&seen);
    let want: BTreeMap<String, usize> = ["US", "GB"]
        .iter()
        .flat_map(|r| (0..12).map(move |k| (batch_ids(r, k), 1)))
        .collect();
    assert_eq!(sent, want);
    assert_eq!(searches(&seen), 6);
    assert_eq!(seen.len(), 30);
    for region in ["US", "GB"] {
        let files = batch_files(&d, region);
        assert_eq!(files, (0..12).map(|k| (k, 1)).collect(), "{region}");
    }
    assert!(
        r.stderr.contains(
            "finished; 30 calls, spent units 30; regions done 2/2; 30 pages written; next run starts at US step 0 page 0"
        ),
        "{r:?}"
    );

    // The same job one request at a time writes the same pages, byte for byte.
    let one = Standin::start(&["--pages", "3", "--items", "40"]);
    let d1 = Deployment::new("");
    d1.write(&yaml(&embedded_store(&d1), &one.base(), "US, GB", 1, 1000));
    let r1 = d1.portion(&["run"]);
    assert_eq!(r1.code, 0, "{r1:?}");
    assert_eq!(max_in_flight(&one.seen()), 1);
    assert_eq!(pages(&d1), pages(&d));
}

#[test]
fn a_kill_9_mid_fan_out_redoes_at_most_n_batches_and_replaces_no_page() {
    let up = standin("200ms");
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), "US", 4, 1000));
    let mut victim = spawn(&mut d.cmd(&["run"]));
    // The 3 search pages, then batches: killed with some in flight.
    up.wait_for(3 + 6);
    victim.kill().unwrap(); // SIGKILL: no cleanup at all
    victim.wait().unwrap();
    let first = up.seen();
    assert!(max_in_flight(&first) > 1, "{first:?}");
    let before = pages(&d);
    assert!(before.keys().all(|f| f.contains(".r000001.")), "{before:?}");

    let rerun = d.run_after_killed_lock();
    assert_eq!(rerun.code, 0, "{rerun:?}");
    let seen = up.seen();
    // No search again; every batch sent, and at most 4 of them twice.
    assert_eq!(searches(&seen), 3, "{seen:?}");
    let sent = batches(&seen);
    let every: BTreeSet<String> = (0..12).map(|k| batch_ids("US", k)).collect();
    assert_eq!(sent.keys().cloned().collect::<BTreeSet<_>>(), every);
    let again = batches(&seen[first.len()..]);
    let redone: Vec<&String> = again
        .keys()
        .filter(|b| batches(&first).contains_key(*b))
        .collect();
    assert!(
        redone.len() <= 4,
        "{} batches sent again: {redone:?}",
        redone.len()
    );
    assert!(sent.values().all(|&c| c <= 2), "{sent:?}");
    // The second run wrote each batch it sent under the batch's own
    // number, and replaced no page the first wrote.
    let after = pages(&d);
    for (name, text) in &before {
        assert_eq!(after.get(name), Some(text), "{name} changed");
    }
    assert!(after.keys().all(|f| !f.starts_with('.')), "{after:?}");
    let files = batch_files(&d, "US");
    assert_eq!(
        files.keys().copied().collect::<Vec<_>>(),
        (0..12).collect::<Vec<_>>()
    );
    // A batch has two pages only if it was sent twice (the kill came
    // between its page and the cursor that says so).
    for (k, n) in &files {
        assert!(*n <= sent[&batch_ids("US", *k)], "batch {k}: {files:?}");
    }
    let twice = files.values().filter(|&&n| n == 2).count();
    assert!(twice <= redone.len(), "{files:?}");
}

#[test]
fn a_rejection_mid_fan_out_stops_with_75_and_the_next_run_sends_only_the_rest() {
    for redis in [None, Some(RedisServer::start())] {
        let up = standin("100ms");
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        // 3 searches and 6 batches fit; the 7th batch is refused.
        d.write(&yaml(&store, &up.base(), "US", 4, 9));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert!(r.stderr.contains("the quota said no"), "{r:?}");
        let first = up.seen();
        assert_eq!(first.len(), 9, "{first:?}");
        assert!(max_in_flight(&first) > 1, "{first:?}");
        // Those in flight at the rejection finished and were written.
        assert_eq!(d.outputs("details").len(), 9);
        assert!(
            r.stderr.contains("9 calls, spent units 9;") && r.stderr.contains("9 pages written"),
            "{r:?}"
        );

        // Room again: only the batches not yet written, each once.
        d.write(&yaml(&store, &up.base(), "US", 4, 1000));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let seen = up.seen();
        assert_eq!(seen.len(), 15, "{seen:?}");
        assert_eq!(searches(&seen), 3);
        let every: BTreeMap<String, usize> = (0..12).map(|k| (batch_ids("US", k), 1)).collect();
        assert_eq!(batches(&seen), every);
        assert!(r.stderr.contains("6 calls, spent units 6;"), "{r:?}");
        let files = batch_files(&d, "US");
        assert_eq!(files, (0..12).map(|k| (k, 1)).collect());
    }
}

#[test]
fn batches_written_out_of_order_are_kept_in_the_cursor_and_not_sent_again() {
    // Batch 0 (it holds US00000) takes 6 s, the others 100 ms: the other
    // eleven are written while it is still in flight, however loaded the
    // machine (3 s was once not enough beside parallel builds; under the
    // client's 10 s timeout, as the next run sends it again).
    let up = Standin::start(&[
        "--pages",
        "3",
        "--items",
        "40",
        "--delay",
        "100ms",
        "--slow",
        "US00000=6s",
    ]);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), "US", 4, 1000));
    let victim = spawn(&mut d.cmd(&["run"]));
    wait_until(
        Duration::from_secs(10),
        "the eleven fast batches were never written",
        || pages_written(&d) == 3 + 11,
    );
    // A stop signal abandons batch 0 (its charge kept).
    kill("-TERM", victim.id());
    let r = finish(victim);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr
            .contains("15 calls, spent units 15; regions done 0/1; 14 pages written; next run starts at US step 1 page 0"),
        "{r:?}"
    );
    // The cursor: batch 0 first, its values and all after, and the
    // batches after it already written.
    let status = d.status_json();
    let c = &status["credentials"][0]["jobs"][0]["cursor"];
    assert_eq!((&c["step"], &c["page"]), (&1.into(), &0.into()), "{c}");
    assert_eq!(
        c["written"],
        serde_json::json!((1..12).collect::<Vec<u32>>()),
        "{c}"
    );
    assert_eq!(
        (c["batch_size"].as_u64(), c["batch_at"]["left"].as_u64()),
        (Some(10), Some(120)),
        "{c}"
    );

    // Dry-run plans that one batch, not the eleven written.
    let plan = d.portion(&["run", "--dry-run", "--json"]);
    assert_eq!(plan.code, 0, "{plan:?}");
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    let job = &plan["credentials"][0]["jobs"][0];
    assert_eq!(job["next_run"]["calls"], 1, "{job}");

    // The next run sends batch 0 only, and writes it under its number.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    let again: Vec<String> = seen[15..].iter().filter_map(batch).collect();
    assert_eq!(again, [batch_ids("US", 0)], "{seen:?}");
    assert_eq!(seen.len(), 16);
    let files = batch_files(&d, "US");
    assert_eq!(files, (0..12).map(|k| (k, 1)).collect());
    assert!(
        d.outputs("details")
            .contains(&"details.r000002.US.s1.p000000.json".to_string())
    );
    assert!(r.stderr.contains("1 calls, spent units 1;"), "{r:?}");
}

#[test]
fn a_kill_9_after_the_batch_size_changed_loses_no_value() {
    for redis in [None, Some(RedisServer::start())] {
        // Batch 0 is held; the eleven others are written; a stop signal
        // leaves the cursor pointing into the stored list, 1..11 written.
        let up = Standin::start(&["--pages", "3", "--items", "40", "--slow", "US00000=60s"]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        d.write(&yaml(&store, &up.base(), "US", 4, 1000));
        let victim = spawn(&mut d.cmd(&["run"]));
        wait_until(
            Duration::from_secs(20),
            "the eleven fast batches were never written",
            || pages_written(&d) == 3 + 11,
        );
        kill("-TERM", victim.id());
        assert_eq!(finish(victim).code, 75);
        let c = d.status_json()["credentials"][0]["jobs"][0]["cursor"].clone();
        assert!(c["batch_at"].is_object(), "{c}");
        let eleven = serde_json::json!((1..12).collect::<Vec<u32>>());
        assert_eq!((&c["page"], &c["written"]), (&0.into(), &eleven), "{c}");

        // Batches of 7 now: batch 0's ten values are cut afresh into two
        // batches, kept as a new list under the same key. Every answer is
        // held, and the run is killed once both batches are asked for.
        let batch7 =
            |base: &str| yaml(&store, base, "US", 4, 1000).replace("batch: 10,", "batch: 7,");
        let held = Standin::start(&["--pages", "3", "--items", "40", "--delay", "60s"]);
        d.write(&batch7(&held.base()));
        let mut victim = spawn(&mut d.cmd(&["run"]));
        held.wait_for(2);
        victim.kill().unwrap(); // SIGKILL: no cleanup at all
        victim.wait().unwrap();

        // The next run sends those ten values, in the same two batches.
        let up = standin("0ms");
        d.write(&batch7(&up.base()));
        let r = d.run_after_killed_lock();
        assert_eq!(r.code, 0, "{r:?}");
        let sent: BTreeSet<String> = up.seen().iter().filter_map(batch).collect();
        let ids: Vec<String> = batch_ids("US", 0).split(',').map(String::from).collect();
        let want = BTreeSet::from([ids[..7].join(","), ids[7..].join(",")]);
        assert_eq!((sent, up.seen().len()), (want, 2), "{r:?}");
        assert!(!r.stderr.contains("gone"), "{r:?}");
    }
}

/// [`yaml`] with a third step, a fan-out over the second's pages: the
/// details of the ids each batch asked for, 7 at a time (18 batches of
/// the 120 ids, found in the second step's pages in page order), told
/// apart from the second step by `part: snippet`.
fn chained_yaml(store: &str, base: &str, n: usize, limit: u32) -> String {
    let third = format!(
        r#"      - endpoint: videos.list
        for_each: {{ from: /items/*/id, batch: 7, join: ",", per_page: 10 }}
        request: {{ url: "{base}/youtube/v3/videos", query: {{ part: snippet, id: "{{batch}}", key: "{{secret}}" }} }}
    output: out/details"#
    );
    yaml(store, base, "US", n, limit).replace("    output: out/details", &third)
}

/// The requests of fan-out step `step` (1: `statistics`, 2: `snippet`).
fn of_step(seen: &[Seen], step: u32) -> Vec<Seen> {
    let part = if step == 1 { "statistics" } else { "snippet" };
    let want = format!("part={part}&");
    (seen.iter())
        .filter(|s| batch(s).is_some() && s.query.as_ref().is_some_and(|q| q.starts_with(&want)))
        .cloned()
        .collect()
}

/// The most requests in flight while step `step`'s were.
fn peak(seen: &[Seen], step: u32) -> Option<u64> {
    of_step(seen, step).iter().map(|s| s.in_flight).max()
}

/// What the third step must ask, each once: the 120 ids in page order, 7
/// at a time.
fn third_step_want() -> BTreeMap<String, usize> {
    let ids: Vec<String> = (0..120)
        .map(|i| format!("US{:02}{:03}", i / 40, i % 40))
        .collect();
    ids.chunks(7).map(|c| (c.join(","), 1)).collect()
}

/// Pages as name without the run → contents (a batch written by two runs
/// holds the same both times).
fn by_batch(d: &Deployment) -> BTreeMap<String, String> {
    let pages = pages(d).into_iter();
    pages
        .map(|(name, text)| (without_run(&name), text))
        .collect()
}

/// A clean run of the chained job, one request at a time: [`by_batch`].
fn chained_one_at_a_time() -> BTreeMap<String, String> {
    let one = Standin::start(&["--pages", "3", "--items", "40"]);
    let d = Deployment::new("");
    d.write(&chained_yaml(&embedded_store(&d), &one.base(), 1, 1000));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(max_in_flight(&one.seen()), 1);
    assert_eq!(batches(&of_step(&one.seen(), 2)), third_step_want());
    by_batch(&d)
}

#[test]
fn chained_fan_outs_go_out_n_at_once_and_hand_on_the_values_in_page_order() {
    let up = standin("100ms");
    let d = Deployment::new("");
    d.write(&chained_yaml(&embedded_store(&d), &up.base(), 4, 1000));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    // The first fan-out, followed by another, still sends 4 at once.
    assert_eq!(
        (peak(&seen, 1), peak(&seen, 2)),
        (Some(4), Some(4)),
        "{seen:?}"
    );
    assert_eq!(max_in_flight(&seen), 4);
    assert_eq!(seen.len(), 3 + 12 + 18, "{seen:?}");
    // The third step got the ids in page order, as one at a time does:
    // the same requests, and every page the same, byte for byte.
    assert_eq!(batches(&of_step(&seen, 2)), third_step_want());
    let one = chained_one_at_a_time();
    assert_eq!(by_batch(&d), one);
    assert_eq!(pages(&d).len(), one.len());

    // A rejection mid first fan-out (3 searches and 6 batches fit): the
    // next run completes the step, the third gets the same values.
    let up = standin("100ms");
    let d = Deployment::new("");
    d.write(&chained_yaml(&embedded_store(&d), &up.base(), 4, 9));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(up.seen().len(), 9);
    d.write(&chained_yaml(&embedded_store(&d), &up.base(), 4, 1000));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    let every: BTreeMap<String, usize> = (0..12).map(|k| (batch_ids("US", k), 1)).collect();
    assert_eq!(batches(&of_step(&seen, 1)), every);
    assert_eq!(batches(&of_step(&seen, 2)), third_step_want());
    assert_eq!(by_batch(&d), one);
}

#[test]
fn a_kill_9_mid_chained_fan_out_keeps_what_the_batches_ahead_found() {
    // Batch 0 of the first fan-out (it holds US00000) takes 6 s: the
    // other eleven are written while it is in flight, and killed so.
    let slow = ["--pages", "3", "--items", "40", "--delay", "100ms"];
    let up = Standin::start(&[&slow[..], &["--slow", "US00000=6s"]].concat());
    let d = Deployment::new("");
    d.write(&chained_yaml(&embedded_store(&d), &up.base(), 4, 1000));
    let mut victim = spawn(&mut d.cmd(&["run"]));
    // The cursor saved after the eleventh, then a kill: no cleanup at all.
    let cursor = || d.status_json()["credentials"][0]["jobs"][0]["cursor"].clone();
    let ahead = |c: &serde_json::Value| c["found_ahead"].as_object().map_or(0, |m| m.len());
    wait_until(
        Duration::from_secs(10),
        "the eleven fast batches were never saved in the cursor",
        || ahead(&cursor()) == 11,
    );
    victim.kill().unwrap();
    victim.wait().unwrap();
    let first = up.seen();
    assert_eq!(peak(&first, 1), Some(4), "{first:?}");
    // The values the eleven found wait in the cursor for batch 0's.
    let c = cursor();
    assert_eq!((&c["step"], &c["page"]), (&1.into(), &0.into()), "{c}");
    assert_eq!(ahead(&c), 11, "{c}");
    let before = pages(&d);

    let rerun = d.run_after_killed_lock();
    assert_eq!(rerun.code, 0, "{rerun:?}");
    let seen = up.seen();
    assert_eq!(searches(&seen), 3, "{seen:?}");
    let sent = batches(&of_step(&seen, 1));
    assert_eq!(sent.len(), 12, "{sent:?}");
    assert!(sent.values().all(|&c| c <= 2), "{sent:?}");
    let redone = batches(&of_step(&seen[first.len()..], 1));
    assert!(redone.len() <= 4, "{redone:?}");
    assert!(redone.contains_key(&batch_ids("US", 0)), "{redone:?}");
    // The third step got every id once, in page order: the pages are a
    // clean run's, and none the first run wrote was replaced.
    assert_eq!(batches(&of_step(&seen, 2)), third_step_want());
    let after = pages(&d);
    for (name, text) in &before {
        assert_eq!(after.get(name), Some(text), "{name} changed");
    }
    assert_eq!(by_batch(&d), chained_one_at_a_time());
}
