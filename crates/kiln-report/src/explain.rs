//! `cargo xtask explain`'s tables: one model's operations per backend (`table`) and two Burns'
//! operations side by side (`ab`); the request, record and model sites they read are
//! `kiln_contract::explain`'s, re-exported here so a reader needs one path.

pub mod ab;
mod table;

pub use kiln_contract::explain::*;
pub use table::*;

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{ModelKind, Precision, Status};

    fn timing(s: f64) -> Timing {
        Timing {
            median_seconds: s,
            mean_seconds: None,
            min_seconds: s,
            max_seconds: s,
            runs: 3,
        }
    }

    fn record(backend: &str, per_op: &[(usize, Phase, f64)], step: f64) -> ExplainRecord {
        let request = ExplainRequest::new(ModelKind::MnistCnn, backend, "cpu", Precision::F32, 128);
        let mut r = ExplainRecord::start(&request, "test", 2);
        r.status = Status::Ok;
        r.ops = per_op
            .iter()
            .map(|&(site, phase, s)| OpTiming {
                site,
                phase,
                timing: timing(s),
            })
            .collect();
        r.step = Some(timing(step));
        r
    }

    #[test]
    fn table_sums_shares_ratios_and_gaps() {
        // Site 2 is conv2, site 6 fc1.
        let torch = record(
            "pytorch",
            &[
                (2, Phase::Forward, 0.010),
                (2, Phase::ParamGrad, 0.020),
                (6, Phase::Forward, 0.002),
            ],
            0.040,
        );
        let flex = record(
            "flex",
            &[
                (2, Phase::Forward, 0.015),
                (2, Phase::ParamGrad, 0.060),
                (6, Phase::Forward, 0.001),
            ],
            0.080,
        );
        let t = ExplainTable::new(&[&flex, &torch]).expect("a table");
        assert_eq!(t.reference, Some(1));
        assert!((t.totals[0] - 0.076).abs() < 1e-12);
        assert!((t.totals[1] - 0.032).abs() < 1e-12);
        assert!((flex.explained().unwrap() - 0.95).abs() < 1e-12);
        let weight = t
            .rows
            .iter()
            .find(|r| r.label == "conv2d · weight grad")
            .expect("row");
        assert_eq!(weight.seconds, [Some(0.060), Some(0.020)]);
        let gaps = &t.gaps[0];
        assert_eq!(gaps[0].label, "conv2d 64→512 k3 at 13×13 · weight grad");
        assert!((gaps[0].extra_seconds - 0.040).abs() < 1e-12);
        assert!((gaps[0].share_of_gap - 0.040 / 0.044).abs() < 1e-12);
        assert!(gaps[2].extra_seconds < 0.0, "fc1 forward is faster on flex");
        let md = markdown(&t);
        assert!(md.contains("60.0 ms (79%), 3.00×"), "{md}");
        assert!(md.contains("| explained | 95% | 80% |"), "{md}");
        assert!(md.contains("(+40.0 ms, 91% of the gap)"), "{md}");
        assert!(t.gaps[1].is_empty(), "the reference has no gap to itself");
    }

    #[test]
    fn a_decomposition_outside_its_band_says_so_in_the_table_and_the_record() {
        // 0.070 s of ops against a 0.050 s step: 140% explained.
        let over = record(
            "flex",
            &[(2, Phase::Forward, 0.030), (2, Phase::ParamGrad, 0.040)],
            0.050,
        );
        let note = over.outside_band().expect("140% is outside the band");
        assert!(note.contains("140%") && note.contains("70–130%"), "{note}");
        assert!(note.contains("ratios between backends"), "{note}");
        let md = markdown(&ExplainTable::new(&[&over]).expect("a table"));
        assert!(md.contains("| explained | 140% ⚠ |"), "{md}");
        assert!(
            md.contains("⚠ flex: its ops timed alone add up to 140%"),
            "{md}"
        );
        // 60%: below the band; 95%: inside, no note.
        let under = record("tch", &[(2, Phase::Forward, 0.030)], 0.050);
        assert!(under.outside_band().unwrap().contains("only 60%"));
        let inside = record("tch", &[(2, Phase::Forward, 0.0475)], 0.050);
        assert_eq!(inside.outside_band(), None);
        assert!(!markdown(&ExplainTable::new(&[&inside]).unwrap()).contains('⚠'));
    }
}
