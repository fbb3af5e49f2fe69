//! The worker's events: one JSON object per line on its stdout, each with `event` (its
//! name), `node` and `mono_ns` (`CLOCK_MONOTONIC` when it was printed), and the fields of
//! its kind (the names are listed in the worker's `--help`; `src/bin/tenure-worker/run.rs`
//! prints them).
//!
//! An event of an election (`leader_changed`, `lease_*`, `history`, the settlement's)
//! carries `election`: `null` for the group's own (root) election, the name of a named
//! election otherwise (`worker --elections N`). Events of a worker older than that field
//! have none, which reads as the root's: [`Event::election`].

use std::io::{BufRead, BufReader, Read};
use std::thread::JoinHandle;
use std::time::Instant;

use serde_json::Value;

use crate::checker;

/// One event line of a worker, parsed.
#[derive(Debug, Clone)]
pub struct Event {
    /// The worker that printed it.
    pub node: u64,
    /// `started`, `leader_changed`, `lease_acquired`, …
    pub event: String,
    /// `CLOCK_MONOTONIC` when the worker printed it.
    pub mono_ns: u64,
    /// When this process parsed it.
    pub at: Instant,
    /// The whole object.
    pub v: Value,
    /// The line as it was printed.
    pub raw: String,
}

impl Event {
    /// Parses one line; `None` unless it is a JSON object with a string `event`, and
    /// `node` and `mono_ns` numbers (as every line the worker prints is).
    pub fn parse(line: &str) -> Option<Event> {
        let raw = line.trim();
        let v: Value = serde_json::from_str(raw).ok()?;
        Some(Event {
            node: v.get("node")?.as_u64()?,
            event: v.get("event")?.as_str()?.to_string(),
            mono_ns: v.get("mono_ns")?.as_u64()?,
            at: Instant::now(),
            raw: raw.to_string(),
            v,
        })
    }

    /// The `term` field.
    pub fn term(&self) -> Option<u64> {
        self.u64("term")
    }

    /// An unsigned field.
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.v.get(key).and_then(Value::as_u64)
    }

    /// The named election this event is about: `None` for the root election (`"election":
    /// null`, or no field at all) and for events of no election.
    pub fn election(&self) -> Option<&str> {
        self.str("election")
    }

    /// Whether this event is of the root election (or of none).
    pub fn is_root(&self) -> bool {
        self.election().is_none()
    }

    /// A string field.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.v.get(key).and_then(Value::as_str)
    }

    /// The event as the history checker takes it.
    pub fn judged(&self) -> Option<checker::Event> {
        checker::Event::from_json(&self.v)
    }
}

/// Reads a worker's stdout on a thread of its own until it closes, and hands every
/// event line to `sink` in order (other lines are skipped).
pub fn read_events(
    out: impl Read + Send + 'static,
    mut sink: impl FnMut(Event) + Send + 'static,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(e) = Event::parse(&line) {
                sink(e);
            }
        }
    })
}
