//! Results reader: any bytes give records and warnings, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut loaded = kiln_report::read::Loaded::default();
    kiln_report::read::read_into(data, std::path::Path::new("fuzz"), &mut loaded);
});
