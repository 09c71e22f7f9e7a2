//! Burn A/B verdicts on real runs: the maxpool-x3 A/B (burn-flex's f32 max-pool backward done
//! three times, about 4.6% slower; five passes on a 2-core AMD EPYC family 25 model 17, drift
//! 8.3% over the run), which the unpaired rule called "no difference beyond the noise".

fn fixture(file: &str) -> Vec<kiln_contract::Record> {
    let path = kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ab-maxpool-x3")
        .join(file);
    kiln_report::read::load(&[path]).unwrap().records
}

#[test]
fn the_maxpool_runs_read_as_their_pairs_are_b_slower() {
    let rows = kiln_report::ab::compare(
        &fixture("a-results.jsonl"),
        &fixture("b-results.jsonl"),
        None,
    );
    assert_eq!(rows.len(), 1);
    let epoch = &rows[0].measures[0];
    assert_eq!(epoch.name, "epoch time");
    assert_eq!(epoch.test, "paired t, 5 pairs");
    assert_eq!(epoch.verdict, "B slower", "{epoch:?}");
    let (ratio, low, high) = epoch.change.unwrap();
    // The pairs' own reading (paired.md): 1.046x (1.025-1.067), p 0.0036.
    assert!((ratio - 1.046).abs() < 0.001, "{ratio}");
    assert!(low > 1.0 && (low - 1.025).abs() < 0.001, "{low}");
    assert!((high - 1.067).abs() < 0.001, "{high}");
    assert!(epoch.p.unwrap() < 0.005, "{:?}", epoch.p);
    let md = kiln_report::ab::markdown(&rows, "0.22.1", "path:BURN_COPY");
    assert!(md.contains("| paired t, 5 pairs | B slower |"), "{md}");
}

#[test]
fn no_difference_says_the_smallest_change_the_pairs_would_have_shown() {
    let mut a = fixture("a-results.jsonl");
    // B as A, each run 0.2% slower: no change beyond the 1% floor, and the pairs could have
    // shown a far smaller one than the unpaired spread.
    let mut b = fixture("b-results.jsonl");
    for (ra, rb) in a.iter_mut().zip(b.iter_mut()) {
        let e = ra.epoch_seconds.clone().unwrap();
        rb.epoch_seconds = Some(e.scaled(1.002 + 0.001 * (ra.started_at % 3) as f64));
    }
    let rows = kiln_report::ab::compare(&a, &b, None);
    let epoch = &rows[0].measures[0];
    assert!(
        epoch
            .verdict
            .starts_with("no difference beyond the noise (a change over 1.0% would have shown)"),
        "{epoch:?}"
    );
    // A side that lost a run keeps the other pairs, and says how many runs had no partner.
    let n = b.len();
    b.pop();
    let rows = kiln_report::ab::compare(&a, &b, None);
    assert_eq!(
        rows[0].measures[0].test,
        format!(
            "paired t, {} pairs; 1 run without a partner left out",
            n - 1
        )
    );
    // Runs merged from two directories (a pass twice on a side) are compared unpaired.
    b.push(b[0].clone());
    let rows = kiln_report::ab::compare(&a, &b, None);
    assert_eq!(rows[0].measures[0].test, "Welch's t (unpaired)");
}

#[test]
fn under_the_sequential_rule_the_maxpool_pairs_are_never_called_faster_or_equal() {
    let rule = kiln_contract::stats::Sequential::KILN;
    let rows = kiln_report::ab::compare(
        &fixture("a-results.jsonl"),
        &fixture("b-results.jsonl"),
        Some(&rule),
    );
    let epoch = &rows[0].measures[0];
    assert!(
        epoch.test.starts_with("sequential paired t, 5 pairs"),
        "{epoch:?}"
    );
    // Five pairs at p about 0.004 sit at the edge of a look's level (0.05 / 14): slower, or
    // not decided yet (the run would add a pair), never the other way.
    match epoch.look {
        Some(kiln_contract::stats::Look::Changed(true)) => assert_eq!(epoch.verdict, "B slower"),
        Some(kiln_contract::stats::Look::Undecided) => {
            assert!(
                epoch.verdict.starts_with("undecided after 5 pairs"),
                "{epoch:?}"
            )
        }
        other => panic!("{other:?}: {epoch:?}"),
    }
    let md = kiln_report::ab::markdown(&rows, "0.22.1", "path:BURN_COPY");
    assert!(md.contains("--repeats auto"), "{md}");
}
