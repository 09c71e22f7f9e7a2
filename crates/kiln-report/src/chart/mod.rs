//! SVG bar charts of a report, drawn with plotters: per model, one bar per timed row for the
//! epoch time and one for the speed-up over the baseline, each with its interval as an error
//! bar (between runs where the row combines repeats, else within its one run), on log axes
//! fitted to the data (backends differ by orders of magnitude). A projection from too few
//! chunks is a low-confidence estimate: it gets no bar, only a line under the chart.

mod bars;
mod curves;
mod explain;
mod latency;
mod palette;

pub use bars::charts;
pub use curves::{accuracy_curves, batch_charts};
pub use explain::explain_chart;
pub use latency::latency_chart;
#[cfg(test)]
pub use palette::*;

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_contract::{CellId, DataKind, Method, Obtained, Stats};
    use kiln_contract::{Record, Status};
    use plotters::prelude::RGBColor;

    fn timed(backend: &str, median: f64) -> Record {
        let cell = CellId {
            training_loop: None,
            model: "mnist-cnn".into(),
            backend: backend.into(),
            device: "cpu".into(),
            precision: "f32".into(),
            batch_size: 128,
        };
        let mut r = Record::not_run(&cell, Status::Ok, "");
        r.epoch_seconds = Stats::from_samples(&[median]);
        r.obtained = Obtained {
            method: Method::Measured,
            epochs: 1,
            steps: 1,
            chunks: 0,
            epoch_samples: 1,
            standard_epoch_samples: 60_000,
            budget_seconds: None,
            budget_exhausted: false,
        };
        r.data = DataKind::Real;
        r
    }

    fn fill_count(svg: &str, color: RGBColor) -> usize {
        let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
        let fill = format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2);
        doc.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| {
                n.attribute("fill")
                    .is_some_and(|f| f.eq_ignore_ascii_case(&fill))
            })
            .count()
    }

    #[test]
    fn one_well_formed_svg_per_model_with_one_bar_per_cell() {
        let mut failed = timed("ndarray", 1.0);
        failed.status = Status::Failed;
        let mut resnet = timed("flex", 90.0);
        resnet.model = "resnet18".into();
        let records = vec![
            timed("flex", 360.0),
            timed("ndarray", 19_800.0),
            failed,
            resnet,
        ];
        let charts = charts(&records, None).unwrap();
        assert_eq!(charts.len(), 2);
        let (model, svg) = &charts[0];
        assert_eq!(model, "mnist-cnn");
        assert_eq!(fill_count(svg, TIME_COLOR), 2, "the failed cell has no bar");
        assert_eq!(fill_count(svg, SPEEDUP_COLOR), 2);
        assert!(svg.contains("flex/cpu/f32"));
        assert_eq!(fill_count(&charts[1].1, TIME_COLOR), 1);
    }

    #[test]
    fn accuracy_curves_have_one_line_per_row_and_the_target() {
        let mut r = timed("flex", 10.0);
        r.epochs = (1..=3)
            .map(|e| kiln_contract::EpochSummary {
                epoch: e,
                seconds: 2.0,
                steps: 1,
                samples: 1,
                partial: false,
                mean_loss: 1.0,
                test_accuracy: Some(0.5 + 0.1 * e as f64),
                rss_bytes: None,
            })
            .collect();
        r.time_to_accuracy = Some(kiln_contract::TimeToAccuracy {
            target: 0.75,
            seconds: Some(6.0),
            epoch: Some(3),
            epochs_evaluated: 3,
            best: Some(0.8),
            budget_exhausted: false,
        });
        let curves = accuracy_curves(&[r]).unwrap();
        assert_eq!(curves.len(), 1);
        let svg = &curves[0].1;
        roxmltree::Document::parse(svg).expect("well-formed SVG");
        assert!(
            svg.contains("flex/cpu/f32") && svg.contains("test accuracy"),
            "{svg}"
        );
    }

    #[test]
    fn a_target_accuracy_adds_a_panel_with_a_bar_per_row_that_reached_it() {
        let reached = |backend: &str, seconds: Option<f64>| {
            let mut r = timed(backend, 100.0);
            r.time_to_accuracy = Some(kiln_contract::TimeToAccuracy {
                target: 0.8,
                seconds,
                epoch: seconds.map(|_| 2),
                epochs_evaluated: 3,
                best: Some(if seconds.is_some() { 0.82 } else { 0.6 }),
                budget_exhausted: false,
            });
            r
        };
        let records = [
            reached("flex", Some(40.0)),
            reached("tch", Some(30.0)),
            reached("ndarray", None),
        ];
        let svg = &charts(&records, None).unwrap()[0].1;
        assert_eq!(
            fill_count(svg, TARGET_COLOR),
            2,
            "one bar per row that reached it"
        );
        assert!(svg.contains("seconds to 80% test accuracy"), "{svg}");
        assert_eq!(svg.matches("not reached").count(), 1);
        // Without a target, no such panel.
        let svg = &charts(&[timed("flex", 1.0)], None).unwrap()[0].1;
        assert_eq!(fill_count(svg, TARGET_COLOR), 0);
        assert!(!svg.contains("test accuracy"));
    }

    #[test]
    fn batch_charts_draw_a_line_per_row_and_a_cross_per_out_of_memory() {
        let at = |backend: &str, batch: usize, median: f64| {
            let mut r = timed(backend, median);
            r.batch_size = batch;
            r.images_per_second = Some(60_000.0 / median);
            r
        };
        let mut oom = at("tch", 512, 1.0);
        oom.status = Status::OutOfMemory;
        oom.epoch_seconds = None;
        let records = [
            at("flex", 32, 120.0),
            at("flex", 512, 200.0),
            at("tch", 32, 60.0),
            oom,
        ];
        let charts = batch_charts(&records).unwrap();
        assert_eq!(charts.len(), 1);
        let svg = &charts[0].1;
        roxmltree::Document::parse(svg).expect("well-formed SVG");
        for text in [
            "flex/cpu/f32",
            "tch/cpu/f32",
            "batch 32",
            "batch 512",
            "500",
            "out of memory",
        ] {
            assert!(svg.contains(text), "{text:?} not in the chart");
        }
        // One batch size: no chart.
        assert!(batch_charts(&[timed("flex", 1.0)]).unwrap().is_empty());
        // The bar chart names each row with its batch.
        let bars = &super::charts(&records, None).unwrap()[0].1;
        assert!(bars.contains("flex/cpu/f32 @ batch 512"), "{bars}");
    }

    #[test]
    fn a_low_confidence_projection_gets_no_bar_and_a_note() {
        let mut slow = timed("ndarray", 17_000.0);
        slow.obtained.method = Method::Projected;
        slow.obtained.chunks = 1;
        let charts = charts(&[timed("flex", 360.0), slow], None).unwrap();
        let svg = &charts[0].1;
        assert_eq!(fill_count(svg, TIME_COLOR), 1);
        assert!(svg.contains("not drawn: ndarray/cpu/f32"), "{svg}");
    }

    #[test]
    fn explain_chart_stacks_one_segment_per_op_row_in_each_backend() {
        use crate::explain::{
            ExplainRecord, ExplainRequest, ExplainTable, OpTiming, Phase, Timing,
        };
        use kiln_contract::{ModelKind, Precision};
        let record = |backend: &str, seconds: &[f64]| {
            let request =
                ExplainRequest::new(ModelKind::MnistCnn, backend, "cpu", Precision::F32, 128);
            let mut r = ExplainRecord::start(&request, "", 2);
            r.status = Status::Ok;
            r.ops = seconds
                .iter()
                .enumerate()
                .map(|(site, &s)| OpTiming {
                    site,
                    phase: Phase::Forward,
                    timing: Timing {
                        median_seconds: s,
                        mean_seconds: None,
                        min_seconds: s,
                        max_seconds: s,
                        runs: 3,
                    },
                })
                .collect();
            r.step = Some(Timing {
                median_seconds: 0.05,
                mean_seconds: None,
                min_seconds: 0.05,
                max_seconds: 0.05,
                runs: 3,
            });
            r
        };
        let flex = record("flex", &[0.01, 0.02, 0.03]);
        // Sites 0 and 2 are both conv2d forward (one row); site 1 is a max pool.
        let torch = record("pytorch", &[0.005, 0.0, 0.0]);
        let table = ExplainTable::new(&[&flex, &torch]).expect("a table");
        let svg = explain_chart(&table).expect("drawn");
        // Two rows, heaviest first, each bar in both panels (ms and shares) and one legend key;
        // pytorch's pool took no time and has no segment.
        assert_eq!(fill_count(&svg, PALETTE[0]), 2 * 2 + 1);
        assert_eq!(fill_count(&svg, PALETTE[1]), 2 + 1);
        assert_eq!(fill_count(&svg, PALETTE[2]), 0);
        assert!(svg.contains("flex") && svg.contains("pytorch"));
        assert!(
            svg.contains("60 ms (120%)"),
            "flex's sum against its 50 ms step"
        );
    }
}
