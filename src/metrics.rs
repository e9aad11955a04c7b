//! OpenMetrics text for scrapers and node_exporter's textfile collector:
//! `portion status --format openmetrics` and `portion run --metrics-file`
//! build their [`Family`]s from what they already know, and [`encode`]
//! writes them with the Prometheus project's own Rust client
//! (`prometheus-client`), which writes `# HELP`, `# TYPE`, `# UNIT`, escapes
//! label values and ends the text with `# EOF`.
//!
//! Every family is a gauge: a snapshot of the ledger or of one run, not a
//! count kept by a live process. Gauges also read the same in the
//! Prometheus text format that the textfile collector parses (it takes
//! `# UNIT` and `# EOF` for comments), where an OpenMetrics counter's
//! `_total` sample would not match its family. Label sets are written in
//! the order given, so the text is stable from one call to the next.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// A sample's labels, in order: (name, value).
pub type Labels = Vec<(String, String)>;

/// One metric family: a gauge, its samples in order.
#[derive(Debug, Clone)]
pub struct Family {
    /// The name without its unit suffix (the encoder adds `_UNIT`).
    pub name: &'static str,
    /// One sentence, written as it is (no newline or backslash).
    pub help: &'static str,
    pub unit: Option<MetricUnit>,
    pub samples: Vec<(Labels, Value)>,
}

/// The units portion's families are measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricUnit {
    Seconds,
    /// Quota units, as the configuration's costs and limits count them.
    Units,
}

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(v as i64)
    }
}

impl Family {
    pub fn new(name: &'static str, help: &'static str, unit: Option<MetricUnit>) -> Self {
        Family {
            name,
            help,
            unit,
            samples: Vec::new(),
        }
    }

    /// Add a sample with `labels` (name, value pairs).
    pub fn push(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples.push((labels, value.into()));
    }
}

/// Microseconds since the epoch as Unix seconds, the unit of OpenMetrics
/// timestamps.
pub fn unix_seconds(micros: i64) -> Value {
    Value::Float(micros as f64 / 1e6)
}

/// The families as OpenMetrics text, ending with `# EOF`.
pub fn encode(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(families)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String never fails");
    out
}

#[derive(Debug)]
struct Families(Vec<Family>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let unit = f.unit.map(|u| match u {
                MetricUnit::Seconds => Unit::Seconds,
                MetricUnit::Units => Unit::Other("units".into()),
            });
            let kind = ConstGauge::new(0i64).metric_type();
            let mut family = encoder.encode_descriptor(f.name, f.help, unit.as_ref(), kind)?;
            match f.samples.as_slice() {
                // A lone sample without labels is written without `{}`.
                [(labels, value)] if labels.is_empty() => gauge(*value, family)?,
                samples => {
                    for (labels, value) in samples {
                        gauge(*value, family.encode_family(labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn gauge(value: Value, sample: MetricEncoder) -> Result<(), std::fmt::Error> {
    match value {
        Value::Int(v) => ConstGauge::new(v).encode(sample),
        Value::Float(v) => ConstGauge::new(v).encode(sample),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_in_order_with_units_and_escaped_labels() {
        let mut remaining = Family::new(
            "portion_window_remaining",
            "Units left.",
            Some(MetricUnit::Units),
        );
        remaining.push(&[("credential", "a\"b\\c\nd"), ("pool", "units")], 7u64);
        remaining.push(&[("credential", "b"), ("pool", "units")], 0u64);
        let mut until = Family::new("portion_until", "When.", Some(MetricUnit::Seconds));
        until.push(&[], unix_seconds(1_500_000));
        let text = encode(vec![remaining, until]);
        assert_eq!(
            text,
            "# HELP portion_window_remaining_units Units left.\n\
             # TYPE portion_window_remaining_units gauge\n\
             # UNIT portion_window_remaining_units units\n\
             portion_window_remaining_units{credential=\"a\\\"b\\\\c\\nd\",pool=\"units\"} 7\n\
             portion_window_remaining_units{credential=\"b\",pool=\"units\"} 0\n\
             # HELP portion_until_seconds When.\n\
             # TYPE portion_until_seconds gauge\n\
             # UNIT portion_until_seconds seconds\n\
             portion_until_seconds 1.5\n\
             # EOF\n"
        );
    }
}
