//! A file of inputs with many skipped records (issue 36 item 19): a run of
//! 200,000 ragged CSV rows logged 200,000 warnings (24 MB). The first 20
//! of each kind are said, the rest counted and said once.

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::inputs::{per_key, write, yaml};
use crate::common::standin::Standin;

#[test]
fn many_skipped_records_of_a_kind_are_warned_about_twenty_times_then_counted_once() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let mut csv = String::from("id,p\nA,a\n");
    for i in 0..200_000 {
        csv.push_str(&format!("R{i},1,2\n"));
    }
    for _ in 0..30 {
        csv.push_str("A,a\n");
    }
    csv.push_str("B,b\n");
    write(&d, "p.csv", &csv);
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: p.csv, key: id }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{}", &r.stderr[..r.stderr.len().min(4000)]);
    let asked = per_key(&up);
    assert_eq!(asked.keys().collect::<Vec<_>>(), ["A", "B"], "{asked:?}");
    let warned = |what: &str| {
        (r.stderr.lines())
            .filter(|l| l.contains(what) && l.contains("skipped, not charged"))
            .count()
    };
    assert_eq!(
        warned("field(s) where the header row has 2"),
        20,
        "the ragged rows said one by one"
    );
    assert_eq!(warned("again"), 20, "the repeated key said one by one");
    let totals: Vec<&str> = (r.stderr.lines())
        .filter(|l| l.contains("records skipped in all"))
        .collect();
    assert_eq!(totals.len(), 2, "{totals:?}");
    assert!(
        totals.iter().any(
            |l| l.contains("200000 records skipped in all like the first, ")
                && l.contains("p.csv line 3:")
                && l.contains("the other 199980 only counted")
        ),
        "{totals:?}"
    );
    assert!(
        totals
            .iter()
            .any(|l| l.contains("30 records skipped in all") && l.contains("key A again")),
        "{totals:?}"
    );
    assert!(
        r.stderr.len() < 64 * 1024,
        "{} bytes of log",
        r.stderr.len()
    );
}
