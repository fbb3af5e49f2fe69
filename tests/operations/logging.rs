//! `tenure::logging::TracingDrain` (feature `tracing`): records logged through slog reach
//! a `tracing` subscriber as events with their level, message, target and key-value
//! pairs as typed fields.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// One event as the subscriber saw it: level, target, and each field as `type:value`.
#[derive(Debug, Clone)]
struct Seen {
    level: tracing_core::Level,
    target: String,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing_core::field::Visit for Fields<'_> {
    fn record_u64(&mut self, f: &tracing_core::field::Field, v: u64) {
        self.0.insert(f.name().into(), format!("u64:{v}"));
    }
    fn record_i64(&mut self, f: &tracing_core::field::Field, v: i64) {
        self.0.insert(f.name().into(), format!("i64:{v}"));
    }
    fn record_bool(&mut self, f: &tracing_core::field::Field, v: bool) {
        self.0.insert(f.name().into(), format!("bool:{v}"));
    }
    fn record_f64(&mut self, f: &tracing_core::field::Field, v: f64) {
        self.0.insert(f.name().into(), format!("f64:{v}"));
    }
    fn record_str(&mut self, f: &tracing_core::field::Field, v: &str) {
        self.0.insert(f.name().into(), format!("str:{v}"));
    }
    fn record_debug(&mut self, f: &tracing_core::field::Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().into(), format!("debug:{v:?}"));
    }
}

impl<S: tracing_core::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing_core::Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            fields,
        });
    }
}

/// One statement, logged through different loggers: one call site per set of keys.
fn lease_acquired(log: &slog::Logger, token: u64) {
    slog::info!(log, "lease acquired"; "token" => token, "reason" => "elected");
}

#[test]
fn slog_records_reach_a_tracing_subscriber_with_level_and_fields() {
    let capture = Capture::default();
    let _guard = tracing_subscriber::registry()
        .with(capture.clone().with_filter(LevelFilter::INFO))
        .set_default();

    let root = tenure::logging::tracing_logger();
    let node = root.new(slog::o!("node" => 3u64, "component" => "driver"));
    let raft = node.new(slog::o!("raft_id" => 3u64, "component" => "raft"));
    lease_acquired(&node, 7);
    slog::warn!(raft, "slow fsync"; "ms" => 250i64, "synced" => false, "share" => 0.5f64);
    slog::debug!(raft, "below the subscriber's level"; "x" => 1);
    slog::crit!(node, "store corrupt"; "path" => %"/var/lib/t", "message" => "shadowed", "node" => 9u64);
    lease_acquired(&root, 8);
    slog::error!(root, "many pairs";
        "k0" => 0, "k1" => 1, "k2" => 2, "k3" => 3, "k4" => 4, "k5" => 5, "k6" => 6,
        "k7" => 7, "k8" => 8, "k9" => 9, "k10" => 10, "k11" => 11, "k12" => 12,
        "k13" => 13, "k14" => 14, "k15" => 15, "k16" => 16, "k17" => 17, "k18" => 18,
        "k19" => 19, "k20" => 20, "k21" => 21, "k22" => 22, "k23" => 23, "k24" => 24,
        "k25" => 25, "k26" => 26, "k27" => 27, "k28" => 28, "k29" => 29, "k30" => 30,
        "k31" => 31);

    let seen = capture.0.lock().unwrap().clone();
    let f = |s: &Seen| {
        s.fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let summary: Vec<String> = seen
        .iter()
        .map(|s| format!("{} {} {}", s.level, s.target, f(s)))
        .collect();
    assert_eq!(
        seen.len(),
        5,
        "the debug record is filtered out: {summary:#?}"
    );
    let here = module_path!();

    // The record's pairs and its logger's, each with its type; the target is the module.
    assert_eq!(seen[0].level, tracing_core::Level::INFO);
    assert_eq!(seen[0].target, here);
    assert_eq!(
        f(&seen[0]),
        "component=str:driver message=debug:lease acquired node=u64:3 reason=str:elected token=u64:7"
    );
    // A child logger's value of a key wins over its parent's.
    assert_eq!(seen[1].level, tracing_core::Level::WARN);
    assert_eq!(
        f(&seen[1]),
        "component=str:raft message=debug:slow fsync ms=i64:250 node=u64:3 raft_id=u64:3 share=f64:0.5 synced=bool:false"
    );
    // Critical is ERROR; the record's value wins over its logger's; a key `message`
    // does not replace the message.
    assert_eq!(seen[2].level, tracing_core::Level::ERROR);
    assert_eq!(
        f(&seen[2]),
        "component=str:driver message=debug:store corrupt node=u64:9 path=str:/var/lib/t slog.message=str:shadowed"
    );
    // The same statement through the root logger: a call site with fewer keys.
    assert_eq!(
        f(&seen[3]),
        "message=debug:lease acquired reason=str:elected token=u64:8"
    );
    // More pairs than a call site holds: all of them in one string, in written order.
    assert_eq!(seen[4].level, tracing_core::Level::ERROR);
    assert_eq!(seen[4].target, "slog");
    let kv: Vec<String> = (0..=31).map(|i| format!("k{i}={i}")).collect();
    assert_eq!(
        f(&seen[4]),
        format!(
            "message=debug:many pairs slog.kv=str:{} slog.module=str:{here}",
            kv.join(", ")
        )
    );
}
