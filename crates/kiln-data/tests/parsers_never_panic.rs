//! Property tests: any byte string given to a dataset parser yields an error or a valid value,
//! never a panic, and a header never makes the parser allocate more than the file holds.

use kiln_data::{cifar, idx};
use proptest::collection::vec;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn idx_parse_never_panics(bytes in vec(any::<u8>(), 0..600), rank in 1usize..4) {
        if let Ok(parsed) = idx::parse(bytes.clone(), rank, "fuzz") {
            prop_assert_eq!(parsed.dims.len(), rank);
            prop_assert_eq!(parsed.data.len(), parsed.dims.iter().product::<usize>());
            prop_assert_eq!(parsed.data.len() + 4 + 4 * rank, bytes.len());
        }
    }

    #[test]
    fn idx_headers_are_checked_against_the_bytes_present(
        dims in vec(any::<u32>(), 1..4),
        data in vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = vec![0u8, 0, 0x08, dims.len() as u8];
        for d in &dims {
            bytes.extend_from_slice(&d.to_be_bytes());
        }
        bytes.extend_from_slice(&data);
        let claimed = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let result = idx::parse(bytes, dims.len(), "fuzz");
        prop_assert_eq!(result.is_ok(), claimed == Some(data.len()));
    }

    #[test]
    fn gzip_input_never_panics(tail in vec(any::<u8>(), 0..300)) {
        let mut bytes = vec![0x1f, 0x8b];
        bytes.extend(tail);
        if let Ok(out) = idx::decompress_if_gzip(bytes, 1 << 20, "fuzz") {
            let _ = idx::parse(out, 3, "fuzz");
        }
    }

    #[test]
    fn cifar_parse_never_panics(bytes in vec(any::<u8>(), 0..7_000)) {
        if let Ok((pixels, labels)) = cifar::parse(&bytes, "fuzz") {
            prop_assert_eq!(pixels.len(), labels.len() * 3072);
            prop_assert!(labels.iter().all(|&l| l < 10));
        }
    }
}
