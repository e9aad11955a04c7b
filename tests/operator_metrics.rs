//! OpenMetrics, through the real binary: `portion status --format
//! openmetrics` on a known ledger (embedded, clock frozen) and on a Redis
//! that lost its log, and `portion run --metrics-file` after a run that
//! finished, one the quota stopped, one whose store lost its log, one a
//! signal stopped, one with a configuration error and one whose file cannot
//! be written. Every text
//! is read back by a real OpenMetrics parser (`common::openmetrics`), and
//! the numbers are checked against the charges the test made.

use std::collections::BTreeMap;
use std::path::Path;

use portion::ledger::{At, EmbeddedLedger, Ledger};
use portion::metrics::{Family, encode};

use crate::common::deployment::{
    Deployment, WIDE, deployment_yaml, embedded_store, finish, kill, spawn, trending_with,
    videos_job,
};
use crate::common::known::{at_report_time, known_config, known_ledger, report_time_us};
use crate::common::openmetrics::{Families, parse};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

const HOUR_US: i64 = 3_600_000_000;

fn window(pool: &str, window: &'static str) -> Vec<(&'static str, String)> {
    vec![
        ("credential", "main".into()),
        ("pool", pool.into()),
        ("window", window.into()),
    ]
}

fn value(m: &Families, name: &str, labels: &[(&'static str, String)]) -> f64 {
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    m.value(name, &labels)
}

fn status_metrics_at_report_time(d: &Deployment) -> Families {
    let r = at_report_time(d, &["status", "--format", "openmetrics"]);
    assert_eq!(r.code, 0, "{r:?}");
    parse(&r.stdout)
}

#[test]
fn status_as_openmetrics_on_a_known_ledger() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let m = status_metrics_at_report_time(&d);

    // units 24h: limit 100, headroom 10% (10), 20 spent (5 at -20h, 10 at
    // -3h, 5 at -30m); units 1h: limit 30, the 5 of -30m; search 24h:
    // limit 10, 3 spent at -2h.
    let expect = [
        (
            "units",
            "24h",
            100.0,
            10.0,
            90.0,
            20.0,
            70.0,
            4.0 * 3600.0,
            86_400.0,
        ),
        ("units", "1h", 30.0, 0.0, 30.0, 5.0, 25.0, 1800.0, 3600.0),
        (
            "search",
            "24h",
            10.0,
            0.0,
            10.0,
            3.0,
            7.0,
            22.0 * 3600.0,
            86_400.0,
        ),
    ];
    for (pool, per, limit, headroom, budget, used, remaining, next_free, len) in expect {
        let l = window(pool, per);
        assert_eq!(value(&m, "portion_window_limit_units", &l), limit, "{l:?}");
        assert_eq!(value(&m, "portion_window_headroom_units", &l), headroom);
        assert_eq!(value(&m, "portion_window_budget_units", &l), budget);
        assert_eq!(value(&m, "portion_window_used_units", &l), used, "{l:?}");
        assert_eq!(value(&m, "portion_window_remaining_units", &l), remaining);
        assert_eq!(value(&m, "portion_window_next_free_seconds", &l), next_free);
        assert_eq!(value(&m, "portion_window_length_seconds", &l), len);
    }
    let by = |name, key, who: &str, pool, per| {
        let mut l = window(pool, per);
        l.push((key, who.to_string()));
        value(&m, name, &l)
    };
    assert_eq!(
        by(
            "portion_window_used_by_job_units",
            "job",
            "trending",
            "units",
            "24h"
        ),
        20.0
    );
    assert_eq!(
        by(
            "portion_window_used_by_job_units",
            "job",
            "trending",
            "units",
            "1h"
        ),
        5.0
    );
    assert_eq!(
        by(
            "portion_window_used_by_job_units",
            "job",
            "music",
            "search",
            "24h"
        ),
        3.0
    );
    assert_eq!(
        by(
            "portion_window_used_by_endpoint_units",
            "endpoint",
            "search.list",
            "search",
            "24h"
        ),
        3.0
    );
    let main = [("credential", "main".to_string())];
    assert_eq!(value(&m, "portion_credential_blocked", &main), 0.0);
    assert_eq!(
        value(
            &m,
            "portion_credential_blocked_until_timestamp_seconds",
            &main
        ),
        0.0
    );
    assert_eq!(value(&m, "portion_credential_log_lost", &main), 0.0);
    assert_eq!(
        value(&m, "portion_credential_charges_recorded", &main),
        23.0
    );
    let units = [
        ("credential", "main".to_string()),
        ("pool", "units".to_string()),
    ];
    assert_eq!(value(&m, "portion_pool_log_lost", &units), 0.0);
    assert_eq!(
        m.value("portion_status_timestamp_seconds", &[]),
        report_time_us() as f64 / 1e6
    );

    // Gauges with their units declared, for every family.
    for f in &m.0 {
        assert_eq!(f.kind, "gauge", "{f:?}");
        assert!(f.name.starts_with("portion_"), "{f:?}");
        assert!(!f.help.is_empty(), "{f:?}");
        let unit = f.name.rsplit('_').next().unwrap();
        if ["units", "seconds"].contains(&unit) {
            assert_eq!(f.unit, unit, "{f:?}");
        }
    }
    assert_eq!(m.family("portion_window_remaining_units").unit, "units");
    assert_eq!(m.family("portion_window_next_free_seconds").unit, "seconds");
}

#[test]
fn a_blocked_credential_shows_in_the_metrics() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let until = report_time_us() + 5 * HOUR_US;
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(ledger.block(
            "main",
            until,
            "upstream 403 quotaExceeded",
            At::Fixed(report_time_us()),
        ))
        .unwrap();
    let m = status_metrics_at_report_time(&d);
    let main = [("credential", "main".to_string())];
    assert_eq!(value(&m, "portion_credential_blocked", &main), 1.0);
    assert_eq!(
        value(
            &m,
            "portion_credential_blocked_until_timestamp_seconds",
            &main
        ),
        until as f64 / 1e6
    );
}

#[test]
fn the_status_formats_and_their_flags() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let json = at_report_time(&d, &["status", "--json"]).stdout;
    assert_eq!(
        at_report_time(&d, &["status", "--format", "json"]).stdout,
        json
    );
    assert!(json.starts_with('{'), "{json}");
    let r = at_report_time(&d, &["status", "--json", "--format", "openmetrics"]);
    assert_eq!(r.code, 2, "{r:?}");
    // One credential by name: only its samples.
    let r = at_report_time(&d, &["status", "main", "--format", "openmetrics"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.ends_with("# EOF\n"), "{}", r.stdout);
    let m = parse(&r.stdout);
    assert_eq!(m.samples("portion_window_remaining_units").len(), 3);
    assert_eq!(
        m.samples("portion_window_remaining_units")[0].0["window"],
        "24h"
    );
}

#[test]
fn label_values_are_escaped_so_a_parser_reads_them_back() {
    let odd = ["quo\"te", "back\\slash", "new\nline", "ünï ✓ {x=\"1\"}"];
    let mut f = Family::new("portion_test", "Escaping.", None);
    for (i, v) in odd.iter().enumerate() {
        f.push(&[("credential", v), ("pool", "p")], i as u64);
    }
    let m = parse(&encode(vec![f]));
    for (i, v) in odd.iter().enumerate() {
        assert_eq!(
            m.value("portion_test", &[("credential", v), ("pool", "p")]),
            i as f64
        );
    }
}

/// The outcome file `portion run --metrics-file` wrote, parsed.
fn outcome(path: &Path) -> Families {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        !text.contains("demo-key"),
        "the secret is in the file:\n{text}"
    );
    parse(&text)
}

/// The `reason` whose stop-reason sample is 1 (each job has one of each).
fn stop_reason(m: &Families, job: &str) -> String {
    let reasons: BTreeMap<String, f64> = m
        .samples("portion_run_job_stop_reason")
        .into_iter()
        .filter(|(l, _)| l["job"] == job)
        .map(|(l, v)| (l["reason"].clone(), v))
        .collect();
    assert_eq!(reasons.len(), 9, "{reasons:?}");
    let set: Vec<&String> = reasons
        .iter()
        .filter(|(_, v)| **v == 1.0)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(set.len(), 1, "{reasons:?}");
    set[0].clone()
}

fn job_value(m: &Families, name: &str, job: &str) -> f64 {
    m.value(name, &[("job", job)])
}

#[test]
fn the_run_outcome_file_after_a_rejection_and_after_a_finish() {
    // 5 units an hour; US and GB have 3 pages each: US 1-3, GB 1-2, then
    // the quota says no at GB page 3.
    let up = Standin::start(&["--pages", "3"]);
    let tight = &["{ limit: 5, per: 1h }"];
    let d = trending_with(&up, "embedded", tight, &["US", "GB"], 3, "fail_closed");
    let dir = d.path().join("textfile");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("portion.prom");
    let before = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    let r = d.portion(&["run", "--metrics-file", file.to_str().unwrap()]);
    let after = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    assert_eq!(r.code, 75, "{r:?}");
    let m = outcome(&file);
    assert_eq!(m.value("portion_run_exit_code", &[]), 75.0);
    assert_eq!(job_value(&m, "portion_run_job_exit_code", "trending"), 75.0);
    assert_eq!(stop_reason(&m, "trending"), "quota");
    assert_eq!(job_value(&m, "portion_run_job_calls", "trending"), 5.0);
    assert_eq!(
        job_value(&m, "portion_run_job_unmetered_calls", "trending"),
        0.0
    );
    let units = [("job", "trending"), ("pool", "units")];
    assert_eq!(m.value("portion_run_job_charged_units", &units), 5.0);
    assert_eq!(
        job_value(&m, "portion_run_job_pages_written", "trending"),
        5.0
    );
    assert_eq!(
        job_value(&m, "portion_run_job_regions_done", "trending"),
        1.0
    );
    assert_eq!(job_value(&m, "portion_run_job_regions", "trending"), 2.0);
    assert_eq!(
        job_value(&m, "portion_run_job_failed_regions", "trending"),
        0.0
    );
    let end = m.value("portion_run_end_timestamp_seconds", &[]);
    assert!(before <= end && end <= after, "{before} {end} {after}");
    let took = m.value("portion_run_duration_seconds", &[]);
    assert!(took > 0.0 && took <= after - before, "{took}");
    assert!(job_value(&m, "portion_run_job_duration_seconds", "trending") <= took);
    // Written atomically: nothing but the file in its folder.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["portion.prom"]);

    // The status agrees: the hour's 5 units are spent.
    let r = d.portion(&["status", "--format", "openmetrics"]);
    let s = parse(&r.stdout);
    assert_eq!(
        value(&s, "portion_window_used_units", &window("units", "1h")),
        5.0
    );
    assert_eq!(
        value(&s, "portion_window_remaining_units", &window("units", "1h")),
        0.0
    );

    // With room again, the next run serves GB from page 3, then US again
    // (a run serves every region once, from where the last one stopped).
    d.write(
        &std::fs::read_to_string(d.config())
            .unwrap()
            .replace(tight[0], WIDE[0]),
    );
    let r = d.portion(&["run", "--metrics-file", file.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    let m = outcome(&file);
    assert_eq!(m.value("portion_run_exit_code", &[]), 0.0);
    assert_eq!(stop_reason(&m, "trending"), "none");
    assert_eq!(job_value(&m, "portion_run_job_calls", "trending"), 4.0);
    assert_eq!(m.value("portion_run_job_charged_units", &units), 4.0);
    assert_eq!(
        job_value(&m, "portion_run_job_pages_written", "trending"),
        4.0
    );
    assert_eq!(
        job_value(&m, "portion_run_job_regions_done", "trending"),
        2.0
    );
}

#[test]
fn a_configuration_error_still_writes_the_outcome() {
    let d = Deployment::new("credentials: {}\nnot_a_key: 1\n");
    let file = d.path().join("portion.prom");
    std::fs::write(&file, "the previous run's file").unwrap();
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let old = inode(&file);
    let r = d.portion(&["run", "--metrics-file", file.to_str().unwrap()]);
    assert_eq!(r.code, 78, "{r:?}");
    // Replaced by a rename (a new file), not rewritten in place, which a
    // collector reading meanwhile could see half done.
    assert_ne!(inode(&file), old, "the file was rewritten in place");
    let m = outcome(&file);
    assert_eq!(m.value("portion_run_exit_code", &[]), 78.0);
    assert!(m.samples("portion_run_job_exit_code").is_empty(), "{m:?}");
}

#[test]
fn a_metrics_file_that_cannot_be_written_fails_the_run() {
    let up = Standin::start(&["--pages", "1"]);
    let d = trending_with(&up, "embedded", WIDE, &["US"], 1, "fail_closed");
    let file = d.path().join("missing-folder").join("portion.prom");
    let r = d.portion(&["run", "--metrics-file", file.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("cannot write the metrics file"), "{r:?}");
    assert_eq!(up.seen().len(), 1, "the run itself went ahead");
    // A run that failed keeps its own code: here the store is unreachable
    // (69), and the write's error is logged beside it.
    let gone = trending_with(
        &up,
        "redis://127.0.0.1:1/0",
        WIDE,
        &["US"],
        1,
        "fail_closed",
    );
    let file = gone.path().join("missing-folder").join("portion.prom");
    let r = gone.portion(&["run", "--metrics-file", file.to_str().unwrap()]);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(r.stderr.contains("cannot write the metrics file"), "{r:?}");
    assert_eq!(up.seen().len(), 1, "nothing was sent");
}

#[test]
fn a_redis_that_lost_its_log_shows_in_status_and_run_metrics() {
    let mut redis = RedisServer::start(); // no persistence
    let up = Standin::start(&["--pages", "3"]);
    let four = &["{ limit: 4, per: 1h }"];
    let d = trending_with(&up, &redis.url(), four, &["US", "GB"], 3, "fail_closed");
    let file = d.path().join("portion.prom");
    let metrics = ["run", "--metrics-file", file.to_str().unwrap()];
    assert_eq!(d.portion(&metrics).code, 75);
    let m = outcome(&file);
    assert_eq!(stop_reason(&m, "trending"), "quota");
    assert_eq!(job_value(&m, "portion_run_job_calls", "trending"), 4.0);

    let main = [("credential", "main".to_string())];
    let units = [
        ("credential", "main".to_string()),
        ("pool", "units".to_string()),
    ];
    let status = || {
        let r = d.portion(&["status", "--format", "openmetrics"]);
        assert_eq!(r.code, 0, "{r:?}");
        parse(&r.stdout)
    };
    let s = status();
    assert_eq!(value(&s, "portion_credential_log_lost", &main), 0.0);
    assert_eq!(value(&s, "portion_credential_charges_recorded", &main), 4.0);
    assert_eq!(
        value(&s, "portion_window_remaining_units", &window("units", "1h")),
        0.0
    );

    redis.restart(); // comes back empty
    let s = status();
    assert_eq!(value(&s, "portion_credential_log_lost", &main), 1.0);
    assert_eq!(value(&s, "portion_credential_charges_recorded", &main), 0.0);

    // The run tells the store, which counts the pool as spent for an hour.
    let started = redis.time_us();
    assert_eq!(d.portion(&metrics).code, 75);
    let m = outcome(&file);
    assert_eq!(stop_reason(&m, "trending"), "log_lost");
    assert_eq!(job_value(&m, "portion_run_job_calls", "trending"), 0.0);
    let s = status();
    assert_eq!(value(&s, "portion_pool_log_lost", &units), 1.0);
    let until = value(&s, "portion_pool_log_lost_until_timestamp_seconds", &units);
    let (lo, hi) = (started + HOUR_US, redis.time_us() + HOUR_US);
    assert!(
        lo as f64 / 1e6 <= until && until <= hi as f64 / 1e6,
        "{until}"
    );
    assert_eq!(
        value(&s, "portion_window_remaining_units", &window("units", "1h")),
        0.0
    );
}

#[test]
fn a_stop_signal_is_in_the_outcome_of_the_job_it_stopped_and_of_the_next() {
    let up = Standin::start(&["--pages", "3", "--delay", "150ms"]);
    let d = Deployment::new("");
    let jobs = [
        videos_job("first", "main", &["US", "GB", "DE"], 3, &up.base()),
        videos_job("second", "main", &["JP"], 3, &up.base()),
    ];
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &jobs,
    ));
    let file = d.path().join("portion.prom");
    let run = spawn(&mut d.cmd(&["run", "--metrics-file", file.to_str().unwrap()]));
    up.wait_for(2);
    kill("-TERM", run.id());
    let r = finish(run);
    assert_eq!(r.code, 75, "{r:?}");
    let m = outcome(&file);
    assert_eq!(m.value("portion_run_exit_code", &[]), 75.0);
    assert_eq!(stop_reason(&m, "first"), "signal");
    assert_eq!(stop_reason(&m, "second"), "signal");
    assert_eq!(job_value(&m, "portion_run_job_exit_code", "second"), 75.0);
    let pages = job_value(&m, "portion_run_job_pages_written", "first");
    assert_eq!(pages, d.outputs("first").len() as f64);
    assert!(job_value(&m, "portion_run_job_calls", "first") >= 2.0);
    assert!(pages < 9.0, "the signal stopped nothing");
    assert!(
        m.samples("portion_run_job_calls").len() == 1,
        "second never started"
    );
}
