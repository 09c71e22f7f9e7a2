//! Ctrl-C: stop the current cell, keep the finished ones.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ctrl-C stops the current cell (it is not recorded, so `--resume` runs it again), keeps every
/// finished one and still writes the report.
pub fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            // A second Ctrl-C: leave now.
            std::process::exit(130);
        }
        eprintln!("\nkiln: interrupted; stopping the current cell (Ctrl-C again to quit at once)");
    });
}

/// True once Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
