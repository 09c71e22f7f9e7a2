//! IDX reader (gzip or raw): any bytes give a value or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(bytes) = kiln_data::idx::decompress_if_gzip(data.to_vec(), 1 << 24, "fuzz") {
        for rank in 1..=3 {
            if let Ok(parsed) = kiln_data::idx::parse(bytes.clone(), rank, "fuzz") {
                assert_eq!(parsed.data.len(), parsed.dims.iter().product::<usize>());
            }
        }
    }
});
