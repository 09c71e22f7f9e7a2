//! Property tests: any bytes given to the results reader yield records and warnings, never a
//! panic; a valid record survives being followed by garbage.

use std::path::Path;

use kiln_contract::{CellId, Record, Status};
use kiln_report::read::{Loaded, parse_line, read_into};
use proptest::collection::vec;
use proptest::prelude::*;

fn valid_line() -> String {
    let cell = CellId {
        training_loop: None,
        model: "mnist-cnn".into(),
        backend: "flex".into(),
        device: "cpu".into(),
        precision: "f32".into(),
        batch_size: 128,
    };
    serde_json::to_string(&Record::not_run(&cell, Status::Skipped, "p")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn any_bytes_read_without_panic(bytes in vec(any::<u8>(), 0..2_000)) {
        let mut loaded = Loaded::default();
        read_into(&bytes[..], Path::new("fuzz"), &mut loaded);
    }

    #[test]
    fn any_text_parses_or_errs(text in ".{0,400}") {
        let _ = parse_line(&text);
    }

    #[test]
    fn a_record_followed_by_garbage_is_kept(garbage in vec(any::<u8>(), 0..300)) {
        let mut bytes = format!("{}\n", valid_line()).into_bytes();
        bytes.extend(garbage);
        let mut loaded = Loaded::default();
        read_into(&bytes[..], Path::new("fuzz"), &mut loaded);
        prop_assert!(!loaded.records.is_empty());
    }

    #[test]
    fn cutting_a_record_anywhere_never_panics(cut in 0usize..2_000) {
        let line = valid_line();
        let cut = cut.min(line.len());
        let mut loaded = Loaded::default();
        read_into(&line.as_bytes()[..cut], Path::new("fuzz"), &mut loaded);
        prop_assert!(loaded.records.len() <= 1);
    }
}
