//! The files a run writes, through the real binary: pages are never
//! replaced, temporary files belong to one job, and what quota creates is
//! not readable by everyone.

use crate::common::deployment::{Deployment, WIDE, deployment_yaml, embedded_store, videos_job};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

/// Moving a deployment to a new store (here from the embedded file to a
/// Redis) loses the job's cursor, so the store would start again at run 1:
/// the pages already in the folder decide the run number instead, and a
/// page planted under run 1's name survives.
#[test]
fn a_new_store_never_replaces_a_page() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        std::slice::from_ref(&job),
    ));
    let r = d.quota(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        d.outputs("trending"),
        [
            "trending.r000001.GB.s0.p0.json",
            "trending.r000001.US.s0.p0.json"
        ]
    );
    let marker = d.path().join("out/trending/trending.r000001.US.s0.p0.json");
    std::fs::write(&marker, "{\"marker\": \"must survive\"}").unwrap();

    let redis = RedisServer::start();
    d.write(&deployment_yaml(&redis.url(), WIDE, "fail_closed", &[job]));
    let r = d.quota(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "holds pages of run 1 but the store's cursor says run 0 (a new or reset store?): this run is run 2, so no page is replaced"
        ),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "{\"marker\": \"must survive\"}"
    );
    assert_eq!(
        d.outputs("trending"),
        [
            "trending.r000001.GB.s0.p0.json",
            "trending.r000001.US.s0.p0.json",
            "trending.r000002.GB.s0.p0.json",
            "trending.r000002.US.s0.p0.json"
        ]
    );
    // The store's own numbering goes on from there.
    let r = d.quota(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("run 3 starts at region US"), "{r:?}");
    assert_eq!(d.outputs("trending").len(), 6);
}
