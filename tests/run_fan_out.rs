//! Fan-out steps (`for_each`) end to end: a step that runs once per batch
//! of the values the previous step's pages hold, against the stand-in
//! (`/ids`, whose pages repeat a value and mix numbers with strings, then
//! videos.list by `id=A,B,C`), on the embedded store and a real Redis. What
//! the upstream received, what each request was charged, where a run
//! stopped by its budget resumes, what dry-run plans, and every bad
//! `for_each` refused with 78 before anything is sent.

use crate::common::deployment::{Deployment, Ran, embedded_store, spawn};
use crate::common::kept::Kept;
use crate::common::redis::RedisServer;
use crate::common::standin::{Seen, Standin};
use crate::common::yaml::{self, Config, Credential, Job, Step};

/// A deployment whose `units` pool allows `limit` units an hour: `ids`
/// and `videos.list` cost 1 each, and `details` walks `/ids` (page
/// numbers, until an empty page, at most 5) then fans out over
/// `/items/*/id/n` to videos.list in batches of 4.
fn yaml(store: &str, base: &str, limit: u32) -> String {
    let ids = Step::new("ids")
        .url(&format!("\"{base}/ids\""))
        .query(r#"{ region: "{region}", key: "{secret}" }"#)
        .paginate("{ page: page, start: 1, until_empty: /items, max_pages: 5 }");
    let details = Step::new("videos.list")
        .for_each(r#"{ from: /items/*/id/n, batch: 4, join: ",", per_page: 4 }"#)
        .url(&format!("\"{base}/youtube/v3/videos\""))
        .query(r#"{ part: statistics, id: "{batch}", key: "{secret}" }"#);
    let job = Job::new("details", "main")
        .regions(&["US", "GB"])
        .step(ids)
        .step(details);
    Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }")
        .credential(Credential::new("main").pool("units", &[yaml::limit(limit.into(), "1h")]))
        .endpoint("ids", "1")
        .endpoint("videos.list", "1")
        .job(job)
        .render()
}

/// The stand-in's `/ids` with 3 pages of 4: 0 v1 2 v3 | v3 4 v5 6 | 6 v7 8 v9,
/// then an empty page.
fn standin() -> Standin {
    Standin::start(&["--pages", "3", "--items", "4"])
}

fn deployment(store: &str, up: &Standin, limit: u32) -> Deployment {
    let d = Deployment::new("");
    d.write(&yaml(&store_for(&d, store), &up.base(), limit));
    d
}

/// The `store:` of `d` for `store` ("embedded": a file in its folder).
fn store_for(d: &Deployment, store: &str) -> String {
    if store == "embedded" {
        embedded_store(d)
    } else {
        store.to_string()
    }
}

/// Each request as (path, region, page or the ids asked).
fn requests(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| {
            let q = s.query.clone().unwrap_or_default();
            let url = reqwest::Url::parse(&format!("http://x/?{q}")).unwrap();
            let get = |k: &str| {
                url.query_pairs()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            match s.path.as_str() {
                "/ids" => format!("ids {} p{}", get("region"), get("page")),
                p => format!("{p} id={}", get("id")),
            }
        })
        .collect()
}

fn region_walk(region: &str) -> Vec<String> {
    let mut v: Vec<String> = (1..=4).map(|p| format!("ids {region} p{p}")).collect();
    v.extend(videos(&["0,v1,2,v3", "4,v5,6,v7", "8,v9"]));
    v
}

fn videos(batches: &[&str]) -> Vec<String> {
    batches
        .iter()
        .map(|b| format!("/youtube/v3/videos id={b}"))
        .collect()
}

fn usage(d: &Deployment) -> String {
    d.status_json()["credentials"][0]["pools"].to_string()
}

fn spent(d: &Deployment, endpoint: &str) -> u64 {
    let json = d.status_json();
    let text = json.to_string();
    let key = format!(r#""{endpoint}":"#);
    let at = text
        .find(&key)
        .unwrap_or_else(|| panic!("{endpoint}: {text}"));
    text[at + key.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn cursor(d: &Deployment) -> serde_json::Value {
    d.status_json()["credentials"][0]["jobs"][0]["cursor"].clone()
}

fn ran_ok(r: &Ran) {
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_fan_out_batches_every_pages_values_in_order_once_each() {
    let redis = RedisServer::start();
    for store in ["embedded".to_string(), redis.url()] {
        let up = standin();
        let d = deployment(&store, &up, 1000);
        ran_ok(&d.portion(&["run"]));

        // Values from all of a region's pages, in order, the repeated ones
        // (v3, 6) once, numbers as text, joined in batches of 4.
        let mut want = region_walk("US");
        want.extend(region_walk("GB"));
        let seen = up.seen();
        assert_eq!(requests(&seen), want, "{store}");
        assert!(seen.iter().all(|s| s.status == 200), "{seen:?}");

        // Every request charged to its own endpoint: 4 + 3 per region.
        assert_eq!(spent(&d, "ids"), 8, "{store}: {}", usage(&d));
        assert_eq!(spent(&d, "videos.list"), 6, "{store}: {}", usage(&d));

        // Every request wrote its page; the fan-out's are numbered by batch.
        let files = d.outputs("details");
        assert_eq!(files.len(), 14, "{files:?}");
        let page = |name: &str| -> serde_json::Value {
            let path = d.path().join("out/details").join(name);
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let last = page("details.r000001.GB.s1.p000002.json");
        let ids: Vec<&str> = last["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["8", "v9"]);
        assert!(
            !files.iter().any(|f| f.contains(".s1.p000003")),
            "{files:?}"
        );
        // The round is over: the next run starts again at US, no values kept.
        let c = cursor(&d);
        assert_eq!((&c["region"], &c["step"]), (&"US".into(), &0.into()), "{c}");
        assert!(c.get("batch").is_none() && c.get("found").is_none(), "{c}");
    }
}

#[test]
fn a_fan_out_stopped_by_its_budget_resumes_at_the_next_unsent_batch() {
    let redis = RedisServer::start();
    for store in ["embedded".to_string(), redis.url()] {
        let up = standin();
        // 5 units: US's 4 pages of ids and one batch; the second is refused.
        let d = deployment(&store, &up, 5);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        let first = requests(&up.seen());
        assert_eq!(first, region_walk("US")[..5], "{r:?}");
        let c = cursor(&d);
        assert_eq!(
            (&c["region"], &c["step"], &c["page"]),
            (&"US".into(), &1.into(), &1.into()),
            "{c}"
        );
        // Its 6 values not yet sent: a position in the list kept apart
        // (the values themselves are not rewritten after each batch).
        assert!(c.get("batch").is_none(), "{c}");
        assert_eq!(
            (&c["batch_at"]["from"], &c["batch_at"]["left"]),
            (&4.into(), &6.into()),
            "{c}"
        );

        // Dry-run plans from there: US's two batches left, then GB in full at
        // its worst case (5 pages of ids, then 5 × 4 values in batches of 4).
        d.write(&yaml(&store_for(&d, &store), &up.base(), 1000));
        let plan = d.portion(&["run", "--dry-run", "--json"]);
        ran_ok(&plan);
        let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
        let job = &plan["credentials"][0]["jobs"][0];
        assert_eq!(job["next_run"]["calls"], 2 + 5 + 5, "{job}");
        assert_eq!(up.seen().len(), 5, "dry-run sends nothing");

        // With room again, the next run sends US's unsent batches only (no
        // page of ids again, no batch twice), then serves GB.
        ran_ok(&d.portion(&["run"]));
        let rest = requests(&up.seen()[5..]);
        let mut want = videos(&["4,v5,6,v7", "8,v9"]);
        want.extend(region_walk("GB"));
        assert_eq!(rest, want);
        assert_eq!(spent(&d, "ids"), 8, "{}", usage(&d));
        assert_eq!(spent(&d, "videos.list"), 6, "{}", usage(&d));
        let files = d.outputs("details");
        assert_eq!(files.len(), 14, "{files:?}");
        for f in [
            "details.r000002.US.s1.p000001.json",
            "details.r000002.US.s1.p000002.json",
        ] {
            assert!(files.contains(&f.to_string()), "{f}: {files:?}");
        }
    }
}

#[test]
fn dry_run_plans_a_fan_out_at_its_worst_case() {
    let up = standin();
    let d = deployment("embedded", &up, 1000);
    let r = d.portion(&["run", "--dry-run", "--json"]);
    ran_ok(&r);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let job = &plan["credentials"][0]["jobs"][0];
    // Per region: 5 pages of ids, each full (per_page 4 values), so 20
    // values in batches of 4: 5 more calls. Two regions.
    assert_eq!(job["calls_per_run"], 20, "{job}");
    assert_eq!(job["units_per_run"]["units"], 20, "{job}");
    assert_eq!(job["next_run"]["calls"], 20, "{job}");
    assert!(up.seen().is_empty());
    // A real run never sends more than planned.
    ran_ok(&d.portion(&["run"]));
    assert!(up.seen().len() <= 20);
}

#[test]
fn values_past_the_planned_worst_case_are_left_out_with_a_warning() {
    let up = standin();
    let d = deployment("embedded", &up, 1000);
    // per_page 1: at most 5 values (5 pages), so 2 batches of 4 at most.
    d.write(&yaml(&embedded_store(&d), &up.base(), 1000).replace("per_page: 4", "per_page: 1"));
    let r = d.portion(&["run"]);
    ran_ok(&r);
    assert!(
        r.stderr.contains("left out of the next step's fan-out"),
        "{r:?}"
    );
    let mut want: Vec<String> = (1..=4).map(|p| format!("ids US p{p}")).collect();
    want.extend(videos(&["0,v1,2,v3", "4"]));
    assert_eq!(requests(&up.seen())[..6], want);
}

#[test]
fn every_bad_for_each_exits_78_naming_file_and_field() {
    let up = standin();
    let d = deployment("embedded", &up, 1000);
    let good = yaml(&embedded_store(&d), &up.base(), 1000);
    let fan = "for_each: { from: /items/*/id/n, batch: 4, join: \",\", per_page: 4 }";
    let first = "paginate: { page: page, start: 1, until_empty: /items, max_pages: 5 }";
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "no from",
            fan,
            "for_each: { batch: 4 }",
            &["steps[1].for_each.from", "needs from"],
        ),
        (
            "not a pointer",
            fan,
            "for_each: { from: items/*/id }",
            &["steps[1].for_each.from", "not a JSON pointer"],
        ),
        (
            "batch 0",
            fan,
            "for_each: { from: /items, batch: 0 }",
            &["steps[1].for_each.batch", "out of range"],
        ),
        (
            "unknown key",
            fan,
            "for_each: { from: /items, size: 3 }",
            &["steps[1].for_each", "unknown field `size`"],
        ),
        (
            "first step",
            first,
            &format!("{first}\n        for_each: {{ from: /items }}"),
            &["jobs.details.steps[0].for_each", "no previous step"],
        ),
        (
            "batch without for_each",
            "region: \"{region}\"",
            "region: \"{region}{batch}\"",
            &["jobs.details.steps[0].request.query.region", "no for_each"],
        ),
        (
            "for_each without batch",
            "id: \"{batch}\"",
            "id: \"all\"",
            &["jobs.details.steps[1].for_each", "uses {batch} nowhere"],
        ),
        (
            "a paginated fan-out",
            fan,
            &format!("{fan}\n        paginate: {{ link: next, max_pages: 2 }}"),
            &["jobs.details.steps[1].paginate", "does not paginate"],
        ),
    ];
    d.assert_each_edit_exits_78(&good, cases);
    assert!(up.seen().is_empty(), "nothing was sent: {:?}", up.seen());
    // Nothing was charged either.
    d.write(&good);
    assert_eq!(d.status_json()["credentials"][0]["charges_recorded"], 0);
}

#[test]
fn a_stop_inside_the_previous_step_keeps_the_values_of_its_written_pages() {
    let up = standin();
    // 2 units: US's ids pages 1 and 2; the values of both are in the
    // store's list, the cursor says which and how many.
    let d = deployment("embedded", &up, 2);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let c = cursor(&d);
    assert_eq!((&c["step"], &c["page"]), (&0.into(), &2.into()), "{c}");
    assert_eq!(c["found_in"]["count"], 7, "{c}");
    assert!(c.get("found").is_none(), "{c}");
    let kept = Kept { d: &d, redis: None };
    let (id, values) = kept.list(US_LIST);
    assert_eq!(values, ["0", "v1", "2", "v3", "4", "v5", "6"]);
    assert_eq!(id.as_deref(), c["found_in"]["list"].as_str(), "{c}");

    d.write(&yaml(&embedded_store(&d), &up.base(), 1000));
    ran_ok(&d.portion(&["run"]));
    // The pages of the first run are not fetched again, and their values
    // are in the batches all the same.
    let mut want = region_walk("US");
    want.extend(region_walk("GB"));
    assert_eq!(requests(&up.seen()), want);
}

#[test]
fn a_cursor_holding_the_values_found_as_an_older_build_saved_it_still_resumes() {
    let redis = RedisServer::start();
    for (store, server) in [("embedded".to_string(), None), (redis.url(), Some(&redis))] {
        let up = standin();
        let d = deployment(&store, &up, 2);
        assert_eq!(d.portion(&["run"]).code, 75);
        let kept = Kept {
            d: &d,
            redis: server,
        };
        // The layout before: the values in the cursor, no list.
        let mut c: serde_json::Value = serde_json::from_str(&kept.get("details").unwrap()).unwrap();
        let b = c.as_object_mut().unwrap();
        b.remove("found_in");
        b.insert(
            "found".into(),
            serde_json::json!(["0", "v1", "2", "v3", "4", "v5", "6"]),
        );
        kept.set("details", &c.to_string());
        kept.forget(US_LIST);
        kept.forget(&format!("{US_LIST}:seen"));
        d.write(&yaml(&store_for(&d, &store), &up.base(), 1000));
        ran_ok(&d.portion(&["run"]));
        let mut want = region_walk("US");
        want.extend(region_walk("GB"));
        assert_eq!(requests(&up.seen()), want, "{store}");
    }
}

#[test]
fn a_fan_out_killed_mid_run_redoes_at_most_the_request_in_flight() {
    let up = Standin::start(&["--pages", "3", "--items", "4", "--delay", "100ms"]);
    let d = deployment("embedded", &up, 1000);
    let mut victim = spawn(&mut d.cmd(&["run"]));
    up.wait_for(6);
    victim.kill().unwrap(); // SIGKILL: no cleanup at all
    victim.wait().unwrap();
    let before = up.seen().len();
    let written = d.outputs("details").len();
    assert!(before - written <= 1, "{before} fetched, {written} written");

    let rerun = d.run_after_killed_lock();
    ran_ok(&rerun);
    let mut round = region_walk("US");
    round.extend(region_walk("GB"));
    let mut want = round[written..].to_vec();
    if written >= 7 {
        want.extend(region_walk("US"));
    }
    assert_eq!(requests(&up.seen()[before..]), want, "{rerun:?}");
    assert!(up.seen().iter().all(|s| s.status == 200));
}

/// `jobs/youtube.yaml` as shipped, pointed at the stand-in `base` (the key
/// from the deployment's file, pages under `out/`, the embedded store), its
/// 2-hour `units` window replaced by `units_2h`.
fn youtube_example(d: &Deployment, base: &str, units_2h: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/jobs/youtube.yaml")).unwrap();
    let window = "{ limit: 800, per: 2h }";
    assert!(text.contains(window), "the example's 2h window changed");
    format!(
        "store: {}\n{}",
        embedded_store(d),
        text.replace("https://www.googleapis.com", base)
            .replace("{ env: YT_API_KEY }", "{ file: key }")
            .replace("../out/", "out/")
            .replace(window, units_2h)
    )
}

#[test]
fn the_examples_fan_out_of_120_ids_in_batches_of_50_resumes_mid_fan_out() {
    // Search: 3 pages of 40 video ids per region; videos.list takes 50.
    let up = Standin::start(&["--pages", "3", "--items", "40"]);
    let d = Deployment::new("");
    // One unit of videos.list: the first batch, then a stop (75).
    d.write(&youtube_example(&d, &up.base(), "{ limit: 1, per: 2h }"));
    let r = d.portion(&["run", "music-details"]);
    assert_eq!(r.code, 75, "{r:?}");
    d.write(&youtube_example(&d, &up.base(), "{ limit: 800, per: 2h }"));
    ran_ok(&d.portion(&["run", "music-details"]));

    let seen = up.seen();
    let ids = |s: &Seen| -> Vec<String> {
        let url = reqwest::Url::parse(&format!("http://x/?{}", s.query.clone().unwrap())).unwrap();
        let ids = url.query_pairs().find(|(k, _)| k == "id").unwrap().1;
        ids.split(',').map(String::from).collect()
    };
    let mut at = 0;
    for region in ["US", "GB"] {
        let searches: Vec<u32> = seen[at..at + 3].iter().map(|s| s.page).collect();
        assert!(
            seen[at..at + 3]
                .iter()
                .all(|s| s.path == "/youtube/v3/search")
        );
        assert_eq!(searches, [0, 1, 2], "{region}: each search page once");
        let batches: Vec<Vec<String>> = seen[at + 3..at + 6].iter().map(ids).collect();
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [50, 50, 20], "{region}");
        let all: Vec<String> = (0..3)
            .flat_map(|p| (0..40).map(move |i| format!("{region}{p:02}{i:03}")))
            .collect();
        assert_eq!(batches.concat(), all, "{region}: every id once, in order");
        at += 6;
    }
    assert_eq!(seen.len(), 12, "no request twice: {seen:?}");
    assert!(seen.iter().all(|s| s.status == 200));
}

#[test]
fn a_value_that_carries_the_secret_is_never_sent_stored_or_logged() {
    let up = standin();
    let d = Deployment::new("");
    let echoing = |limit| {
        yaml(&embedded_store(&d), &up.base(), limit)
            .replace("key: \"{secret}\" }", "key: \"{secret}\", echo: \"1\" }")
    };
    // Each page of ids ends with the key. Stopped inside the step (2
    // units), the cursor keeps the values found so far, the key not.
    d.write(&echoing(2));
    let stopped = d.portion(&["run"]);
    assert_eq!(stopped.code, 75, "{stopped:?}");
    let status = d.status_json().to_string();
    assert!(status.contains(r#""found_in":{"#), "{status}");
    let kept = Kept { d: &d, redis: None };
    let (_, found) = kept.list(US_LIST);
    assert_eq!(found[..2], ["0", "v1"], "{found:?}");
    for text in found
        .iter()
        .chain(kept.map(&format!("{US_LIST}:seen")).iter().map(|(v, _)| v))
    {
        assert!(!text.contains("demo-key"), "{text}");
    }
    d.write(&echoing(1000));
    let r = d.portion(&["run", "-v"]);
    ran_ok(&r);
    assert!(
        r.stderr.contains("left out of the next step's fan-out"),
        "{r:?}"
    );
    let mut want = region_walk("US");
    want.extend(region_walk("GB"));
    assert_eq!(requests(&up.seen()[2..]), want[2..]);
    for text in [stopped.all(), r.all(), status, d.status_json().to_string()] {
        assert!(!text.contains("demo-key"), "{text}");
    }
    for f in d.outputs("details") {
        let page = std::fs::read_to_string(d.path().join("out/details").join(&f)).unwrap();
        assert!(
            !page.contains("demo-key") && !f.contains("demo-key"),
            "{f}: {page}"
        );
    }
}

#[test]
fn a_fan_out_may_follow_another_and_is_planned_from_its_worst_case() {
    let up = standin();
    let d = Deployment::new("");
    let third = format!(
        r#"      - endpoint: videos.list
        for_each: {{ from: /items/*/id, batch: 5 }}
        request: {{ url: "{}/youtube/v3/videos", query: {{ part: snippet, id: "{{batch}}", key: "{{secret}}" }} }}
    output: out/details"#,
        up.base()
    );
    d.write(
        &yaml(&embedded_store(&d), &up.base(), 1000).replace("    output: out/details", &third),
    );
    // Per region: 5 pages of ids, 5 batches of the 20 values they can
    // hold, then the ids of those 5 pages of details (5 each, per_page
    // defaults to batch): 5 more.
    let plan = d.portion(&["run", "--dry-run", "--json"]);
    ran_ok(&plan);
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    assert_eq!(plan["credentials"][0]["jobs"][0]["calls_per_run"], 30);

    ran_ok(&d.portion(&["run"]));
    let mut want = Vec::new();
    for region in ["US", "GB"] {
        want.extend(region_walk(region));
        want.extend(videos(&["0,v1,2,v3,4", "v5,6,v7,8,v9"]));
    }
    assert_eq!(requests(&up.seen()), want);
    assert_eq!(spent(&d, "videos.list"), 10, "{}", usage(&d));
}

const US_LIST: &str = "details:values:US:s1";

/// A run of `store` stopped by its budget after US's first batch, its
/// file then given room again.
fn stopped_after_a_batch(store: &str) -> (Standin, Deployment) {
    let up = standin();
    let d = deployment(store, &up, 5);
    assert_eq!(d.portion(&["run"]).code, 75);
    d.write(&yaml(&store_for(&d, store), &up.base(), 1000));
    (up, d)
}

#[test]
fn a_fan_outs_values_are_kept_once_and_an_old_or_lost_list_is_handled() {
    let redis = RedisServer::start();
    for (store, server) in [("embedded".to_string(), None), (redis.url(), Some(&redis))] {
        redis.cli(&["FLUSHALL"]);
        let (up, d) = stopped_after_a_batch(&store);
        let kept = Kept {
            d: &d,
            redis: server,
        };
        // The list, once, beside a cursor that points into it.
        let (id, list) = kept.list(US_LIST);
        let all = ["0", "v1", "2", "v3", "4", "v5", "6", "v7", "8", "v9"];
        assert_eq!(list, all, "{store}");
        let mut c: serde_json::Value = serde_json::from_str(&kept.get("details").unwrap()).unwrap();
        assert_eq!(c["batch_at"]["list"].as_str(), id.as_deref(), "{c}");
        assert_eq!(c["batch_at"]["mapped"], true, "{c}");

        // A cursor of the layout before (the values in it) still resumes.
        let b = c.as_object_mut().unwrap();
        b.remove("batch_at");
        b.insert("batch".into(), serde_json::json!(all[4..]));
        kept.set("details", &c.to_string());
        kept.forget(US_LIST);
        ran_ok(&d.portion(&["run"]));
        let mut want = videos(&["4,v5,6,v7", "8,v9"]);
        want.extend(region_walk("GB"));
        assert_eq!(requests(&up.seen()[5..]), want, "{store}");

        // So does one pointing into a list of the layout before (all its
        // values in one text under the list's name).
        redis.cli(&["FLUSHALL"]);
        let (up, d) = stopped_after_a_batch(&store);
        let kept = Kept {
            d: &d,
            redis: server,
        };
        let mut c: serde_json::Value = serde_json::from_str(&kept.get("details").unwrap()).unwrap();
        c["batch_at"] = serde_json::json!({ "list": "old", "from": 4, "left": 6 });
        kept.set("details", &c.to_string());
        kept.forget(US_LIST);
        kept.set(
            US_LIST,
            &serde_json::json!({ "id": "old", "values": all }).to_string(),
        );
        ran_ok(&d.portion(&["run"]));
        let mut want = videos(&["4,v5,6,v7", "8,v9"]);
        want.extend(region_walk("GB"));
        assert_eq!(requests(&up.seen()[5..]), want, "{store}");

        // A list gone from the store: its 6 values not yet sent are LOST,
        // said, and the run exits 1; the next run walks US afresh.
        redis.cli(&["FLUSHALL"]);
        let (up, d) = stopped_after_a_batch(&store);
        Kept {
            d: &d,
            redis: server,
        }
        .forget(US_LIST);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr
                .contains("the fan-out's 6 value(s) not yet sent are gone from the store")
                && r.stderr.contains("done, 6 fan-out value(s) LOST")
                && !r.stderr.contains("holds no values"),
            "{r:?}"
        );
        assert_eq!(requests(&up.seen()[5..]), region_walk("GB"), "{r:?}");
        ran_ok(&d.portion(&["run"]));
        let mut want = region_walk("GB");
        want.extend(region_walk("US"));
        want.extend(region_walk("GB"));
        assert_eq!(requests(&up.seen()[5..]), want, "{store}");
    }
}

#[test]
fn a_store_error_reading_a_fan_outs_values_stops_the_run_and_loses_nothing() {
    let redis = RedisServer::start();
    for (store, server) in [("embedded".to_string(), None), (redis.url(), Some(&redis))] {
        let (up, d) = stopped_after_a_batch(&store);
        let kept = Kept {
            d: &d,
            redis: server,
        };
        let (list, cursor) = (kept.map(US_LIST), kept.get("details").unwrap());
        kept.spoil_field(US_LIST, "id");
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{store}: {r:?}");
        assert!(
            !r.stderr.contains("LOST") && !r.stderr.contains("gone"),
            "{r:?}"
        );
        assert_eq!(up.seen().len(), 5, "nothing sent: {r:?}");
        assert_eq!(kept.get("details"), Some(cursor), "the cursor is kept");
        // The store readable again, the next run resumes at the next batch.
        kept.forget(US_LIST);
        kept.put(US_LIST, &list);
        ran_ok(&d.portion(&["run"]));
        let mut want = videos(&["4,v5,6,v7", "8,v9"]);
        want.extend(region_walk("GB"));
        assert_eq!(requests(&up.seen()[5..]), want, "{store}");
    }
}

#[test]
fn a_fan_outs_list_is_emptied_once_its_walk_is_done() {
    let redis = RedisServer::start();
    for (store, server) in [("embedded".to_string(), None), (redis.url(), Some(&redis))] {
        let (_up, d) = stopped_after_a_batch(&store);
        let kept = Kept {
            d: &d,
            redis: server,
        };
        assert_eq!(kept.list(US_LIST).1.len(), 10);
        // (the values seen, forgotten once the step before was done)
        assert_eq!(kept.map(&format!("{US_LIST}:seen")), [], "{store}");
        ran_ok(&d.portion(&["run"]));
        // US's walk resumed and ended, GB's started and ended: neither
        // list (nor the values it has seen) is kept.
        for name in [US_LIST, "details:values:GB:s1"] {
            assert_eq!(kept.map(name), [], "{store}: {name}");
            assert_eq!(kept.map(&format!("{name}:seen")), [], "{store}: {name}");
        }
    }
}

#[test]
fn a_fan_outs_numbers_are_sent_as_the_page_writes_them() {
    let redis = RedisServer::start();
    for store in ["embedded".to_string(), redis.url()] {
        // One page of ids, a long number and -0 first among them.
        let up = Standin::start(&["--pages", "1", "--items", "4", "--long-ids"]);
        let d = deployment(&store, &up, 1000);
        ran_ok(&d.portion(&["run"]));
        let mut want = Vec::new();
        for region in ["US", "GB"] {
            want.extend([format!("ids {region} p1"), format!("ids {region} p2")]);
            want.extend(videos(&["123456789012345678901234,-0,0,v1", "2,v3"]));
        }
        assert_eq!(requests(&up.seen()), want, "{store}");
    }
}
