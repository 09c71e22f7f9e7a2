//! The site built from every committed run keeps simulated rows (replays from a GPU's profile,
//! GPU kits' dry runs) out of "All results", Compare and the machine pages, and shows them on
//! their own page, labelled; a checkout's rows name its revision, never the path it had.

use kiln_report::site;

#[test]
fn the_committed_site_shows_no_replayed_or_dry_run_row_among_the_measured_ones() {
    let results =
        kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
    let (dirs, _) = site::run_dirs(std::slice::from_ref(&results)).unwrap();
    let runs = site::read_runs(&dirs).unwrap();
    let replays: Vec<&str> = runs
        .iter()
        .filter(|r| r.records.iter().any(|x| x.replay.is_some()))
        .map(|r| r.name.as_str())
        .collect();
    assert!(!replays.is_empty(), "the committed runs hold replays");
    let dry: Vec<&str> = runs
        .iter()
        .filter(|r| r.simulated.is_some())
        .map(|r| r.name.as_str())
        .collect();
    assert!(
        dry.iter().any(|n| n.contains("dry-run")),
        "the committed kit dry runs are simulated: {dry:?}"
    );
    let (machines, rows, per_run, simulated) = site::rows::site_rows(&runs);
    for r in rows.iter().chain(per_run.iter().flatten()) {
        assert!(
            !replays.contains(&r.run.as_str()) && !dry.contains(&r.run.as_str()),
            "{} from {} among the measured rows",
            r.backend,
            r.run
        );
        assert!(!r.burn.contains("path:"), "{} names a path", r.burn);
    }
    for m in &machines {
        let listed: Vec<&String> = m
            .runs
            .iter()
            .filter(|n| replays.contains(&n.as_str()))
            .collect();
        assert!(listed.is_empty(), "{} lists {listed:?}", m.short);
    }
    assert!(simulated.iter().any(|r| r.labels == [site::runs::REPLAYED]));
    assert!(simulated.iter().any(|r| r.labels == [site::runs::DRY_RUN]));
    let page = site::pages::simulated(&machines, &simulated);
    assert!(page.contains("simulated: replayed") && page.contains("gpu-replay-h200"));
}
