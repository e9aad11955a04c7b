//! Bad configurations: each one exits 78, names the file and the field, and
//! sends nothing and charges nothing. The corpus is run through both `check`
//! and `run`, with the stand-in as the upstream to prove that no request left.

use crate::common::deployment::{Deployment, portion, run};
use crate::common::standin::Standin;

/// A valid file; each case below breaks it in one place.
fn base(upstream: &str) -> String {
    format!(
        r#"credentials:
  main:
    secret: {{ file: key }}
    upstream_reset: "00:00 America/Los_Angeles"
    pools:
      units:
        - {{ limit: 100, per: 1h, headroom: 5% }}
endpoints:
  videos.list: {{ cost: {{ units: 1 }} }}
jobs:
  trending:
    credential: main
    regions: [US, GB]
    steps:
      - endpoint: videos.list
        request:
          url: {upstream}/youtube/v3/videos
          query: {{ regionCode: "{{region}}", key: "{{secret}}" }}
    output: out/trending
"#
    )
}

struct Case {
    name: &'static str,
    from: &'static str,
    to: &'static str,
    /// What the error must say: the field, then words of the message.
    expect: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "syntax",
        from: "regions: [US, GB]",
        to: "regions: [US, GB",
        expect: &["line", "column"],
    },
    Case {
        name: "unknown top-level key",
        from: "credentials:\n",
        to: "colour: blue\ncredentials:\n",
        expect: &["unknown field `colour`"],
    },
    Case {
        name: "unknown key in a step",
        from: "      - endpoint: videos.list",
        to: "      - endpoint: videos.list\n        retries: 3",
        expect: &["jobs.trending.steps[0]", "unknown field `retries`"],
    },
    Case {
        name: "unknown key in a window",
        from: "per: 1h,",
        to: "per: 1h, burst: 3,",
        expect: &["credentials.main.pools.units[0]", "unknown field `burst`"],
    },
    Case {
        name: "duplicate job",
        from: "    output: out/trending\n",
        to: "    output: out/trending\n  trending:\n    credential: main\n    steps: []\n    output: x\n",
        expect: &["duplicate", "trending"],
    },
    Case {
        name: "duplicate credential",
        from: "endpoints:\n",
        to: "  main:\n    secret: { file: key }\n    pools: { units: [ { limit: 1, per: 1h } ] }\nendpoints:\n",
        expect: &["duplicate", "main"],
    },
    Case {
        name: "duplicate endpoint",
        from: "  videos.list: { cost: { units: 1 } }\n",
        to: "  videos.list: { cost: { units: 1 } }\n  videos.list: { cost: { units: 2 } }\n",
        expect: &["duplicate", "videos.list"],
    },
    Case {
        name: "negative limit",
        from: "limit: 100",
        to: "limit: -5",
        expect: &["credentials.main.pools.units[0].limit", "not positive"],
    },
    Case {
        name: "zero limit",
        from: "limit: 100",
        to: "limit: 0",
        expect: &["credentials.main.pools.units[0].limit", "not positive"],
    },
    Case {
        name: "zero window",
        from: "per: 1h",
        to: "per: 0s",
        expect: &["credentials.main.pools.units[0].per", "positive"],
    },
    Case {
        name: "bad duration",
        from: "per: 1h",
        to: "per: 1 fortnight",
        expect: &["credentials.main.pools.units[0].per", "not a duration"],
    },
    Case {
        name: "zero cost",
        from: "cost: { units: 1 }",
        to: "cost: { units: 0 }",
        expect: &["endpoints.videos.list.cost.units", "not positive"],
    },
    Case {
        name: "negative cost",
        from: "cost: { units: 1 }",
        to: "cost: { units: -1 }",
        expect: &["endpoints.videos.list.cost.units", "not positive"],
    },
    Case {
        name: "headroom at the limit",
        from: "headroom: 5%",
        to: "headroom: 100",
        expect: &["credentials.main.pools.units[0].headroom", "leaves nothing"],
    },
    Case {
        name: "headroom of 100%",
        from: "headroom: 5%",
        to: "headroom: 100%",
        expect: &["credentials.main.pools.units[0].headroom", "leaves nothing"],
    },
    Case {
        name: "cost above a budget",
        from: "cost: { units: 1 }",
        to: "cost: { units: 96 }",
        expect: &[
            "endpoints.videos.list.cost.units",
            "can never fit",
            "budget of 95",
        ],
    },
    Case {
        name: "undefined credential",
        from: "credential: main",
        to: "credential: backup",
        expect: &["jobs.trending.credential", "no credential named 'backup'"],
    },
    Case {
        name: "undefined pool",
        from: "cost: { units: 1 }",
        to: "cost: { search: 1 }",
        expect: &["endpoints.videos.list.cost.search", "has no pool 'search'"],
    },
    Case {
        name: "undefined endpoint",
        from: "- endpoint: videos.list",
        to: "- endpoint: video.list",
        expect: &[
            "jobs.trending.steps[0].endpoint",
            "no endpoint named 'video.list'",
        ],
    },
    Case {
        name: "duplicate region",
        from: "[US, GB]",
        to: "[US, GB, US]",
        expect: &["jobs.trending.regions[2]", "appears twice"],
    },
    Case {
        name: "unknown placeholder",
        from: "regionCode: \"{region}\"",
        to: "regionCode: \"{regoin}\"",
        expect: &[
            "jobs.trending.steps[0].request.query.regionCode",
            "unknown placeholder '{regoin}'",
        ],
    },
    Case {
        name: "missing secret env",
        from: "{ file: key }",
        to: "{ env: PORTION_TEST_NO_SUCH_VAR }",
        expect: &[
            "credentials.main.secret",
            "PORTION_TEST_NO_SUCH_VAR is not set",
        ],
    },
    Case {
        name: "missing secret file",
        from: "{ file: key }",
        to: "{ file: nokey }",
        expect: &["credentials.main.secret", "cannot read"],
    },
    Case {
        name: "empty secret file",
        from: "{ file: key }",
        to: "{ file: empty }",
        expect: &["credentials.main.secret", "empty"],
    },
    Case {
        name: "secret with a line break inside",
        from: "{ file: key }",
        to: "{ file: broken }",
        expect: &[
            "credentials.main.secret",
            "file broken contains a control character",
        ],
    },
    Case {
        name: "inline secret",
        from: "{ file: key }",
        to: "hunter2",
        expect: &["credentials.main.secret", "never written inline"],
    },
    Case {
        name: "bad upstream_reset",
        from: "00:00 America/Los_Angeles",
        to: "00:00 America/Springfield",
        expect: &["credentials.main.upstream_reset", "not a time zone"],
    },
    Case {
        name: "bare cost with two pools",
        from: "cost: { units: 1 }",
        to: "cost: 1",
        expect: &[
            "endpoints.videos.list.cost",
            "a bare cost needs a credential with one pool",
        ],
    },
    Case {
        name: "bad store",
        from: "credentials:\n",
        to: "store: mysql://x\ncredentials:\n",
        expect: &["store", "unknown store"],
    },
    Case {
        name: "header with a control character",
        from: "          query: { regionCode: \"{region}\", key: \"{secret}\" }\n",
        to: "          query: { regionCode: \"{region}\", key: \"{secret}\" }\n          headers: { Accept: application/json, X-Trace: \"a\\u0007b\" }\n",
        expect: &[
            "jobs.trending.steps[0].request.headers.X-Trace",
            "after substitution, the value is not one HTTP allows in a header: it holds a control character",
        ],
    },
    Case {
        name: "bad max_body",
        from: "credentials:\n",
        to: "http: { max_body: 12 parsecs }\ncredentials:\n",
        expect: &["http.max_body", "not a size"],
    },
    Case {
        name: "max_body too small",
        from: "credentials:\n",
        to: "http: { max_body: 100 }\ncredentials:\n",
        expect: &["http.max_body", "out of range: 1KiB to 4GiB"],
    },
    Case {
        name: "bad pagination pointer",
        from: "    output:",
        to: "        paginate: { token: nextPageToken, param: pageToken, max_pages: 2 }\n    output:",
        expect: &["jobs.trending.steps[0].paginate.token", "JSON pointer"],
    },
    Case {
        name: "zero max_pages",
        from: "    output:",
        to: "        paginate: { token: /next, param: pageToken, max_pages: 0 }\n    output:",
        expect: &["jobs.trending.steps[0].paginate.max_pages"],
    },
    Case {
        name: "wrong type",
        from: "limit: 100",
        to: "limit: lots",
        expect: &["credentials.main.pools.units[0].limit", "invalid type"],
    },
    Case {
        // It would make the log lines that name it read backwards.
        name: "region with a bidirectional control",
        from: "regions: [US, GB]",
        to: "regions: [US, \"G\\u202eB\"]",
        expect: &["jobs.trending.regions[1]", "bidirectional"],
    },
    Case {
        // Its pages could take the names of job `trending`'s, region
        // `r000001.X`… (job names are the part before the run number).
        name: "job name with a run number in it",
        from: "\n  trending:\n",
        to: "\n  trending.r000001.X:\n",
        expect: &[
            "jobs.trending.r000001.X",
            "its part '.r000001' reads as a run number in page file names",
            "'trending.run000001.X'",
        ],
    },
    Case {
        name: "empty file",
        from: "",
        to: "",
        expect: &["the file is empty"],
    },
];

#[test]
fn every_bad_configuration_exits_78_naming_file_and_field_and_sends_nothing() {
    let up = Standin::start(&[]);
    let d = Deployment::new(&base(&up.base()));
    std::fs::write(d.path().join("empty"), "\n").unwrap();
    std::fs::write(d.path().join("broken"), "demo\nkey\n").unwrap();
    // The base file is good: the cases below fail for their one change.
    let ok = d.portion(&["check"]);
    assert_eq!(ok.code, 0, "{ok:?}");

    for case in CASES {
        let text = if case.name == "empty file" {
            String::new()
        } else {
            let good = base(&up.base());
            // A second pool, for the case of a bare cost.
            let good = if case.name == "bare cost with two pools" {
                good.replace(
                    "endpoints:\n",
                    "      search:\n        - { limit: 100, per: 24h }\nendpoints:\n",
                )
            } else {
                good
            };
            assert!(
                good.contains(case.from),
                "{}: {:?} not in the base",
                case.name,
                case.from
            );
            good.replacen(case.from, case.to, 1)
        };
        d.write(&text);
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{} ({cmd}): {r:?}", case.name);
            let file = d.config().display().to_string();
            assert!(
                r.stderr.contains(&file),
                "{} ({cmd}) must name the file: {r:?}",
                case.name
            );
            for want in case.expect {
                assert!(
                    r.stderr.contains(want),
                    "{} ({cmd}) must say {want:?}: {r:?}",
                    case.name
                );
            }
            assert!(
                !r.all().contains("demo-key") && !r.all().contains("hunter2"),
                "{}: {r:?}",
                case.name
            );
        }
    }
    assert!(up.seen().is_empty(), "no request was sent: {:?}", up.seen());
    assert!(
        !d.path().join("state").exists(),
        "nothing was charged: no store was even opened"
    );
}

#[test]
fn a_missing_configuration_file_is_78_and_quota_config_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(portion(dir.path()).current_dir(dir.path()).arg("check"));
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr
            .contains("portion.yaml: cannot read the configuration"),
        "{r:?}"
    );

    let r = run(portion(dir.path())
        .env("PORTION_CONFIG", dir.path().join("elsewhere.yaml"))
        .arg("check"));
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr
            .contains("elsewhere.yaml: cannot read the configuration"),
        "{r:?}"
    );
}

#[test]
fn a_secret_comes_from_the_systemd_credentials_directory() {
    let d =
        Deployment::new(&base("http://127.0.0.1:9").replace("{ file: key }", "{ credential: yt }"));
    // Outside the unit, `check` names the secret it could not see and
    // checks the rest (exit 0); `run` never goes without its key (78).
    let r = run(d.cmd(&["check"]).env_remove("CREDENTIALS_DIRECTORY"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("$CREDENTIALS_DIRECTORY is not set"),
        "{r:?}"
    );
    let r = run(d.cmd(&["run"]).env_remove("CREDENTIALS_DIRECTORY"));
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("$CREDENTIALS_DIRECTORY is not set"),
        "{r:?}"
    );
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("yt"), "from-systemd\n").unwrap();
    let r = run(d.cmd(&["check"]).env("CREDENTIALS_DIRECTORY", creds.path()));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("secret from systemd credential yt (present, not shown)"),
        "{r:?}"
    );
    assert!(!r.all().contains("from-systemd"));
}

#[test]
fn a_byte_order_mark_before_the_file_is_accepted() {
    let up = Standin::start(&[]);
    let d = Deployment::new(&format!("\u{feff}{}", base(&up.base())));
    assert!(
        std::fs::read(d.config())
            .unwrap()
            .starts_with(b"\xef\xbb\xbf")
    );
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("job trending (credential main)"), "{r:?}");
}

/// Merge keys and top-level `x-` blocks (the docker-compose convention), in
/// the places a deployment would use them.
fn with_anchors(upstream: &str) -> String {
    format!(
        r#"x-windows:
  hourly: &hourly {{ limit: 100, per: 1h }}
  daily: &daily
    <<: *hourly
    per: 24h
x-request: &request
  url: {upstream}/youtube/v3/videos
  query: &query {{ part: snippet, key: "{{secret}}" }}
credentials:
  main:
    secret: {{ file: key }}
    pools:
      units:
        - {{ <<: *hourly, headroom: 5% }}
        - *daily
      search:
        - {{ <<: [*daily, *hourly], limit: 7 }}
endpoints:
  videos.list: {{ cost: {{ units: 1 }} }}
jobs:
  trending:
    credential: main
    regions: [US, GB]
    steps:
      - endpoint: videos.list
        request:
          <<: *request
          query: {{ <<: *query, regionCode: "{{region}}" }}
    output: out/trending
"#
    )
}

#[test]
fn merge_keys_and_top_level_x_blocks_are_resolved_and_unknown_keys_still_refused() {
    let up = Standin::start(&[]);
    let url = format!("{}/youtube/v3/videos", up.base());
    let d = Deployment::new(&with_anchors(&up.base()));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    for want in [
        "pool units      per 1h       limit     100  headroom      5",
        // An anchor built on another: the inner merge is applied too.
        "pool units      per 24h      limit     100  headroom      0",
        // The first of a list of merges wins, an explicit key over both.
        "pool search     per 24h      limit       7",
        // Merged keys come after the mapping's own.
        &format!("videos.list GET {url}?regionCode={{region}}&part=snippet&key={{secret}}"),
    ] {
        assert!(r.stdout.contains(want), "{want:?}: {r:?}");
    }

    // Everywhere else an unknown key is still an error, merged in or not,
    // with the path of the field.
    for (from, to, expect) in [
        (
            "  query: &query",
            "  retries: 3\n  query: &query",
            &["jobs.trending.steps[0].request", "unknown field `retries`"][..],
        ),
        (
            "hourly: &hourly { limit: 100,",
            "hourly: &hourly { burst: 3, limit: 100,",
            &["credentials.main.pools.units[0]", "unknown field `burst`"],
        ),
        (
            "    credential: main\n    regions",
            "    credential: main\n    x-note: hi\n    regions",
            &["jobs.trending", "unknown field `x-note`"],
        ),
        (
            "credentials:\n",
            "xs: 1\ncredentials:\n",
            &["unknown field `xs`"],
        ),
        ("    <<: *hourly\n", "    <<: 3\n", &["merg"]),
    ] {
        let text = with_anchors(&up.base());
        assert!(text.contains(from), "{from:?}");
        d.write(&text.replacen(from, to, 1));
        let r = d.portion(&["check"]);
        assert_eq!(r.code, 78, "{to:?}: {r:?}");
        assert!(
            r.stderr.contains(&d.config().display().to_string()),
            "{r:?}"
        );
        for want in expect {
            assert!(r.stderr.contains(want), "{to:?} must say {want:?}: {r:?}");
        }
        assert!(!r.stderr.contains(" at line "), "{to:?}: {r:?}");
    }
    assert!(up.seen().is_empty(), "{:?}", up.seen());
}

#[test]
fn a_long_region_list_is_checked_for_duplicates() {
    let up = Standin::start(&[]);
    let regions: Vec<String> = (0..200_000).map(|i| format!("R{i}")).collect();
    let with = |regions: &[String]| {
        base(&up.base()).replace("[US, GB]", &format!("[{}]", regions.join(", ")))
    };
    let d = Deployment::new(&with(&regions));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("regions (200000): R0, R1, "),
        "{}",
        r.stderr
    );

    // One duplicate, far from its first occurrence: named, with its place.
    let mut dup = regions;
    dup[150_000] = "R42".into();
    d.write(&with(&dup));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 78, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("jobs.trending.regions[150000]: region 'R42' appears twice"),
        "{}",
        r.stderr
    );
}

#[test]
fn check_prints_a_url_without_a_query_without_a_question_mark() {
    let up = Standin::start(&[]);
    let url = format!("{}/youtube/v3/videos", up.base());
    let text = base(&up.base()).replace(
        "          query: { regionCode: \"{region}\", key: \"{secret}\" }\n",
        "          headers: { X-Region: \"{region}\" }\n",
    );
    assert!(!text.contains("query:"));
    let d = Deployment::new(&text);
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!("videos.list GET {url}\n")),
        "{r:?}"
    );

    // With a query, it follows the one `?`.
    d.write(&base(&up.base()));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "videos.list GET {url}?regionCode={{region}}&key={{secret}}\n"
        )),
        "{r:?}"
    );
}
