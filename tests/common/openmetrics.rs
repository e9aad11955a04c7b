//! A real OpenMetrics parser for the tests: the one in the Prometheus
//! project's Python client (`prometheus_client.openmetrics.parser`), run
//! through `python3`. It is strict: a missing `# EOF`, a bad name, a unit
//! that is not the name's suffix, a badly escaped label or a sample of the
//! wrong family is an error, and so fails the test. A machine without it
//! fails these tests too (`.ci/run` installs it); they never skip.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde::Deserialize;

/// One metric family, as the parser read it.
#[derive(Debug, Deserialize)]
pub struct MetricFamily {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub unit: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

/// One sample, as the parser read it.
#[derive(Debug, Deserialize)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "unit": f.unit, "help": f.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]})
json.dump(out, sys.stdout)
"#;

/// `text` parsed by the Prometheus Python client's OpenMetrics parser;
/// panics with the parser's complaint when the text is not OpenMetrics.
pub fn parse(text: &str) -> Families {
    let mut child = Command::new("python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (with prometheus_client: .ci/run installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    Families(serde_json::from_slice(&out.stdout).unwrap())
}

/// Parsed families, with look-ups that panic unless exactly one matches.
#[derive(Debug)]
pub struct Families(pub Vec<MetricFamily>);

impl Families {
    /// The family named `name` (without a counter's `_total`).
    pub fn family(&self, name: &str) -> &MetricFamily {
        self.0
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no family {name} in {:#?}", self.names()))
    }

    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|f| f.name.as_str()).collect()
    }

    /// The value of the one sample of `name` whose labels are exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<&Sample> = self
            .0
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name && s.labels == want)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "samples {name}{want:?}: {found:?} in {:#?}",
            self.0
        );
        found[0].value
    }

    /// Every sample of `name`: (labels, value).
    pub fn samples(&self, name: &str) -> Vec<(&BTreeMap<String, String>, f64)> {
        self.0
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .map(|s| (&s.labels, s.value))
            .collect()
    }
}
