//! What the flex runner's integration tests share: the binary, and its output read as events.
#![allow(dead_code)] // each test file uses the part it needs

use std::process::Command;

use kiln_contract::{Event, Record};

pub fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln-flex"))
}

/// Every event line of a run, and its final record (exactly one).
pub fn events_and_record(stdout: &[u8]) -> (Vec<Event>, Record) {
    let text = String::from_utf8_lossy(stdout);
    let events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect();
    let finals: Vec<Record> = events
        .iter()
        .filter_map(|e| match e {
            Event::Final(r) => Some((**r).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(finals.len(), 1, "exactly one final record: {text}");
    (events, finals[0].clone())
}

/// A run's final record.
pub fn final_record(stdout: &[u8]) -> Record {
    events_and_record(stdout).1
}
