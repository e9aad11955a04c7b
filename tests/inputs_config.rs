//! Jobs with `inputs` (issue 25): `check` accepts one and says where its
//! inputs come from; every mistake in `inputs`, `once` and the placeholders
//! that read an input is a 78 naming the file and the field, nothing sent;
//! and `run --dry-run` plans such a job by the inputs left in its file.

use crate::common::deployment::Deployment;
use crate::common::standin::Standin;

/// A valid file: a .jsonl job, a .csv job and a .txt job, and a region job.
fn base(upstream: &str) -> String {
    format!(
        r#"credentials:
  main:
    secret: {{ file: key }}
    pools:
      units:
        - {{ limit: 100, per: 1h }}
endpoints:
  chat: {{ cost: {{ units: 1 }} }}
jobs:
  summaries:
    credential: main
    inputs: {{ file: prompts.jsonl, key: /id }}
    once: true
    steps:
      - endpoint: chat
        request:
          method: POST
          url: {upstream}/v1/chat/{{key}}
          headers: {{ Authorization: "Bearer {{secret}}" }}
          body: {{ n: "{{input.meta.n}}", content: "{{input.prompt}}" }}
    output: out/summaries
  rows:
    credential: main
    inputs: {{ file: rows.csv, key: id }}
    steps:
      - endpoint: chat
        request:
          url: {upstream}/v1/rows/{{key}}
          query: {{ q: "{{input.prompt}}" }}
    output: out/rows
  ids:
    credential: main
    inputs: {{ file: ids.txt }}
    steps:
      - endpoint: chat
        request: {{ url: "{upstream}/v1/ids/{{key}}" }}
    output: out/ids
  trending:
    credential: main
    regions: [US]
    steps:
      - endpoint: chat
        request: {{ url: "{upstream}/v1/r/{{key}}" }}
    output: out/trending
"#
    )
}

fn deployment(up: &Standin) -> (Deployment, String) {
    let good = base(&up.base());
    let d = Deployment::new(&good);
    let write = |name: &str, text: &str| std::fs::write(d.path().join(name), text).unwrap();
    write(
        "prompts.jsonl",
        "{\"id\": \"a\", \"prompt\": \"hi\", \"meta\": {\"n\": 1}}\n",
    );
    write("rows.csv", "id,prompt\nr1,\"a, b\"\n");
    write("ids.txt", "x\ny\n");
    write("other.json", "{}\n");
    std::fs::create_dir(d.path().join("folder.txt")).unwrap();
    (d, good)
}

#[test]
fn check_accepts_a_job_with_inputs_and_shows_its_source() {
    let up = Standin::start(&[]);
    let (d, _) = deployment(&up);
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    let dir = d.path().display().to_string();
    for want in [
        format!(
            "  inputs: {dir}/prompts.jsonl (jsonl, key at /id, fields meta.n, prompt), each done once\n"
        ),
        format!(
            "  inputs: {dir}/rows.csv (csv, key in column \"id\", fields prompt), every input every run\n"
        ),
        format!("  inputs: {dir}/ids.txt (txt, a key a line), every input every run\n"),
        "  per input, at most: 1 calls, spending units 1\n".to_string(),
    ] {
        assert!(r.stdout.contains(&want), "{want:?} in {r:?}");
    }
    assert!(!r.all().contains("demo-key"), "{r:?}");
    assert!(up.seen().is_empty());
}

#[test]
fn dry_run_plans_each_job_of_inputs_by_the_inputs_left_in_its_file() {
    let up = Standin::start(&[]);
    let (d, _) = deployment(&up);
    let r = d.portion(&["run", "--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let jobs = plan["credentials"][0]["jobs"].as_array().unwrap();
    for (job, left) in [("summaries", 1), ("rows", 1), ("ids", 2)] {
        let j = jobs.iter().find(|j| j["job"] == job).unwrap();
        assert_eq!(j["inputs"]["left"], left, "{job}: {j}");
        assert_eq!(
            j["next_run"],
            serde_json::json!({"outcome": "inputs", "inputs": left, "calls": left, "left_after": 0}),
            "{job}: {j}"
        );
    }
    let r = d.portion(&["run", "--dry-run", "ids"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("inputs: 0 done, 0 skipped, 0 failed, 2 left"),
        "{r:?}"
    );
    assert!(r.stdout.contains("does the 2 inputs left"), "{r:?}");
    assert!(up.seen().is_empty(), "nothing sent: {:?}", up.seen());
    // A job without inputs in the same file is planned as before.
    let r = d.portion(&["run", "--dry-run", "trending"]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn every_mistake_in_inputs_exits_78_naming_file_and_field() {
    let up = Standin::start(&[]);
    let (d, good) = deployment(&up);
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "inputs and regions",
            "    once: true\n",
            "    once: true\n    regions: [US]\n",
            &["jobs.summaries.inputs", "`regions` or `inputs`, not both"],
        ),
        (
            "unknown extension",
            "file: prompts.jsonl",
            "file: other.json",
            &[
                "jobs.summaries.inputs.file",
                "'other.json': unknown extension",
            ],
        ),
        (
            "missing file",
            "file: prompts.jsonl",
            "file: gone.jsonl",
            &[
                "jobs.summaries.inputs.file",
                "gone.jsonl: cannot read it",
                "No such file",
            ],
        ),
        (
            "a folder",
            "file: ids.txt",
            "file: folder.txt",
            &[
                "jobs.ids.inputs.file",
                "folder.txt: cannot read it: a directory, not a file",
            ],
        ),
        (
            "bad pointer",
            "key: /id",
            "key: id",
            &["jobs.summaries.inputs.key", "'id' is not a JSON pointer"],
        ),
        (
            "bad pointer escape",
            "key: /id",
            "key: /a~2",
            &["jobs.summaries.inputs.key", "~0"],
        ),
        (
            "jsonl without key",
            "file: prompts.jsonl, key: /id",
            "file: prompts.jsonl",
            &[
                "jobs.summaries.inputs.key",
                "missing: a .jsonl file needs `key`",
            ],
        ),
        (
            "txt with key",
            "file: ids.txt",
            "file: ids.txt, key: /id",
            &["jobs.ids.inputs.key", "leave `key` out"],
        ),
        (
            "txt with a field",
            "/v1/ids/{key}",
            "/v1/ids/{input.x}",
            &[
                "jobs.ids.steps[0].request",
                "a .txt file's lines have no fields",
            ],
        ),
        (
            "unknown key in inputs",
            "file: ids.txt",
            "file: ids.txt, column: 2",
            &["jobs.ids.inputs", "unknown field `column`"],
        ),
        (
            "once without inputs",
            "    regions: [US]\n",
            "    regions: [US]\n    once: true\n",
            &["jobs.trending.once", "once: true needs `inputs`"],
        ),
        (
            "input field without inputs",
            "/v1/r/{key}",
            "/v1/r/{input.id}",
            &[
                "jobs.trending.steps[0].request.url",
                "{input.id} is used but the job has no inputs",
            ],
        ),
        (
            "key without regions or inputs",
            "    regions: [US]\n",
            "",
            &[
                "jobs.trending.steps[0].request.url",
                "{key} is used but the job has neither regions nor inputs",
            ],
        ),
        (
            "region in a job with inputs",
            "/v1/ids/{key}",
            "/v1/ids/{region}",
            &[
                "jobs.ids.steps[0].request.url",
                "no regions: an input's key is {key}",
            ],
        ),
        (
            "csv key column not in the header",
            "key: id }",
            "key: ident }",
            &[
                "jobs.rows.inputs.key",
                "column 'ident' is not in its header row",
                "columns: id, prompt",
            ],
        ),
        (
            "csv field not in the header",
            "q: \"{input.prompt}\"",
            "q: \"{input.text}\"",
            &[
                "jobs.rows.steps[0].request",
                "column 'text' is not in its header row",
            ],
        ),
    ];
    d.assert_each_edit_exits_78(&good, cases);
    // (the upstream's address is the stand-in's, known only here)
    let url = format!("url: {}/v1/rows/{{key}}", up.base());
    d.assert_each_edit_exits_78(
        &good,
        &[(
            "input field in the host",
            &url,
            "url: http://{input.prompt}.example/v1/rows/{key}",
            &[
                "jobs.rows.steps[0].request.url",
                "{input.prompt} is in the URL's host",
            ],
        )],
    );
    assert!(up.seen().is_empty(), "nothing sent: {:?}", up.seen());
    assert!(!d.path().join("state").exists(), "no store was opened");
}

/// `{key}` in the host of a request that carries the secret lets a line
/// of the inputs file choose the host that receives the key: 78 at
/// `check` (and `run`), unless the job says `hosts_from_inputs: true`; a
/// request without the secret may take its host from the key; a job of
/// regions names its own hosts and takes no such flag.
#[test]
fn a_key_in_the_host_that_receives_the_secret_is_78_unless_the_job_allows_it() {
    let up = Standin::start(&[]);
    let (d, good) = deployment(&up);
    let chat = format!("url: {}/v1/chat/{{key}}", up.base());
    let in_host = "url: http://{key}.example/v1/chat";
    d.assert_each_edit_exits_78(
        &good,
        &[
            (
                "key in the host of the secret's request",
                &chat,
                in_host,
                &[
                    "jobs.summaries.steps[0].request.url",
                    "{key} is in the URL's host",
                    "hosts_from_inputs: true",
                ],
            ),
            (
                "hosts_from_inputs on a job of regions",
                "    regions: [US]\n",
                "    regions: [US]\n    hosts_from_inputs: true\n",
                &["jobs.trending.hosts_from_inputs", "needs `inputs`"],
            ),
        ],
    );
    let allowed = good.replacen(&chat, in_host, 1).replacen(
        "    once: true\n",
        "    once: true\n    hosts_from_inputs: true\n",
        1,
    );
    d.write(&allowed);
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    // (rows sends no secret: its host may come from the key)
    let rows = format!("url: {}/v1/rows/{{key}}", up.base());
    d.write(&good.replacen(&rows, "url: http://{key}.example/v1/rows", 1));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(up.seen().is_empty(), "nothing sent: {:?}", up.seen());
}

/// An inputs file that is a FIFO or a device is refused like a folder, at
/// every command that reads it: opening a FIFO waits for a writer and
/// /dev/zero never ends, so each would hang (the probe's F-fifo).
#[test]
fn an_inputs_file_that_is_a_fifo_or_a_device_is_78_at_every_command() {
    let up = Standin::start(&[]);
    let (d, good) = deployment(&up);
    let fifo = d.path().join("fifo.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success(), "mkfifo {}", fifo.display());
    std::os::unix::fs::symlink("/dev/zero", d.path().join("zero.txt")).unwrap();
    for (name, what) in [
        ("fifo.txt", "a FIFO (named pipe)"),
        ("zero.txt", "a device"),
    ] {
        d.write(&good.replacen("file: ids.txt", &format!("file: {name}"), 1));
        for cmd in [&["check"][..], &["status"], &["run", "--dry-run"], &["run"]] {
            // (the timeout only ends a hang the test is about; never met)
            let r = crate::common::deployment::run(
                &mut d.cmd_via(&["timeout", "-s", "KILL", "60"], cmd),
            );
            assert_eq!(r.code, 78, "{name} {cmd:?}: {r:?}");
            for want in ["jobs.ids.inputs.file", name, &format!("{what}, not a file")] {
                assert!(
                    r.stderr.contains(want),
                    "{name} {cmd:?} says {want:?}: {r:?}"
                );
            }
        }
    }
    assert!(up.seen().is_empty(), "nothing sent: {:?}", up.seen());
}

#[test]
fn a_csv_file_without_a_header_row_is_78() {
    let up = Standin::start(&[]);
    let (d, _) = deployment(&up);
    std::fs::write(d.path().join("rows.csv"), "").unwrap();
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(r.stderr.contains("jobs.rows.inputs.file"), "{r:?}");
    assert!(
        r.stderr
            .contains("rows.csv: no header row: the file is empty"),
        "{r:?}"
    );
}
