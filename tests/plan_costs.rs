//! What `portion run --dry-run` assumes a run costs, through the real
//! binary (issue 38, section 3): the pacing window it proposes goes at the
//! budget's rate, never below.

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
