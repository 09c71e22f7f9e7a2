//! CIFAR-10 binary reader: any bytes give a value or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((pixels, labels)) = kiln_data::cifar::parse(data, "fuzz") {
        assert_eq!(pixels.len(), labels.len() * 3072);
    }
});
