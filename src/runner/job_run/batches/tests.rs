//! The batches of a fan-out in flight, driven on their own: written out
//! of order, resumed, their values in page order.

use super::*;

fn values(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("v{i}")).collect()
}

fn at() -> Position<'static> {
    Position {
        key: "US",
        input: None,
        batch: None,
        slot: 0,
        step: 1,
        run: 3,
    }
}

#[test]
fn batches_written_out_of_order_move_the_cursor_only_past_a_row() {
    let mut b = Batches::resume(
        Values::Held(values(10)),
        2,
        &[],
        BTreeMap::new(),
        None,
        3,
        false,
    );
    assert_eq!(b.todo().collect::<Vec<_>>(), [2, 3, 4, 5]);
    assert_eq!(b.joined(5, ",").unwrap(), "v9");
    b.mark_written(3, Vec::new());
    b.mark_written(5, Vec::new());
    let c = b.cursor(&at(), &FoundValues::default());
    assert_eq!(
        (c.place.page, c.place.written.clone(), c.place.batch_size),
        (2, vec![3, 5], Some(3))
    );
    assert_eq!(c.place.batch.as_ref().unwrap().len(), 10);
    b.mark_written(2, Vec::new());
    let c = b.cursor(&at(), &FoundValues::default());
    assert_eq!((c.place.page, c.place.written.clone()), (4, vec![5]));
    assert_eq!(c.place.batch.unwrap(), ["v6", "v7", "v8", "v9"]);
    // The next run from that cursor sends batch 4 only, with its values.
    let back = Batches::resume(
        Values::Held(values(10)[6..].to_vec()),
        4,
        &[5],
        BTreeMap::new(),
        Some(3),
        3,
        false,
    );
    assert_eq!(back.todo().collect::<Vec<_>>(), [4]);
    assert_eq!(back.joined(4, ",").unwrap(), "v6,v7,v8");
    b.mark_written(4, Vec::new());
    assert!(b.is_done());
    assert_eq!(b.todo().collect::<Vec<_>>(), Vec::<u32>::new());
}

#[test]
fn in_a_row_the_cursor_is_the_sequential_one() {
    let mut b = Batches::resume(
        Values::Held(values(5)),
        0,
        &[],
        BTreeMap::new(),
        None,
        2,
        false,
    );
    b.mark_written(0, Vec::new());
    let c = b.cursor(&at(), &FoundValues::default());
    assert_eq!(
        (c.place.page, c.place.written.len(), c.place.batch_size),
        (1, 0, None)
    );
    assert_eq!(c.place.batch.unwrap(), ["v2", "v3", "v4"]);
}

#[test]
fn a_changed_batch_size_drops_the_written_values_and_cuts_the_rest_afresh() {
    // Saved in threes: batch 1 (v3 v4 v5) written; now in fours.
    let b = Batches::resume(
        Values::Held(values(9)),
        0,
        &[1],
        BTreeMap::new(),
        Some(3),
        4,
        false,
    );
    assert_eq!(b.todo().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(b.joined(0, ",").unwrap(), "v0,v1,v2,v6");
    assert_eq!(b.joined(1, ",").unwrap(), "v7,v8");
    // Numbers that do not fit are ignored.
    let b = Batches::resume(
        Values::Held(values(4)),
        2,
        &[1, 2, 9],
        BTreeMap::new(),
        Some(2),
        2,
        false,
    );
    assert_eq!(b.todo().collect::<Vec<_>>(), [2, 3]);
}

fn found(k: u32) -> Vec<String> {
    vec![format!("f{k}"), "shared".into()]
}

#[test]
fn what_batches_written_ahead_found_waits_for_those_before_them() {
    let mut b = Batches::resume(
        Values::Held(values(8)),
        0,
        &[],
        BTreeMap::new(),
        None,
        2,
        false,
    );
    assert!(b.mark_written(2, found(2)).is_empty());
    assert!(b.mark_written(1, found(1)).is_empty());
    let c = b.cursor(&at(), &FoundValues::default());
    assert_eq!(
        c.place.found_ahead.keys().copied().collect::<Vec<_>>(),
        [1, 2]
    );
    // Batch 0 written: 0, 1, 2 come back in order; 3 is left.
    let row = b.mark_written(0, found(0));
    assert_eq!(row, [(0, found(0)), (1, found(1)), (2, found(2))]);
    assert!(
        b.cursor(&at(), &FoundValues::default())
            .place
            .found_ahead
            .is_empty()
    );
    // From a saved cursor: batch 1 and 3 written ahead of 0.
    let saved = BTreeMap::from([(1, found(1)), (3, found(3))]);
    let mut b = Batches::resume(
        Values::Held(values(8)),
        0,
        &[1, 3],
        saved.clone(),
        Some(2),
        2,
        false,
    );
    assert_eq!(b.todo().collect::<Vec<_>>(), [0, 2]);
    assert_eq!(b.mark_written(0, Vec::new()), [(0, vec![]), (1, found(1))]);
    assert_eq!(b.mark_written(2, found(2)), [(2, found(2)), (3, found(3))]);
    assert!(b.is_done());
    // Another batch size: batches 1 and 3 are dropped, what they found
    // goes first.
    let mut b = Batches::resume(
        Values::Held(values(8)),
        0,
        &[1, 3],
        saved,
        Some(2),
        3,
        false,
    );
    assert_eq!(b.take_early(), ["f1", "shared", "f3", "shared"]);
    assert!(b.take_early().is_empty());
    assert_eq!(b.todo().collect::<Vec<_>>(), [0, 1]);
    assert!(
        b.cursor(&at(), &FoundValues::default())
            .place
            .found_ahead
            .is_empty()
    );
}

#[test]
fn a_listed_plans_cursor_is_a_position_in_its_list() {
    // Values 4.. of list L, in batches of 2.
    let list = Values::Listed {
        id: "L".into(),
        from: 4,
        left: 6,
    };
    let mut b = Batches::resume(list, 2, &[], BTreeMap::new(), None, 2, false);
    assert!(b.unlisted().is_none());
    assert_eq!(b.in_list(3), Some(("L", 6, 2)));
    assert_eq!(b.joined(3, ","), None);
    b.mark_written(2, Vec::new());
    let c = b.cursor(&at(), &FoundValues::default());
    let at_l = |from, left| BatchAt {
        list: "L".into(),
        from,
        left,
        mapped: true,
    };
    assert_eq!(
        (c.place.batch, c.place.batch_at, c.place.page),
        (None, Some(Box::new(at_l(6, 4))), 3)
    );
    // Cut afresh (another batch size, batches written ahead): read from
    // the list L, no longer its end, so the cursor holds the values
    // again until listed.
    assert!(Batches::cut_afresh(Some(2), 3, 0, &[1]));
    assert!(!Batches::cut_afresh(Some(3), 3, 0, &[1]));
    let mut b = Batches::resume(
        Values::Held(values(8)),
        0,
        &[1],
        BTreeMap::new(),
        Some(2),
        3,
        true,
    );
    assert_eq!(b.unlisted().map(<[String]>::len), Some(6));
    assert!(b.replaces_list(), "the saved cursor still points into L");
    assert_eq!(
        b.cursor(&at(), &FoundValues::default())
            .place
            .batch
            .map(|v| v.len()),
        Some(6)
    );
    b.listed("M".into());
    assert!(!b.replaces_list());
    b.mark_written(0, Vec::new());
    let c = b.cursor(&at(), &FoundValues::default());
    assert_eq!(
        (
            c.place.batch,
            c.place.batch_at.map(|a| (a.list, a.from, a.left))
        ),
        (None, Some(("M".into(), 3, 3)))
    );
}
