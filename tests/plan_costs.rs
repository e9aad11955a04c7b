//! What `portion run --dry-run` assumes a run costs, through the real
//! binary (issue 38, section 3): the pacing window it proposes goes at the
//! budget's rate, never below; a conditional job is planned at its share
//! of 304s, on both stores; a once-job's time to finish counts its waits
//! inside a run, or its schedule's ticks when it stops.

use crate::common::deployment::Deployment;

/// One credential a pool, `requests`, of `limit` per `per`, each with a job
/// of up to 10 pages of one request.
fn pools_yaml(pools: &[(u64, &str)]) -> String {
    let mut credentials = String::new();
    let mut jobs = String::new();
    for (i, (limit, per)) in pools.iter().enumerate() {
        credentials.push_str(&format!(
            "  c{i}:\n    secret: {{ file: key }}\n    pools:\n      requests: [ {{ limit: {limit}, per: {per} }} ]\n"
        ));
        jobs.push_str(&format!(
            "  j{i}:\n    credential: c{i}\n    steps:\n      - endpoint: list\n        request: {{ url: \"http://127.0.0.1:9/v\" }}\n        paginate: {{ token: /next, param: t, max_pages: 10 }}\n    output: out/j{i}\n"
        ));
    }
    format!(
        "credentials:\n{credentials}endpoints:\n  list: {{ cost: {{ requests: 1 }} }}\njobs:\n{jobs}"
    )
}

#[test]
fn the_proposed_pacing_window_goes_at_the_budgets_rate() {
    let pools = [(250, "1m"), (250, "1h"), (5000, "1h")];
    let d = Deployment::new(&pools_yaml(&pools));
    let r = d.portion(&["run", "--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let proposed: Vec<(u64, u64, u64, u64)> = (plan["credentials"].as_array().unwrap().iter())
        .map(|c| {
            let p = &c["pools"][0]["pacing"];
            let n = |f: &str| p[f].as_u64().unwrap_or_else(|| panic!("{f}: {c}"));
            let (budget, longest) = (n("budget"), n("longest_seconds"));
            (
                budget,
                longest,
                n("propose_limit"),
                n("propose_per_seconds"),
            )
        })
        .collect();
    // Was { limit: 10, per: 1m } for 250 a minute (a 25th of it) and
    // { limit: 10, per: 3m } for 250 an hour.
    assert_eq!(
        proposed,
        [(250, 60, 25, 6), (250, 3600, 10, 144), (5000, 3600, 25, 18)]
    );
    for (budget, longest, limit, per) in proposed {
        assert_eq!(limit * longest, budget * per, "{budget}/{longest}s");
    }
    let r = d.portion(&["run", "--dry-run"]);
    assert!(
        r.stdout.contains(
            "{ limit: 25, per: 6s } (the budget's own rate, 250 per 1m; a run of the largest job, 10 units, fits in one)"
        ),
        "{r:?}"
    );
}

#[test]
fn a_conditional_jobs_plan_counts_its_share_of_304s_embedded() {
    let d = Deployment::new("");
    let store = crate::common::deployment::embedded_store(&d);
    plan_counts_the_share_of_304s(&d, &store);
}

#[test]
fn a_conditional_jobs_plan_counts_its_share_of_304s_on_redis() {
    let redis = crate::common::redis::RedisServer::start();
    plan_counts_the_share_of_304s(&Deployment::new(""), &redis.url());
}

/// A conditional job run twice against the stand-in's GitHub (2
/// repositories of 2 pages, up to 5 pages each, every 10 minutes, 60
/// requests an hour; a 304 costs nothing): the first run fetches the 4
/// pages in full, the second is answered 304 on each page 1. The plan then
/// counts a run at that share of 304s, 2 of 6 calls: 10 pages at 2/3 of a
/// unit, 7, not 10.
fn plan_counts_the_share_of_304s(d: &Deployment, store: &str) {
    use crate::common::standin::Standin;
    use crate::run_conditional::{CONDITIONAL, yaml};

    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let every = "    output: out/issues\n    schedule: every 10m\n";
    let config = yaml(store, &up.base(), 60, CONDITIONAL);
    d.write(&config.replace("    output: out/issues\n", every));
    let plan = |d: &Deployment| {
        let r = d.portion(&["run", "--dry-run", "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        plan["credentials"][0]["jobs"][0].clone()
    };

    // Before any run: no share known, full pages, and the plan says so.
    let job = plan(d);
    let observed = &job["not_modified"];
    assert_eq!(observed["calls"], 0, "{job}");
    assert!(observed["expected_units_per_run"].is_null(), "{job}");
    assert_eq!(job["schedule"]["units_per_day"]["requests"], 1440, "{job}");
    let text = d.portion(&["run", "--dry-run"]).stdout;
    assert!(
        text.contains("no share of 304s known yet (none of their calls in the store's log): full pages assumed"),
        "{text}"
    );

    assert_eq!(d.portion(&["run"]).code, 0);
    let second = d.portion(&["run"]);
    assert_eq!(second.code, 0, "{second:?}");
    assert!(second.stderr.contains("2 answered 304"), "{second:?}");

    let job = plan(d);
    let observed = &job["not_modified"];
    assert_eq!(
        (&observed["calls"], &observed["answered_304"]),
        (&6.into(), &2.into()),
        "{job}"
    );
    assert_eq!(observed["expected_units_per_run"]["requests"], 7, "{job}");
    // The worst case is still said as such; the schedule counts 7 a run:
    // 144 runs a day, 6 of them an hour (42 of the 60), and one every
    // 7m30s at most (8 an hour), rounded up to 8m.
    assert_eq!(job["units_per_run"]["requests"], 10, "{job}");
    let schedule = &job["schedule"];
    assert_eq!(schedule["units_per_day"]["requests"], 1008, "{job}");
    assert_eq!(schedule["windows"][0]["units_needed"], 42, "{job}");
    assert_eq!(schedule["fastest_every_seconds"], 480, "{job}");
    let text = d.portion(&["run", "--dry-run"]).stdout;
    assert!(
        text.contains("conditional steps: 2 of their 6 calls in the store's log answered 304 (33%): a run planned at requests 7 (full pages: requests 10)"),
        "{text}"
    );
}

/// A conditional job of inputs (20 repositories of one page each, up to 5,
/// 60 requests an hour) walked twice, the second walk answered 304 on
/// every page: half its calls, so an input is planned at 2.5 units, not
/// 5, and the rest of the next walk done in 10 minutes, not an hour.
#[test]
fn a_conditional_job_of_inputs_finishes_at_its_share_of_304s() {
    use crate::common::deployment::embedded_store;
    use crate::common::standin::Standin;

    let up = Standin::start(&["--pages", "1", "--items", "3"]);
    let d = Deployment::new("");
    let repos: Vec<String> = (1..=20).map(|i| format!("r/{i}")).collect();
    std::fs::write(d.path().join("repos.txt"), repos.join("\n") + "\n").unwrap();
    let yaml = format!(
        r#"store: {store}
credentials:
  main:
    secret: {{ file: key }}
    pools:
      requests: [ {{ limit: 60, per: 1h }} ]
endpoints:
  issues.list: {{ cost: {{ requests: 1, not_modified: 0 }} }}
jobs:
  issues:
    credential: main
    inputs: {{ file: repos.txt }}
    steps:
      - endpoint: issues.list
        request: {{ url: "{base}/repos/{{key}}/issues", query: {{ key: "{{secret}}", sort: updated }} }}
        paginate: {{ link: next, max_pages: 5 }}
        conditional: true
        on_not_modified: end
    output: out/issues
"#,
        store = embedded_store(&d),
        base = up.base()
    );
    d.write(&yaml);
    let plan = |d: &Deployment| {
        let r = d.portion(&["run", "--dry-run", "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        plan["credentials"][0]["jobs"][0].clone()
    };
    for _ in 0..2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let job = plan(&d);
    // 40 of the 60 left: 20 inputs at 2.5 need 50, 10 more than now, which
    // the hour frees in 10 minutes (at 5 an input: 100, an hour).
    assert_eq!(job["inputs"]["left"], 20, "{job}");
    assert_eq!(job["inputs"]["done_in_seconds"], 600, "{job}");
    let observed = &job["not_modified"];
    assert_eq!(
        (&observed["calls"], &observed["answered_304"]),
        (&40.into(), &20.into()),
        "{job}"
    );
    let text = d.portion(&["run", "--dry-run"]).stdout;
    assert!(
        text.contains("(in 10m) at the pace the budgets allow, each request at its share of 304s"),
        "{text}"
    );
}

/// A once-job of 100 inputs under a budget of 10 a minute, run every 10
/// minutes: a run that stops at a refusal does 10 a tick, the rest done
/// at the 9th tick after now (90 minutes); one that waits up to 10 minutes
/// (`max_wait`, or `run --dry-run --wait`) goes on at the budget's pace,
/// the 90 after the 10 of now in 9 minutes.
#[test]
fn a_once_jobs_time_to_finish_counts_its_waits_or_its_ticks() {
    let d = Deployment::new("");
    let keys: Vec<String> = (1..=100).map(|i| format!("K{i}")).collect();
    std::fs::write(d.path().join("ids.txt"), keys.join("\n") + "\n").unwrap();
    let yaml = |max_wait: &str| {
        format!(
            r#"credentials:
  main:
    secret: {{ file: key }}
    pools:
      requests: [ {{ limit: 10, per: 1m }} ]
endpoints:
  details: {{ cost: {{ requests: 1 }} }}
jobs:
  batch:
    credential: main
    inputs: {{ file: ids.txt }}
    once: true
    schedule: every 10m
{max_wait}    steps:
      - endpoint: details
        request: {{ url: "http://127.0.0.1:9/details/{{key}}" }}
    output: out/batch
"#
        )
    };
    let plan = |d: &Deployment, args: &[&str]| {
        let mut all = vec!["run", "--dry-run", "--json"];
        all.extend(args);
        let r = d.portion(&all);
        assert_eq!(r.code, 0, "{r:?}");
        let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        let job = plan["credentials"][0]["jobs"][0].clone();
        (
            job["inputs"]["done_in_seconds"].clone(),
            job["finish"].clone(),
        )
    };
    let stops = serde_json::json!({ "runs": "stops", "max_wait_seconds": 0, "every_seconds": 600 });
    let waits =
        serde_json::json!({ "runs": "waits", "max_wait_seconds": 600, "every_seconds": 600 });

    d.write(&yaml(""));
    assert_eq!(plan(&d, &[]), (5400.into(), stops.clone()));
    let text = d.portion(&["run", "--dry-run"]).stdout;
    assert!(
        text.contains("(in 1h30m) each run stopping at a refusal until the next tick (every 10m)"),
        "{text}"
    );
    assert_eq!(plan(&d, &["--wait", "10m"]), (540.into(), waits.clone()));

    d.write(&yaml("    max_wait: 10m\n"));
    assert_eq!(plan(&d, &[]), (540.into(), waits));
    let text = d.portion(&["run", "--dry-run"]).stdout;
    assert!(
        text.contains(
            "(in 9m) at the pace the budgets allow, the run waiting up to 10m inside itself"
        ),
        "{text}"
    );
    assert_eq!(plan(&d, &["--wait", "0s"]), (5400.into(), stops));
}
